# migctl image: every component shares it (one package, one entry point `migctl`).
#
# Platform-neutral: one Dockerfile for linux/amd64 and linux/arm64 (GH200 and GB200 hosts are Grace, arm64, and the
# node agent runs there). Nothing below names an architecture:
#   - the build stage runs on the builder's own platform ($BUILDPLATFORM) and makes migctl's wheel, which is pure
#     Python (py3-none-any), so it is built once for every target;
#   - the final stage is the target platform's python:3.11-slim (a multi-arch image), and pip installs only binary
#     wheels for it (--only-binary=:all:): a dependency without a wheel for the target fails the build here, instead
#     of compiling from source in an image that has no compiler.
#
#   docker build -t migctl:0.1.0 .                                                          # this machine's arch
#   docker buildx build --platform linux/amd64,linux/arm64 -t REGISTRY/migctl:0.1.0 --push .   # both (docs/install.md)
#
# tests/unit/test_packaging.py checks these properties of this file, and builds and installs the same wheel in a fresh
# virtual environment; no Docker engine runs in the test environment, so the image build itself is not run there.
FROM --platform=$BUILDPLATFORM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY migctl ./migctl
COPY profiles ./profiles
RUN pip install --no-cache-dir "build>=1.2" && python -m build --wheel --outdir /wheels

FROM python:3.11-slim
# No compilers, no shell tools beyond the base image; the wheel carries the profile catalog.
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir --only-binary=:all: /wheels/*.whl && rm -rf /wheels \
    && useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin migctl
USER 65532:65532
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
ENTRYPOINT ["migctl"]
CMD ["run", "--config", "/etc/migctl/config.yaml"]

# migctl image: the controller, the node agent and the fallback scheduler share it (one package, one entry point).
# Build: docker build -t migctl:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY migctl ./migctl
COPY profiles ./profiles
RUN pip install --no-cache-dir build && python -m build --wheel --outdir /wheels

FROM python:3.11-slim
# No compilers, no shell tools beyond the base image; the wheel carries the profile catalog.
COPY --from=build /wheels /wheels
RUN pip install --no-cache-dir /wheels/*.whl && rm -rf /wheels \
    && useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin migctl
USER 65532:65532
ENV PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1
ENTRYPOINT ["migctl"]
CMD ["run", "--config", "/etc/migctl/config.yaml"]

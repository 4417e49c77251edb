"""Distribution, checked here: the wheel `python -m build` makes (as the Dockerfile does) carries the catalog and the
example and installs into a fresh virtual environment whose own `migctl` plans the example; the chart lints strictly
and packages; the Dockerfile names no architecture.

What is not checked here: the image build (no Docker engine runs in the test environment) and installing the
dependencies from PyPI (the fresh environment borrows them from this one, read-only, through a .pth file: see
`fresh_venv`), so this proves the wheel and its entry points, not the resolver.
"""

from __future__ import annotations

import email.parser
import re
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.unit.deploy.helm_tool import CHART, helm_binary, run_helm

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build --wheel`, without network isolation (hatchling comes from the dev extra)."""
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (whl,) = out.glob("migctl-*-py3-none-any.whl")  # pure Python: one wheel for amd64 and arm64
    return whl


def test_wheel_contains_every_catalog_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in (ROOT / "profiles").glob("*.yaml"):
        assert f"migctl/profiles/{f.name}" in names
    assert "migctl/examples/cluster-snapshot.yaml" in names


def test_wheel_metadata_declares_the_projects_dependencies_and_entry_points(wheel: Path) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    with zipfile.ZipFile(wheel) as z:
        meta_name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(meta_name).decode())
        entry_points = z.read(meta_name.replace("METADATA", "entry_points.txt")).decode()

    def norm(req: str) -> tuple[str, frozenset[str]]:
        r = Requirement(req)
        return r.name.lower(), frozenset(str(s) for s in r.specifier)

    required = {norm(r) for r in meta.get_all("Requires-Dist") or [] if "extra ==" not in r}
    assert required == {norm(d) for d in project["dependencies"]}
    assert "migctl = migctl.cli:main" in entry_points and "kubectl-migctl = migctl.cli:kubectl_main" in entry_points


def test_installed_package_finds_its_own_catalog(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)], check=True
    )
    code = (
        "from migctl.core.hardware.catalog import default_profiles_dir, load_catalog;"
        "print(default_profiles_dir()); print(len(load_catalog().models))"
    )
    deps = [p for p in sys.path if "site-packages" in p]  # pydantic, yaml, ... but not the checkout
    env = {"PYTHONPATH": ":".join([str(target), *deps])}
    res = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    where, count = res.stdout.split()
    assert where.startswith(str(target))
    assert int(count) == len(list((ROOT / "profiles").glob("*.yaml"))) - 1  # minus the non-MIG card list


def fresh_venv(where: Path) -> Path:
    """A new virtual environment (its own interpreter, site-packages and bin/) whose dependencies come from this
    one's site-packages through a .pth line. A .pth line only adds a directory: the .pth files inside it (this
    checkout's editable install among them) are not run, so `import migctl` can only find the installed wheel."""
    venv.EnvBuilder(with_pip=False, clear=True).create(where)
    (site,) = where.glob("lib/python*/site-packages")
    deps = [p for p in sys.path if p.endswith("site-packages") and Path(p).is_dir()]
    (site / "_migctl_test_deps.pth").write_text("\n".join(deps) + "\n")
    return where / "bin"


@pytest.mark.slow
def test_the_wheel_installs_into_a_fresh_venv_and_its_migctl_plans_the_example(wheel: Path, tmp_path: Path) -> None:
    bin_dir = fresh_venv(tmp_path / "venv")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "-q", "--no-deps",
         "--no-index", str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    where = subprocess.run(
        [str(bin_dir / "python"), "-c", "import migctl, sys; print(migctl.__file__); print(sys.prefix)"],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout.split()  # fmt: skip
    assert where[0].startswith(str(tmp_path / "venv")) and not where[0].startswith(str(ROOT)), where
    for exe in ("migctl", "kubectl-migctl"):
        assert (bin_dir / exe).exists(), f"the wheel's console script {exe} was not installed"
    res = subprocess.run([str(bin_dir / "migctl"), "plan", "--example"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=300, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr[-2000:]
    assert "a100-node-2" in res.stdout and "stranded" in res.stdout, res.stdout[:2000]
    version = subprocess.run([str(bin_dir / "kubectl-migctl"), "--version"], capture_output=True, text=True,
                             check=True).stdout  # fmt: skip
    assert re.fullmatch(r"migctl \d+\.\d+\.\d+\S*\n", version), version


# -- the chart ---------------------------------------------------------------------------------------------------


def test_helm_lint_strict_and_helm_package(tmp_path: Path) -> None:
    helm = helm_binary()
    for values in ([], ["--set", "agent.inPlace.enabled=true", "--set", "webhook.enabled=true",
                        "--set", "fallback.enabled=true", "--set", "controller.serviceMonitor.enabled=true",
                        "--set", "controller.prometheusRule.enabled=true",
                        "--set", "controller.grafanaDashboard.enabled=true"]):  # fmt: skip
        lint = run_helm(helm, "lint", "--strict", str(CHART), *values)
        assert lint.returncode == 0, lint.stdout + lint.stderr
    package = run_helm(helm, "package", str(CHART), "--destination", str(tmp_path))
    assert package.returncode == 0, package.stdout + package.stderr
    (tgz,) = tmp_path.glob("migctl-*.tgz")
    listing = subprocess.run(["tar", "-tzf", str(tgz)], capture_output=True, text=True, check=True).stdout.split()
    for member in ("migctl/Chart.yaml", "migctl/values.yaml", "migctl/values.schema.json", "migctl/README.md",
                   "migctl/dashboards/migctl.json", "migctl/templates/servicemonitor.yaml"):  # fmt: skip
        assert member in listing, member
    shown = run_helm(helm, "show", "readme", str(tgz))
    assert shown.returncode == 0 and "## Upgrading" in shown.stdout


# -- the image ---------------------------------------------------------------------------------------------------


def test_the_dockerfile_is_platform_neutral() -> None:
    """One Dockerfile for linux/amd64 and linux/arm64: no architecture named anywhere, the pure wheel built once on
    the builder's platform, and only binary wheels installed for the target (a missing arm64 wheel fails the
    build rather than compiling from source)."""
    text = (ROOT / "Dockerfile").read_text()
    instructions = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    body = "\n".join(instructions)
    assert not re.search(r"amd64|x86_64|aarch64|arm64|linux/", body, re.I), body
    froms = [ln for ln in instructions if ln.startswith("FROM ")]
    assert froms[0].startswith("FROM --platform=$BUILDPLATFORM ") and " AS build" in froms[0]
    assert len(froms) == 2 and "--platform" not in froms[1], "the final stage is the target platform's base"
    assert re.search(r"pip install [^\n]*--only-binary=:all: /wheels/\*\.whl", body)
    assert "python -m build --wheel" in body
    install = (ROOT / "docs" / "install.md").read_text()
    assert "docker buildx build --platform linux/amd64,linux/arm64" in install and "--push" in install

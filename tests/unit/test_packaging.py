"""The wheel carries the profile catalog and the example, and an installed migctl finds them (not the checkout)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(ROOT)],
        check=True,
    )
    (whl,) = out.glob("migctl-*.whl")
    return whl


def test_wheel_contains_every_catalog_file(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for f in (ROOT / "profiles").glob("*.yaml"):
        assert f"migctl/profiles/{f.name}" in names
    assert "migctl/examples/cluster-snapshot.yaml" in names


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

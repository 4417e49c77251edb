"""Cluster tier fixtures: one real control plane per pytest session, a fresh namespace per test.

Binaries come from `MIGCTL_TESTBIN` (a directory) or else `hack/testbin.sh --path` (which builds nothing).
Without them the cluster tests are skipped with one loud line, unless `MIGCTL_REQUIRE_CLUSTER=1` (CI), in
which case they fail.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from kubernetes import client

from .controlplane import ControlPlane, ControlPlaneError, find_bin_dir

REPO_ROOT = Path(__file__).resolve().parents[2]
_bin: list[tuple[Path | None, str]] = []  # memo of find_bin_dir: it runs a script
_running: list[ControlPlane] = []  # the session's control plane, for failure reports


def _require() -> bool:
    return os.environ.get("MIGCTL_REQUIRE_CLUSTER", "") not in ("", "0", "false")


def _bin_dir() -> tuple[Path | None, str]:
    if not _bin:
        _bin.append(find_bin_dir(REPO_ROOT))
    return _bin[0]


@pytest.hookimpl(trylast=True)  # after `-m` deselection, so `-m "not cluster"` prints nothing
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip (or, with MIGCTL_REQUIRE_CLUSTER=1, let fail) the cluster tests when no binaries exist."""
    cluster_items = [i for i in items if i.get_closest_marker("cluster")]
    if not cluster_items:
        return
    bin_dir, why = _bin_dir()
    if bin_dir is not None:
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if _require():
        line = f"CLUSTER TIER REQUIRED BUT UNAVAILABLE (MIGCTL_REQUIRE_CLUSTER=1): {why}"
    else:
        line = f"CLUSTER TIER SKIPPED: {why}"
        marker = pytest.mark.skip(reason=line)
        for item in cluster_items:
            item.add_marker(marker)
    if reporter is not None:
        reporter.write_line(f"!!! {line} !!!", red=True, bold=True)


@pytest.fixture(scope="session")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + kube-scheduler + kwok, started once for the session."""
    bin_dir, why = _bin_dir()
    if bin_dir is None:
        if _require():
            pytest.fail(f"MIGCTL_REQUIRE_CLUSTER=1 but the control-plane binaries are missing: {why}", pytrace=False)
        pytest.skip(f"CLUSTER TIER SKIPPED: {why}")
    cp = ControlPlane(bin_dir, work_dir=tmp_path_factory.mktemp("control-plane"))
    try:
        cp.start()
    except ControlPlaneError as e:
        pytest.fail(str(e), pytrace=False)
    _running.append(cp)
    print(f"\ncontrol plane up in {cp.startup_seconds:.1f}s at {cp.server} (kubeconfig {cp.kubeconfig})")
    try:
        yield cp
    finally:
        _running.remove(cp)
        cp.stop()


@pytest.fixture
def api(control_plane: ControlPlane) -> Iterator[client.ApiClient]:
    """An admin ApiClient for one test."""
    api_client = control_plane.api_client()
    try:
        yield api_client
    finally:
        api_client.close()


@pytest.fixture
def core(api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api)


@pytest.fixture
def namespace(core: client.CoreV1Api) -> Iterator[str]:
    """A fresh namespace; its pods are deleted with grace 0 afterwards.

    The namespace itself is deleted too but never finishes (no kube-controller-manager runs the namespace
    controller); that is harmless within one session.
    """
    name = f"t-{uuid.uuid4().hex[:8]}"
    core.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
        core.delete_namespace(name)


@pytest.fixture
def node_names(core: client.CoreV1Api, namespace: str) -> Iterator[list[str]]:
    """Names for this test's nodes (prefixed by the namespace); nodes are deleted afterwards."""
    created: list[str] = []
    yield created
    for name in created:
        try:
            core.delete_node(name)
        except client.ApiException as e:
            if e.status != 404:
                raise


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the component log tails to a failing cluster test's report."""
    report = yield
    if _running and report.failed and item.get_closest_marker("cluster"):
        report.sections.append(("control-plane logs", _running[0].log_tails(25)))
    return report

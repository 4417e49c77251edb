"""Cluster tier fixtures: one real control plane per pytest session, a fresh namespace per test.

Binaries come from `MIGCTL_TESTBIN` (a directory) or else `hack/testbin.sh --path` (which builds nothing).
Without them the cluster tests are skipped with one loud line, unless `MIGCTL_REQUIRE_CLUSTER=1` (CI), in
which case they fail.
"""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from kubernetes import client, watch

from .controlplane import ControlPlane, ControlPlaneError, find_bin_dir
from .dra_harness import DraCluster
from .mig_parted_check import MigPartedCheck, Verdict, find_binary

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


@pytest.fixture
def dra_cluster(control_plane: ControlPlane, namespace: str, node_names: list[str]) -> Iterator[DraCluster]:
    """A DRA cluster for one test (tests/cluster/dra_harness.py): NVIDIA's `gpu.nvidia.com` and `mig.nvidia.com`
    DeviceClasses installed; add per-profile classes, fake-plugin nodes, claims and fences through it. Pods,
    plugins (pods and slices), fences and classes are removed afterwards; nodes via `node_names`."""
    cluster = DraCluster(control_plane, namespace, node_names)
    try:
        cluster.install_classes()
        yield cluster
    finally:
        cluster.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Attach the component log tails to a failing cluster test's report."""
    report = yield
    if _running and report.failed and item.get_closest_marker("cluster"):
        report.sections.append(("control-plane logs", _running[0].log_tails(25)))
    return report


# ---------------------------------------------------------------------------------------------------------
# NVIDIA's check of every ConfigMap migctl writes (tests/cluster/mig_parted_check.py says what is skipped)


class MigPartedAudit:
    """Watches every ConfigMap labelled `app.kubernetes.io/managed-by=migctl`, in every namespace, and runs
    `nvidia-mig-parted assert --valid-config` on each version of it; a cluster test fails if one was broken."""

    SELECTOR = "app.kubernetes.io/managed-by=migctl"

    def __init__(self, cp: ControlPlane, check: MigPartedCheck) -> None:
        self.cp, self.mig_parted = cp, check
        self.checked: dict[tuple[str, str, str], Verdict | None] = {}  # (ns, name, rv) -> verdict; None: being checked
        self.failures: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="mig-parted-audit", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def see(self, cm: client.V1ConfigMap) -> None:
        meta = cm.metadata
        key = (meta.namespace, meta.name, meta.resource_version)
        text = (cm.data or {}).get("config.yaml")
        with self._lock:
            if key in self.checked or text is None:
                return
            self.checked[key] = None
        verdict = self.mig_parted.check(text)
        with self._lock:
            self.checked[key] = verdict
            if not verdict.ok:
                where = f"ConfigMap {meta.namespace}/{meta.name}@{meta.resource_version}"
                self.failures.append(f"{where}: {verdict.output}")

    def sync(self) -> None:
        """Check the current version of every migctl ConfigMap (the watch may not have delivered it yet)."""
        api = self.cp.api_client()
        try:
            for cm in client.CoreV1Api(api).list_config_map_for_all_namespaces(label_selector=self.SELECTOR).items:
                self.see(cm)
        finally:
            api.close()

    def forget(self, namespace: str, name: str) -> list[str]:
        """Drop (and return) the failures of one ConfigMap: a test that breaks one on purpose."""
        with self._lock:
            mine = [f for f in self.failures if f.startswith(f"ConfigMap {namespace}/{name}@")]
            self.failures = [f for f in self.failures if f not in mine]
        return mine

    def _watch(self) -> None:
        while not self._stop.is_set():
            api = self.cp.api_client()
            try:
                core = client.CoreV1Api(api)
                for event in watch.Watch().stream(
                    core.list_config_map_for_all_namespaces, label_selector=self.SELECTOR, timeout_seconds=5
                ):
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.see(event["object"])
                    if self._stop.is_set():
                        break
            except Exception:  # a dropped watch is restarted; sync() catches up
                time.sleep(0.5)
            finally:
                api.close()


_audit: list[MigPartedAudit] = []


@pytest.fixture(scope="session")
def mig_parted(control_plane: ControlPlane) -> MigPartedCheck:
    """The real nvidia-mig-parted (v0.10.0); required like the control plane when MIGCTL_REQUIRE_CLUSTER=1."""
    binary, why = find_binary()
    if binary is None:
        if _require():
            pytest.fail(f"MIGCTL_REQUIRE_CLUSTER=1 but nvidia-mig-parted is missing: {why}", pytrace=False)
        pytest.skip(f"CLUSTER TIER SKIPPED: {why}")
    return MigPartedCheck(binary)


@pytest.fixture(scope="session")
def mig_parted_audit(control_plane: ControlPlane, mig_parted: MigPartedCheck) -> Iterator[MigPartedAudit]:
    audit = MigPartedAudit(control_plane, mig_parted)
    audit.start()
    _audit.append(audit)
    try:
        yield audit
    finally:
        audit.stop()


@pytest.fixture(autouse=True)
def _every_written_configmap_is_valid(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each cluster test: every version of every migctl ConfigMap passed NVIDIA's check."""
    if request.node.get_closest_marker("cluster") is None:
        yield
        return
    audit: MigPartedAudit = request.getfixturevalue("mig_parted_audit")
    yield
    audit.sync()
    with audit._lock:
        failures, audit.failures = list(audit.failures), []
    assert not failures, "nvidia-mig-parted assert --valid-config rejected a ConfigMap migctl wrote:\n" + "\n".join(
        failures
    )

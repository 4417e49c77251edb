"""The agent's in-place loop (migctl/agent/inplace_loop.py) with an in-memory AgentApi (its own Node only), the
fake driver at pynvml's interface and a real gRPC PodResources server standing in for the kubelet. The cluster-tier
end-to-end test of the protocol is the controller side's."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from migctl.adapters.nvml import NvmlReader
from migctl.adapters.nvml_mig import MigNvml
from migctl.adapters.podresources import PodResourcesClient
from migctl.agent.apply import Applier, Retry
from migctl.agent.inplace_loop import InPlaceLoop
from migctl.agent.journal import Journal, LayoutRecord
from migctl.agent.usage import KubeletAwareReader
from migctl.core.model.inventory import Inventory
from migctl.wire.inplace import Target, decode_status, encode_target
from migctl.wire.names import DEVICE_PLUGIN_CONFIG, IN_PLACE_STATUS, IN_PLACE_TARGET
from tests.unit.builders import CATALOG
from tests.unit.fake_nvml_mig import FakeMigNvml, MigGpu
from tests.unit.fake_podresources import FakeKubelet, serve_kubelet

Obj = dict[str, Any]
NODE = "gpu-node-1"


class OwnNode:
    """AgentApi in memory: one Node, merge patches of labels and annotations, every patch recorded."""

    def __init__(self) -> None:
        self.node: Obj = {"metadata": {"name": NODE, "labels": {DEVICE_PLUGIN_CONFIG: "migctl-a"}, "annotations": {}}}
        self.patches: list[Obj] = []

    def read_node(self, name: str) -> Obj:
        assert name == NODE, "the agent reads only its own node"
        copy: Obj = json.loads(json.dumps(self.node))
        return copy

    def patch_node(self, name: str, patch: Obj, what: str = "patch") -> Obj:
        assert name == NODE, "the agent writes only its own node"
        self.patches.append(patch)
        for key in ("labels", "annotations"):
            self.node["metadata"][key].update(patch.get("metadata", {}).get(key, {}))
        return self.read_node(name)

    def target(self, plan: str, gpus: dict[int, dict[str, int]]) -> None:
        self.node["metadata"]["annotations"][IN_PLACE_TARGET] = encode_target(Target(plan, gpus))

    @property
    def label(self) -> str:
        return str(self.node["metadata"]["labels"][DEVICE_PLUGIN_CONFIG])


class Rig:
    def __init__(self, tmp: Path, kubelet: FakeKubelet, socket: Path) -> None:
        self.fake = FakeMigNvml([MigGpu(uuid="GPU-0")])
        self.kubelet, self.socket, self.state = kubelet, socket, tmp / "state"
        self.api = OwnNode()
        self.caps = 0

    def loop(self) -> InPlaceLoop:
        """A fresh agent process (same node, same state directory)."""

        def caps() -> None:
            self.caps += 1

        applier = Applier(
            MigNvml(self.fake),
            PodResourcesClient(self.socket, 5),
            Journal(self.state),
            CATALOG,
            caps,
            Retry(3, 0.001, 0.001),
            LayoutRecord(self.state),
        )
        return InPlaceLoop(self.api, NODE, applier, ("migctl-a", "migctl-b"))


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with serve_kubelet(tmp_path) as (kubelet, socket):
        yield Rig(tmp_path, kubelet, socket)


def test_a_new_plan_is_applied_readvertised_and_answered(rig: Rig) -> None:
    rig.fake.add(0, "3g.20gb", 0, processes=1)
    rig.api.target("p1", {0: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}})
    status = rig.loop().tick()
    assert status is not None and (status.plan, status.state) == ("p1", "applied")
    assert [(h.profile, h.start, h.size, h.in_use) for h in status.gpus[0]] == [
        ("3g.20gb", 0, 4, True),
        ("2g.10gb", 4, 2, False),
        ("1g.5gb", 6, 1, False),
    ]
    written = decode_status(rig.api.node["metadata"]["annotations"][IN_PLACE_STATUS])
    assert written == status
    assert rig.api.label == "migctl-b" and rig.caps == 1
    label_patch = next(i for i, p in enumerate(rig.api.patches) if "labels" in p["metadata"])
    status_patch = next(i for i, p in enumerate(rig.api.patches) if "annotations" in p["metadata"])
    assert label_patch < status_patch  # re-advertise first, then answer


def test_an_answered_plan_is_not_applied_again(rig: Rig) -> None:
    rig.api.target("p1", {0: {"7g.40gb": 1}})
    loop = rig.loop()
    assert loop.tick() is not None
    mutations, patches = len(rig.fake.mutations), len(rig.api.patches)
    assert loop.tick() is None
    assert rig.loop().tick() is None  # a restarted agent reads the answer from the node
    assert (len(rig.fake.mutations), len(rig.api.patches)) == (mutations, patches)
    rig.api.target("p2", {0: {"3g.20gb": 2}})
    status = loop.tick()
    assert status is not None and status.state == "applied" and rig.api.label == "migctl-a"  # flipped back


def test_already_at_target_answers_applied_without_readvertising(rig: Rig) -> None:
    rig.fake.add(0, "7g.40gb", 0)
    rig.api.target("p1", {0: {"7g.40gb": 1}})
    status = rig.loop().tick()
    assert status is not None and status.state == "applied"
    assert rig.fake.mutations == [] and rig.api.label == "migctl-a" and rig.caps == 0


def test_blocked_is_answered_with_the_reason_and_nothing_changes(rig: Rig) -> None:
    uuid = rig.fake.add(0, "3g.20gb", 4)
    rig.kubelet.give("ml", "trainer", "nvidia.com/mig-3g.20gb", uuid)
    rig.api.target("p1", {0: {"7g.40gb": 1}})
    status = rig.loop().tick()
    assert status is not None and status.state == "blocked"
    assert "3g.20gb at 4+4" in status.message and "pod ml/trainer" in status.message
    assert [(h.profile, h.in_use) for h in status.gpus[0]] == [("3g.20gb", True)]
    assert rig.fake.mutations == [] and rig.api.label == "migctl-a"


def test_a_bad_target_is_answered_failed(rig: Rig) -> None:
    rig.api.target("p1", {0: {"9g.99gb": 1}})
    status = rig.loop().tick()
    assert status is not None and status.state == "failed" and "no MIG profile '9g.99gb'" in status.message


def test_another_versions_target_is_left_alone(rig: Rig) -> None:
    rig.api.node["metadata"]["annotations"][IN_PLACE_TARGET] = json.dumps({"version": "v9", "plan": "x"})
    assert rig.loop().tick() is None
    assert rig.api.patches == [] and rig.fake.mutations == []


def test_start_rebuilds_the_last_applied_layout_after_a_reboot_then_readvertises(rig: Rig) -> None:
    rig.api.target("p1", {0: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}})
    rig.loop().tick()
    before = [(p, s, z) for p, s, z, _ in rig.fake.layout(0)]
    rig.fake.gpus[0].gis.clear()  # reboot: MIG instances do not survive it
    rig.api.patches.clear()
    loop = rig.loop()
    notes = loop.start()
    assert notes == ["GPU 0: rebuilt 3 instances of the last applied layout"]
    assert [(p, s, z) for p, s, z, _ in rig.fake.layout(0)] == before
    assert rig.api.patches == []  # owed, paid by the first tick
    assert loop.tick() is None  # p1 is answered already
    assert rig.api.patches == [{"metadata": {"labels": {DEVICE_PLUGIN_CONFIG: "migctl-a"}}}]
    loop.tick()
    assert len(rig.api.patches) == 1  # paid once


def test_a_rebuild_and_the_next_change_share_one_readvertise(rig: Rig) -> None:
    """A flip for the rebuild and another for the change (a -> b -> a) could reach the device plugin's
    config-manager as no change at all, and it would advertise neither: the start's flip is paid by the apply's."""
    rig.api.target("p1", {0: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}})
    rig.loop().tick()
    rig.fake.gpus[0].gis.clear()  # reboot
    rig.api.target("p2", {0: {"3g.20gb": 2}})
    rig.api.patches.clear()
    loop = rig.loop()
    assert loop.start() == ["GPU 0: rebuilt 3 instances of the last applied layout"]
    status = loop.tick()
    assert status is not None and status.state == "applied"
    flips = [p for p in rig.api.patches if "labels" in p["metadata"]]
    assert flips == [{"metadata": {"labels": {DEVICE_PLUGIN_CONFIG: "migctl-a"}}}]


def test_start_with_nothing_to_do_changes_nothing(rig: Rig) -> None:
    rig.fake.add(0, "7g.40gb", 0)
    assert rig.loop().start() == []
    assert rig.api.patches == [] and rig.fake.mutations == []


def test_inventory_marks_kubelet_allocated_instances_busy(rig: Rig) -> None:
    held = rig.fake.add(0, "3g.20gb", 0)
    rig.fake.add(0, "3g.20gb", 4)
    rig.kubelet.give("ml", "waiting", "nvidia.com/mig-3g.20gb", held)
    inventory = KubeletAwareReader(NvmlReader(rig.fake), PodResourcesClient(rig.socket, 5)).read()
    assert [(d.start, d.busy) for d in inventory.gpus[0].instances] == [(0, True), (4, False)]
    blind = KubeletAwareReader(NvmlReader(rig.fake), PodResourcesClient(rig.state / "none.sock", 1)).read()
    assert [d.busy for d in blind.gpus[0].instances] == [None, None] and blind.gpus[0].busy is None


def test_a_failing_in_place_tick_does_not_stop_the_inventory(rig: Rig) -> None:
    from migctl.adapters.kube.errors import TransientError
    from migctl.agent.runner import AgentRunner
    from migctl.config.agent import AgentSettings

    published: list[Inventory] = []

    def broken_tick() -> None:
        raise TransientError("read node", 503, "Service Unavailable", "apiserver down")

    class Sink:
        def publish(self, inventory: Inventory) -> bool:
            published.append(inventory)
            return True

    runner = AgentRunner(NvmlReader(rig.fake), Sink(), AgentSettings(), before_read=broken_tick)
    assert runner.tick() and runner.ready and len(published) == 1


def test_migctl_agent_once_on_an_in_place_node_applies_answers_and_publishes(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command's wiring: agent.in_place builds the loop, runs its start and one tick before the inventory."""
    from click.testing import CliRunner

    import migctl.adapters.kube as kube_module
    import migctl.adapters.nvml as nvml_module
    import migctl.cli.agent_apply as wiring
    from migctl.cli import cli

    monkeypatch.setattr(nvml_module, "NvmlReader", lambda: NvmlReader(rig.fake))
    monkeypatch.setattr(wiring, "MigNvml", lambda: MigNvml(rig.fake))
    monkeypatch.setattr(kube_module, "api_client", lambda *a, **k: None)
    monkeypatch.setattr(kube_module, "KubeApi", lambda *a, **k: rig.api)
    held = rig.fake.add(0, "3g.20gb", 0)
    rig.kubelet.give("ml", "starting", "nvidia.com/mig-3g.20gb", held)
    rig.api.target("p7", {0: {"3g.20gb": 1, "1g.5gb": 2}})
    agent = {"in_place": True, "state_dir": str(rig.state), "pod_resources_socket": str(rig.socket)}
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"agent": {**agent, "caps_command": ["true"], "health_port": None}}))
    result = CliRunner().invoke(cli, ["agent", "--once", "--node", NODE, "--config", str(config)])
    assert result.exit_code == 0, result.output
    annotations = rig.api.node["metadata"]["annotations"]
    status = decode_status(annotations[IN_PLACE_STATUS])
    assert (status.plan, status.state) == ("p7", "applied") and rig.api.label == "migctl-b"
    assert [(h.start, h.in_use) for h in status.gpus[0]] == [(0, True), (4, False), (5, False)]  # the kubelet's
    inventory = json.loads(annotations["migctl.io/gpus"])
    busy = {(d["profile"], d["start"]): d["busy"] for d in inventory["gpus"][0]["instances"]}
    assert busy == {("3g.20gb", 0): True, ("1g.5gb", 4): False, ("1g.5gb", 5): False}  # the kubelet's view


def test_no_change_while_mig_manager_runs_on_the_node(rig: Rig) -> None:
    rig.api.node["metadata"]["labels"]["nvidia.com/gpu.deploy.mig-manager"] = "true"
    rig.api.target("p1", {0: {"7g.40gb": 1}})
    status = rig.loop().tick()
    assert status is not None and status.state == "failed" and "gpu.deploy.mig-manager=false" in status.message
    assert rig.fake.mutations == []


def test_a_layout_found_already_at_target_is_rebuilt_after_a_reboot(rig: Rig) -> None:
    """The node was cut before it opted in; the first plan asks for what it has: that too is what a reboot loses."""
    rig.fake.add(0, "4g.20gb", 0)
    rig.fake.add(0, "3g.20gb", 4)
    rig.api.target("p1", {0: {"4g.20gb": 1, "3g.20gb": 1}})
    assert rig.loop().tick() is not None and rig.fake.mutations == []
    rig.fake.gpus[0].gis.clear()
    assert rig.loop().start() == ["GPU 0: rebuilt 2 instances of the last applied layout"]
    assert [(s, z) for _, s, z, _ in rig.fake.layout(0)] == [(0, 4), (4, 4)]

"""The in-place agent on a DRA node (migctl/agent/dra.py through InPlaceLoop): the fake driver at pynvml's
interface, a real gRPC PodResources server standing in for the kubelet (it knows no DRA device, as a real one
does not list them), and an in-memory DraAgentApi (dra_fakes.DraApi) holding NVIDIA's slices as its static-MIG
plugin would publish them for that NVML, the cluster's ResourceClaims and pods of several nodes and namespaces.

The real kubelet plugin and the API server's policy are not here: tests/cluster/test_dra_agent_rbac.py proves
the policy; what only a GPU can show is in docs/install.md "On a DRA cluster"."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from migctl.adapters.kube.errors import TransientError
from migctl.adapters.kube.interface import DraAgentApi
from migctl.adapters.nvml_mig import MigNvml
from migctl.adapters.podresources import PodResourcesClient
from migctl.agent.apply import Applier, Retry
from migctl.agent.dra import DYNAMIC_REFUSAL, DraNode
from migctl.agent.inplace_loop import InPlaceLoop
from migctl.agent.journal import Journal, LayoutRecord
from migctl.config.agent import AgentDraSettings
from migctl.wire.inplace import Status, Target, decode_status, encode_target
from migctl.wire.names import DEVICE_PLUGIN_CONFIG, IN_PLACE_STATUS, IN_PLACE_TARGET
from tests.nvidia_slices import node_slices
from tests.unit.agent.dra_fakes import PLUGIN_NS, DraApi, Obj, claim, pod, static_slices
from tests.unit.builders import CATALOG
from tests.unit.fake_nvml_mig import FakeMigNvml, MigGpu
from tests.unit.fake_podresources import FakeKubelet, serve_kubelet

NODE = "gpu-node-1"
OTHER = "gpu-node-2"
MODEL = CATALOG.model("a100-40gb")
SPLIT = {0: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}}  # from 2x 3g.20gb: the one at 4 is re-cut


class Rig:
    """One DRA node: its NVML, its kubelet, the cluster's API; `own` is its plugin pod, the rest are pods the
    agent must never delete."""

    def __init__(self, tmp: Path, kubelet: FakeKubelet, socket: Path) -> None:
        self.fake = FakeMigNvml([MigGpu(uuid="GPU-0")])
        self.kubelet, self.socket, self.state = kubelet, socket, tmp / "state"
        self.api = DraApi(NODE)
        self.own = pod("plugin-own", NODE)
        self.api.pods = [
            self.own,
            pod("plugin-other-node", OTHER),
            pod("unlabelled", NODE, labels={"app": "something-else"}),
            pod("plugin-elsewhere", NODE, namespace="kube-system"),
        ]
        self.api.on_delete = self.republish

    def publish(self) -> None:
        """What the plugin lists when it starts: the instances NVML has now (and a neighbour's slice)."""
        neighbour = node_slices(OTHER, MODEL, 1, mode="dynamic")
        self.api.slices = static_slices(NODE, self.fake, MODEL) + neighbour

    def republish(self, deleted: Obj) -> None:
        """The DaemonSet makes a new pod, whose plugin lists the instances that exist now."""
        self.api.pods.append(pod("plugin-own-2", deleted["spec"]["nodeName"]))
        self.publish()

    def loop(self, dra: bool = True) -> InPlaceLoop:
        """A fresh agent process (same node, same state directory); `dra`: agent.dra.enabled."""
        applier = Applier(
            MigNvml(self.fake),
            PodResourcesClient(self.socket, 5),
            Journal(self.state),
            CATALOG,
            lambda: None,
            Retry(3, 0.001, 0.001),
            LayoutRecord(self.state),
        )
        api: DraAgentApi = self.api
        node = DraNode(api, NODE, AgentDraSettings(enabled=True), CATALOG) if dra else None
        return InPlaceLoop(api, NODE, applier, ("migctl-a", "migctl-b"), node)

    def target(self, plan: str, gpus: dict[int, dict[str, int]]) -> None:
        self.api.node["metadata"]["annotations"][IN_PLACE_TARGET] = encode_target(Target(plan, gpus))

    def answer(self, plan: str, gpus: dict[int, dict[str, int]], loop: InPlaceLoop | None = None) -> Status:
        self.target(plan, gpus)
        status = (loop or self.loop()).tick()
        assert status is not None and status.plan == plan
        assert decode_status(self.api.node["metadata"]["annotations"][IN_PLACE_STATUS]) == status
        return status

    @property
    def label(self) -> str:
        return str(self.api.node["metadata"]["labels"][DEVICE_PLUGIN_CONFIG])

    def layout(self) -> list[tuple[int, int]]:
        return [(s, z) for _, s, z, _ in self.fake.layout(0)]


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    with serve_kubelet(tmp_path) as (kubelet, socket):
        r = Rig(tmp_path, kubelet, socket)
        r.fake.add(0, "3g.20gb", 0)
        r.fake.add(0, "3g.20gb", 4)
        r.publish()
        yield r


def device_names(slices: list[Obj], node: str) -> list[str]:
    return sorted(d["name"] for s in slices if s["spec"]["nodeName"] == node for d in s["spec"].get("devices") or [])


def test_a_static_dra_node_recuts_free_instances_and_restarts_only_its_own_plugin_pod(rig: Rig) -> None:
    """The server answers every list unfiltered (`lying`): the agent itself keeps to its node's slices and its
    node's plugin pod (namespace, labels, node), and deletes that one with its uid, instead of flipping the
    device plugin's label; then the answer. The new plugin lists the new instances."""
    rig.api.lying = True
    status = rig.answer("p1", SPLIT)
    assert status.state == "applied", status.message
    assert rig.layout() == [(0, 4), (4, 2), (6, 1)]
    assert rig.api.deletes == [f"delete {PLUGIN_NS}/plugin-own uid={rig.own['metadata']['uid']}"]
    assert rig.label == "migctl-a" and all("labels" not in p["metadata"] for p in rig.api.patches)
    assert rig.api.calls.index(rig.api.deletes[0]) < rig.api.calls.index("patch")  # re-advertise, then answer
    left = {p["metadata"]["name"] for p in rig.api.pods}
    assert left == {"plugin-other-node", "unlabelled", "plugin-elsewhere", "plugin-own-2"}
    assert device_names(rig.api.slices, NODE) == [
        "gpu-0-mig-1g5gb-19-6",
        "gpu-0-mig-2g10gb-14-4",
        "gpu-0-mig-3g20gb-9-0",
    ]


def test_an_instance_allocated_to_a_claim_is_never_destroyed(rig: Rig) -> None:
    """Allocated, no process on it, and the kubelet lists nothing for it: the claim alone keeps it."""
    rig.api.claims = [claim("ml", "train-0", NODE, "gpu-0-mig-3g20gb-9-4", pod_name="trainer")]
    status = rig.answer("p1", {0: {"7g.40gb": 1}})
    assert status.state == "blocked"
    assert "ResourceClaim ml/train-0 (gpu-0-mig-3g20gb-9-4) of pod trainer" in status.message
    assert [(h.profile, h.start, h.in_use) for h in status.gpus[0]] == [("3g.20gb", 0, False), ("3g.20gb", 4, True)]
    assert rig.fake.mutations == [] and rig.api.deletes == []


def test_a_claim_of_another_node_does_not_hold_this_nodes_instance(rig: Rig) -> None:
    """Same device name on the neighbour's pool: nothing of this node is in use."""
    rig.api.claims = [claim("ml", "train-0", OTHER, "gpu-0-mig-3g20gb-9-4")]
    status = rig.answer("p1", SPLIT)
    assert status.state == "applied", status.message
    assert rig.layout() == [(0, 4), (4, 2), (6, 1)]


def _claims_unlistable(rig: Rig) -> None:
    rig.api.fail["list_resource_claims"] = TransientError("list resourceclaims", 503, "Service Unavailable")


def _claim_unreadable(rig: Rig) -> None:
    bad = claim("ml", "odd", NODE, "gpu-0-mig-3g20gb-9-4")
    bad["spec"]["devices"]["requests"] = "not a list"
    rig.api.claims = [bad]


@pytest.mark.parametrize(
    ("breaks", "why"),
    [
        (_claims_unlistable, "the claims on node gpu-node-1 could not be read: list resourceclaims: 503"),
        (_claim_unreadable, "ResourceClaim ml/odd may hold a device of node gpu-node-1 but cannot be read"),
    ],
    ids=["list-fails", "claim-malformed"],
)
def test_unreadable_claims_change_nothing(rig: Rig, breaks: Callable[[Rig], None], why: str) -> None:
    breaks(rig)
    status = rig.answer("p1", SPLIT)
    assert status.state == "failed" and why in status.message, status.message
    assert rig.fake.mutations == [] and rig.api.deletes == []


def _no_such_device(rig: Rig) -> None:
    rig.api.claims = [claim("ml", "ghost", NODE, "gpu-0-mig-1g5gb-19-6")]


def _no_uuid_attribute(rig: Rig) -> None:
    rig.api.claims = [claim("ml", "ghost", NODE, "gpu-0-mig-3g20gb-9-4")]
    for s in rig.api.slices:
        for d in s["spec"].get("devices") or []:
            d["attributes"].pop("uuid", None)


def _plugin_republishing(rig: Rig) -> None:
    rig.api.claims = [claim("ml", "ghost", NODE, "gpu-0-mig-3g20gb-9-4")]
    rig.api.slices = [s for s in rig.api.slices if s["spec"]["nodeName"] != NODE]  # the plugin pod still there


@pytest.mark.parametrize(
    "unmapped", [_no_such_device, _no_uuid_attribute, _plugin_republishing], ids=["device", "uuid", "no-slices"]
)
def test_a_claim_that_maps_to_no_instance_fails_closed(rig: Rig, unmapped: Callable[[Rig], None]) -> None:
    """Which instance it holds is unknown, so every instance might be it."""
    unmapped(rig)
    status = rig.answer("p1", SPLIT)
    assert status.state == "failed", status.message
    assert "ResourceClaim ml/ghost holds gpu.nvidia.com/gpu-node-1/" in status.message
    assert "do not map to a MIG UUID" in status.message
    assert rig.fake.mutations == [] and rig.api.deletes == []


def test_unreadable_slices_change_nothing(rig: Rig) -> None:
    """A slice the reader drops might be the one showing counters (DynamicMIG)."""
    rig.api.slices[0]["spec"]["devices"][0]["capacity"] = ["not", "a", "map"]
    status = rig.answer("p1", SPLIT)
    assert status.state == "failed" and "cannot read this node's ResourceSlices" in status.message, status.message
    assert "spec.devices[0].capacity" in status.message
    assert rig.fake.mutations == [] and rig.api.deletes == []


def test_a_dynamic_mig_node_is_refused_and_not_rebuilt_at_start(rig: Rig) -> None:
    """DynamicMIG destroys partitions its plugin did not create: no target is applied, no layout rebuilt after a
    reboot. The same node with static slices does rebuild (so the refusal is the slices', not the record's)."""
    assert rig.answer("p1", SPLIT).state == "applied"  # records the layout a reboot loses
    rig.fake.gpus[0].gis.clear()  # reboot
    rig.api.slices = node_slices(NODE, MODEL, 1, mode="dynamic")
    rig.api.calls.clear()
    mutations = len(rig.fake.mutations)
    loop = rig.loop()
    assert loop.start() == [] and rig.layout() == []
    status = rig.answer("p2", {0: {"7g.40gb": 1}}, loop)
    assert (status.state, status.message) == ("failed", DYNAMIC_REFUSAL)
    assert len(rig.fake.mutations) == mutations and rig.api.deletes == []
    assert "migctl.io/actuation=in-place" in DYNAMIC_REFUSAL
    rig.api.slices = static_slices(NODE, rig.fake, MODEL)  # static again (the whole GPU)
    assert rig.loop().start() == ["GPU 0: rebuilt 3 instances of the last applied layout"]


def test_dra_objects_unreadable_at_start_means_no_rebuild(rig: Rig) -> None:
    assert rig.answer("p1", SPLIT).state == "applied"
    rig.fake.gpus[0].gis.clear()
    rig.api.fail["list_node_resource_slices"] = TransientError("list resourceslices", 503, "Service Unavailable")
    assert rig.loop().start() == [] and rig.layout() == []


def test_a_missing_plugin_pod_fails_the_answer_and_the_restart_is_owed(rig: Rig) -> None:
    """Instances changed but the plugin could not be restarted: the answer says so, and each tick tries the
    restart again until it is done (the old plugin lists devices that are gone)."""
    rig.api.pods = [p for p in rig.api.pods if p is not rig.own]
    loop = rig.loop()
    status = rig.answer("p1", SPLIT, loop)
    assert status.state == "failed" and "re-advertise failed: no pod labelled" in status.message
    assert rig.layout() == [(0, 4), (4, 2), (6, 1)] and rig.api.deletes == []
    rig.api.pods.append(rig.own)  # the DaemonSet's pod is back
    assert loop.tick() is None
    assert rig.api.deletes == [f"delete {PLUGIN_NS}/plugin-own uid={rig.own['metadata']['uid']}"]
    loop.tick()
    assert len(rig.api.deletes) == 1  # paid once


@pytest.mark.parametrize("dra", [False, True], ids=["dra-disabled", "dra-enabled-no-driver"])
def test_device_plugin_nodes_flip_the_label_as_before(rig: Rig, dra: bool) -> None:
    """agent.dra off: no DRA object is read. On, on a node NVIDIA's DRA driver does not serve (a mixed cluster):
    the device plugin's label flip, and no pod deleted."""
    rig.api.slices = [s for s in rig.api.slices if s["spec"]["nodeName"] != NODE]
    rig.api.pods = [p for p in rig.api.pods if p is not rig.own]
    rig.api.claims = [claim("ml", "elsewhere", OTHER, "gpu-0-mig-3g20gb-9-4")]
    status = rig.answer("p1", SPLIT, rig.loop(dra=dra))
    assert status.state == "applied", status.message
    assert rig.label == "migctl-b" and rig.api.deletes == []
    assert bool(rig.api.dra_reads) is dra


def test_migctl_agent_once_on_a_dra_node_restarts_its_plugin(
    rig: Rig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The command's wiring: agent.dra.enabled (as the chart renders it) builds the DRA node into the loop."""
    from click.testing import CliRunner

    import migctl.adapters.kube as kube_module
    import migctl.adapters.nvml as nvml_module
    import migctl.cli.agent_apply as wiring
    from migctl.adapters.nvml import NvmlReader
    from migctl.cli import cli

    monkeypatch.setattr(nvml_module, "NvmlReader", lambda: NvmlReader(rig.fake))
    monkeypatch.setattr(wiring, "MigNvml", lambda: MigNvml(rig.fake))
    monkeypatch.setattr(kube_module, "api_client", lambda *a, **k: None)
    monkeypatch.setattr(kube_module, "KubeApi", lambda *a, **k: rig.api)
    rig.api.claims = [claim("ml", "train-0", NODE, "gpu-0-mig-3g20gb-9-0")]
    rig.target("p7", SPLIT)
    dra = {"enabled": True, "plugin_namespace": PLUGIN_NS, "plugin_labels": rig.own["metadata"]["labels"]}
    agent = {"in_place": True, "state_dir": str(rig.state), "pod_resources_socket": str(rig.socket), "dra": dra}
    config = tmp_path / "config.yaml"
    config.write_text(json.dumps({"agent": {**agent, "caps_command": ["true"], "health_port": None}}))
    result = CliRunner().invoke(cli, ["agent", "--once", "--node", NODE, "--config", str(config)])
    assert result.exit_code == 0, result.output
    status = decode_status(rig.api.node["metadata"]["annotations"][IN_PLACE_STATUS])
    assert (status.plan, status.state) == ("p7", "applied"), status.message
    assert [(h.start, h.in_use) for h in status.gpus[0]] == [(0, True), (4, False), (6, False)]  # the claim's
    assert rig.api.deletes == [f"delete {PLUGIN_NS}/plugin-own uid={rig.own['metadata']['uid']}"]
    assert rig.label == "migctl-a"

"""migctl reads mig-parted configs as mig-parted does: filter matching, the node's own PCI id, lenient seeding,
and the mig-manager version setting. Configs are NVIDIA's own (the GPU Operator's default-mig-parted-config @
a22dbf6, tests/fixtures) unless a case needs a filter NVIDIA's file lacks. The tests against the real
nvidia-mig-parted binary are in tests/cluster/test_mig_parted.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from migctl.adapters.objects import snapshot_from_objects
from migctl.controller.configmap import ConfigMapWriter
from migctl.core.hardware.catalog import Catalog
from migctl.core.migparted.apply import resolve
from migctl.core.migparted.config import parse
from migctl.core.model.cluster import Node, Snapshot
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.inventory import GpuInfo, Inventory, MigDevice
from migctl.core.model.settings import GpuOperatorSettings
from migctl.core.planner import plan
from migctl.core.text.migparted_rules import DeviceId, filters_match, parse_filter
from migctl.errors import InputError
from tests.unit.builders import CATALOG, mig, node

DATA = Path(__file__).parents[4] / "migctl" / "sim" / "data"
FIXTURE = (DATA / "gpu-operator-a22dbf6-default-mig-parted-config.yaml").read_text()
H100 = DeviceId(0x233010DE, 0x16C010DE)
OLD = (0, 14, 5)  # the last release before subsystem filters


@pytest.mark.parametrize(
    ("filters", "device", "version", "expected"),
    [
        ((), H100, None, True),  # absent, "" and [] all read as no filter: every GPU
        (("",), H100, None, False),  # a list holding "" does not parse: no GPU
        (("0x233010DE",), H100, None, True),
        (("0X233010de",), H100, None, True),  # Go accepts either case
        (("590352606",), H100, None, True),  # decimal: strconv.ParseUint(s, 0, 32)
        (("04314010336",), H100, None, True),  # Go's legacy octal
        (("0x2330_10DE",), H100, None, True),  # Go literal underscores
        (("0x233110DE",), H100, None, False),
        (("0x233010DE:0x16C010DE",), H100, None, True),  # v0.15: exact four-part match
        (("0x233010DE:0x16C110DE",), H100, None, False),
        (("0x233010DE:0x16C110DE", "0x233010DE:0x16C010DE"), H100, None, True),
        (("0x233010DE:0x16C010DE:x",), H100, None, False),  # malformed: no match
        (("0x233010DE:0x16C010DE",), DeviceId(0x233010DE), None, None),  # subsystem unknown: undecided
        (("0x233010DE:0x16C010DE",), H100, OLD, False),  # before v0.15 the colon fails to parse
        (("+590352606",), H100, OLD, True),  # ParseInt took a sign; ParseUint (v0.15) does not
        (("+590352606",), H100, None, False),
        (("0x1233010DE",), H100, None, False),  # more than 32 bits
    ],
)
def test_device_filter_matching(
    filters: tuple[str, ...], device: DeviceId, version: tuple[int, int, int] | None, expected: bool | None
) -> None:
    assert filters_match(filters, device, *([version] if version else [])) is expected


def test_empty_filter_string_matches_every_gpu_and_a_decimal_one_matches_its_gpu() -> None:
    text = (
        "version: v1\nmig-configs:\n  a:\n  - {device-filter: '', devices: all, mig-enabled: false}\n"
        "  b:\n  - {device-filter: ['590352606'], devices: [1], mig-enabled: true, mig-devices: {7g.80gb: 1}}\n"
    )
    cfg = parse(text, "t")
    assert resolve(cfg, "a", [(0, "0x20B010DE"), (1, None)]) == {0: GpuConfig.disabled(), 1: GpuConfig.disabled()}
    assert resolve(cfg, "b", [(0, "0x233010DE"), (1, "0x233010DE")]) == {1: GpuConfig.mig({"7g.80gb": 1})}
    assert parse_filter("590352606") == DeviceId(0x233010DE)


# ---------------------------------------------------------------------------------------------------------
# The node's own PCI id, through the adapter


def _cm(text: str = FIXTURE) -> dict[str, Any]:
    return {
        "kind": "ConfigMap",
        "metadata": {"name": "default-mig-parted-config", "namespace": "gpu-operator"},
        "data": {"config.yaml": text},
    }


def _inventory(pci: str, sub: str, layouts: list[dict[str, int]], model: str) -> str:
    m = CATALOG.model(model)
    gpus = []
    for i, layout in enumerate(layouts):
        instances, start = [], 0
        for name, n in layout.items():
            p = m.profile(name)
            for _ in range(n):
                uuid = f"MIG-{i}-{start}"
                instances.append(
                    MigDevice(
                        profile=name,
                        profile_id=p.profile_id or 0,
                        gi=start,
                        start=start,
                        size=p.memory_slices,
                        memory_mib=p.memory_mib,
                        uuid=uuid,
                        busy=False,
                    )
                )
                start += p.memory_slices
        gpus.append(
            GpuInfo(
                index=i,
                uuid=f"GPU-{i}",
                name="?",
                memory_mib=m.memory_mib,
                mig_capable=True,
                mig_enabled=True,
                mig_pending=True,
                busy=False,
                instances=tuple(instances),
                pci_device_id=pci,
                pci_subsystem_id=sub,
            )
        )
    return Inventory(gpus=tuple(gpus)).to_annotation()


def _node(product: str, config: str, count: int = 2, inventory: str | None = None) -> dict[str, Any]:
    return {
        "kind": "Node",
        "metadata": {
            "name": "n",
            "labels": {
                "nvidia.com/gpu.product": product,
                "nvidia.com/gpu.count": str(count),
                "nvidia.com/mig.config": config,
                "nvidia.com/mig.config.state": "success",
            },
            "annotations": {"migctl.io/gpus": inventory} if inventory else {},
        },
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}},
    }


def _read(*objs: dict[str, Any], catalog: Catalog = CATALOG, **operator: Any) -> tuple[Node, Snapshot]:
    snap = snapshot_from_objects(objs, catalog, operator=GpuOperatorSettings(**operator))
    (n,) = snap.nodes
    return n, snap


def test_h200_nvl_is_left_untouched_by_all_1g_35gb_as_mig_parted_leaves_it() -> None:
    """NVIDIA's all-1g.35gb filters 0x2335 (H200) and 0x31C2 (GB300): an H200 NVL (0x233B) is not touched, so
    its layout is not known from that label (migctl used to take the first PCI id of the model: 4x1g.35gb)."""
    h200, _ = _read(_node("NVIDIA-H200", "all-1g.35gb"), _cm())
    assert [g.config for g in h200.gpus] == [GpuConfig.mig({"1g.35gb": 4})] * 2
    nvl, _ = _read(_node("NVIDIA-H200-NVL", "all-1g.35gb"), _cm())
    assert nvl.gpus == () and "current layout unknown" in nvl.frozen_reason


def test_gb300_reads_its_own_1g_35gb_from_the_agents_pci_id() -> None:
    """GB300's 1g.35gb is a 1-slice profile (7 per GPU), H200's a 2-slice one (4 per GPU): one name, two
    meanings, told apart by the node's model and its own PCI id."""
    inv = _inventory("0x31C210DE", "0x000010DE", [{"1g.35gb": 7}] * 2, "gb300-278gb")
    gb300, snap = _read(_node("NVIDIA-GB300", "all-1g.35gb", inventory=inv), _cm())
    assert gb300.model is not None and gb300.model.id == "gb300-278gb"
    assert [g.config for g in gb300.gpus] == [GpuConfig.mig({"1g.35gb": 7})] * 2
    assert gb300.frozen_reason == "" and not [w for w in snap.warnings if "disagrees" in w]
    assert gb300.model.profile("1g.35gb").memory_slices == 1
    assert CATALOG.model("h200-141gb").profile("1g.35gb").memory_slices == 2


def test_unpaired_ids_resolve_only_where_every_candidate_agrees() -> None:
    """GH200 480GB: NVIDIA's config lists the whole 96 GB family in one filter, so all-balanced resolves without
    knowing which id this board has; a filter naming one id of the family does not."""
    gh, _ = _read(_node("NVIDIA-GH200-480GB", "all-balanced"), _cm())
    assert [g.config for g in gh.gpus] == [GpuConfig.mig({"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1})] * 2
    one = "version: v1\nmig-configs:\n  x:\n  - {device-filter: '0x234210DE', devices: all, mig-enabled: false}\n"
    unknown, _ = _read(_node("NVIDIA-GH200-480GB", "x"), _cm(one))
    assert "current layout unknown" in unknown.frozen_reason
    inv = _inventory("0x234210DE", "0x000010DE", [{}, {}], "h100-96gb")
    inv = json.dumps(
        {
            **json.loads(inv),
            "gpus": [{**g, "mig_enabled": False, "mig_pending": False} for g in json.loads(inv)["gpus"]],
        }
    )
    known, snap = _read(_node("NVIDIA-GH200-480GB", "x", inventory=inv), _cm(one))
    assert known.frozen_reason == "" and not [w for w in snap.warnings if "disagrees" in w]


SUB = (
    "version: v1\nmig-configs:\n  x:\n"
    "  - {device-filter: '0x233010DE:0x16C010DE', devices: all, mig-enabled: true, mig-devices: {7g.80gb: 1}}\n"
)


def test_subsystem_filter_needs_the_subsystem_and_a_new_enough_mig_manager() -> None:
    """The hardware has 2x3g.40gb: where the config applies (7g.80gb) migctl reports the disagreement; where
    mig-parted would leave the GPUs untouched, the label says nothing and the hardware is believed."""
    mine = _inventory("0x233010DE", "0x16C010DE", [{"3g.40gb": 2}] * 2, "h100-80gb")
    other = _inventory("0x233010DE", "0x16C110DE", [{"3g.40gb": 2}] * 2, "h100-80gb")
    _, snap = _read(_node("NVIDIA-H100-80GB-HBM3", "x", inventory=mine), _cm(SUB))
    assert any("recorded 7g.80gb" in w or "disagrees with the hardware" in w for w in snap.warnings)
    for inv, operator in ((other, {}), (mine, {"mig_manager_version": "v0.14.5"})):
        n, snap = _read(_node("NVIDIA-H100-80GB-HBM3", "x", inventory=inv), _cm(SUB), **operator)
        assert not [w for w in snap.warnings if "disagrees" in w] and n.frozen_reason == ""
    gfd_only, _ = _read(_node("NVIDIA-H100-80GB-HBM3", "x"), _cm(SUB))  # GFD has no subsystem id
    assert "current layout unknown" in gfd_only.frozen_reason


# ---------------------------------------------------------------------------------------------------------
# Seeding migctl's ConfigMap, and the mig-manager version


class FakeKube:
    def __init__(self, objects: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.objects = objects

    def read_configmap(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get((namespace, name))

    def create_configmap(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        self.objects[(namespace, body["metadata"]["name"])] = body
        return body

    def replace_configmap(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return self.create_configmap(namespace, body)


BAD_NAME = "  custom-bad:\n  - devices: all\n    mig-enabled: true\n    mig-devices: {'1g.5gb+.me': 1}\n"


def _writer(seed: str, **operator: Any) -> tuple[ConfigMapWriter, FakeKube]:
    kube = FakeKube({("gpu-operator", "default-mig-parted-config"): _cm(seed)})
    return ConfigMapWriter(kube, "migctl", "migctl-mig-config", GpuOperatorSettings(**operator), set), kube  # type: ignore[arg-type]


def test_one_unreadable_seed_config_loses_only_itself(caplog: pytest.LogCaptureFixture) -> None:
    writer, kube = _writer(FIXTURE + BAD_NAME)
    with caplog.at_level(logging.WARNING):
        assert writer.ensure_exists()
    written = parse(kube.objects[("migctl", "migctl-mig-config")]["data"]["config.yaml"], "written")
    assert "all-disabled" in written.mig_configs and "all-balanced" in written.mig_configs
    assert "custom-bad" not in written.mig_configs and not written.skipped
    assert any(
        "custom-bad" in r.getMessage() and "attribute begins/ends with a dot" in r.getMessage() for r in caplog.records
    )


def test_old_mig_manager_never_gets_a_name_it_cannot_parse() -> None:
    writer, kube = _writer(FIXTURE, mig_manager_version="v0.12.2")
    writer.ensure_exists()
    text = kube.objects[("migctl", "migctl-mig-config")]["data"]["config.yaml"]
    assert "+me.all" not in text and "-me" not in text
    assert {"all-disabled", "all-1g.24gb.me", "all-1g.24gb.gfx"} <= set(parse(text, "w", (0, 12, 2)).mig_configs)
    with pytest.raises(InputError, match=r"refusing to write a config mig-manager v0\.12\.2 cannot read"):
        writer.ensure("migctl-x", {0: GpuConfig.mig({"1g.24gb-me": 4})})
    writer.ensure("migctl-y", {0: GpuConfig.mig({"1g.24gb": 4})})  # a readable one is written


def test_old_mig_manager_version_keeps_me_all_and_no_me_profiles_out_of_plans() -> None:
    rtx = {
        "kind": "Node",
        "metadata": {
            "name": "rtx",
            "labels": {
                "nvidia.com/gpu.product": "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition",
                "nvidia.com/gpu.count": "1",
            },
            "annotations": {"migctl.io/layout": json.dumps({"gpus": {"0": {"mig": True, "layout": {"4g.96gb": 1}}}})},
        },
        "status": {"allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"}},
    }
    pod = {
        "kind": "Pod",
        "metadata": {"namespace": "a", "name": "p"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/mig-1g.24gb-me": 1}}}]},
        "status": {"phase": "Pending"},
    }
    for version, placed in (("v0.12.3", 1), ("v0.12.2", 0)):
        snap = snapshot_from_objects([rtx, pod], CATALOG, operator=GpuOperatorSettings(mig_manager_version=version))
        (n,) = snap.nodes
        assert n.model is not None and n.model.has_profile("1g.24gb-me") is bool(placed)
        assert plan(snap).summary.pods_placed == placed


# ---------------------------------------------------------------------------------------------------------
# Each new model is planned


@pytest.mark.parametrize(
    ("model", "full", "ask"),
    [
        ("b300-269gb", "7g.269gb", "3g.135gb"),
        ("gb300-278gb", "7g.278gb", "1g.35gb"),
        ("h100-96gb", "7g.96gb", "3g.48gb"),
        ("blackwell-189gb", "7g.189gb", "3g.95gb"),
    ],
)
def test_a_node_of_each_new_model_is_planned(model: str, full: str, ask: str) -> None:
    n = node("n1", model, [{full: 1}])
    result = plan(Snapshot((n,), (mig("p", ask), mig("q", ask)))).to_dict()
    got = {a["pod"]: (a["node"], a["profile"]) for a in result["assignments"]}  # type: ignore[union-attr]
    assert got == {"ns/p": ("n1", ask), "ns/q": ("n1", ask)}
    (gpu,) = result["nodes"][0]["gpus"]  # type: ignore[index]
    assert gpu["target"][ask] >= 2


def test_without_a_seed_the_configmap_still_holds_all_disabled() -> None:
    """mig-parted rejects a file without configs, and `all-disabled` is the operator's default label: found by
    the cluster tier's nvidia-mig-parted audit (the ConfigMap was created with `mig-configs: {}`)."""
    kube = FakeKube({})
    writer = ConfigMapWriter(kube, "migctl", "cm", GpuOperatorSettings(), set)  # type: ignore[arg-type]
    writer.ensure_exists()
    written = parse(kube.objects[("migctl", "cm")]["data"]["config.yaml"], "written")
    assert set(written.mig_configs) == {"all-disabled"}
    assert written.mig_configs["all-disabled"][0].devices == "all"

"""`migctl status` on node objects as the API serves them: the phase the actuator writes, the last error a rollback
writes, the layout the adapter reads, the actuation label, and the command's table and JSON (through a snapshot
file: the live read is the cluster tier's, tests/cluster/test_observability.py)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from migctl.adapters.objects import snapshot_from_objects
from migctl.cli import cli
from migctl.cli.status import age, layout_cell, statuses
from migctl.core.hardware.catalog import load_catalog
from migctl.core.model.gpu_config import GpuConfig, config_name
from migctl.reconcile.nodestate import APPLYING, Target
from migctl.wire import inplace
from migctl.wire.layout import GpuLayout, encode
from migctl.wire.names import (
    ACTUATION,
    IN_PLACE,
    IN_PLACE_STATUS,
    LAST_ERROR,
    LAYOUT,
    PHASE,
    PHASE_SINCE,
    PLAN_ID,
    RECONFIGURING,
    TARGET,
)

from ..kube_builders import Obj, gpu_node, mig_parted

ALL_1G = {0: {"1g.10gb": 7}, 1: {"1g.10gb": 7}}
TARGET_3G = {0: {"3g.40gb": 2}, 1: {"1g.10gb": 7}}


def gpu(index: int, instances: dict[str, int], mig: bool = True) -> dict[str, Any]:
    """One GPU as status rows and `-o json` carry it: machine values, the plan JSON's profile counts."""
    return {"index": index, "mig_enabled": mig, "instances": instances}


def h100(name: str, **annotations: str) -> Obj:
    node = gpu_node(name, "h100-80gb", ALL_1G)
    node["metadata"]["annotations"].update(annotations)
    return node


def in_flight(since: float, phase: str = APPLYING, plan: str = "p0000000001") -> dict[str, str]:
    """The phase annotations as the actuator writes them (actuator.py: taint step), with the real Target codec."""
    gpus = {i: GpuConfig.mig(lay) for i, lay in TARGET_3G.items()}
    target = Target(plan, config_name(gpus), gpus, started=since)
    return {PLAN_ID: plan, PHASE: phase, PHASE_SINCE: f"{since:.3f}", TARGET: target.to_json()}


def rows(*nodes: Obj) -> list[dict[str, Any]]:
    objects = [*nodes, mig_parted(ALL_1G, TARGET_3G)]
    snap = snapshot_from_objects(objects, load_catalog())
    return [r.__dict__ for r in statuses(objects, snap, time.time())]


def run_cli(tmp_path: Path, *nodes: Obj, args: tuple[str, ...] = ()) -> tuple[int, str, str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"kind": "List", "items": [*nodes, mig_parted(ALL_1G, TARGET_3G)]}))
    res = CliRunner().invoke(cli, ["status", "--snapshot", str(path), *args])
    return res.exit_code, res.stdout, res.stderr


def test_a_node_mid_change_shows_its_phase_and_since_when() -> None:
    since = time.time() - 125
    node = h100("busy", **in_flight(since))
    node["spec"]["taints"] = [{"key": RECONFIGURING, "value": "true", "effect": "NoSchedule"}]
    (row,) = rows(node)
    assert row["phase"] == APPLYING
    assert row["phase_since"] == pytest.approx(since, abs=0.001)
    assert row["phase_problem"] == ""
    assert row["target"] == [gpu(0, {"3g.40gb": 2}), gpu(1, {"1g.10gb": 7})]
    assert row["frozen"]  # the snapshot leaves a node mid-change alone: status says so


def test_an_idle_node_has_no_phase() -> None:
    (row,) = rows(h100("idle"))
    assert row["phase"] is None and row["phase_since"] is None and row["last_error"] is None and row["target"] is None


def test_after_a_rollback_the_last_error_is_shown_whole_in_json_and_cut_in_the_table(tmp_path: Path) -> None:
    reason = "mig-manager did not report success within 900 s (nvidia.com/mig.config.state=pending); " * 3
    node = h100("rolled-back", **{LAST_ERROR: reason[:1000]})
    code, out, _ = run_cli(tmp_path, node, args=("-o", "json"))
    assert code == 0
    (row,) = json.loads(out)["nodes"]
    assert row["last_error"] == reason[:1000] and row["phase"] is None
    code, out, _ = run_cli(tmp_path, node)
    line = out.splitlines()[1]
    assert line.startswith("rolled-back") and "mig-manager did not report success" in line and line.endswith("...")


def test_unreadable_phase_annotations_are_shown_as_such_not_hidden() -> None:
    ann = {**in_flight(time.time() - 10), PHASE_SINCE: "yesterday"}
    (row,) = rows(h100("hand-edited", **ann))
    assert row["phase"] == APPLYING
    assert "migctl.io/phase-since='yesterday'" in row["phase_problem"]


def test_layout_per_gpu_is_the_adapters_reading_the_layout_annotation_first() -> None:
    """The label names the all-1g config; migctl's layout record says GPU 0 holds 2 x 3g.40gb. The snapshot
    (adapters/objects.py) trusts the record, and so does status."""
    record = encode({0: GpuLayout(True, {"3g.40gb": 2}), 1: GpuLayout(True, {"1g.10gb": 7})}, "cfg")
    (row,) = rows(h100("recorded", **{LAYOUT: record}))
    assert row["gpus"] == [gpu(0, {"3g.40gb": 2}), gpu(1, {"1g.10gb": 7})]
    assert row["models"] == ["NVIDIA-H100-80GB-HBM3"]


def test_actuation_path_is_the_label_absent_means_mig_manager() -> None:
    stock = h100("stock")
    opted = h100("opted")
    opted["metadata"]["labels"][ACTUATION] = IN_PLACE
    status = inplace.Status("p1", "blocked", "GPU 0: instance 3g.40gb busy")
    opted["metadata"]["annotations"][IN_PLACE_STATUS] = inplace.encode_status(status)
    by_name = {r["node"]: r for r in rows(stock, opted)}
    assert by_name["stock"]["actuation"] == "mig-manager" and by_name["stock"]["in_place_status"] is None
    assert by_name["opted"]["actuation"] == "in-place"
    assert by_name["opted"]["in_place_status"] == {"plan": "p1", "state": "blocked",
                                                   "message": "GPU 0: instance 3g.40gb busy"}  # fmt: skip


def test_a_node_the_snapshot_skips_is_still_listed_when_migctl_left_an_error_on_it() -> None:
    broken = h100("broken", **{LAST_ERROR: "verify: allocatable never matched"})
    broken["metadata"]["labels"]["nvidia.com/gpu.product"] = "NVIDIA-Unknown-GPU"
    plain = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cpu-only"}, "status": {}}
    (row,) = rows(broken, plain)
    assert row["node"] == "broken" and row["gpus"] == [] and row["last_error"].startswith("verify")
    assert "not in the profile catalog" in row["frozen"]


def test_a_snapshot_file_with_malformed_metadata_is_read_without_a_crash(tmp_path: Path) -> None:
    odd = h100("odd")
    odd["metadata"]["annotations"] = [LAST_ERROR, "a list, not a map"]
    odd["metadata"]["labels"] = "nor this"
    code, out, err = run_cli(tmp_path, odd, h100("fine", **{LAST_ERROR: "x"}))
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()[1:]] == ["fine"]


def test_table_has_kubectl_get_columns(tmp_path: Path) -> None:
    code, out, _ = run_cli(tmp_path, h100("n2", **in_flight(time.time() - 30)), h100("n1"))
    assert code == 0
    header, first, second = out.splitlines()
    assert header.split() == ["NODE", "MODELS", "ACTUATION", "LAYOUT", "PHASE", "SINCE", "LAST-ERROR"]
    assert first.split() == ["n1", "NVIDIA-H100-80GB-HBM3", "mig-manager", "0-1:7×1g.10gb", "<none>", "<none>",
                             "<none>"]  # fmt: skip
    name, _, _, layout, phase, since, error = second.split()
    assert (name, layout, phase, error) == ("n2", "0-1:7×1g.10gb->0:2×3g.40gb;1:7×1g.10gb", APPLYING, "<none>")
    assert since in ("30s", "31s")


def test_layout_cell_folds_runs_of_equal_gpus_only_when_consecutive() -> None:
    a_b, c = {"1g.10gb": 1, "3g.40gb": 1}, {"7g.80gb": 1}
    gpus = [gpu(i, lay) for i, lay in enumerate([a_b, a_b, c, a_b])]
    assert layout_cell(gpus) == "0-1:1g.10gb+3g.40gb;2:7g.80gb;3:1g.10gb+3g.40gb"
    assert layout_cell([gpu(0, c), gpu(2, c)]) == "0:7g.80gb;2:7g.80gb"  # GPU 1 unknown
    assert layout_cell([gpu(0, {}, mig=False), gpu(1, {"1g.10gb": 7})]) == "0:MIGdisabled;1:7×1g.10gb"
    assert layout_cell([]) == "unknown"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(0, "0s"), (59, "59s"), (61, "1m1s"), (599, "9m59s"), (600, "10m"), (3661, "1h1m"), (36000, "10h"),
     (90000, "1d1h"), (-5, "0s")],
)  # fmt: skip
def test_age_is_kubectls(seconds: float, shown: str) -> None:
    assert age(seconds) == shown


def test_kubectl_plugin_entry_point_is_the_same_group_named_kubectl_migctl() -> None:
    res = CliRunner().invoke(cli, ["status", "--help"], prog_name="kubectl migctl")
    assert res.exit_code == 0 and "Usage: kubectl migctl status" in res.stdout
    assert "plan" in CliRunner().invoke(cli, ["--help"], prog_name="kubectl migctl").stdout


# -- shaped like kubectl get (issue 44) -------------------------------------------------------------------------


def test_json_carries_machine_values_rfc3339_times_and_profile_counts(tmp_path: Path) -> None:
    from datetime import datetime

    since = 1_780_000_000.25  # 2026-05-28T20:26:40.25Z
    code, out, _ = run_cli(tmp_path, h100("busy", **in_flight(since)), args=("-o", "json"))
    assert code == 0
    doc = json.loads(out)
    (row,) = doc["nodes"]
    assert row["phase_since"] == "2026-05-28T20:26:40Z"
    assert datetime.strptime(doc["time"], "%Y-%m-%dT%H:%M:%SZ").timestamp() == pytest.approx(time.time(), abs=600)
    assert row["gpus"] == [gpu(0, {"1g.10gb": 7}), gpu(1, {"1g.10gb": 7})]
    assert row["target"] == [gpu(0, {"3g.40gb": 2}), gpu(1, {"1g.10gb": 7})]
    assert "×" not in out  # no display strings


def test_yaml_is_the_json_document(tmp_path: Path) -> None:
    node = h100("n1", **{LAST_ERROR: "verify: allocatable never matched"})
    _, out_json, _ = run_cli(tmp_path, node, args=("-o", "json"))
    code, out_yaml, _ = run_cli(tmp_path, node, args=("-o", "yaml"))
    assert code == 0
    assert out_yaml.startswith("source: ") and "\nnodes:\n- node: n1\n" in out_yaml  # block YAML, not JSON text
    as_json, as_yaml = json.loads(out_json), yaml.safe_load(out_yaml)
    as_json.pop("time"), as_yaml.pop("time")
    assert as_yaml == as_json


def test_wide_adds_the_gpu_count_the_agent_and_why_a_node_is_frozen(tmp_path: Path) -> None:
    opted = h100("opted", **in_flight(time.time() - 5))
    opted["metadata"]["labels"][ACTUATION] = IN_PLACE
    opted["metadata"]["annotations"][IN_PLACE_STATUS] = inplace.encode_status(inplace.Status("p1", "applying", ""))
    long_error = "x" * 100
    opted["metadata"]["annotations"][LAST_ERROR] = long_error
    code, out, _ = run_cli(tmp_path, opted, h100("idle"), args=("-o", "wide"))
    assert code == 0
    header, first, second = out.splitlines()
    assert header.split() == ["NODE", "MODELS", "ACTUATION", "LAYOUT", "PHASE", "SINCE", "DRIVER", "GPUS", "AGENT",
                              "FROZEN", "LAST-ERROR"]  # fmt: skip
    assert first.split()[0] == "idle" and first.split()[6:] == ["device-plugin", "2", "<none>", "<none>", "<none>"]
    assert second.split()[0] == "opted" and second.split()[6:9] == ["device-plugin", "2", "applying"]
    assert second.endswith(long_error)  # whole in wide; the plain table cuts it at 60
    _, plain, _ = run_cli(tmp_path, opted, h100("idle"))
    assert long_error not in plain


def test_node_names_and_a_selector_pick_nodes(tmp_path: Path) -> None:
    a, b, c = h100("a"), h100("b"), h100("c")
    a["metadata"]["labels"]["pool"] = "train"
    b["metadata"]["labels"]["pool"] = "infer"
    c["metadata"]["labels"]["pool"] = "train"

    def listed(*args: str) -> list[str]:
        code, out, err = run_cli(tmp_path, a, b, c, args=args)
        assert code == 0, err
        return [line.split()[0] for line in out.splitlines()[1:]]

    assert listed() == ["a", "b", "c"]
    assert listed("c", "a") == ["a", "c"]
    assert listed("-l", "pool=train") == ["a", "c"]
    assert listed("--selector", "pool!=train") == ["b"]
    code, _, err = run_cli(tmp_path, a, args=("-l", "pool=train", "c"))
    assert code == 2 and "error: name cannot be provided when a selector is specified" in err  # as kubectl get
    assert listed("-l", "!pool") == []  # kubectl prints no rows then: here "No GPU nodes found."


def test_a_node_not_found_is_an_error_after_the_others_are_shown(tmp_path: Path) -> None:
    code, out, err = run_cli(tmp_path, h100("a"), args=("a", "nope", "-o", "json"))
    assert code == 1
    assert [r["node"] for r in json.loads(out)["nodes"]] == ["a"]
    assert err.strip() == 'error: node "nope" not found (not a GPU node, nor one migctl annotated)'


@pytest.mark.parametrize("selector", ["pool in (a,b)", "pool notin (a)", "pool", "!pool,x in (y)"])
def test_set_based_selectors_are_refused_equality_based_read(tmp_path: Path, selector: str) -> None:
    code, _, err = run_cli(tmp_path, h100("a"), args=("-l", selector))
    if "(" in selector:
        assert code == 2 and "error: " in err and "set-based selectors (in, notin) are not supported" in err
    else:
        assert code == 0, err


def test_a_bad_selector_term_names_itself(tmp_path: Path) -> None:
    code, _, err = run_cli(tmp_path, h100("a"), args=("-l", "pool=a b"))
    assert code == 2 and "error: " in err and "term 'pool=a b'" in err


def test_a_dra_node_shows_its_path_and_driver(tmp_path: Path) -> None:
    """A node whose GPUs NVIDIA's DRA driver serves (its ResourceSlices, tests/nvidia_slices.py) is a DRA node:
    path dynamic-mig or dra, driver dra-dynamic or dra-static, beside a device-plugin node."""
    from migctl.core.hardware.geometry import Placement
    from tests.nvidia_slices import node_slices

    model = load_catalog().model("a100-40gb")
    bare = {"apiVersion": "v1", "kind": "Node", "status": {"allocatable": {"cpu": "8", "memory": "64Gi"}}}
    dyn = {**bare, "metadata": {"name": "dyn", "labels": {}}}
    sta = {**bare, "metadata": {"name": "sta", "labels": {}}}
    seven = [Placement("1g.5gb", s, 1) for s in range(7)]
    objects = [*node_slices("dyn", model, 1), *node_slices("sta", model, 1, mode="static", static_layouts=[seven])]
    code, out, _ = run_cli(tmp_path, dyn, sta, h100("plain"), *objects, args=("-o", "json"))
    assert code == 0
    rows = {r["node"]: (r["actuation"], r["driver"]) for r in json.loads(out)["nodes"]}
    assert rows == {"dyn": ("dynamic-mig", "dra-dynamic"), "sta": ("dra", "dra-static"),
                    "plain": ("mig-manager", "device-plugin")}  # fmt: skip

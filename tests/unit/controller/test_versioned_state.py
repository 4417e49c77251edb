"""Versioned state: every annotation migctl writes carries `version`; the unversioned form reads as v1; a value of
another version is reported and its node left alone, never rolled back (issue 33)."""

from __future__ import annotations

import copy
import json

import pytest

from migctl.adapters.objects import load_objects, snapshot_from_objects
from migctl.cli.plan import example_path
from migctl.core.hardware.catalog import Catalog
from migctl.reconcile.nodestate import LeftAlone, Rollback, Target, abandoned, read_state, target_configs
from migctl.wire import layout
from migctl.wire.versions import UnknownVersionError
from tests.unit.controller.test_actuator_state_machine import FakeKube, actuator, node_with
from tests.unit.reconcile.test_nodestate import GOOD, NOW, TARGET


def _versioned(text: str, version: object) -> str:
    """The JSON value with its version replaced (None: removed, the form every earlier migctl wrote)."""
    doc = json.loads(text)
    doc.pop("version", None)
    if version is not None:
        doc["version"] = version
    return json.dumps(doc, sort_keys=True)


# -- migctl.io/layout -----------------------------------------------------------------------------------------

GPUS = {0: layout.GpuLayout(True, {"3g.40gb": 2})}


def test_layout_is_written_with_its_version_and_read_unversioned_as_v1() -> None:
    raw = layout.encode(GPUS, "migctl-x")
    assert json.loads(raw)["version"] == "v1"
    assert layout.decode(raw) == layout.decode(_versioned(raw, None)) == GPUS
    with pytest.raises(UnknownVersionError, match=r"migctl\.io/layout: version 'v2'"):
        layout.decode(_versioned(raw, "v2"))


def test_a_layout_of_another_version_leaves_its_node_alone_and_says_so(catalog: Catalog) -> None:
    items = copy.deepcopy(load_objects(example_path()))
    node = next(o for o in items if o["kind"] == "Node" and o["metadata"]["name"] == "a100-node-1")
    recorded = layout.encode({0: layout.GpuLayout(True, {"1g.5gb": 4}), 1: layout.GpuLayout(True, {})}, "x")
    node["metadata"].setdefault("annotations", {})["migctl.io/layout"] = _versioned(recorded, "v9")
    snap = snapshot_from_objects(items, catalog)
    (read,) = [n for n in snap.nodes if n.name == "a100-node-1"]
    assert read.frozen_reason.startswith("left alone: migctl.io/layout: version 'v9'")
    assert ("Node", "a100-node-1") in {(k, n) for k, n, _ in snap.problems}  # reported on the node
    node["metadata"]["annotations"]["migctl.io/layout"] = "{not json"  # unreadable is another matter
    snap = snapshot_from_objects(items, catalog)
    assert not any("left alone" in w for w in snap.warnings)


# -- migctl.io/target and migctl.io/rollback (the phase annotations' JSON) -------------------------------------


def test_target_and_rollback_are_written_with_their_version_and_read_unversioned_as_v1() -> None:
    assert json.loads(TARGET.to_json())["version"] == "v1"
    assert Target.from_json(_versioned(TARGET.to_json(), None)) == TARGET
    rb = Rollback("why", "eviction", relabel=True)
    assert json.loads(rb.to_json())["version"] == "v1"
    assert Rollback.from_json(_versioned(rb.to_json(), None)) == rb
    legacy = {**GOOD, "migctl.io/target": _versioned(TARGET.to_json(), None)}
    state = read_state(legacy, NOW)
    assert not state.problem and not state.foreign and state.target == TARGET


@pytest.mark.parametrize("key", ["migctl.io/target", "migctl.io/rollback"])
def test_phase_json_of_another_version_is_foreign_not_a_problem(key: str) -> None:
    ann = {**GOOD, "migctl.io/phase": "rolling-back", "migctl.io/rollback": Rollback("w", "verify", True).to_json()}
    ann[key] = _versioned(ann[key], 2)
    state = read_state(ann, NOW)
    assert state.foreign.startswith(f"{key}: version 2 was written by another migctl version")
    assert not state.problem  # never read as unreadable: that would roll the node back
    assert not abandoned(state, NOW + 10**9, actuator(FakeKube(node_with({}), str)).settings)


@pytest.mark.parametrize("key", ["migctl.io/target", "migctl.io/rollback"])
def test_the_actuator_leaves_a_node_of_another_version_alone(key: str) -> None:
    ann = {**GOOD, "migctl.io/phase": "rolling-back", "migctl.io/rollback": Rollback("w", "verify", True).to_json()}
    ann[key] = _versioned(ann[key], "v3")
    kube = FakeKube(node_with(ann), lambda c: "success")
    before = copy.deepcopy(kube.node)
    a = actuator(kube)
    for act in (lambda: a.drive("n"), lambda: a.release("n", "released: test")):
        with pytest.raises(LeftAlone, match="another migctl version"):
            act()
    assert kube.node == before  # no rollback, no untaint, no relabel: nothing written
    assert [e["reason"] for e in kube.events] == ["MigctlNeedsAttention"] * 2
    assert a.metrics.failed.labels("unreadable")._value.get() == 0


def test_configs_a_foreign_target_names_are_kept() -> None:
    """The ConfigMap's cleanup keeps what an in-flight target needs, also one of another version."""
    assert target_configs({"migctl.io/target": _versioned(TARGET.to_json(), "v2")}) == {"migctl-x", "all-1g.10gb"}

"""`migctl plan --snapshot` on malformed input: a corpus generated per class of mistake (or attack).

Each case mutates the bundled example snapshot in one place. Whatever the mutation, `migctl plan` ends with exit 0
(the bad object costs only itself: a warning or a rejection naming it) or exit 2 (the file itself is unusable:
one paragraph naming it), never a traceback, and the message names the object and the field. The classes come
from issue 21 (over 150 snapshots fed by hand) plus our own; a hypothesis test mutates random fields on top.
"""

from __future__ import annotations

import copy
import json
import math
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from migctl.cli import cli
from migctl.cli.plan import example_path

BASE: list[dict[str, Any]] = yaml.safe_load(example_path().read_text())["items"]
VRAM = "migctl.io/vram"
LIMITS: list[str | int] = ["spec", "containers", 0, "resources", "limits"]


def _obj(items: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    for o in items:
        meta = o["metadata"]
        full = f"{meta.get('namespace')}/{meta['name']}" if kind in ("Pod", "ConfigMap") else meta.get("name")
        if o["kind"] == kind and (full == name or meta.get("name") == name):
            return o
    raise LookupError(name)


def _set(obj: dict[str, Any], path: list[str | int], value: Any) -> None:
    cur: Any = obj
    for p in path[:-1]:
        if isinstance(p, str) and (not isinstance(cur.get(p), dict | list) or cur.get(p) is None):
            cur[p] = {}
        cur = cur[p]
    cur[path[-1]] = value


def _plan(tmp_path: Path, items: list[dict[str, Any]] | None = None, text: str | None = None) -> tuple[int, str, Any]:
    """Run `migctl plan -o json`; (exit code, stdout + stderr, the exception if one escaped)."""
    path = tmp_path / "snap.yaml"
    if text is None:
        text = yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}, allow_unicode=True)
    path.write_text(text, encoding="utf-8")
    res = CliRunner().invoke(cli, ["plan", "--snapshot", str(path), "-o", "json"])
    escaped = None if res.exception is None or isinstance(res.exception, SystemExit) else res.exception
    return res.exit_code, res.stdout + res.stderr, escaped


def _json(out: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(out)
    return data


_BASELINE: dict[str, Any] = {}


def _baseline(tmp_path: Path) -> dict[str, Any]:
    """The plan of the unmutated example (computed once)."""
    if not _BASELINE:
        code, out, _ = _plan(tmp_path, copy.deepcopy(BASE))
        assert code == 0
        _BASELINE.update(_json(out))
    return _BASELINE


def _messages(data: dict[str, Any]) -> list[str]:
    return [*data["warnings"], *(f"{u['pod']}: {u['reason']}" for u in data["unplaced"])]


# ---------------------------------------------------------------------------------------------------------
# Quantities: every field migctl reads as a quantity, times every class of bad quantity


BAD_QUANTITIES: list[tuple[str, Any]] = [
    ("huge exponent", "1e999999999"),
    ("exponent past int64", "1e5000"),
    ("negative huge", "-1e19"),
    ("infinity", math.inf),
    ("nan", math.nan),
    ("infinity text", "Infinity"),
    ("nan text", "NaN"),
    ("superscript digit", "²"),
    ("fullwidth digit", "１"),
    ("arabic-indic digit", "٣Gi"),
    ("tiny exponent", "1e-99"),
    ("70 digits", "9" * 70),
    ("two dots", "1.5.5"),
    ("hex", "0x10"),
    ("bool", True),
    ("list", [1]),
    ("object", {"a": 1}),
    ("unit only", "Gi"),
    ("space inside", "1 Gi"),
]

# (object kind, name, field path, how messages spell the field)
QUANTITY_FIELDS: list[tuple[str, str, list[str | int], str]] = [
    ("Node", "a100-node-1", ["status", "allocatable", "cpu"], "status.allocatable.cpu"),
    ("Node", "h100-node-1", ["status", "allocatable", "memory"], "status.allocatable.memory"),
    ("Node", "h100-node-2", ["status", "allocatable", "nvidia.com/mig-1g.10gb"], "nvidia.com/mig-1g.10gb"),
    ("Pod", "ml/infer-a", ["spec", "containers", 0, "resources", "limits", VRAM], f"resources[{VRAM}]"),
    ("Pod", "ml/train-3g", ["spec", "containers", 0, "resources", "limits", "nvidia.com/mig-3g.40gb"], "mig-3g.40gb"),
    ("Pod", "ml/train-3g", ["spec", "containers", 0, "resources", "requests", "cpu"], "resources[cpu]"),
    ("Pod", "ml/train-3g", ["metadata", "annotations", VRAM], f"annotations[{VRAM}]"),
    ("Pod", "ml/llm-70b", ["spec", "overhead", "memory"], "spec.overhead[memory]"),
    ("Pod", "research/notebook-0", ["spec", "containers", 0, "resources", "limits", "nvidia.com/mig-1g.5gb"],
     "mig-1g.5gb"),
]  # fmt: skip


# every bad quantity on the first three fields; on the others, each bad quantity once (rotating), to keep it quick
QUANTITY_CASES = [
    (*f, *q)
    for i, f in enumerate(QUANTITY_FIELDS)
    for j, q in enumerate(BAD_QUANTITIES)
    if i < 3 or j % (len(QUANTITY_FIELDS) - 3) == i - 3 or j < 2
]


def _plan_with(tmp_path: Path, kind: str, name: str, path: list[str | int], value: Any) -> Any:
    """`migctl plan` of BASE with one field of one object set to `value`: it must exit 0 with a plan."""
    items = copy.deepcopy(BASE)
    _set(_obj(items, kind, name), path, value)
    code, out, escaped = _plan(tmp_path, items)
    assert escaped is None and code == 0, out
    return _json(out)


@pytest.mark.parametrize(
    ("kind", "name", "path", "label", "what", "value"),
    QUANTITY_CASES,
    ids=[f"{c[4]}:{c[3]}@{c[1]}" for c in QUANTITY_CASES],
)
def test_a_bad_quantity_costs_only_its_object(
    tmp_path: Path, kind: str, name: str, path: list[str | int], label: str, what: str, value: Any
) -> None:
    data = _plan_with(tmp_path, kind, name, path, value)
    about = [m for m in _messages(data) if name in m and label in m]
    assert about, f"no message names {name} and {label}: {_messages(data)}"
    base = _baseline(tmp_path)
    others = {a["pod"] for a in base["assignments"]} - {name, "ml/infer-a", "ml/infer-b", "ml/infer-c"}
    # the rest of the cluster is still planned: at least the pods the bad object cannot touch
    if kind == "Pod" and name != "research/notebook-0":
        assert others - {name} <= {a["pod"] for a in data["assignments"]}


def test_a_bad_annotation_on_a_cpu_only_pod_changes_nothing(tmp_path: Path) -> None:
    items = copy.deepcopy(BASE)
    cpu_pod = copy.deepcopy(_obj(items, "Pod", "ml/train-3g"))
    cpu_pod["metadata"] = {"namespace": "web", "name": "frontend", "annotations": {VRAM: "1e999999999"}}
    cpu_pod["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1"}}
    cpu_pod["spec"]["nodeName"] = "cpu-node-1"
    cpu_pod["status"] = {"phase": "Running"}
    pending_cpu = copy.deepcopy(cpu_pod)
    pending_cpu["metadata"]["name"] = "frontend-pending"
    del pending_cpu["spec"]["nodeName"]
    pending_cpu["status"] = {"phase": "Pending"}
    code, out, escaped = _plan(tmp_path, [*items, cpu_pod, pending_cpu])
    assert escaped is None and code == 0
    data = _json(out)
    assert data["assignments"] == _baseline(tmp_path)["assignments"]


def test_the_hostile_pending_limit_is_rejected_by_name_and_value(tmp_path: Path) -> None:
    items = copy.deepcopy(BASE)
    _set(_obj(items, "Pod", "ml/infer-b"), ["spec", "containers", 0, "resources", "limits", VRAM], "1e5000")
    code, out, _ = _plan(tmp_path, items)
    assert code == 0
    data = _json(out)
    (reason,) = [u["reason"] for u in data["unplaced"] if u["pod"] == "ml/infer-b"]
    assert "invalid pod spec" in reason and "'1e5000' is out of range" in reason, reason
    assert {"ml/infer-a", "ml/infer-c", "ml/train-3g"} <= {a["pod"] for a in data["assignments"]}


# ---------------------------------------------------------------------------------------------------------
# Wrongly typed fields


WRONG_TYPES: list[Any] = ["a string", 7, [None]]
TYPED_FIELDS: list[tuple[str, str, list[str | int]]] = [
    ("Node", "a100-node-2", ["status"]),
    ("Node", "a100-node-2", ["status", "allocatable"]),
    ("Node", "a100-node-2", ["metadata", "labels"]),
    ("Node", "a100-node-2", ["metadata", "annotations"]),
    ("Node", "a100-node-2", ["spec"]),
    ("Node", "a100-node-2", ["spec", "taints"]),
    ("Pod", "ml/train-3g", ["spec"]),
    ("Pod", "ml/train-3g", ["spec", "containers"]),
    ("Pod", "ml/train-3g", ["spec", "containers", 0]),
    ("Pod", "ml/train-3g", ["spec", "containers", 0, "resources"]),
    ("Pod", "ml/train-3g", ["spec", "containers", 0, "resources", "limits"]),
    ("Pod", "ml/train-3g", ["spec", "initContainers"]),
    ("Pod", "ml/train-3g", ["spec", "tolerations"]),
    ("Pod", "ml/train-3g", ["spec", "affinity"]),
    ("Pod", "ml/train-3g", ["spec", "nodeSelector"]),
    ("Pod", "ml/train-3g", ["spec", "priority"]),
    ("Pod", "ml/train-3g", ["spec", "overhead"]),
    ("Pod", "ml/train-3g", ["status"]),
    ("Pod", "ml/train-3g", ["status", "conditions"]),
    ("Pod", "ml/train-3g", ["metadata", "annotations"]),
    ("Pod", "research/notebook-0", ["spec", "containers"]),
    ("Pod", "ml/infer-c", ["metadata"]),  # found by the hypothesis test below: the VRAM-request section read it
]


@pytest.mark.parametrize(
    ("kind", "name", "path"), TYPED_FIELDS, ids=[f"{f[1]}:{'.'.join(map(str, f[2]))}" for f in TYPED_FIELDS]
)
@pytest.mark.parametrize("value", WRONG_TYPES, ids=["str", "int", "null-list"])
def test_a_wrongly_typed_field_costs_only_its_object(
    tmp_path: Path, kind: str, name: str, path: list[str | int], value: Any
) -> None:
    data = _plan_with(tmp_path, kind, name, path, value)
    # a field that is ignored when it reads as nothing may pass; one that is read names the object
    if any(name in m for m in _messages(data)):
        assert any(name in m and ("expected" in m or "not" in m) for m in _messages(data)), _messages(data)
    assert "ml/llm-70b" in {a["pod"] for a in data["assignments"]}  # the rest is planned


def test_node_status_string_names_the_field(tmp_path: Path) -> None:
    items = copy.deepcopy(BASE)
    _obj(items, "Node", "a100-node-2")["status"] = "broken"
    _, out, _ = _plan(tmp_path, items)
    assert "node a100-node-2: status: expected an object, got str 'broken'; node skipped" in _json(out)["warnings"]


def test_configmap_data_string_warns_and_keeps_planning(tmp_path: Path) -> None:
    items = copy.deepcopy(BASE)
    _obj(items, "ConfigMap", "default-mig-parted-config")["data"] = "oops"
    code, out, _ = _plan(tmp_path, items)
    assert code == 0
    assert any("default-mig-parted-config: data: expected an object, got str" in w for w in _json(out)["warnings"])


# ---------------------------------------------------------------------------------------------------------
# GFD labels


@pytest.mark.parametrize("value", ["-1", "abc", "0", "²", "100000", "1e3", " ", "99999999999999", "2.0", "+2"])
def test_a_bad_gpu_count_freezes_the_node_and_says_why(tmp_path: Path, value: str) -> None:
    items = copy.deepcopy(BASE)
    _obj(items, "Node", "h100-node-1")["metadata"]["labels"]["nvidia.com/gpu.count"] = value
    code, out, escaped = _plan(tmp_path, items)
    assert escaped is None and code == 0
    data = _json(out)
    assert any(w.startswith("node h100-node-1: label nvidia.com/gpu.count: ") for w in data["warnings"])
    assert not any("GPUs busy" in u["reason"] for u in data["unplaced"])
    assert "h100-node-1" not in {n["name"] for n in data["nodes"] if n["changed"]}


@pytest.mark.parametrize("label", ["nvidia.com/gpu.memory", "nvidia.com/mig-1g.10gb.memory"])
@pytest.mark.parametrize("value", ["-5", "²", "1e9", "99999999999"])
def test_a_bad_memory_label_is_ignored_with_a_warning(tmp_path: Path, label: str, value: str) -> None:
    items = copy.deepcopy(BASE)
    _obj(items, "Node", "h100-node-1")["metadata"]["labels"][label] = value
    code, out, _ = _plan(tmp_path, items)
    assert code == 0
    assert any(w.startswith(f"node h100-node-1: label {label}: ") for w in _json(out)["warnings"])


def test_an_empty_gpu_product_is_a_warning_not_silence(tmp_path: Path) -> None:
    items = copy.deepcopy(BASE)
    _obj(items, "Node", "a100-node-2")["metadata"]["labels"]["nvidia.com/gpu.product"] = ""
    _, out, _ = _plan(tmp_path, items)
    assert any(w.startswith("node a100-node-2: label nvidia.com/gpu.product is empty") for w in _json(out)["warnings"])


# ---------------------------------------------------------------------------------------------------------
# Current layouts checked against the model


LAYOUTS = {
    "unknown profile": '{"gpus": {"0": {"layout": {"9g.99gb": 1}}, "1": {"layout": {"1g.5gb": 7}}}}',
    "too many slices": '{"gpus": {"0": {"layout": {"1g.5gb": 7, "3g.20gb": 1}}, "1": {"layout": {"1g.5gb": 7}}}}',
    "eight 1g": '{"gpus": {"0": {"layout": {"1g.5gb": 8}}, "1": {"layout": {"1g.5gb": 7}}}}',
    "count a string": '{"gpus": {"0": {"layout": {"1g.5gb": "7"}}, "1": {"layout": {"1g.5gb": "x"}}}}',
    "not an object": "[1, 2]",
    "gpus a list": '{"gpus": [1]}',
    "bad index": '{"gpus": {"²": {"layout": {}}}}',
    "not json": "{gpus",
}


@pytest.mark.parametrize("raw", list(LAYOUTS.values()), ids=list(LAYOUTS))
def test_an_impossible_current_layout_freezes_its_node_and_is_never_a_target(tmp_path: Path, raw: str) -> None:
    items = copy.deepcopy(BASE)
    _obj(items, "Node", "a100-node-2")["metadata"].setdefault("annotations", {})["migctl.io/layout"] = raw
    code, out, escaped = _plan(tmp_path, items)
    assert escaped is None and code == 0
    data = _json(out)
    assert any(w.startswith("node a100-node-2: ") for w in data["warnings"]), data["warnings"]
    assert not any(n["name"] == "a100-node-2" and n["changed"] for n in data["nodes"])


def test_an_impossible_mig_parted_config_freezes_the_node(tmp_path: Path) -> None:
    """The issue's case: 8×1g.6gb on an A30, here 8×1g.5gb on an A100, from the mig-parted ConfigMap."""
    items = copy.deepcopy(BASE)
    cm = _obj(items, "ConfigMap", "default-mig-parted-config")
    cfg = yaml.safe_load(cm["data"]["config.yaml"])
    cfg["mig-configs"]["all-eight"] = [{"devices": "all", "mig-enabled": True, "mig-devices": {"1g.5gb": 8}}]
    cm["data"]["config.yaml"] = yaml.safe_dump(cfg)
    node = _obj(items, "Node", "a100-node-2")
    node["metadata"]["labels"]["nvidia.com/mig.config"] = "all-eight"
    node["status"]["allocatable"] = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/mig-1g.5gb": "16"}
    code, out, _ = _plan(tmp_path, items)
    data = _json(out)
    assert code == 0
    assert any("a100-node-2" in w and "impossible" in w for w in data["warnings"]), data["warnings"]
    assert not any(n["name"] == "a100-node-2" and n["changed"] for n in data["nodes"])
    assert not any(a["node"] == "a100-node-2" for a in data["assignments"])


# ---------------------------------------------------------------------------------------------------------
# Duplicates and unreadable running pods


def test_duplicate_nodes_and_pods_count_once(tmp_path: Path) -> None:
    items = copy.deepcopy(BASE)
    dups = [copy.deepcopy(_obj(items, "Node", "h100-node-1")), copy.deepcopy(_obj(items, "Pod", "ml/infer-a"))]
    dups.append(copy.deepcopy(_obj(items, "Pod", "serving/embedder")))
    _, out, _ = _plan(tmp_path, [*items, *dups])
    data = _json(out)
    base = _baseline(tmp_path)
    assert data["summary"]["pending_pods"] == base["summary"]["pending_pods"]
    assert data["assignments"] == base["assignments"]
    for what in ("node h100-node-1", "pod ml/infer-a", "pod serving/embedder"):
        assert f"{what}: listed more than once; the last copy counts" in data["warnings"]


@pytest.mark.parametrize(
    "mutate",
    [
        lambda p: p["spec"].__setitem__("containers", [None]),
        lambda p: p["spec"]["containers"][0]["resources"]["limits"].__setitem__("nvidia.com/mig-1g.5gb", "one"),
        lambda p: p["spec"]["containers"][0].__setitem__("resources", "big"),
    ],
    ids=["null container", "typo in count", "resources a string"],
)
def test_an_unreadable_running_pod_leaves_its_node_usage_unknown(tmp_path: Path, mutate: Callable[[Any], None]) -> None:
    items = copy.deepcopy(BASE)
    mutate(_obj(items, "Pod", "research/notebook-0"))  # runs on a100-node-1
    _, out, _ = _plan(tmp_path, items)
    data = _json(out)
    assert any(w.startswith("pod research/notebook-0: unreadable (") and "a100-node-1's usage is unknown" in w
               for w in data["warnings"]), data["warnings"]  # fmt: skip
    assert not any(n["name"] == "a100-node-1" and n["changed"] for n in data["nodes"])
    assert not any(a["node"] == "a100-node-1" for a in data["assignments"])  # its free instances are not "free"


def test_a_typo_in_a_running_pods_need_annotation_keeps_it_in_accounting(tmp_path: Path) -> None:
    items = copy.deepcopy(BASE)
    _obj(items, "Pod", "serving/embedder")["metadata"]["annotations"] = {VRAM: "6 Gi"}
    _, out, _ = _plan(tmp_path, items)
    data = _json(out)
    assert any(
        w.startswith(f"pod serving/embedder: metadata.annotations[{VRAM}]: '6 Gi' unreadable") for w in data["warnings"]
    )
    assert data["assignments"] == _baseline(tmp_path)["assignments"]


# ---------------------------------------------------------------------------------------------------------
# Whole files


def _bomb(levels: int) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines)


FILES = {
    "anchor bomb in a node label": (
        "apiVersion: v1\nkind: List\nitems:\n- kind: Node\n  metadata:\n    name: n\n    labels:\n"
        + "\n".join("      " + line for line in _bomb(9).splitlines())
        + "\n",
        2, "aliases expand to more than",
    ),
    "deep flow nesting": ("kind: Node\nmetadata: " + "[" * 5000 + "]" * 5000 + "\n", 2, "not valid YAML or JSON"),
    "deep block nesting": (
        "kind: Node\nmetadata:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 90)) + "  " * 90 + "x: 1\n",
        2, "nested deeper than 64",
    ),
    "deep JSON": ('{"kind": "List", "items": ' + "[" * 100 + "]" * 100 + "}", 2, "nested deeper than 64"),
    "many aliases": ("a: &a 1\nb: [" + ", ".join(["*a"] * 2000) + "]\n", 2, "more than 1000 aliases"),
    "not UTF-8": ("\udcff", 2, "not UTF-8"),
    "a scalar": ("42\n", 2, "document 0: expected a Kubernetes object or List, got int"),
    "items a string": ("kind: List\nitems: nope\n", 2, "items: expected a list, got str"),
    "an item a list": ("kind: List\nitems:\n- [1]\n", 2, "items[0]: expected an object, got list"),
    "no kind": ("kind: List\nitems:\n- metadata: {}\n", 2, "items[0].kind: missing"),
    "tab indentation": ("kind: List\nitems:\n\t- x\n", 2, "not valid YAML or JSON"),
    "empty": ("", 2, "no Kubernetes objects found (an empty file?)"),
}  # fmt: skip


@pytest.mark.parametrize(("text", "code", "message"), list(FILES.values()), ids=list(FILES))
def test_a_malformed_file_is_one_clear_error(tmp_path: Path, text: str, code: int, message: str) -> None:
    path = tmp_path / "snap.yaml"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    res = CliRunner().invoke(cli, ["plan", "--snapshot", str(path)])
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert res.exit_code == code, res.output
    assert message in res.stdout + res.stderr


# ---------------------------------------------------------------------------------------------------------
# Bounded time and memory: a real process under a memory cap and a timeout


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


HEAVY = {
    "gpu.count 100000": lambda items: _obj(items, "Node", "h100-node-1")["metadata"]["labels"].__setitem__(
        "nvidia.com/gpu.count", "100000"
    ),
    "every node at the largest sane count, a pod asking for 1e18 instances": lambda items: [
        o["metadata"]["labels"].__setitem__("nvidia.com/gpu.count", "64")
        for o in items
        if "nvidia.com/gpu.count" in (o["metadata"].get("labels") or {})
    ] + [_set(_obj(items, "Pod", "ml/train-3g"), [*LIMITS, "nvidia.com/mig-3g.40gb"], "1e18")],
    "ten thousand hostile pods": lambda items: items.extend(
        {"kind": "Pod", "metadata": {"namespace": "x", "name": f"p{i}", "annotations": {VRAM: "1e999999999"}},
         "spec": {"containers": [{"resources": {"limits": {VRAM: "1e5000"}}}]}, "status": {"phase": "Pending"}}
        for i in range(10_000)
    ),
}  # fmt: skip


@pytest.mark.parametrize("mutate", list(HEAVY.values()), ids=list(HEAVY))
def test_plan_ends_in_bounded_time_and_memory(tmp_path: Path, mutate: Callable[[list[dict[str, Any]]], Any]) -> None:
    items = copy.deepcopy(BASE)
    mutate(items)
    path = tmp_path / "snap.yaml"
    path.write_text(yaml.safe_dump({"kind": "List", "items": items}))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "migctl"), "plan", "--snapshot", str(path), "-o", "json"],
        capture_output=True, text=True, timeout=120, preexec_fn=_limited, check=False,
    )  # fmt: skip
    assert proc.returncode in (0, 2), proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_the_anchor_bomb_file_ends_in_bounded_memory(tmp_path: Path) -> None:
    path = tmp_path / "bomb.yaml"
    path.write_text(FILES["anchor bomb in a node label"][0])
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "migctl"), "plan", "--snapshot", str(path)],
        capture_output=True, text=True, timeout=120, preexec_fn=_limited, check=False,
    )  # fmt: skip
    assert proc.returncode == 2 and "refused: aliases expand" in proc.stderr and "Traceback" not in proc.stderr


# ---------------------------------------------------------------------------------------------------------
# Random mutations on top of the classes above


JUNK = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["1e999999999", "1e5000", "²", "-1", "0", "100000", ".inf", "{}", "[]"]),
    st.lists(st.none(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)  # fmt: skip


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*prefix, i))
    return out


PATHS = [(i, p) for i, o in enumerate(BASE) for p in _paths(o) if p[0] != "kind"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(PATHS), JUNK), min_size=1, max_size=4))
def test_random_mutations_never_crash(tmp_path: Path, mutations: list[tuple[tuple[int, tuple[Any, ...]], Any]]) -> None:
    items = copy.deepcopy(BASE)
    for (i, path), junk in mutations:
        cur: Any = items[i]
        try:
            for p in path[:-1]:
                cur = cur[p]
            cur[path[-1]] = junk
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation replaced a parent
    code, out, escaped = _plan(tmp_path, items)
    assert escaped is None, repr(escaped)
    assert code in (0, 2), out

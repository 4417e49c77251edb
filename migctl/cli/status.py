"""`migctl status` (and `kubectl migctl status`): one line per GPU node, read from the live cluster; changes nothing.

Every value comes from a reader that already exists, so status says what the controller itself reads: the node's
model and per-GPU layout from the planner's snapshot (`adapters.objects`: the `migctl.io/layout` annotation, else the
node agent's inventory, else the mig-parted config the label names), the phase from the controller's strict decoder
of its phase annotations (`controller.nodestate.read_state`), and on in-place nodes the agent's answer
(`wire.inplace.decode_status`).

Shaped like `kubectl get`: NODE arguments and `-l` pick nodes, `-o wide` adds columns, `-o json|yaml` gives machine
values (`to_json`: RFC 3339 times, profile counts), the table the display strings.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from migctl.adapters.objects import snapshot_from_objects
from migctl.adapters.pods import meta_of
from migctl.cli.inputs import CONFIG_FROM_CLUSTER_OPTION, read_inputs
from migctl.cli.output import EXIT_RUNTIME, FORMAT_OPTION, Command, emit, table
from migctl.cli.profiles import PROFILES_DIR_OPTION
from migctl.config.selector import LabelSelector
from migctl.core.hardware.catalog import load_catalog
from migctl.core.hardware.geometry import describe
from migctl.core.model.cluster import Node, Snapshot
from migctl.core.model.gpu_config import GpuConfig
from migctl.reconcile.nodestate import PHASE_ANNOTATIONS, read_state
from migctl.reconcile.paths import opted_in, path_of
from migctl.wire import inplace
from migctl.wire.names import GPU_PRODUCT, IN_PLACE_STATUS, LAST_ERROR

NO_SELECTOR = LabelSelector.parse("")


NONE = "<none>"  # what `kubectl get` prints for an empty cell
ERROR_WIDTH = 60  # the text table's last-error column; -o json has it whole
HEADERS = ("NODE", "MODELS", "ACTUATION", "LAYOUT", "PHASE", "SINCE", "LAST-ERROR")
WIDE_HEADERS = (*HEADERS[:-1], "DRIVER", "GPUS", "AGENT", "FROZEN", "LAST-ERROR")  # -o wide; LAST-ERROR whole, last


@dataclass(frozen=True)
class NodeStatus:
    """What `migctl status` says of one node (the `-o json` row)."""

    node: str
    models: list[str]
    actuation: str  # the node's path: mig-manager, in-place, dra or dynamic-mig
    driver: str  # what hands its GPUs to pods: device-plugin, dra-static or dra-dynamic
    gpus: list[dict[str, Any]]  # [{"index": 0, "mig_enabled": True, "instances": {"3g.40gb": 1}}]; [] if unknown
    target: list[dict[str, Any]] | None  # the GPUs an in-flight change is reaching, same shape (None: no change)
    phase: str | None  # the controller's phase while it changes the node, else None
    phase_since: float | None  # Unix seconds (RFC 3339 in -o json)
    phase_problem: str  # why a phase annotation is unreadable ("" when all are readable)
    last_error: str | None
    frozen: str  # why the planner leaves the node alone now ("" when it may change it)
    in_place_status: dict[str, Any] | None  # the agent's last answer on an in-place node

    def to_json(self) -> dict[str, Any]:
        """The `-o json` row: machine values only (no display strings, times in RFC 3339)."""
        return {
            "node": self.node,
            "models": self.models,
            "actuation": self.actuation,
            "driver": self.driver,
            "gpus": self.gpus,
            "target": self.target,
            "phase": self.phase,
            "phase_since": rfc3339(self.phase_since),
            "phase_problem": self.phase_problem,
            "last_error": self.last_error,
            "frozen": self.frozen,
            "in_place_status": self.in_place_status,
        }


def rfc3339(seconds: float | None) -> str | None:
    """Unix seconds as Kubernetes writes a time (metav1.Time: UTC, whole seconds, `Z`)."""
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def gpu_layout(config: GpuConfig) -> str:
    return describe(config.layout) if config.mig_enabled else "MIG disabled"


def _layouts(gpus: Mapping[int, GpuConfig]) -> list[dict[str, Any]]:
    """Per GPU, as the plan JSON gives a layout: MIG on or off, and profile -> count ({} when off)."""
    return [
        {
            "index": i,
            "mig_enabled": gpus[i].mig_enabled,
            "instances": dict(gpus[i].layout) if gpus[i].mig_enabled else {},
        }
        for i in sorted(gpus)
    ]


def _text(gpu: Mapping[str, Any]) -> str:
    return describe(gpu["instances"]) if gpu["mig_enabled"] else "MIG disabled"


def _models(node: Node) -> list[str]:
    """The GPU product as GPU Feature Discovery labels it (what `kubectl get nodes` users know), else the catalog's
    model the snapshot matched (from the agent's NVML names or PCI ids)."""
    product = node.labels.get(GPU_PRODUCT)
    if product:
        return [product]
    if node.model is not None:
        return [node.model.id]
    if node.card is not None:
        return [node.card.nvml_names[0]]
    return []


def _in_place_status(annotations: Mapping[str, Any]) -> dict[str, Any] | None:
    raw = annotations.get(IN_PLACE_STATUS)
    if raw is None:
        return None
    try:
        status = inplace.decode_status(str(raw))
    except ValueError as e:  # UnknownVersionError included: say so, do not guess
        return {"unreadable": f"{IN_PLACE_STATUS}: {e}"}
    return {"plan": status.plan, "state": status.state, "message": status.message}


def _map(meta: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    """metadata.labels or .annotations; a snapshot file may hold anything there (the snapshot warns about it)."""
    value = meta.get(key)
    return value if isinstance(value, Mapping) else {}


def node_status(
    obj: Mapping[str, Any], node: Node | None, now: float, problem: str = "", selector: LabelSelector = NO_SELECTOR
) -> NodeStatus:
    """One node's status from its object and, when the snapshot could read it, its snapshot node; its path is the
    reconcile's reading (`reconcile.paths.path_of`: the label, the config's selector, how DRA serves it)."""
    meta = meta_of(obj)
    annotations, labels = _map(meta, "annotations"), _map(meta, "labels")
    state = read_state(annotations, now)
    in_flight = state.in_flight
    dra = node.dra if node is not None else ""
    path = path_of({str(k): str(v) for k, v in labels.items()}, selector, dra)
    in_place = path.re_cuts_busy and path.actuates
    last_error = annotations.get(LAST_ERROR)
    return NodeStatus(
        node=str(meta.get("name") or ""),
        models=_models(node) if node is not None else [],
        actuation=path.name,
        driver={"": "device-plugin", "static": "dra-static", "dynamic": "dra-dynamic"}[dra],
        gpus=_layouts({g.index: g.config for g in node.gpus}) if node is not None else [],
        target=_layouts(state.target.gpus) if in_flight and state.target is not None else None,
        phase=state.phase if in_flight else None,
        phase_since=state.since if in_flight else None,
        phase_problem=state.problem if in_flight else "",
        last_error=None if last_error is None else str(last_error),
        frozen=node.frozen_reason if node is not None else problem or "not read as a GPU node",
        in_place_status=_in_place_status(annotations) if in_place else None,
    )


def statuses(
    objects: Iterable[Mapping[str, Any]],
    snapshot: Snapshot,
    now: float,
    names: Sequence[str] = (),
    selector: LabelSelector | None = None,
    in_place: LabelSelector = NO_SELECTOR,
) -> list[NodeStatus]:
    """Every GPU node of the snapshot, and every other node that carries migctl's phase or last-error annotations
    (a node the snapshot skipped, e.g. for a bad label, may still be mid-change), sorted by name; only those in
    `names` (when given) whose labels match `selector` (when given)."""
    nodes = {n.name: n for n in snapshot.nodes}
    problems = {name: what for kind, name, what in snapshot.problems if kind == "Node"}
    out: dict[str, NodeStatus] = {}
    for obj in objects:
        if obj.get("kind") != "Node":
            continue
        meta = meta_of(obj)
        name = str(meta.get("name") or "")
        if (names and name not in names) or (selector is not None and not selector.matches(_map(meta, "labels"))):
            continue
        ours = any(k in _map(meta, "annotations") for k in (*PHASE_ANNOTATIONS, LAST_ERROR))
        if name in nodes or ours:
            out[name] = node_status(obj, nodes.get(name), now, problems.get(name, ""), in_place)
    return [out[k] for k in sorted(out)]


def age(seconds: float) -> str:
    """`kubectl get`'s AGE: 45s, 3m12s, 5h4m, 2d3h."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60}s" if s < 600 else f"{s // 60}m"
    if s < 86400:
        return f"{s // 3600}h{s % 3600 // 60}m" if s < 36000 else f"{s // 3600}h"
    return f"{s // 86400}d{s % 86400 // 3600}h"


def layout_cell(gpus: Sequence[Mapping[str, Any]]) -> str:
    """Per GPU, runs of consecutive GPUs with one layout folded: `0-6:7×1g.10gb;7:7g.80gb`."""
    if not gpus:
        return "unknown"
    runs: list[tuple[int, int, str]] = []
    for g in gpus:
        index, text = int(g["index"]), _text(g).replace(" ", "")
        if runs and runs[-1][2] == text and runs[-1][1] == index - 1:
            runs[-1] = (runs[-1][0], index, text)
        else:
            runs.append((index, index, text))
    return ";".join(f"{a}:{t}" if a == b else f"{a}-{b}:{t}" for a, b, t in runs)


def _cut(text: str, width: int) -> str:
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= width else one_line[: width - 3] + "..."


def render_table(rows: Sequence[NodeStatus], now: float, wide: bool = False) -> str:
    """kubectl get's table; `wide` adds what hands the GPUs to pods (device plugin or DRA), the GPU count, the
    in-place agent's state, why the planner leaves the node alone, and the last error uncut."""
    cells: list[tuple[str, ...]] = []
    for r in rows:
        phase = NONE if r.phase is None else (r.phase or "?") + (" (unreadable)" if r.phase_problem else "")
        since = NONE if r.phase_since is None else age(now - r.phase_since)
        error = NONE if not r.last_error else _cut(r.last_error, 10**6 if wide else ERROR_WIDTH)
        models = ",".join(m.replace(" ", "-") for m in r.models) or "?"  # a cell has no spaces
        layout = layout_cell(r.gpus) + (f"->{layout_cell(r.target)}" if r.target else "")
        head = (r.node, models, r.actuation, layout, phase, since)
        if not wide:
            cells.append((*head, error))
            continue
        agent = NONE if not r.in_place_status else str(r.in_place_status.get("state") or "unreadable")
        frozen = _cut(r.frozen, ERROR_WIDTH) if r.frozen else NONE
        cells.append((*head, r.driver, str(len(r.gpus)), agent, frozen, error))
    return table(WIDE_HEADERS if wide else HEADERS, cells)


def parse_selector(
    _ctx: click.Context | None, _param: click.Parameter | None, value: str | None
) -> LabelSelector | None:
    """`-l`: equality-based (`a=b,c!=d,e,!f`), as config/selector.py reads them; set-based terms are refused."""
    if value is None:
        return None
    if "(" in value or any(f" {op} " in f" {t.strip()} " for t in value.split(",") for op in ("in", "notin")):
        raise click.BadParameter(
            f"{value!r}: set-based selectors (in, notin) are not supported; use key=value, key!=value, key or !key, "
            "comma-separated"
        )
    try:
        selector = LabelSelector.parse(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from e
    if selector.empty:
        raise click.BadParameter("an empty selector; expected key=value, key!=value, key or !key")
    return selector


@click.command("status", cls=Command)
@click.argument("names", metavar="[NODE]...", nargs=-1)
@click.option(
    "--selector",
    "-l",
    callback=parse_selector,
    help="Only nodes whose labels match (equality-based, as kubectl -l: a=b,c!=d,e,!f).",
)
@click.option("--kubeconfig", type=click.Path(path_type=Path), help="Default: in-cluster, then KUBECONFIG or "
              "~/.kube/config.")  # fmt: skip
@click.option("--context", help="kubeconfig context.")
@click.option(
    "--snapshot",
    "snapshot_file",
    type=click.Path(path_type=Path),
    help="Read `kubectl get nodes,pods,configmaps -A -o yaml` output instead of the cluster.",
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    help="migctl config file (YAML). Default: live, the controller's (--config-from-cluster); offline, the defaults.",
)
@CONFIG_FROM_CLUSTER_OPTION
@PROFILES_DIR_OPTION
@FORMAT_OPTION
def status_command(
    names: tuple[str, ...],
    selector: LabelSelector | None,
    kubeconfig: Path | None,
    context: str | None,
    snapshot_file: Path | None,
    config_file: Path | None,
    config_from_cluster: tuple[str, str] | None,
    profiles_dirs: tuple[Path, ...],
    output: str,
) -> None:
    """One line per GPU node: models, actuation path, layout per GPU (`->` the layout a change in flight is
    reaching), phase and since when, last error. Read-only. NODE names and -l pick nodes; a NODE that is not
    listed is an error (exit 1) after the others are shown."""
    if names and selector is not None:
        raise click.UsageError("name cannot be provided when a selector is specified (as kubectl get says)")
    inputs = read_inputs(snapshot_file, kubeconfig, context, config_file, config_from_cluster)
    cfg, objects, source = inputs.cfg, inputs.objects, inputs.source
    catalog = load_catalog([*cfg.profiles_dirs, *profiles_dirs])
    opted = cfg.controller.in_place_selector
    snapshot = snapshot_from_objects(
        objects, catalog, cfg.planner, cfg.gpu_operator, source, in_place=lambda labels: opted_in(labels, opted)
    )
    now = time.time()
    rows = statuses(objects, snapshot, now, names, selector, opted)
    if output in ("json", "yaml"):
        emit(output, {"source": source, "time": rfc3339(now), "nodes": [r.to_json() for r in rows]})
    else:
        click.echo(render_table(rows, now, output == "wide") if rows else "No GPU nodes found.")
    missing = [n for n in dict.fromkeys(names) if n not in {r.node for r in rows}]
    for name in missing:
        click.echo(f'error: node "{name}" not found (not a GPU node, nor one migctl annotated)', err=True)
    if missing:
        raise SystemExit(EXIT_RUNTIME)

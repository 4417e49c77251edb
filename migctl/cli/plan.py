"""`migctl plan`: a dry run. Shows what migctl would do, against a snapshot or the live cluster; changes nothing."""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

import click

from migctl.adapters.dra.snapshot import DraReading
from migctl.adapters.objects import read_cluster
from migctl.adapters.views import is_pod, pod_view
from migctl.cli.inputs import CONFIG_FROM_CLUSTER_OPTION, read_inputs
from migctl.cli.output import FORMAT_OPTION, Command, SharedRow, emit, fail
from migctl.cli.profiles import PROFILES_DIR_OPTION
from migctl.config import ControllerSettings
from migctl.config.fallback import FallbackSettings
from migctl.controller.snapshots import dra_facts
from migctl.core.forecast.estimate import forecast
from migctl.core.hardware.catalog import Catalog, load_catalog
from migctl.core.hardware.geometry import describe
from migctl.core.model.cluster import Pod, Snapshot
from migctl.core.model.gpu_config import GpuConfig
from migctl.core.model.plan import Plan
from migctl.core.model.settings import PlannerSettings
from migctl.core.planner import plan as make_plan
from migctl.reconcile.decide import routes
from migctl.reconcile.facts import NodeFacts
from migctl.reconcile.paths import opted_in
from migctl.reconcile.step import Facts, steer

EXAMPLE = "cluster-snapshot.yaml"


def example_path() -> Path:
    """The bundled example snapshot (inside the installed package)."""
    return Path(str(resources.files("migctl.examples").joinpath(EXAMPLE)))


@click.command("plan", cls=Command)
@click.option("--snapshot", "snapshot_file", type=click.Path(path_type=Path), help="kubectl get -o yaml|json output.")
@click.option("--example", is_flag=True, help="Plan the bundled example cluster (no cluster needed).")
@click.option("--explain", is_flag=True, help="Say why each unplaced pod cannot be served.")
@click.option(
    "--config",
    "config_file",
    type=click.Path(path_type=Path),
    help="migctl config file (YAML). Default: live, the controller's (--config-from-cluster); offline, the defaults.",
)
@CONFIG_FROM_CLUSTER_OPTION
@click.option(
    "--evictions",
    type=click.Choice(["none", "lower-priority"]),
    default=None,
    help="Override the config: may the plan evict lower-priority GPU pods?",
)
@click.option("--allow-mig-mode-change", is_flag=True, default=None, help="Allow switching MIG on/off on idle nodes.")
@click.option("--kubeconfig", type=click.Path(path_type=Path), help="For the live cluster (default: in-cluster, "
              "then KUBECONFIG or ~/.kube/config).")  # fmt: skip
@click.option("--context", help="kubeconfig context for the live cluster.")
@click.option("--all-nodes", is_flag=True, help="Also list GPU nodes the plan leaves unchanged.")
@click.option("--thorough", is_flag=True, help="Give the exact solver a larger work budget (slower, better plans).")
@PROFILES_DIR_OPTION
@FORMAT_OPTION
def plan_command(
    snapshot_file: Path | None,
    example: bool,
    explain: bool,
    config_file: Path | None,
    config_from_cluster: tuple[str, str] | None,
    evictions: str | None,
    allow_mig_mode_change: bool | None,
    kubeconfig: Path | None,
    context: str | None,
    all_nodes: bool,
    thorough: bool,
    profiles_dirs: tuple[Path, ...],
    output: str,
) -> None:
    """Plan MIG layouts for pending GPU pods and print the plan. Read-only: nothing in the cluster changes.

    Against the live cluster it plans with the controller's own settings (its config ConfigMap) unless --config
    is given; stderr says which. -o wide adds each instance's size and each unplaced pod's reason.
    """
    if example and snapshot_file:
        fail("use either --example or --snapshot FILE, not both")
    path = example_path() if example else snapshot_file
    inputs = read_inputs(path, kubeconfig, context, config_file, config_from_cluster, "example" if example else "")
    cfg, objects, source = inputs.cfg, inputs.objects, inputs.source
    overrides: dict[str, Any] = {}
    if evictions is not None:
        overrides["evictions"] = evictions
    if allow_mig_mode_change:
        overrides["allow_mig_mode_change"] = True
    if thorough:
        overrides["exact"] = cfg.planner.exact.thorough()
    settings = cfg.planner.model_copy(update=overrides)
    catalog = load_catalog([*cfg.profiles_dirs, *profiles_dirs])
    selector = cfg.controller.in_place_selector
    with _kept_for_the_run():
        snapshot, dra = read_cluster(
            objects, catalog, settings, cfg.gpu_operator, source, in_place=lambda labels: opted_in(labels, selector)
        )
        result = make_plan(snapshot, settings)
    warnings = plan_warnings(objects, source, result)
    fallback = fallback_section(objects, catalog, settings, cfg.fallback, snapshot)
    vram = vram_requests_section(objects, snapshot, settings, cfg.webhook)
    dra_section = dra_fences_section(snapshot, result, dra, cfg.controller)
    if output in ("json", "yaml"):
        extra = {"warnings": warnings, "fallback": fallback, "dra": dra_section}
        emit(output, {**result.to_dict(), **extra}, {"vram_requests": vram})
        return
    wide = output == "wide"
    drivers = dra_section["nodes"]
    click.echo(render_text(result, source, len(snapshot.nodes), explain or wide, all_nodes, warnings, wide, drivers))
    if dra_section["nodes"]:
        click.echo("\n" + render_dra(dra_section))
    if explain:  # the forecast the plan's spare instances were chosen for (the planner computes the same)
        click.echo("\n" + "\n".join(forecast(snapshot, settings).describe()))
    if fallback["nodes"] or fallback["pending_pods"]:
        click.echo("\n" + render_fallback(fallback, explain))
    if vram:
        click.echo("\n" + render_vram_requests(vram))


def dra_fences_section(
    snapshot: Snapshot, result: Plan, dra: DraReading, settings: ControllerSettings
) -> dict[str, Any]:
    """The DRA nodes (static or DynamicMIG) and, on each DynamicMIG node, the fences `migctl run` would set for
    this plan (the controller's own rule, `reconcile.step.steer`): what a dry run cannot otherwise show."""
    nodes = {n.name: n.dra for n in snapshot.nodes if n.dra}
    if not nodes:
        return {"nodes": {}, "fences": {}}
    facts = {n.name: NodeFacts(n.name, n.labels, dra=n.dra) for n in snapshot.nodes}
    step_dra = dra_facts(dra, settings)  # the controller's own reading (cap included)
    fences = (
        steer(Facts(snapshot, facts, dra=step_dra), result, snapshot, routes(facts.values(), settings))
        if step_dra is not None
        else {}
    )
    return {
        "nodes": dict(sorted(nodes.items())),
        "fences": {
            n: {"add": list(f.add), "keep": list(f.keep), "lift": list(f.lift), "capped": f.capped}
            for n, f in sorted(fences.items())
        },
    }


def render_dra(section: dict[str, Any]) -> str:
    lines = ["DRA nodes (NVIDIA's DRA driver serves their GPUs):"]
    for name, mode in section["nodes"].items():
        f = section["fences"].get(name)
        what = "DynamicMIG: migctl steers first fit" if mode == "dynamic" else "static MIG devices"
        lines.append(f"  {name}: {what}")
        if f and (f["add"] or f["keep"] or f["lift"]):
            fenced = [*f["keep"], *f["add"]]
            lift = f"; lift {', '.join(f['lift'])}" if f["lift"] else ""
            capped = " (cap reached)" if f["capped"] else ""
            lines.append(f"    would fence {len(fenced)} device(s): {', '.join(fenced) or '-'}{lift}{capped}")
    return "\n".join(lines)


_EXPECTED = "nothing to plan (expected Nodes and Pods, e.g. kubectl get nodes,pods,configmaps -A -o yaml)"


def plan_warnings(objects: Sequence[Mapping[str, Any]], source: str, p: Plan) -> list[str]:
    """Every warning of this plan, the one list both renderings print (text: `warning:` lines; JSON and YAML:
    `warnings`): what the input lacks, then what the snapshot could not read."""
    found = nothing_to_plan(objects)
    return [*([f"{source}: {found}"] if found else []), *p.warnings]


def nothing_to_plan(objects: Sequence[Mapping[str, Any]]) -> str:
    """Why these objects cannot make a plan (no objects, no Node), saying what they are; "" when they have a Node.

    A user who exported the wrong thing (`kubectl get pods` only, an empty file) is told, not shown an empty plan.
    """
    kinds = Counter(str(o.get("kind") or "untyped object") for o in objects)
    if kinds["Node"]:
        return ""
    if not objects:
        return f"no Kubernetes objects found (an empty file?); {_EXPECTED}"
    what = ", ".join(
        f"{n} {k}{'' if n == 1 else 's'}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0]))
    )
    noun = "object" if len(objects) == 1 else "objects"
    return f"the input has {len(objects)} {noun}: {what}, no Node; {_EXPECTED}"


@contextmanager
def _kept_for_the_run() -> Iterator[None]:
    """The objects, the snapshot and the plan live until the command ends. While they are made, the cyclic
    garbage collector would walk every object made so far, again and again (half a second at 1,000 nodes),
    and find little: reference counting frees the rest (the planner pauses it too, `planner.passes`). So it is
    paused, and then told to leave them out of its walks (`gc.freeze`): what the reports after the plan make
    is collected as usual, and the few cycles left behind go with the process."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def _cfg(c: GpuConfig) -> str:
    return describe(c.layout) if c.mig_enabled else "MIG disabled"


def render_text(
    p: Plan,
    source: str,
    n_nodes: int,
    explain: bool,
    all_nodes: bool,
    warnings: Sequence[str] | None = None,
    wide: bool = False,
    dra: Mapping[str, str] | None = None,
) -> str:
    """The human form of a plan: per node and GPU, current -> target, who each instance serves; `wide` adds each
    instance's size. `warnings`: the plan's own when None (`plan_warnings` adds the input's)."""
    s = p.summary
    lines = [f"migctl plan: {source}, {n_nodes} GPU nodes, {s.pending_pods} pending GPU pods (dry run)", ""]
    by_node: dict[str, list[Any]] = {}
    for a in p.assignments:
        by_node.setdefault(a.node, []).append(a)
    for n in p.nodes:
        if not (n.changed or n.name in by_node or all_nodes):
            continue
        model = n.gpus[0].model if n.gpus else "?"
        head = f"node {n.name} ({model} x{len(n.gpus)})"
        how = {"dynamic": "  -> made by DynamicMIG at allocation (migctl fences)", "static": "  -> in place, dra path"}
        change = how.get((dra or {}).get(n.name, ""), f"  -> mig-parted config {n.config_name}")
        lines.append(head + (change if n.changed else "  (layout unchanged)"))
        for g in n.gpus:
            if g.changed:
                lines.append(
                    f"  gpu {g.index}: {_cfg(g.current)}  ->  {_cfg(g.target)}   "
                    f"[unusable {g.unusable_mib_before} -> {g.unusable_mib_after} MiB]"
                )
            elif all_nodes or any(a.gpu == g.index for a in by_node.get(n.name, [])):
                lines.append(f"  gpu {g.index}: {_cfg(g.current)} (unchanged)")
            for a in by_node.get(n.name, []):
                if a.gpu == g.index:
                    size = f"instance {a.instance_mib} MiB, " if wide else ""
                    lines.append(
                        f"      {a.pod:<32} {a.profile:<10} {size}need {a.need_mib} MiB, waste {a.waste_mib} MiB"
                    )
        for a in by_node.get(n.name, []):
            if a.gpu is None:
                lines.append(f"  any gpu: {a.pod:<30} {a.profile:<10} (existing free instance)")
        lines.append("")
    if p.evictions:
        lines.append(f"evictions ({len(p.evictions)}):")
        lines += [f"  {e.pod} on {e.node} (priority {e.priority}) for {e.for_pod}" for e in p.evictions]
        lines.append("")
    if p.unplaced:
        lines.append(f"unplaced ({len(p.unplaced)}):")
        for u in p.unplaced:
            lines.append(f"  {u.pod}: {u.reason}" if explain else f"  {u.pod}")
        if not explain:
            lines.append("  (add --explain for the reasons)")
        lines.append("")
    for w in p.warnings if warnings is None else warnings:
        lines.append(f"warning: {w}")
    lines.append(
        f"summary: placed {s.pods_placed}/{s.pending_pods} pods; {s.gpus_reconfigured} GPUs on "
        f"{s.nodes_reconfigured} nodes reconfigured; {s.evictions} evictions; stranded {s.stranded_mib_before} -> "
        f"{s.stranded_mib_after} MiB (internal waste {s.internal_waste_mib}, unusable in changed GPUs "
        f"{s.unusable_mib})"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# GPUs without MIG: the VRAM fallback (docs/fallback.md), shown next to the MIG plan.


def fallback_section(
    objects: list[dict[str, Any]],
    catalog: Catalog,
    planner: PlannerSettings,
    settings: FallbackSettings,
    snapshot: Snapshot | None = None,
) -> dict[str, Any]:
    """Where migctl's fallback scheduler would put pending `schedulerName: migctl` pods, per GPU (from the plan's
    own snapshot when given: the objects are read once)."""
    from migctl.core.vram.fit import report
    from migctl.fallback.capacity import fallback_view

    view = fallback_view(objects, catalog, settings, planner, snapshot)
    return report(view.nodes, view.pods, settings.resource, settings.unit_bytes)


def render_fallback(fb: dict[str, Any], explain: bool) -> str:
    """The fallback part of the text plan: per node and GPU free VRAM, placements, stranded leftovers."""
    lines = [
        f"fallback ({fb['resource']}, GPUs without MIG): {len(fb['nodes'])} nodes, "
        f"{fb['pending_pods']} pending schedulerName: migctl pods"
    ]
    by_gpu: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for p in fb["placements"]:
        by_gpu.setdefault((p["node"], p["gpu"]), []).append(p)
    for n in fb["nodes"]:
        extra = f", {n['unattributed_mib']} MiB held by pods without a GPU annotation" if n["unattributed_mib"] else ""
        lines.append(
            f"  node {n['name']} ({n['source']}{extra})" + (f"  excluded: {n['excluded']}" if n["excluded"] else "")
        )
        for g in n["gpus"]:
            stranded = f", {g['stranded_mib']} MiB stranded" if g["stranded_mib"] else ""
            free = f"{g['free_mib']}/{g['capacity_mib']} MiB free -> {g['free_after_mib']} MiB"
            lines.append(f"    gpu {g['index']}: {free}{stranded}")
            for p in by_gpu.get((n["name"], g["index"]), []):
                lines.append(f"      {p['pod']:<32} {p['request_mib']} MiB")
    if fb["unplaced"]:
        lines.append(f"  unplaced ({len(fb['unplaced'])}):")
        for u in fb["unplaced"]:
            lines.append(f"    {u['pod']}: {u['reason']}" if explain else f"    {u['pod']} ({u['request_mib']} MiB)")
    lines.append(
        f"  fallback summary: placed {fb['pods_placed']}/{fb['pending_pods']} pods; stranded {fb['stranded_mib']} MiB"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------
# VRAM-only pods: what `migctl webhook` would choose for them (docs/vram-requests.md).


def vram_requests_section(
    objects: list[dict[str, Any]], snapshot: Snapshot, planner: PlannerSettings, webhook: Any = None
) -> list[SharedRow]:
    """The webhook's decision for each pending pod that asks for VRAM on the default scheduler: per pod, its
    name and the decision's dict (the one dict for all pods of the decision).

    The pods' placement comes from the plan's snapshot (read once), and one `OfferIndex` serves every pod, so
    the cost is per pod kind and GPU class. Offline there are no namespace labels, so the namespace opt-out is
    not applied (the pod annotation is).
    """
    from migctl.adapters.pods import placement_from_object
    from migctl.adapters.requests import vram_containers
    from migctl.config.webhook import WebhookSettings
    from migctl.core.vram.decide import VramDecision, decide
    from migctl.core.vram.offers import OfferIndex, offers_from_snapshot

    settings = webhook if isinstance(webhook, WebhookSettings) else WebhookSettings()
    rules = settings.rules(planner)
    index = OfferIndex(offers_from_snapshot(snapshot, planner))
    read = {p.key: p for p in snapshot.pods}
    out: list[SharedRow] = []
    unreadable = {k for k, _ in snapshot.rejected}  # the plan already says why; the webhook never sees them
    shown: dict[int, tuple[VramDecision, dict[str, Any]]] = {}  # pods of a kind share one decision: one dict
    for obj in objects:
        if not is_pod(obj):
            continue
        view = pod_view(obj)
        if not view.pending or view.phase != "Pending" or view.deleting:
            continue
        if view.scheduler_name == rules.fallback_scheduler:
            continue  # the fallback section shows these
        pod = view.key
        containers = None if pod in unreadable else vram_containers(obj, rules.resource)
        if containers is None:
            continue
        placement: Pod | str | None = read.get(pod)
        if placement is None:  # a pod the adapter rejected (its reason is in the plan): read only its placement
            try:
                placement = placement_from_object(obj)
            except (ValueError, KeyError, TypeError) as e:
                placement = f"unreadable nodeSelector, node affinity or tolerations: {e!r}"
        decision = decide(view.annotations, view.scheduler_name, containers, placement, index, rules)
        if id(decision) not in shown:
            shown[id(decision)] = (decision, decision.to_dict())  # the decision kept: its id stays its own
        out.append(({"pod": pod}, shown[id(decision)][1]))
    return out


def render_vram_requests(rows: list[SharedRow]) -> str:
    """The VRAM-request part of the text plan: one line per pod."""
    lines = [f"vram requests (what `migctl webhook` would choose): {len(rows)} pending pods"]
    for own, shared in rows:
        r = {**own, **shared}
        if r["action"] == "rewrite":
            what = ", ".join(f"{c['name']} {c['request']} -> {c['resource']}" for c in r["containers"])
            where = {"free": f"free now on {r['node']}", "plannable": f"after a reshape on {r['node']}"}.get(
                r["capacity"], "no capacity yet"
            )
            lines.append(f"  {r['pod']:<32} {what} on {r['model']} ({r['waste_mib']} MiB spare; {where})")
        else:
            lines.append(f"  {r['pod']:<32} {'rejected' if r['action'] == 'reject' else 'left alone'}: {r['reason']}")
    return "\n".join(lines)

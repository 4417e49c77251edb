"""The chart's Grafana dashboard and alert rules, read as files (no tools): the dashboard's structure, its templating
on the datasource and the namespace, and every runbook_url anchor is a section of docs/troubleshooting.md.

What needs the real tools is in tests/cluster/test_observability.py: helm renders both, promtool parses every
expression and unit-tests the alerts, and a live controller's /metrics exports every metric they name.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "migctl"
DASHBOARD = CHART / "dashboards" / "migctl.json"
RULES_TEMPLATE = CHART / "templates" / "prometheusrule.yaml"
TROUBLESHOOTING = ROOT / "docs" / "troubleshooting.md"
METRICS_DOC = ROOT / "docs" / "metrics.md"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}


def panels(dash: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, rows' nested ones included."""
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def github_anchor(heading: str) -> str:
    """The id GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.fixture(scope="module")
def dash() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def test_panel_ids_are_unique_and_every_query_panel_has_a_datasource_and_targets(dash: dict[str, Any]) -> None:
    ids = Counter(p["id"] for p in panels(dash))
    assert all(isinstance(i, int) for i in ids) and max(ids.values()) == 1, ids
    queries = [p for p in panels(dash) if p["type"] != "row"]
    assert len(queries) >= 15
    for p in queries:
        assert p["datasource"] == DATASOURCE, p["title"]
        assert p["targets"], p["title"]
        assert len({t["refId"] for t in p["targets"]}) == len(p["targets"]), p["title"]
        for t in p["targets"]:
            assert t["datasource"] == DATASOURCE, (p["title"], t["refId"])
            assert t["expr"].strip(), (p["title"], t["refId"])


def test_every_metric_selector_is_limited_to_the_chosen_namespace(dash: dict[str, Any]) -> None:
    for p in panels(dash):
        for t in p.get("targets", []):
            for selector in re.findall(r"migctl_[a-z_]+(\{[^}]*\})?", t["expr"]):
                assert 'namespace=~"$namespace"' in selector, (p["title"], t["expr"])


def test_templated_on_the_prometheus_datasource_and_the_namespace(dash: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    ns = variables["namespace"]
    assert ns["type"] == "query" and ns["datasource"] == DATASOURCE
    # every component exports migctl_build_info: the namespace list works without a controller (fallback only)
    assert ns["definition"] == "label_values(migctl_build_info, namespace)" == ns["query"]["query"]


def test_panels_do_not_overlap_on_the_grid(dash: dict[str, Any]) -> None:
    cells: dict[tuple[int, int], str] = {}
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


def test_the_dashboard_shows_what_issue_34_asks_for(dash: dict[str, Any]) -> None:
    exprs = " ".join(t["expr"] for p in panels(dash) for t in p.get("targets", []))
    for metric in ("migctl_stranded_bytes", "migctl_pending_gpu_pods", "migctl_pending_vram_demand_bytes",
                   "migctl_reconfigurations_started_total", "migctl_reconfigurations_succeeded_total",
                   "migctl_reconfigurations_failed_total", "migctl_reconfiguration_seconds_bucket",
                   "migctl_nodes_reconfiguring", "migctl_guard_refusals", "migctl_rejected_objects",
                   "migctl_plan_seconds_bucket", "migctl_leader", "migctl_in_place_changes_total",
                   "migctl_in_place_window_seconds_bucket"):  # fmt: skip
        assert metric in exprs, metric
    assert "by (model)" in exprs and "by (cause)" in exprs and "by (result)" in exprs


def test_memory_panels_are_in_bytes_and_every_component_has_a_panel(dash: dict[str, Any]) -> None:
    """Memory is exported in bytes: a panel on a `_bytes` metric says so (Grafana's IEC `bytes` unit), and no
    panel uses a MiB metric or unit. The agents, the webhook and the fallback each have panels."""
    for p in panels(dash):
        exprs = " ".join(t["expr"] for t in p.get("targets", []))
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit")
        assert "_mib" not in exprs and unit != "decmbytes", p["title"]
        if re.search(r"migctl_\w+_bytes\b", exprs):
            assert unit == "bytes", p["title"]
    exprs = " ".join(t["expr"] for p in panels(dash) for t in p.get("targets", []))
    for metric in ("migctl_agent_ready", "migctl_agent_reads_total", "migctl_agent_in_place_answers_total",
                   "migctl_webhook_admission_requests_total", "migctl_webhook_admission_seconds_bucket",
                   "migctl_fallback_passes_total", "migctl_build_info"):  # fmt: skip
        assert metric in exprs, metric


def rows(dash: dict[str, Any]) -> list[tuple[str, list[dict[str, Any]]]]:
    """(row title, the panels under it), top to bottom, as Grafana groups an expanded row's panels."""
    out: list[tuple[str, list[dict[str, Any]]]] = []
    for p in sorted(dash["panels"], key=lambda p: (p["gridPos"]["y"], p["gridPos"]["x"])):
        if p["type"] == "row":
            out.append((p["title"], []))
        elif out:
            out[-1][1].append(p)
    return out


def test_the_in_place_row_follows_the_reconfiguration_row_with_its_results_and_window(dash: dict[str, Any]) -> None:
    titles = [title for title, _ in rows(dash)]
    stock = next(i for i, t in enumerate(titles) if t.startswith("Reconfigurations: both paths"))
    assert titles[stock + 1].startswith("Reconfigurations: in-place path"), titles
    exprs = [t["expr"] for p in rows(dash)[stock + 1][1] for t in p["targets"]]
    assert any(re.search(r"sum by \(result\) \(increase\(migctl_in_place_changes_total\{", e) for e in exprs), exprs
    for q in ("0.5", "0.95"):
        assert any(e.startswith(f"histogram_quantile({q}, sum by (le) (rate(migctl_in_place_window_seconds_bucket{{")
                   for e in exprs), (q, exprs)  # fmt: skip


def test_every_runbook_url_points_at_a_section_of_troubleshooting_md() -> None:
    anchors = re.findall(r'printf "%s#([^"]+)" \$runbook', RULES_TEMPLATE.read_text())
    alerts = re.findall(r"^\s+- alert: (\w+)$", RULES_TEMPLATE.read_text(), re.M)
    assert len(anchors) == len(alerts) >= 11
    headings = {github_anchor(h) for h in re.findall(r"^#{2,3} (.+)$", TROUBLESHOOTING.read_text(), re.M)}
    missing = sorted(set(anchors) - headings)
    assert not missing, f"runbook anchors with no section in docs/troubleshooting.md: {missing}"


def test_github_anchor_matches_githubs_rule() -> None:
    assert github_anchor("A plan says `planning stopped at planner.work_budget`") == (
        "a-plan-says-planning-stopped-at-plannerwork_budget"
    )
    assert github_anchor("A node is stuck in `pending`") == "a-node-is-stuck-in-pending"


def test_docs_metrics_md_lists_every_alert_with_its_for_severity_and_runbook() -> None:
    """docs/metrics.md's alert table and the chart's rules agree: the same alerts, `for`, severity and runbook."""
    rules = {}
    for block in re.split(r"^\s+- alert: ", RULES_TEMPLATE.read_text(), flags=re.M)[1:]:
        name = block.split("\n", 1)[0].strip()
        # the chart's defaults, as the template passes them to its helpers (customRules may override both)
        duration = re.search(rf'include "migctl.alertFor" \(list \$ "{name}" "([^"]*)"\)', block)
        severity = re.search(rf'include "migctl.alertLabels" \(list \$ "{name}" "([^"]+)"\)', block)
        anchor = re.search(r'printf "%s#([^"]+)"', block)
        assert duration and severity and anchor, name
        rules[name] = (duration.group(1), severity.group(1), anchor.group(1))
    table = {}
    for row in re.findall(r"^\| `Migctl\w+` \| .+ \|$", METRICS_DOC.read_text(), re.M):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row)[1:-1]]  # a `\|` inside a cell is not a border
        name, duration, severity, runbook = cells[0].strip("`"), cells[2], cells[3], cells[4]
        link = re.search(r"#([\w-]+)\)", runbook)
        assert link, row
        table[name] = (duration, severity, link.group(1))
    assert len(rules) >= 11 and table == rules

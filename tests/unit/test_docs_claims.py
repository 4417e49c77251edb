"""What the docs claim, checked against the code: maturity, placement confidence by model, the controller's phases
and concurrency, the install guide's component list and uninstall, and no citations of files outside the repo."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from migctl.config import ControllerSettings
from migctl.core.hardware.catalog import load_catalog
from migctl.reconcile.nodestate import PHASES
from migctl.wire import names

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# The names the README gives the catalog's models.
SHORT = {"a100-40gb": "A100-40GB", "h100-80gb": "H100-80GB", "h100-nvl-94gb": "H100 NVL", "a30-24gb": "A30",
         "h200-141gb": "H200", "rtx-pro-6000-blackwell-96gb": "RTX PRO 6000", "a100-80gb": "A100-80GB",
         "gh200-144gb": "GH200", "b200-180gb": "B200", "gb200-186gb": "GB200", "b300-269gb": "B300",
         "gb300-278gb": "GB300", "h100-96gb": "the 96 GB H100 family", "blackwell-189gb": "a 189 GB board"}  # fmt: skip
OPERATOR_PAGES = ["install.md", "operations.md", "troubleshooting.md", "metrics.md"]


def first_screen() -> str:
    return README.read_text().split("## Quick start", 1)[0]


def test_the_readme_says_what_has_run_on_a_gpu_and_what_has_not() -> None:
    text = " ".join(first_screen().split())
    assert "not yet run on a GPU cluster" in text
    assert "Not run on hardware at all:** the in-place path" in text and "the DRA path" in text
    assert "None of this has run on a GPU yet" in (DOCS / "in-place.md").read_text()  # the page the README follows


def placement_confidence() -> dict[str, str]:
    out = {}
    for model in load_catalog().models:
        levels = {p.placements_confidence.value for p in model.profiles}
        out[model.id] = "inferred" if "inferred" in levels else ("observed" if "observed" in levels else "confirmed")
    return out


def test_the_readme_names_each_models_placement_confidence_as_the_catalog_does() -> None:
    text = " ".join(first_screen().split())
    clause = re.search(r"`confirmed`[^;]* for (.+?); `observed`[^;]* for (.+?); `inferred`.*? for (.+?), whose", text)
    assert clause, "the placement-confidence sentence"
    listed = {"confirmed": clause.group(1), "observed": clause.group(2), "inferred": clause.group(3)}
    conf = placement_confidence()
    assert conf.keys() == SHORT.keys(), sorted(conf)
    for model, level in conf.items():
        name = SHORT[model]
        assert re.search(rf"(^|, | and ){re.escape(name)}(,| and |$)", listed[level]), (model, level, listed[level])
        for other, names_there in listed.items():
            if other != level:
                assert not re.search(rf"(^|, | and ){re.escape(name)}(,| and |$)", names_there), (model, other)
    assert {conf[m] for m in ("gh200-144gb", "b200-180gb", "gb200-186gb", "a100-80gb")} == {"inferred"}


@pytest.mark.parametrize("page", ["README.md", "docs/profiles.md", "docs/comparison.md", "docs/install.md"])
def test_no_page_calls_the_placement_rules_exact(page: str) -> None:
    assert not re.search(r"exact placement", (ROOT / page).read_text(), re.I)


def test_operations_md_states_the_concurrency_and_every_phase() -> None:
    text = (DOCS / "operations.md").read_text()
    assert "one at a time" not in text and "one of the four" not in text
    assert ControllerSettings().max_concurrent_nodes == 4 and "`max_concurrent_nodes`, default 4" in text
    phases = re.search(r"`phase` one of the (\w+) phases \(([^)]*)\)", text)
    assert phases, "the phase-annotation sentence"
    assert set(re.findall(r"`([a-z-]+)`", phases.group(2))) == set(PHASES)
    assert phases.group(1) == {7: "seven", 11: "eleven"}.get(len(PHASES))


def test_the_metrics_table_lives_in_metrics_md_only() -> None:
    ops = (DOCS / "operations.md").read_text()
    assert not re.search(r"^\| `migctl_\w+", ops, re.M), "operations.md links to metrics.md instead"
    assert "metrics.md" in ops


def test_operator_pages_carry_no_dated_simulator_history() -> None:
    for page in OPERATOR_PAGES:
        text = (DOCS / page).read_text()
        assert not re.search(r"until 20\d\d-\d\d-\d\d|seeds? 4\d|Eight settings", text), page


def test_no_doc_cites_a_file_outside_the_repository() -> None:
    """docs/dra.md is left out by name: it is being written in the same change by the DRA work and still cites
    `shared/reference/dra.md` (reported to the lead, not fixed here)."""
    for page in [README, *(p for p in DOCS.glob("*.md") if p.name != "dra.md")]:
        text = page.read_text()
        for bad in ("../shared/reference", "mig-data.md", "anchors.md", "shared/reference/"):
            assert bad not in text, f"{page.name} cites {bad}"


def test_install_md_lists_every_component_and_does_not_call_every_container_non_root() -> None:
    text = (DOCS / "install.md").read_text()
    table = text.split("## What gets installed", 1)[1].split("## Prerequisites", 1)[0]
    for component in ("controller (`migctl run`)", "agent (`migctl agent`)", "in-place agent",
                      "webhook (`migctl webhook`)", "fallback (`migctl fallback`)"):  # fmt: skip
        assert component in table, component
    assert "Every container runs with" not in table and "but the in-place agent" in table


def test_the_uninstall_removes_every_key_migctl_writes() -> None:
    """Every node annotation, label and taint of migctl/wire/names.py the controller, the agents or the fallback
    write at run time, the Lease, the webhook's Secret and the in-place host directory."""
    text = (DOCS / "install.md").read_text().split("## Uninstall", 1)[1]
    written = [names.GPUS, names.LAYOUT, names.PLAN_ID, names.PHASE, names.PHASE_SINCE, names.TARGET, names.ROLLBACK,
               names.LAST_ATTEMPT, names.LAST_CHANGE, names.BACKOFF_UNTIL, names.FAILURES, names.LAST_ERROR,
               names.IN_PLACE_TARGET, names.IN_PLACE_STATUS, names.RECONFIGURING, names.ACTUATION, names.EXCLUDE,
               names.DEVICE_PLUGIN_CONFIG, names.DEPLOY_MIG_MANAGER, names.QUEUE_GATE, names.VRAM,
               names.VRAM_CHOICE, names.GPU_INDEX, names.GPU_UUID, names.VISIBLE_DEVICES]  # fmt: skip
    missing = [k for k in written if k not in text]
    assert not missing, missing
    for thing in ("delete lease", "migctl-webhook-tls", "/var/lib/migctl", "migctl-device-plugin-config",
                  "migctl-mig-parted-config", "pod-security.kubernetes.io/enforce-"):  # fmt: skip
        assert thing in text, thing

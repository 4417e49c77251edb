"""`migctl simulate`: the bundled default scenario runs quickly and prints every policy."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from migctl.cli import cli
from migctl.sim.names import ANALYSIS, DEFAULT_POLICIES


def test_default_run_prints_the_comparison_table() -> None:
    t0 = time.perf_counter()
    res = CliRunner().invoke(cli, ["simulate", "--seeds", "42"])
    assert res.exit_code == 0, res.output
    assert time.perf_counter() - t0 < 30
    for policy in DEFAULT_POLICIES:
        assert policy in res.output
    for policy in ANALYSIS:  # what-if variants run only when asked for
        assert policy not in res.output
    assert "mapping: VRAM = gpu_milli/1000" in res.output


def test_json_and_plots(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        cli,
        ["simulate", "--seeds", "42", "--policies", "migctl,static-balanced,cont-fgd", "-o", "json", "--plot",
         str(tmp_path)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert set(data["metrics"]) == {"migctl", "static-balanced", "cont-fgd"}
    assert data["metrics"]["migctl"]["alloc_pct"]["mean"] > data["metrics"]["static-balanced"]["alloc_pct"]["mean"]
    assert len(list(tmp_path.glob("*.png"))) == 2


def test_unknown_policy_is_a_usage_error() -> None:
    res = CliRunner().invoke(cli, ["simulate", "--policies", "nope"])
    assert res.exit_code == 2


def test_bench_tables_put_both_reconfiguration_times_side_by_side() -> None:
    from bench.simulate import markdown, merge
    from migctl.core.hardware.catalog import load_catalog
    from migctl.sim.scenario import Scenario, load_cluster

    runs = {}
    for median in (60.0, 20.0):
        sc = Scenario("openb-slice", load_cluster("openb-slice"), load_catalog().model("h100-80gb"),
                      ["static-best-mix", "nos"], [42], reconfig_s=median)  # fmt: skip
        sc.run()
        runs[f"openb-slice:openb-slice:h100-80gb:r{median:g}"] = json.loads(json.dumps(sc.to_dict(), default=str))
    text = markdown(runs)
    assert "#### openb-slice:openb-slice:h100-80gb" in text
    sc43 = Scenario("openb-slice", load_cluster("openb-slice"), load_catalog().model("h100-80gb"), ["nos"], [43])
    sc43.run()
    key = "openb-slice:openb-slice:h100-80gb:r60"
    both = merge([runs, {key: json.loads(json.dumps(sc43.to_dict(), default=str))}])[key]
    assert both["seeds"] == [42, 43]
    allocs = [r["alloc_pct"] for r in both["runs"]["nos"]]
    assert both["metrics"]["nos"]["alloc_pct"]["mean"] == pytest.approx(sum(allocs) / 2)
    assert "alloc% @60s" in text and "alloc% @20s" in text
    assert "| static-best-mix (oracle) |" in text and "| nos |" in text


def test_runs_with_departures_also_plot_queue_and_allocation_over_time(tmp_path: Path) -> None:
    from migctl.core.hardware.catalog import load_catalog
    from migctl.sim.report import plot
    from migctl.sim.scenario import Scenario, load_cluster

    sc = Scenario("miso", load_cluster("1x4"), load_catalog().model("h100-80gb"), ["static-best-mix", "hami"], [42])
    sc.run()
    tl = sc.timelines["hami"][0]
    assert len(tl.t) == len(tl.queued) == len(tl.running_pct) > 100
    assert max(tl.queued) > 0 and tl.t == sorted(tl.t)
    names = {p.name for p in plot(sc, tmp_path)}
    assert {"miso-1x4-h100-80gb-r60-a5-queue.png", "miso-1x4-h100-80gb-r60-a5-allocated.png"} <= names


def test_config_file_drives_migctls_policies_and_bad_settings_name_their_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The simulator runs migctl with the settings `migctl run` would read. A tiny MISO-format trace (written
    # here, so the test needs no shared data): with the defaults migctl cuts the uncut GPUs and places every
    # job; a paused controller never starts a reconfiguration, so nothing is placed.
    miso = tmp_path / "data" / "miso-socc22-profiles"
    miso.mkdir(parents=True)
    (miso / "job_models.json").write_text(json.dumps({str(i): "resnet_train64" for i in range(4)}))
    (miso / "memory.json").write_text(json.dumps({"resnet": {"64": 9934}}))
    (miso / "trace_100.json").write_text(json.dumps({str(i): 600 for i in range(4)}))
    monkeypatch.setenv("MIGCTL_SIM_DATA", str(tmp_path / "data"))
    args = ["simulate", "--workload", "miso", "--cluster", "1x2", "--seeds", "42", "--policies", "migctl", "-o", "json"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    default = json.loads(res.output)["metrics"]["migctl"]
    paused = tmp_path / "paused.yaml"
    paused.write_text("controller:\n  paused: true\n")
    res = CliRunner().invoke(cli, [*args, "--config", str(paused)])
    assert res.exit_code == 0, res.output
    held = json.loads(res.output)["metrics"]["migctl"]
    assert default["placed_pods_pct"]["mean"] == 100.0
    assert held["placed_pods_pct"]["mean"] == 0.0
    bad = tmp_path / "bad.yaml"
    bad.write_text("controller:\n  cooldown_s: -1\n")
    res = CliRunner().invoke(cli, [*args, "--config", str(bad)])
    assert res.exit_code == 2
    assert "controller.cooldown_s" in res.output and str(bad) in res.output

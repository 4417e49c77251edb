"""`migctl simulate`: the bundled default scenario runs quickly and prints every policy."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from migctl.cli import cli
from migctl.sim.names import ANALYSIS, DEFAULT_POLICIES
from migctl.sim.workloads import MISO, data_dir

# The MISO trace is shared data (../shared/data or $MIGCTL_SIM_DATA), not bundled: skipped without it, like
# tests/unit/sim/test_sim_validation.py's openb tests.
needs_miso = pytest.mark.skipif(
    not (data_dir(MISO) / "trace_100.json").exists(), reason="shared MISO trace data absent"
)


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


@needs_miso
def test_runs_with_departures_also_plot_queue_and_allocation_over_time(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
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


# -- every option is checked before anything runs (issue 44) ----------------------------------------------------


@pytest.mark.timeout(20)  # `--batch 0` used to spin forever in sim/run.py's arrival loop
@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--batch", "0"], "--batch"),
        (["--batch", "-1"], "--batch"),
        (["--seeds", "abc"], "'abc' is not a seed"),
        (["--seeds=-3"], "'-3' is not a seed"),
        (["--seeds", "44-42"], "empty range"),
        (["--seeds", "42,42"], "given twice"),
        (["--seeds", "0-5000"], "more than 1000 seeds"),
        (["--cluster", "0x0"], "at least 1 node"),
        (["--cluster", "2x0"], "at least 1 node"),
        (["--cluster", "openb/0"], "K must be >= 1"),
        (["--cluster", "big"], "expected openb-slice"),
        (["--model", "a100"], "unknown GPU model 'a100' (known: a100-40gb"),
        (["--policies", " , "], "no policy given"),
        (["--policies", "nope"], "unknown policies nope"),
        (["--reconfig-s", "-5"], "--reconfig-s"),
        (["--reconfig-s", "nan"], "not a finite number"),
        (["--readvertise-s", "inf"], "not a finite number"),
        (["--workload", "miso", "--policies", "cont-fgd"], "need an openb workload"),
    ],
)
def test_bad_options_are_usage_errors_that_name_the_option(args: list[str], says: str) -> None:
    res = CliRunner().invoke(cli, ["simulate", *args])
    assert res.exit_code == 2, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)  # no traceback
    assert "error: " in res.stderr and says in res.stderr, res.stderr
    assert "Traceback" not in res.output and "KeyError" not in res.stderr and '"unknown' not in res.stderr


def test_seeds_take_lists_ranges_and_both() -> None:
    from migctl.cli.simulate import parse_seeds

    assert parse_seeds(None, None, "42,43") == [42, 43]
    assert parse_seeds(None, None, "42-44") == [42, 43, 44]
    assert parse_seeds(None, None, "1, 5-6") == [1, 5, 6]


@pytest.mark.timeout(20)
def test_the_simulator_refuses_a_batch_that_would_never_take_an_arrival() -> None:
    """sim/run.py itself, not only the CLI: without departures a round takes up to `batch` arrivals."""
    from migctl.core.hardware.catalog import load_catalog
    from migctl.sim.run import simulate
    from migctl.sim.workloads import Job

    jobs = [Job("a", 5 * 1024, arrival=0.0, duration=10.0)]
    for batch in (0, -1):
        with pytest.raises(ValueError, match="batch must be >= 1"):
            simulate(jobs, [1], load_catalog().model("h100-80gb"), "static-balanced", batch=batch, departures=False)


def test_a_progress_step_per_run_and_a_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io

    from migctl.cli.simulate import progress
    from migctl.core.hardware.catalog import load_catalog
    from migctl.sim.scenario import Scenario, load_cluster

    sc = Scenario("openb-slice", load_cluster("openb-slice"), load_catalog().model("h100-80gb"),
                  ["static-balanced", "static-all-1g"], [42, 43])  # fmt: skip
    done: list[tuple[str, int]] = []
    sc.run(on_run=lambda p, s: done.append((p, s)))
    assert done == [("static-balanced", 42), ("static-all-1g", 42), ("static-balanced", 43), ("static-all-1g", 43)]

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    tty = Terminal()
    monkeypatch.setattr("sys.stderr", tty)
    with progress(4, shown=True) as step:
        for p, s in done:
            step(p, s)
    assert "4/4" in tty.getvalue() and "simulating" in tty.getvalue()
    quiet = Terminal()
    monkeypatch.setattr("sys.stderr", quiet)
    with progress(4, shown=False) as step:
        step("static-balanced", 42)
    assert quiet.getvalue() == ""
    # through the command: CliRunner's stderr is no terminal, so no bar (nor with -o json)
    res = CliRunner().invoke(cli, ["simulate", "--seeds", "42", "--policies", "static-balanced"])
    assert res.exit_code == 0 and "simulating" not in res.stderr


def test_every_policy_has_its_own_colour_and_line_style_in_the_plots(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from migctl.sim import report
    from migctl.sim.names import ALL_POLICIES

    styles = [report.policy_style(p) for p in ALL_POLICIES]
    assert len({s["color"] for s in styles}) == len(ALL_POLICIES)
    assert len({str(s["linestyle"]) for s in styles}) == len(ALL_POLICIES)
    # the plot draws each policy with its style (read back from the figure matplotlib made)
    from migctl.core.hardware.catalog import load_catalog
    from migctl.sim.scenario import Scenario, load_cluster

    policies = ["migctl", "static-balanced", "static-best-mix", "cont-bestfit"]
    sc = Scenario("openb-slice", load_cluster("openb-slice"), load_catalog().model("h100-80gb"), policies, [42])
    sc.run()
    seen: list[dict[str, object]] = []
    real = report._finish

    def spy(ax: object) -> None:
        for line in ax.get_lines():  # type: ignore[attr-defined]
            # get_linestyle() says "--" for every dash pattern; the pattern itself is this (private) attribute
            seen.append({"label": line.get_label(), "color": line.get_color(), "dash": line._unscaled_dash_pattern})
        real(ax)

    report._finish = spy  # type: ignore[assignment]
    try:
        report.plot(sc, tmp_path)
    finally:
        report._finish = real  # type: ignore[assignment]
    alloc = seen[: len(policies)]  # the first of the two plots
    assert [s["label"] for s in alloc] == [report.label(p) for p in policies]
    assert [s["color"] for s in alloc] == [report.policy_style(p)["color"] for p in policies]
    assert len({s["color"] for s in alloc}) == len({str(s["dash"]) for s in alloc}) == len(policies)


def test_out_dir_writes_the_json_and_csv_of_the_summary_and_the_time_series(tmp_path: Path) -> None:
    import csv

    args = ["simulate", "--seeds", "42,43", "--policies", "migctl,static-balanced,cont-fgd", "-o", "json"]
    res = CliRunner().invoke(cli, [*args, "--out-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    stem = "openb-slice-openb-slice-h100-80gb"
    assert json.loads((tmp_path / f"{stem}.json").read_text()) == data
    with (tmp_path / f"{stem}-summary.csv").open() as f:
        summary = {r["policy"]: r for r in csv.DictReader(f)}
    assert set(summary) == {"migctl", "static-balanced", "cont-fgd"}
    for policy, row in summary.items():
        assert row["seeds"] == "2"
        assert float(row["alloc_pct_mean"]) == pytest.approx(data["metrics"][policy]["alloc_pct"]["mean"])
        assert float(row["alloc_pct_std"]) == pytest.approx(data["metrics"][policy]["alloc_pct"]["std"])
    assert summary["cont-fgd"]["internal_pct_mean"] == ""  # NaN (no MIG, no internal waste measured): empty cell
    with (tmp_path / f"{stem}-series.csv").open() as f:
        series = list(csv.DictReader(f))
    assert list(series[0]) == ["policy", "seed", "sample", "arrived_pct", "alloc_pct", "stranded_pct", "time_s",
                               "queued", "running_pct"]  # fmt: skip
    runs = {(r["policy"], r["seed"]) for r in series}
    assert runs == {(p, s) for p in summary for s in ("42", "43")}
    migctl42 = [r for r in series if r["policy"] == "migctl" and r["seed"] == "42"]
    assert [int(r["sample"]) for r in migctl42] == list(range(len(migctl42))) and len(migctl42) > 5
    arrived = [float(r["arrived_pct"]) for r in migctl42]
    assert arrived == sorted(arrived) and arrived[-1] > 100  # the openb protocol offers 130% of capacity

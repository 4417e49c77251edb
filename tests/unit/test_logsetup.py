"""Logging: every `extra=` field reaches the line in both formats, and every component follows the configured
format and level, with the global `migctl --log-format/--log-level` flags winning over the config."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest
import yaml
from click.testing import CliRunner
from kubernetes import client

import migctl.adapters.kube as kube_module
import migctl.adapters.nvml as nvml_module
from migctl.adapters.nvml import NvmlReader
from migctl.cli import cli
from migctl.logsetup import JsonFormatter, TextFormatter, set_overrides, setup_logging
from tests.unit.fake_nvml import FakeNvml, t4


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    set_overrides(None, None)
    root.handlers[:], root.level = handlers, level


def record(**extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("migctl.controller", logging.INFO, __file__, 1, "node %s: start", ("gpu-1",), None)
    rec.__dict__.update(extra)
    return rec


def test_json_lines_keep_every_extra_and_leave_out_empty_ones() -> None:
    line = json.loads(JsonFormatter().format(record(plan_id="p1", node="gpu-1", gpu=0, cause="verify", pod="")))
    assert line["msg"] == "node gpu-1: start" and line["level"] == "INFO" and line["logger"] == "migctl.controller"
    assert {k: line[k] for k in ("plan_id", "node", "gpu", "cause")} == {
        "plan_id": "p1",
        "node": "gpu-1",
        "gpu": 0,  # a falsy value that is not empty stays
        "cause": "verify",
    }
    assert "pod" not in line
    assert json.loads(JsonFormatter().format(record(level="shadow")))["level"] == "INFO"  # never overwritten


def test_text_lines_keep_every_extra_as_key_value_pairs() -> None:
    line = TextFormatter().format(record(plan_id="p1", attempt=2, result="blocked"))
    assert line.endswith("node gpu-1: start [plan_id=p1 attempt=2 result=blocked]")
    assert "[" not in TextFormatter().format(record())


def test_the_global_flags_win_over_the_config() -> None:
    res = CliRunner().invoke(cli, ["--log-format", "json", "--log-level", "debug", "version"])
    assert res.exit_code == 0, res.output
    setup_logging("text", "WARNING")  # what a subcommand then does with its config
    root = logging.getLogger()
    assert isinstance(root.handlers[0].formatter, JsonFormatter) and root.level == logging.DEBUG
    res = CliRunner().invoke(cli, ["version"])  # without the flags, the config decides again
    setup_logging("text", "WARNING")
    assert isinstance(root.handlers[0].formatter, TextFormatter) and root.level == logging.WARNING


def test_a_bad_global_flag_is_a_usage_error() -> None:
    res = CliRunner().invoke(cli, ["--log-level", "verbose", "version"])
    assert res.exit_code == 2 and "--log-level" in res.output


@pytest.mark.parametrize(("flags", "fmt"), [([], "json"), (["--log-format", "text"], "text")])
def test_the_agent_logs_in_the_configured_format(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, flags: list[str], fmt: str
) -> None:
    """`migctl agent` (NVML failing, as without a driver) writes its "not ready" line as JSON when the config says
    `log_format: json`, and as text when the global flag says so."""
    bad = NvmlReader(FakeNvml([t4()], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    monkeypatch.setattr(nvml_module, "NvmlReader", lambda: bad)
    monkeypatch.setattr(kube_module, "api_client", lambda *a: client.ApiClient())
    config = tmp_path / "migctl.yaml"
    config.write_text(yaml.safe_dump({"controller": {"log_format": "json"}, "agent": {"health_port": None}}))
    res = CliRunner().invoke(cli, [*flags, "agent", "--once", "--node", "n1", "--config", str(config)])
    assert res.exit_code == 1
    lines = [ln for ln in res.stderr.splitlines() if "not ready" in ln]
    assert lines, res.stderr
    if fmt == "json":
        entry = json.loads(lines[0])
        assert entry["level"] == "ERROR" and entry["logger"] == "migctl.agent.runner"
    else:
        assert " ERROR migctl.agent.runner: not ready: " in lines[0]

"""The controller's settings: defaults, exact-field errors, environment overrides; API error translation."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ReadTimeoutError

from migctl.adapters.kube.errors import (
    ConflictError,
    ForbiddenError,
    NotFoundError,
    PermanentError,
    TooManyRequestsError,
    TransientError,
    translate,
)
from migctl.config import Config, ControllerSettings, env_overrides, load_config
from migctl.errors import InputError


def test_every_controller_field_has_a_default_and_a_description() -> None:
    ControllerSettings()  # all defaults valid
    for name, field in ControllerSettings.model_fields.items():
        if name != "leader_election":
            assert field.description, name
    assert (ControllerSettings().max_concurrent_nodes, ControllerSettings().min_dwell_s) == (4, 300.0)
    assert ControllerSettings().dry_run is False


def test_bad_field_fails_with_its_path(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("controller:\n  max_concurrent_nodes: 0\n  leader_election:\n    lease_duration_s: 1\n")
    with pytest.raises(InputError) as e:
        load_config(f, environ={})
    text = str(e.value)
    assert str(f) in text and "controller.max_concurrent_nodes" in text and "controller.leader_election" in text


def test_unknown_field_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("controller:\n  dryrun: true\n")
    with pytest.raises(InputError, match=r"controller\.dryrun: unknown field"):
        load_config(f, environ={})


def test_environment_overrides_win_over_the_file(tmp_path: Path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text("controller:\n  dry_run: false\n  cooldown_s: 5\n")
    cfg = load_config(
        f,
        environ={
            "MIGCTL_CONTROLLER__DRY_RUN": "true",
            "MIGCTL_CONTROLLER__LEADER_ELECTION__LEASE_NAME": "other",
            "MIGCTL_PLANNER__EVICTIONS": "lower-priority",
            "MIGCTL_TESTBIN": "/ignored",  # no double underscore: not a setting
        },
    )
    assert cfg.controller.dry_run is True and cfg.controller.cooldown_s == 5
    assert cfg.controller.leader_election.lease_name == "other"
    assert cfg.planner.evictions == "lower-priority"


def test_bad_environment_override_names_the_variable() -> None:
    with pytest.raises(InputError) as e:
        load_config(None, environ={"MIGCTL_CONTROLLER__MAX_CONCURRENT_NODES": "many"})
    assert "MIGCTL_CONTROLLER__MAX_CONCURRENT_NODES" in str(e.value)
    assert "controller.max_concurrent_nodes" in str(e.value)


def test_env_overrides_only_take_scalars() -> None:
    out, used = env_overrides({"MIGCTL_CONTROLLER__NODE_SELECTOR": "{a: b}", "MIGCTL_X__": "1"})
    assert out == {"controller": {"node_selector": "{a: b}"}} and used == ["MIGCTL_CONTROLLER__NODE_SELECTOR"]


def test_existing_sections_still_load() -> None:
    cfg = Config.model_validate({"planner": {"evictions": "none"}, "gpu_operator": {"configmap_name": "x"}})
    assert cfg.gpu_operator.configmap_name == "x" and cfg.controller == ControllerSettings()


@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (409, ConflictError),
        (429, TooManyRequestsError),
        (500, TransientError),
        (503, TransientError),
        (504, TransientError),
        (400, PermanentError),
        (403, ForbiddenError),
        (404, NotFoundError),
        (422, PermanentError),
    ],
)
def test_api_errors_say_whether_a_retry_can_help(status: int, kind: type[Exception]) -> None:
    err = translate(ApiException(status=status, reason="x"), "patch node n")
    assert type(err) is kind
    assert isinstance(err, TransientError) == (status in (409, 429, 500, 503, 504))
    assert "patch node n" in str(err)
    assert isinstance(err, PermanentError) == (status in (400, 403, 404, 422))


def test_api_errors_carry_the_servers_message() -> None:
    body = '{"kind": "Status", "message": "nodes \\"n\\" is forbidden: ValidatingAdmissionPolicy denied it"}'
    err = translate(ApiException(status=422, reason="Unprocessable Entity", http_resp=None), "patch node n")
    assert err.message == ""
    e = ApiException(status=422, reason="Unprocessable Entity")
    e.body = body
    assert translate(e, "patch node n").message == 'nodes "n" is forbidden: ValidatingAdmissionPolicy denied it'


def test_timeouts_are_transient() -> None:
    assert isinstance(translate(ReadTimeoutError(None, "/api", "read timed out"), "x"), TransientError)  # type: ignore[arg-type]
    assert isinstance(translate(ConnectionRefusedError(), "x"), TransientError)


def test_cli_run_rejects_bad_settings_with_exit_code_2(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from migctl.cli import cli

    f = tmp_path / "c.yaml"
    f.write_text("controller:\n  batch_stable_s: 30\n  batch_max_s: 5\n")
    result = CliRunner().invoke(cli, ["run", "--config", str(f)])
    assert result.exit_code == 2 and "batch_max_s must be >= batch_stable_s" in result.output
    result = CliRunner().invoke(cli, ["run", "--metrics-port", "99999"])
    assert result.exit_code == 2 and "controller.metrics_port" in result.output


def test_the_in_place_rails_are_validated() -> None:
    """Their effect on an in-place node is tests/unit/reconcile/test_paths_rails.py's."""
    with pytest.raises(ValueError, match="in_place_batch_max_s must be >= in_place_batch_stable_s"):
        ControllerSettings(in_place_batch_stable_s=30, in_place_batch_max_s=5)
    with pytest.raises(ValueError, match="in_place_min_dwell_s"):
        ControllerSettings(in_place_min_dwell_s=-1)

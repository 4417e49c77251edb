"""`migctl agent apply`, end to end through the command: each point of issue 31 point 3.

Simulated, at their real interfaces, because neither can run here: the GPU driver (tests/unit/fake_nvml_mig.py, at
pynvml's interface with the catalog's A100-40GB geometry) and the kubelet (a real gRPC PodResources v1 server on a
unix socket, tests/unit/fake_podresources.py). The caps command is a real process (`touch`) that proves it ran.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

import migctl.cli.agent_apply as wiring
from migctl.adapters.nvml_mig import MigNvml
from migctl.cli.agent import agent_command
from migctl.config import load_config
from tests.unit.fake_nvml_mig import AgentKilled, FakeMigNvml, MigGpu
from tests.unit.fake_podresources import FakeKubelet, serve_kubelet

P1G, P2G, P3G = 19, 14, 9  # A100-40GB profile ids: 1g.5gb, 2g.10gb, 3g.20gb


class Node:
    """One GPU node: the fake driver, the kubelet, the state directory and the command."""

    def __init__(self, tmp: Path, fake: FakeMigNvml, kubelet: FakeKubelet, socket: Path) -> None:
        self.tmp, self.fake, self.kubelet, self.socket = tmp, fake, kubelet, socket
        self.state = tmp / "state"
        self.caps_marker = tmp / "caps-ran"
        self.config = tmp / "config.yaml"
        cfg = {"agent": {"caps_command": ["touch", str(self.caps_marker)], "destroy_backoff_seconds": 0.001}}
        self.config.write_text(json.dumps(cfg))

    def apply(self, gpus: object, *extra: str, socket: Path | None = None) -> Result:
        layout = self.tmp / "layout.yaml"
        layout.write_text(gpus if isinstance(gpus, str) else json.dumps({"gpus": gpus}))
        args = ["apply", "--layout", str(layout), "--state-dir", str(self.state), "--config", str(self.config)]
        args += ["--pod-resources-socket", str(socket or self.socket), *extra]
        return CliRunner().invoke(agent_command, args)

    @property
    def journal(self) -> Path:
        return self.state / "in-place-journal.json"


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    fake = FakeMigNvml([MigGpu(uuid="GPU-0"), MigGpu(uuid="GPU-1")])
    monkeypatch.setattr(wiring, "MigNvml", lambda: MigNvml(fake))
    with serve_kubelet(tmp_path) as (kubelet, socket):
        yield Node(tmp_path, fake, kubelet, socket)


def spans(node: Node, gpu: int = 0) -> list[tuple[int, int, int]]:
    return [(p, s, z) for p, s, z, _ in node.fake.layout(gpu)]


def test_busy_instance_kept_and_free_part_reshaped(node: Node) -> None:
    busy = node.fake.add(0, "3g.20gb", 0, processes=1)
    node.fake.add(0, "2g.10gb", 4)
    result = node.apply({0: {"3g.20gb": 1, "1g.5gb": 3}})
    assert result.exit_code == 0, result.output
    assert spans(node) == [(P3G, 0, 4), (P1G, 4, 1), (P1G, 5, 1), (P1G, 6, 1)]
    assert node.fake.layout(0)[0][3] == busy  # the very same instance
    assert all(span != (0, 4) for _, _, span in node.fake.mutations)  # never touched
    assert node.caps_marker.exists() and not node.journal.exists()


def test_allocated_but_not_started_instance_is_kept(node: Node) -> None:
    """The kubelet gave the instance to a pod whose process has not started: NVML sees no process."""
    held = node.fake.add(0, "3g.20gb", 4)
    node.kubelet.give("team-a", "train-7", "nvidia.com/mig-3g.20gb", held)
    result = node.apply({0: {"7g.40gb": 1}})
    assert result.exit_code == 3
    assert "3g.20gb at 4+4" in result.output and "pod team-a/train-7" in result.output
    assert node.fake.mutations == []
    result = node.apply({0: {"3g.20gb": 1, "2g.10gb": 2}})  # reachable around it
    assert result.exit_code == 0, result.output
    assert held in [u for *_, u in node.fake.layout(0)]
    assert all(span != (4, 4) for _, _, span in node.fake.mutations)


def test_blocked_exits_3_names_the_blocker_and_changes_nothing(node: Node) -> None:
    node.fake.add(0, "1g.5gb", 3, processes=2)
    node.fake.add(0, "1g.5gb", 5)
    before = node.fake.layout(0)
    result = node.apply({0: {"4g.20gb": 1, "1g.5gb": 1}})
    assert result.exit_code == 3
    assert "GPU 0:" in result.output and "1g.5gb at 3+1" in result.output and "2 processes" in result.output
    assert node.fake.layout(0) == before and node.fake.mutations == []


def test_a_target_that_fits_only_by_moving_a_free_instance(node: Node) -> None:
    node.fake.add(0, "3g.20gb", 0, processes=1)
    node.fake.add(0, "1g.5gb", 4)
    result = node.apply({0: {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}})
    assert result.exit_code == 0, result.output
    assert spans(node) == [(P3G, 0, 4), (P2G, 4, 2), (P1G, 6, 1)]


def test_dry_run_prints_the_steps_and_changes_nothing(node: Node) -> None:
    node.fake.add(0, "2g.10gb", 0)
    result = node.apply({0: {"1g.5gb": 2}}, "--dry-run")
    assert result.exit_code == 0
    assert "would destroy 2g.10gb at 0+2" in result.output and "would create 1g.5gb at 0+1" in result.output
    node.fake.add(1, "7g.40gb", 0, processes=1)
    blocked = node.apply({1: {"1g.5gb": 1}}, "--dry-run")
    assert blocked.exit_code == 3
    assert node.fake.mutations == [] and not node.caps_marker.exists() and not node.journal.exists()


def test_dry_run_json_output(node: Node) -> None:
    result = node.apply({0: {"3g.20gb": 2}}, "--dry-run", "-o", "json")
    data = json.loads(result.output)
    assert data["exit_code"] == 0 and data["gpus"][0]["steps"] == ["create 3g.20gb at 0+4", "create 3g.20gb at 4+4"]


@pytest.mark.parametrize(
    ("layout", "field"),
    [
        (None, "cannot read the file"),
        ({0: {"5g.25gb": 1}}, "gpus.0: GPU model a100-40gb has no MIG profile '5g.25gb'"),
        ({0: {"4g.20gb": 1, "3g.20gb": 1, "1g.5gb": 1}}, "gpus.0: needs 8 compute slices"),
        ({7: {"1g.5gb": 1}}, "gpus.7: GPU index 7 does not exist"),
        ({0: {"1g.5gb": -1}}, "gpus.0.1g.5gb: negative count -1"),
        ("gpus: [1, 2]", "gpus: expected a mapping"),
        ({0: {"1g.5gb": "two"}}, "gpus.0.1g.5gb: expected a whole number of instances"),
        ({"first": {"1g.5gb": 1}}, "gpus.first: not a GPU index"),
    ],
)
def test_bad_input_exits_2_naming_the_field_and_changes_nothing(node: Node, layout: object, field: str) -> None:
    node.fake.add(0, "2g.10gb", 0)
    if layout is None:
        args = ["apply", "--layout", str(node.tmp / "absent.yaml"), "--state-dir", str(node.state)]
        result = CliRunner().invoke(agent_command, [*args, "--pod-resources-socket", str(node.socket)])
    else:
        result = node.apply(layout)
    assert result.exit_code == 2, result.output
    assert field in result.output
    assert node.fake.mutations == []


def test_mig_off_is_refused_and_mig_mode_never_touched(node: Node) -> None:
    node.fake.gpus[1].mig = 0
    result = node.apply({1: {"1g.5gb": 1}})
    assert result.exit_code == 3 and "MIG mode is off" in result.output
    assert node.fake.mutations == [] and node.fake.gpus[1].mig == 0


def test_transient_in_use_is_retried_then_the_change_completes(node: Node) -> None:
    node.fake.add(0, "2g.10gb", 0)
    node.fake.in_use_on_destroy[(0, (0, 2))] = 2
    result = node.apply({0: {"1g.5gb": 2}})
    assert result.exit_code == 0, result.output
    assert [m for m, _, span in node.fake.mutations if span == (0, 2)] == ["destroy-ci"] * 3 + ["destroy-gi"]
    assert spans(node) == [(P1G, 0, 1), (P1G, 1, 1)]


def test_in_use_that_never_clears_blocks_and_restores_the_gpu(node: Node) -> None:
    node.fake.add(0, "1g.5gb", 0)
    node.fake.add(0, "1g.5gb", 1)
    node.fake.in_use_on_destroy[(0, (1, 1))] = -1
    result = node.apply({0: {"2g.10gb": 1}})
    assert result.exit_code == 3 and "stayed in use after 5 attempts" in result.output
    assert "rolled back" in result.output
    assert spans(node) == [(P1G, 0, 1), (P1G, 1, 1)] and not node.journal.exists()


def test_a_failed_create_rolls_the_gpu_back_and_exits_1(node: Node) -> None:
    node.fake.add(0, "3g.20gb", 0, processes=1)
    node.fake.add(0, "2g.10gb", 4)
    node.fake.fail_gi_create[2] = 999  # the second create of the change fails (NVML "Unknown Error" class)
    result = node.apply({0: {"3g.20gb": 1, "1g.5gb": 3}})
    assert result.exit_code == 1 and "rolled back" in result.output
    assert spans(node) == [(P3G, 0, 4), (P2G, 4, 2)]
    assert not node.journal.exists()


def test_two_gpus_one_blocked_the_other_applied(node: Node) -> None:
    node.fake.add(1, "7g.40gb", 0, processes=1)
    result = node.apply({0: {"3g.20gb": 2}, 1: {"3g.20gb": 2}})
    assert result.exit_code == 3
    assert "GPU 0: applied" in result.output and "GPU 1: blocked" in result.output
    assert spans(node, 0) == [(P3G, 0, 4), (P3G, 4, 4)]
    assert spans(node, 1) == [(0, 0, 8)]


def test_already_at_target_makes_no_mutating_call(node: Node) -> None:
    node.fake.add(0, "3g.20gb", 0, processes=1)
    node.fake.add(0, "2g.10gb", 4)
    result = node.apply({"0": {"3g.20gb": 1, "2g.10gb": 1}})
    assert result.exit_code == 0 and "GPU 0: unchanged" in result.output
    assert node.fake.mutations == [] and not node.caps_marker.exists()


def test_an_unreadable_kubelet_socket_changes_nothing(node: Node) -> None:
    node.fake.add(0, "2g.10gb", 0)
    result = node.apply({0: {"1g.5gb": 2}, 1: {"1g.5gb": 1}}, socket=node.tmp / "no-kubelet.sock")  # GPU 1: create only
    assert result.exit_code == 1 and "PodResources socket" in result.output
    assert node.fake.mutations == []


def test_agent_killed_between_a_destroy_and_a_create_converges_from_its_journal(node: Node) -> None:
    busy = node.fake.add(0, "3g.20gb", 4, processes=1)
    free = node.fake.add(0, "2g.10gb", 0)
    node.fake.kill_at_gi_create = 1
    with pytest.raises(AgentKilled):
        node.apply({0: {"3g.20gb": 1, "1g.5gb": 2}})
    assert spans(node) == [(P3G, 4, 4)]  # the 2g is gone, nothing created yet
    entry = json.loads(node.journal.read_text())["gpus"]["GPU-0"]  # identified by the parent GPU's UUID
    assert [(s["profile_id"], s["start"], s["uuid"]) for s in entry["before"]] == [(P2G, 0, free), (P3G, 4, busy)]
    (kind, destroyed), (kind2, create) = entry["steps"]
    assert (kind, destroyed["uuid"], destroyed["profile_id"], destroyed["start"], destroyed["size"]) == (
        "destroy",
        free,
        P2G,
        0,
        2,
    )
    assert destroyed["gi"] is not None and destroyed["ci"] == 0
    assert (kind2, create["profile_id"], create["start"], create["size"]) == ("create", P1G, 0, 1)

    node.fake.kill_at_gi_create = None  # the agent starts again
    result = node.apply({0: {"3g.20gb": 1, "1g.5gb": 2}})
    assert result.exit_code == 0, result.output
    assert "undid an interrupted change" in result.output
    assert spans(node) == [(P1G, 0, 1), (P1G, 1, 1), (P3G, 4, 4)]
    assert node.fake.layout(0)[2][3] == busy and not node.journal.exists()


def test_journal_undo_alone_restores_the_previous_layout(node: Node) -> None:
    node.fake.add(0, "1g.5gb", 0)
    node.fake.add(0, "1g.5gb", 1)
    node.fake.kill_at_gi_create = 2  # the 3g at 0 was created, the agent dies on the second create
    with pytest.raises(AgentKilled):
        node.apply({0: {"2g.10gb": 1, "3g.20gb": 1}})
    assert spans(node) == [(P3G, 0, 4)]
    node.fake.kill_at_gi_create = None
    applier = wiring.build_applier(load_config(node.config), str(node.socket), node.state)
    assert applier.recover() == ["GPU 0: undid an interrupted change (5 steps journaled)"]
    assert spans(node) == [(P1G, 0, 1), (P1G, 1, 1)] and not node.journal.exists()


def test_agent_killed_between_the_compute_and_the_gpu_instance_destroy_converges(node: Node) -> None:
    """The half-destroyed instance (a GPU instance without compute instance) is cleared, then the change reruns."""
    node.fake.add(0, "2g.10gb", 0)
    node.fake.kill_at_gi_destroy = 1
    with pytest.raises(AgentKilled):
        node.apply({0: {"1g.5gb": 2}})
    assert node.fake.layout(0) == [(P2G, 0, 2, "")]  # its compute instance is gone, the GPU instance is not
    node.fake.kill_at_gi_destroy = None
    result = node.apply({0: {"1g.5gb": 2}})
    assert result.exit_code == 0, result.output
    assert spans(node) == [(P1G, 0, 1), (P1G, 1, 1)] and not node.journal.exists()


def test_a_damaged_journal_stops_the_command_before_any_change(node: Node) -> None:
    node.fake.add(0, "2g.10gb", 0)
    node.state.mkdir()
    node.journal.write_text("{not json")
    result = node.apply({0: {"1g.5gb": 2}})
    assert result.exit_code == 1 and "in-place-journal.json is not valid JSON" in result.output
    assert node.fake.mutations == []


# -- the device-node step is checked before any change (issue 44) --------------------------------------------


def _host_config(node: Node, **agent: object) -> None:
    """The operator's config on a host: no caps_command (the default), so migctl picks one."""
    node.config.write_text(json.dumps({"agent": {"destroy_backoff_seconds": 0.001, **agent}}))


def test_on_a_host_without_the_device_node_tool_nothing_is_created(
    node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`migctl agent apply` on a host (no /host, as in the DaemonSet) whose PATH has no nvidia-smi: it used to
    create the instances and only then fail on `chroot /host nvidia-smi`. Now it stops first, changing nothing."""
    monkeypatch.setattr(wiring, "HOST_ROOT", tmp_path / "no-host")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    _host_config(node)
    result = node.apply({0: {"3g.20gb": 2}})
    assert result.exit_code == 1, result.output
    assert "device-node step after creating instances cannot run: nvidia-smi: nvidia-smi is not on PATH" in (
        result.output
    )
    assert "nothing was changed" in result.output
    assert node.fake.mutations == [] and not node.journal.exists()
    # a target that only destroys needs no device nodes: it runs
    node.fake.add(0, "2g.10gb", 4)
    assert node.apply({0: {}}).exit_code == 0 and node.fake.layout(0) == []


def test_on_a_host_the_default_is_nvidia_smi_from_path(
    node: Node, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default detects where it runs: no /host, so `nvidia-smi` from PATH (here a stand-in that records its
    call, as the real one creates the /dev/nvidia-caps nodes)."""
    monkeypatch.setattr(wiring, "HOST_ROOT", tmp_path / "no-host")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ran = tmp_path / "nvidia-smi-ran"
    smi = bin_dir / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho \"$@\" > {ran}\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    _host_config(node)
    result = node.apply({0: {"3g.20gb": 2}})
    assert result.exit_code == 0, result.output
    assert ran.exists() and len(node.fake.layout(0)) == 2


def test_the_default_command_is_chroot_into_host_only_where_host_holds_nvidia_smi(tmp_path: Path) -> None:
    host = tmp_path / "host"
    assert wiring.caps_command((), host) == ("nvidia-smi",)  # no /host: a host
    (host / "usr" / "bin").mkdir(parents=True)
    assert wiring.caps_command((), host) == ("nvidia-smi",)  # /host without the tool
    smi = host / "usr" / "bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\n")
    smi.chmod(0o755)
    assert wiring.caps_command((), host) == ("chroot", str(host), "nvidia-smi")  # the DaemonSet
    assert wiring.caps_command(("my-tool", "--caps"), host) == ("my-tool", "--caps")  # configured: as given
    assert load_config(None).agent.caps_command == ()  # the default is "detect"


def test_caps_problem_says_why_a_command_cannot_run(tmp_path: Path) -> None:
    assert wiring.caps_problem(("true",)) == ""
    assert wiring.caps_problem(("no-such-tool-here",)) == "no-such-tool-here: no-such-tool-here is not on PATH"
    missing = wiring.caps_problem(("chroot", str(tmp_path / "nope"), "nvidia-smi"))
    assert missing.endswith("is no directory (the in-place DaemonSet mounts the host's / there)")
    empty_root = wiring.caps_problem(("chroot", str(tmp_path), "nvidia-smi"))
    assert empty_root.endswith(f"{tmp_path} holds no executable nvidia-smi")

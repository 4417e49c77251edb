"""The chart's in-place agent DaemonSet passes the settings the agent really reads: the rendered config file plus the
container's environment, loaded by the same `load_config` that `migctl agent` runs, give `agent.in_place`, a state
directory and a PodResources socket that lie on the DaemonSet's mounts, the node name from the downward API, a
caps command that finds the host's root where it is mounted, and the device-plugin config names its admission
policy allows. Real: helm (hack/testbin.sh) and migctl's config loader; nothing is simulated.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import pytest

from migctl.config import env_overrides, load_config

from .test_deploy import find, one, render
from .test_in_place_rbac import IN_PLACE, helm  # noqa: F401 - the fixture

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize(
    "values",
    [[], ["--set", "agent.inPlace.stateDir=/data/migctl", "--set-json", 'config.agent.device_plugin_configs=["x","y"]',
          "--set", "config.agent.health_port=9095"]],
    ids=["defaults", "custom"],
)  # fmt: skip
def test_the_in_place_daemonset_passes_what_the_agent_reads(helm: Path, tmp_path: Path, values: list[str]) -> None:  # noqa: F811
    objs = render(helm, *IN_PLACE, *values, namespace="ops")
    config = tmp_path / "config.yaml"
    config.write_text(one(objs, "ConfigMap", "-config")["data"]["config.yaml"])
    pod = one(objs, "DaemonSet", "-agent-in-place")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    overrides, used = env_overrides(env)
    assert sorted(used) == sorted(k for k in env if k.startswith("MIGCTL_")), "an env var the loader ignores"
    settings = load_config(config, environ=env).agent  # what `migctl agent --config ...` loads in that container
    assert container["args"] == ["agent", "--config", "/etc/migctl/config.yaml"]

    assert settings.in_place is True
    downward = next(e for e in container["env"] if e["name"] == settings.node_name_env)
    assert downward["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"

    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    state = mounts["state"]
    assert state["mountPath"] == settings.state_dir and not state.get("readOnly")  # the journal is written there
    assert volumes["state"]["hostPath"]["path"] == ("/data/migctl" if values else "/var/lib/migctl")
    socket = PurePosixPath(settings.pod_resources_socket)
    assert str(socket.parent) == mounts["pod-resources"]["mountPath"] and mounts["pod-resources"]["readOnly"] is True
    assert volumes["pod-resources"]["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"

    # empty: detected at run time, `chroot /host nvidia-smi` where /host holds it (cli/agent_apply.caps_command)
    assert settings.caps_command == () and mounts["host-root"]["mountPath"] == "/host"
    assert volumes["host-root"]["hostPath"]["path"] == "/" and mounts["dev"]["mountPath"] == "/dev"

    assert settings.health_port == (9095 if values else 8081)
    assert container["ports"][0]["containerPort"] == settings.health_port
    assert settings.device_plugin_configs == (("x", "y") if values else ("migctl-a", "migctl-b"))
    policy = one(objs, "ValidatingAdmissionPolicy", "-agent-in-place-node-restriction")
    allowed = policy["spec"]["validations"][-1]["expression"]
    a, b = settings.device_plugin_configs
    assert f"['{a}', '{b}']" in allowed  # the agent's flip is one the policy lets through
    assert settings.annotation in policy["spec"]["variables"][-1]["expression"]
    assert overrides["agent"]["in_place"] is True and find(objs, "DaemonSet", "-agent-in-place")

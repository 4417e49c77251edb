"""Agent settings (the `agent:` section of migctl's config file)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from migctl.wire.names import GPUS as INVENTORY_ANNOTATION

# NVIDIA's DRA driver chart (kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm: the kubelet plugin's DaemonSet
# selects its pods by `<chart name>-component: kubelet-plugin`) in the namespace of its install guide.
DRA_PLUGIN_NAMESPACE = "dra-driver-nvidia-gpu"
DRA_PLUGIN_LABELS = {"dra-driver-nvidia-gpu-component": "kubelet-plugin"}


class AgentDraSettings(BaseModel):
    """The in-place agent on nodes whose GPUs NVIDIA's DRA driver serves (docs/install.md "On a DRA cluster"): the
    driver's kubelet plugin does not rescan NVML, so the agent re-advertises by deleting its own node's plugin pod
    (the plugin's DaemonSet makes a new one, which lists the instances that exist), instead of flipping the device
    plugin's config label."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(
        False,
        description="Look for NVIDIA's DRA driver on the agent's node: a node with a ResourceSlice of gpu.nvidia.com, "
        "or a plugin pod (below) bound to it, is a DRA node. The chart sets it with `dra.enabled`, together with the "
        "RBAC it needs (reading ResourceSlices and ResourceClaims, deleting the plugin pod of its own node).",
    )
    plugin_namespace: str = Field(
        DRA_PLUGIN_NAMESPACE, min_length=1, description="Namespace of the DRA driver's kubelet-plugin pods."
    )
    plugin_labels: dict[str, str] = Field(
        default_factory=lambda: dict(DRA_PLUGIN_LABELS),
        min_length=1,
        description="Labels every kubelet-plugin pod carries (all must match). NVIDIA's chart: "
        "dra-driver-nvidia-gpu-component=kubelet-plugin; under the GPU Operator's GPUCluster (namespace: the "
        "operator's) read them from the plugin's pods. The chart sets these from `dra.pluginLabels`.",
    )


class AgentSettings(BaseModel):
    """How often the agent reads NVML, where it publishes, how it backs off when NVML fails; and, on nodes opted into
    the in-place path, how it applies the controller's targets (docs/in-place.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval_seconds: float = Field(30.0, gt=0, description="Re-read NVML (and republish if changed) this often.")
    annotation: str = Field(INVENTORY_ANNOTATION, description="Node annotation that carries the inventory.")
    backoff_initial_seconds: float = Field(5.0, gt=0, description="First retry delay after an NVML failure.")
    backoff_max_seconds: float = Field(300.0, gt=0, description="Longest retry delay while NVML keeps failing.")
    health_port: int | None = Field(
        8081, ge=0, le=65535, description="Serve /metrics, /healthz and /readyz here (None: no HTTP server)."
    )
    node_name_env: str = Field("NODE_NAME", description="Env var holding the Node name (downward API spec.nodeName).")
    in_place: bool = Field(
        False,
        description="Apply the controller's in-place targets (migctl.io/in-place-target) on this node; the "
        "DaemonSet of in-place nodes sets it.",
    )
    state_dir: str = Field(
        "/var/lib/migctl", min_length=1, description="The in-place journal and last applied layout (a hostPath)."
    )
    pod_resources_socket: str = Field(
        "/var/lib/kubelet/pod-resources/kubelet.sock",
        min_length=1,
        description="The kubelet's PodResources socket (mount its directory read-only).",
    )
    pod_resources_timeout_seconds: float = Field(10.0, gt=0, description="Deadline of one PodResources call.")
    device_plugin_configs: tuple[str, str] = Field(
        ("migctl-a", "migctl-b"),
        description="Two named device-plugin configs of identical content: the agent flips its node's "
        "nvidia.com/device-plugin.config label between them to make the plugin re-enumerate.",
    )
    caps_command: tuple[str, ...] = Field(
        (),
        description="Run after creating instances, to create their /dev/nvidia-caps device nodes on the host "
        "(as mig-manager does: nvidia-smi inside the host's root file system). Empty: `chroot /host nvidia-smi` "
        "when /host holds nvidia-smi (the in-place DaemonSet mounts the host's / there), else `nvidia-smi` from "
        "PATH (`migctl agent apply` on the host itself). Checked before any change: a command that cannot run "
        "stops the apply with nothing changed.",
    )
    destroy_attempts: int = Field(5, ge=1, le=50, description="Tries of a destroy that NVML refuses with IN_USE.")
    destroy_backoff_seconds: float = Field(0.5, gt=0, description="First wait between those tries (doubling).")
    destroy_backoff_max_seconds: float = Field(4.0, gt=0, description="Longest wait between those tries.")
    dra: AgentDraSettings = Field(default_factory=AgentDraSettings)

    @model_validator(mode="after")
    def _two_configs(self) -> AgentSettings:
        a, b = self.device_plugin_configs
        if not a or not b or a == b:
            raise ValueError("device_plugin_configs: expected two different, non-empty config names")
        return self

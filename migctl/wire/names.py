"""Names on the wire: labels, annotations, taints and resources, as the GPU Operator and migctl spell them.

Settings that let an operator rename a key (`planner.vram_resource`, `gpu_operator.layout_annotation`, ...)
take their defaults from here; code that reads a fixed key uses the constant.
"""

from __future__ import annotations

from collections.abc import Mapping

# -- NVIDIA GPU Operator: GPU Feature Discovery labels, mig-manager's labels, the device plugin's resources --------
NVIDIA_PREFIX = "nvidia.com/"
GPU_PRODUCT = "nvidia.com/gpu.product"  # GFD: the board's product name (NVML's name, spaces as dashes)
GPU_COUNT = "nvidia.com/gpu.count"
GPU_MEMORY = "nvidia.com/gpu.memory"  # MiB
MIG_CAPABLE = "nvidia.com/mig.capable"
MIG_CONFIG = "nvidia.com/mig.config"  # mig-manager applies the mig-parted config of this name
MIG_CONFIG_STATE = "nvidia.com/mig.config.state"  # ... and reports pending, success or failed here
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"  # `nvidia.com/mig-<profile>` (mixed strategy); GFD adds `.count`, `.memory`
MIG_COUNT_SUFFIX = ".count"
MIG_MEMORY_SUFFIX = ".memory"
WHOLE_GPU_RESOURCE = "nvidia.com/gpu"
DEVICE_PLUGIN_CONFIG = "nvidia.com/device-plugin.config"  # the device plugin's config-manager re-reads on a change
DEPLOY_MIG_MANAGER = "nvidia.com/gpu.deploy.mig-manager"  # the GPU Operator runs mig-manager where this is "true"

# -- migctl's own keys ---------------------------------------------------------------------------------------------
PREFIX = "migctl.io/"
VRAM = PREFIX + "vram"  # the extended resource pods ask for VRAM with, and the pod annotation of the real need
VRAM_CHOICE = PREFIX + "vram-choice"  # the webhook's decision on a pod (JSON)
WEBHOOK_OPT_OUT = PREFIX + "webhook"  # pod annotation or namespace label: `disabled` opts out of the webhook
GPUS = PREFIX + "gpus"  # the node agent's NVML inventory (JSON)
LAYOUT = PREFIX + "layout"  # the controller's record of a node's per-GPU layout (JSON: `layout.encode`)
EXCLUDE = PREFIX + "exclude"  # label `true`: nodes left alone; namespaces / pods neither planned for nor evicted
PAUSED = PREFIX + "paused"  # on migctl's ConfigMap: `true` pauses new reconfigurations
RECONFIGURING = PREFIX + "reconfiguring"  # the taint migctl sets on a node while it acts

# The in-place path (docs/in-place.md): a node label opts a node in; the controller writes the target, the node
# agent applies it through NVML and answers in the status (codec: wire/inplace.py).
ACTUATION = PREFIX + "actuation"  # node label: `in-place` opts the node in; absent or `mig-manager`: the stock path
IN_PLACE = "in-place"
MIG_MANAGER = "mig-manager"  # the stock path's name (the label's other value)
DRA = "dra"  # the path of a static-MIG DRA node opted in (the same label value `in-place` opts it in)
DYNAMIC = "dynamic-mig"  # the path of a DynamicMIG node: fences only, no actuation
# DeviceTaintRules migctl owns (resource.k8s.io/v1): labelled with the node they fence and why; their taint keys
FENCE_NODE = PREFIX + "fence-node"  # label: the node whose devices the rule fences
FENCE_PURPOSE = PREFIX + "fence-purpose"  # label: `reshape` (a static-MIG GPU being changed) or `placement`
RESHAPE_TAINT = PREFIX + "reshaping"  # taint key on the devices of a GPU migctl's agent re-cuts (static MIG)
PLACEMENT_TAINT = PREFIX + "placement"  # taint key on a DynamicMIG device first fit must not take (a bad choice)
NVIDIA_DRA_DRIVER = "gpu.nvidia.com"  # NVIDIA's DRA driver (ResourceSlice spec.driver, its DeviceClasses)

IN_PLACE_TARGET = PREFIX + "in-place-target"  # controller -> agent: the per-GPU instances to reach, with a plan id
IN_PLACE_STATUS = PREFIX + "in-place-status"  # agent -> controller: applied, blocked or failed, and what GPUs hold

# The controller's phase annotations on a node it is changing (read strictly by controller/nodestate.py).
PLAN_ID = PREFIX + "plan-id"
PHASE = PREFIX + "phase"
PHASE_SINCE = PREFIX + "phase-since"
TARGET = PREFIX + "target"
ROLLBACK = PREFIX + "rollback"
# ... and its memory of a node between changes (guard rails).
LAST_ATTEMPT = PREFIX + "last-attempt"
LAST_CHANGE = PREFIX + "last-change"
BACKOFF_UNTIL = PREFIX + "backoff-until"
FAILURES = PREFIX + "failures"
LAST_ERROR = PREFIX + "last-error"

# The fallback scheduler's choice of GPU, written on the pod with its Binding (`values.gpu_placement`).
GPU_INDEX = PREFIX + "gpu-index"
GPU_UUID = PREFIX + "gpu-uuid"
VISIBLE_DEVICES = PREFIX + "visible-devices"  # UUID when known, else the index: for NVIDIA_VISIBLE_DEVICES
FALLBACK_SCHEDULER = "migctl"  # the spec.schedulerName of pods the fallback places

# The queue gate (docs/queue-gate.md): the webhook adds this scheduling gate to MIG-profile pods, the controller
# removes it for the pods its plan serves (`spec.schedulingGates`, Kubernetes 1.30+).
QUEUE_GATE = PREFIX + "queue"
HOSTNAME = "kubernetes.io/hostname"  # the label a lifted pod is pinned to its planned node with

WEBHOOK_NAME = "vram." + PREFIX.rstrip("/")  # the webhook's name inside its MutatingWebhookConfiguration

# -- Kubernetes' recommended labels on the objects migctl creates ------------------------------------------------
MANAGED_BY = "app.kubernetes.io/managed-by"
COMPONENT = "app.kubernetes.io/component"
PART_OF = "app.kubernetes.io/part-of"
MIGCTL = "migctl"  # the value of those labels


def is_nvidia(key: str) -> bool:
    """A resource or label of NVIDIA's (GPUs, MIG instances, GFD)."""
    return key.startswith(NVIDIA_PREFIX)


def opts_in_place(labels: Mapping[str, str]) -> bool:
    """The node label's half of the in-place opt-in (the config's selector is the other: `reconcile.paths`)."""
    return labels.get(ACTUATION) == IN_PLACE

"""Agent settings (the `agent:` section of migctl's config file)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from migctl.wire.names import GPUS as INVENTORY_ANNOTATION


class AgentSettings(BaseModel):
    """How often the agent reads NVML, where it publishes, how it backs off when NVML fails."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    interval_seconds: float = Field(30.0, gt=0, description="Re-read NVML (and republish if changed) this often.")
    annotation: str = Field(INVENTORY_ANNOTATION, description="Node annotation that carries the inventory.")
    backoff_initial_seconds: float = Field(5.0, gt=0, description="First retry delay after an NVML failure.")
    backoff_max_seconds: float = Field(300.0, gt=0, description="Longest retry delay while NVML keeps failing.")
    health_port: int | None = Field(
        8081, ge=0, le=65535, description="Serve /healthz and /readyz here (None: no HTTP server)."
    )
    node_name_env: str = Field("NODE_NAME", description="Env var holding the Node name (downward API spec.nodeName).")

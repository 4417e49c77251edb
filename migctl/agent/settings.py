"""Agent settings (the `agent:` section of migctl's config file)."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from migctl.core.inventory import INVENTORY_ANNOTATION
from migctl.errors import InputError, from_validation_error

M = TypeVar("M", bound=BaseModel)


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


def load_section(path: Path | None, section: str, model: type[M]) -> M:
    """One section of migctl's config file (`agent:`, `fallback:`), validated; defaults when absent.

    Read here rather than through `migctl.config.Config` so the agent and the fallback work whichever
    sections the shared config model declares; errors name the file and the field path.
    """
    if path is None:
        return model()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as e:
        raise InputError(str(path), f"cannot read the config: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise InputError(str(path), f"broken YAML: {e}") from e
    if not isinstance(data, dict):
        raise InputError(str(path), f"expected a mapping of settings with a `{section}:` section")
    raw = data.get(section) or {}
    try:
        return model.model_validate(raw)
    except ValidationError as e:
        raise from_validation_error(str(path), e, prefix=section) from e

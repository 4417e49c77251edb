"""migctl's one configuration model (YAML file, `--config`), validated with errors that name the field."""

from __future__ import annotations

from pathlib import Path

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from migctl.core.settings import GpuOperatorSettings, PlannerSettings
from migctl.errors import InputError, from_validation_error


class Config(BaseModel):
    """Everything an operator can set. Unknown keys are errors, so a typo never silently does nothing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    planner: PlannerSettings = Field(default_factory=PlannerSettings)
    gpu_operator: GpuOperatorSettings = Field(default_factory=GpuOperatorSettings)
    profiles_dirs: list[Path] = Field(default_factory=list, description="Extra catalog directories.")


def load_config(path: Path | None) -> Config:
    """The config at `path`, or the defaults when no file is given."""
    if path is None:
        return Config()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as e:
        raise InputError(str(path), f"cannot read the config: {e.strerror}") from e
    except yaml.YAMLError as e:
        raise InputError(str(path), f"broken YAML: {e}") from e
    if not isinstance(data, dict):
        raise InputError(str(path), "expected a mapping of settings (planner:, gpu_operator:, profiles_dirs:)")
    try:
        return Config.model_validate(data)
    except ValidationError as e:
        raise from_validation_error(str(path), e) from e

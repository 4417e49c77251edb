"""Fallback settings (the `fallback:` section of migctl's config file)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from migctl.core.text.quantity import parse_quantity
from migctl.wire import names


class FallbackSettings(BaseModel):
    """The VRAM extended resource on GPUs without MIG, and the scheduler that places pods on one GPU each."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    resource: str = Field(names.VRAM, description="Extended resource advertised on nodes and requested by pods.")
    unit: str = Field(
        "1",
        description="Bytes one unit of the resource stands for: `1` (pods write `8Gi`), or e.g. `512Mi` for clusters "
        "that count units (pods then write `16` for 8 GiB).",
    )
    reserve_mib_per_gpu: int = Field(0, ge=0, description="MiB of each GPU kept out of the advertised capacity.")
    scheduler_name: str = Field(
        names.FALLBACK_SCHEDULER, description="Pods with this spec.schedulerName are placed by migctl."
    )
    interval_seconds: float = Field(
        10.0, gt=0, description="Full resync (capacity and pending pods) at least this often."
    )
    metrics_port: int | None = Field(
        8080, ge=0, le=65535, description="Port of /metrics, /healthz, /readyz (0: any free port; null: off)."
    )

    @field_validator("unit")
    @classmethod
    def _whole_bytes(cls, v: str) -> str:
        value = parse_quantity(v)  # ValueError says what a quantity looks like
        if value <= 0 or value != value.to_integral_value():
            raise ValueError(f"{v!r} must be a positive whole number of bytes (e.g. 1, 512Mi, 1Gi)")
        return v

    @property
    def unit_bytes(self) -> int:
        return int(parse_quantity(self.unit))

"""The file's device table: what each GPU a kernel ran on is (for peak-rate metrics)."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(slots=True)
class DeviceInfo:
    """One entry of the file's device table, in the units Triton's Proton writes."""

    arch: str
    """Compute capability without the dot, e.g. '90'."""
    num_sms: int
    clock_rate: int
    """SM clock in kHz."""
    memory_clock_rate: int
    """Memory clock in kHz."""
    bus_width: int
    """Memory bus width in bits."""

    def to_json(self) -> dict:
        return asdict(self)


def table_json(devices: dict[int, DeviceInfo]) -> dict[str, dict]:
    """{ordinal: DeviceInfo} -> the file's {"0": {...}} (before the writer keeps the used ones)."""
    return {str(k): v.to_json() for k, v in devices.items()}

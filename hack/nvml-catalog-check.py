"""Compare the profile catalog (profiles/) with what NVML reports on this machine's GPUs. Read-only.

Run on a GPU node (or any machine with the NVIDIA driver): `python hack/nvml-catalog-check.py [--json FILE]`.
It calls only NVML queries (`nvmlDevice*Get*`), never a create, destroy, reset or mode change, so it is safe on a
production node. For each GPU it prints the model the catalog matches (by NVML name and PCI device id), total
memory against the catalog's, and, where the driver answers the MIG profile queries (some drivers answer them
only with MIG mode enabled), each profile's id, slices, memory, instance count and placements against the
catalog's. It also runs migctl's own agent reader (`NvmlReader`) to show the inventory the agent would publish.

Exit code: 0 when every field that could be compared agrees, 1 on a mismatch, 2 when NVML itself fails.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
from typing import Any

import pynvml

from migctl.adapters.nvml import NvmlError, NvmlReader
from migctl.core.hardware.catalog import GpuModel, load_catalog

MIB = 2**20


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _query(fn: Any, *args: Any) -> tuple[Any, str | None]:
    """Run one NVML query; a failure becomes its NVML text instead of an exception."""
    try:
        return fn(*args), None
    except pynvml.NVMLError as e:
        return None, str(e)


def _placements(handle: Any, profile_id: int) -> tuple[list[list[int]] | None, str | None]:
    count = ctypes.c_uint(0)
    _, err = _query(pynvml.nvmlDeviceGetGpuInstancePossiblePlacements, handle, profile_id, None, ctypes.byref(count))
    if err:
        return None, err
    array = (pynvml.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
    _, err = _query(pynvml.nvmlDeviceGetGpuInstancePossiblePlacements, handle, profile_id, array, ctypes.byref(count))
    if err:
        return None, err
    return sorted([int(array[i].start), int(array[i].size)] for i in range(count.value)), None


def _live_profiles(handle: Any) -> tuple[dict[int, dict[str, Any]], dict[int, str]]:
    """NVML profile index -> what the driver says about it; index -> error text where it would not say."""
    found: dict[int, dict[str, Any]] = {}
    errors: dict[int, str] = {}
    for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        info, err = _query(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, handle, index)
        if err:
            errors[index] = err
            continue
        if int(info.memorySizeMB) <= 0:
            continue
        placements, perr = _placements(handle, int(info.id))
        found[index] = {
            "name": _text(info.name),
            "profile_id": int(info.id),
            "slices": int(info.sliceCount),
            "memory_mib": int(info.memorySizeMB),
            "max_instances": int(info.instanceCount),
            "sms": int(info.multiprocessorCount),
            "placements": placements,
            "placements_error": perr,
        }
    return found, errors


def _compare(model: GpuModel, total_mib: int, live: dict[int, dict[str, Any]]) -> list[str]:
    """Mismatches between the catalog model and the live GPU, one line each."""
    problems = []
    if total_mib != model.memory_mib:
        problems.append(f"total memory: NVML {total_mib} MiB, catalog {model.id} {model.memory_mib} MiB")
    spec = {p.profile_id: p for p in model.profiles if p.profile_id is not None}
    for got in live.values():
        want = spec.get(got["profile_id"])
        label = f"profile id {got['profile_id']} ({got['name']})"
        if want is None:
            problems.append(f"{label}: not in catalog {model.id}")
            continue
        pairs: list[tuple[str, object, object]] = [
            ("memory_mib", want.memory_mib, got["memory_mib"]),
            ("compute slices", want.compute_slices, got["slices"]),
            ("max_instances", want.max_instances, got["max_instances"]),
        ]
        if got["placements"] is not None:
            pairs.append(("placements", [list(p) for p in want.placements], got["placements"]))
        problems += [f"{label} {field}: NVML {g}, catalog {w}" for field, w, g in pairs if w != g]
        if not got["name"].endswith(want.name):
            problems.append(f"{label} name: NVML {got['name']!r}, catalog {want.name!r}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", help="Also write the full report here.")
    args = parser.parse_args()
    catalog = load_catalog()
    report: dict[str, Any] = {"gpus": []}
    try:
        inventory = NvmlReader().read()
    except NvmlError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    report["agent_inventory"] = inventory.model_dump(mode="json")
    pynvml.nvmlInit()
    mismatches = 0
    try:
        report["driver"] = _text(pynvml.nvmlSystemGetDriverVersion())
        report["nvml"] = _text(pynvml.nvmlSystemGetNVMLVersion())
        for index in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = _text(pynvml.nvmlDeviceGetName(h))
            pci = f"0x{pynvml.nvmlDeviceGetPciInfo(h).pciDeviceId:08X}"
            total_mib = int(pynvml.nvmlDeviceGetMemoryInfo(h).total) // MIB
            modes, mode_err = _query(pynvml.nvmlDeviceGetMigMode, h)
            by_name = catalog.match_product(name)
            by_pci = catalog.match_pci(pci)
            live, errors = _live_profiles(h)
            gpu: dict[str, Any] = {
                "index": index,
                "name": name,
                "pci_device_id": pci,
                "memory_mib": total_mib,
                "mig_mode": None if modes is None else {"current": int(modes[0]), "pending": int(modes[1])},
                "mig_mode_error": mode_err,
                "catalog_by_name": by_name.id if by_name else None,
                "catalog_by_pci": by_pci.id if by_pci else None,
                "profiles": live,
                "profile_query_errors": sorted(set(errors.values())),
            }
            model = by_name or by_pci
            problems = [] if model is None else _compare(model, total_mib, live)
            if by_name and by_pci and by_name.id != by_pci.id:
                problems.append(f"name matches {by_name.id}, PCI id matches {by_pci.id}")
            if model is None and modes is not None:
                problems.append(f"MIG-capable GPU {name!r} ({pci}) matches no catalog model")
            gpu["mismatches"] = problems
            mismatches += len(problems)
            report["gpus"].append(gpu)
            compared = (
                f"{len(live)} MIG profiles compared"
                if live
                else "MIG profiles not readable: " + ("; ".join(gpu["profile_query_errors"]) or "none reported")
            )
            print(f"GPU {index}: {name} {pci} {total_mib} MiB -> catalog {model.id if model else None}; {compared}")
            for line in problems:
                print(f"  MISMATCH {line}")
    finally:
        pynvml.nvmlShutdown()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=2, sort_keys=True)
    print(json.dumps(report, indent=2, sort_keys=True))
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

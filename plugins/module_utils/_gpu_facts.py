# -*- coding: utf-8 -*-
# Copyright: (c) 2026, llmserve maintainers
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Normalise NVIDIA GPU facts from NVML or from ``nvidia-smi --query-gpu`` CSV.

Pure functions: the NVML binding is passed in, so tests can hand in a fake and the
module stays glue. Both sources produce the same per-GPU dict shape.
"""

from __future__ import annotations

import re

# Order matters: it is the column order of the CSV that nvidia-smi prints.
QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "memory.total",
    "memory.used",
    "driver_version",
    "compute_cap",
    "mig.mode.current",
    "persistence_mode",
    "power.limit",
    "ecc.mode.current",
    "clocks.max.sm",
)

_CUDA_BANNER_RE = re.compile(r"CUDA Version:\s*([0-9]+\.[0-9]+)")
_MIB = 1024 * 1024


class GpuFactsError(ValueError):
    """Raised when nvidia-smi or NVML output cannot be understood."""


def query_gpu_command(nvidia_smi):
    """Return the argv that prints one CSV line per GPU in QUERY_FIELDS order."""
    return [nvidia_smi, "--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader,nounits"]


def _none_if_na(value):
    value = value.strip()
    if value in ("", "N/A", "[N/A]", "[Not Supported]", "Not Supported"):
        return None
    return value


def _mode(value):
    """Map Enabled/Disabled/N/A (any case) to enabled/disabled/n/a."""
    value = _none_if_na(value) if isinstance(value, str) else value
    if value is None:
        return "n/a"
    lowered = str(value).lower()
    if lowered in ("enabled", "1", "true"):
        return "enabled"
    if lowered in ("disabled", "0", "false"):
        return "disabled"
    raise GpuFactsError("unexpected mode value %r (want Enabled, Disabled or N/A)" % (value,))


def _number(value, field, cast):
    value = _none_if_na(value)
    if value is None:
        return None
    try:
        return cast(value)
    except ValueError:
        raise GpuFactsError("field %s: %r is not a number" % (field, value))


def parse_query_csv(text):
    """Parse ``--format=csv,noheader,nounits`` output into GPU dicts.

    Returns ``(driver_version, gpus)``. An empty text means no GPU; a line with the
    wrong number of fields is an error, since silently dropping a GPU would mislead
    every later capacity check.
    """
    gpus = []
    driver_versions = set()
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(QUERY_FIELDS):
            raise GpuFactsError(
                "nvidia-smi --query-gpu line %d has %d fields, expected %d (%s): %r"
                % (lineno, len(cells), len(QUERY_FIELDS), ",".join(QUERY_FIELDS), line)
            )
        row = dict(zip(QUERY_FIELDS, cells))
        driver_versions.add(row["driver_version"])
        gpus.append({
            "index": _number(row["index"], "index", int),
            "name": row["name"],
            "uuid": row["uuid"],
            "pci_bus_id": row["pci.bus_id"],
            "memory_total_mib": _number(row["memory.total"], "memory.total", int),
            "memory_used_mib": _number(row["memory.used"], "memory.used", int),
            "compute_capability": _none_if_na(row["compute_cap"]),
            "mig_mode": _mode(row["mig.mode.current"]),
            "persistence_mode": _mode(row["persistence_mode"]) == "enabled",
            "power_limit_w": _number(row["power.limit"], "power.limit", float),
            "ecc_mode": _mode(row["ecc.mode.current"]),
            "max_sm_clock_mhz": _number(row["clocks.max.sm"], "clocks.max.sm", int),
        })
    if len(driver_versions) > 1:
        raise GpuFactsError("GPUs report different driver versions: %s" % ", ".join(sorted(driver_versions)))
    return (driver_versions.pop() if driver_versions else None), gpus


def parse_cuda_version(banner):
    """Return the CUDA driver API version from the plain ``nvidia-smi`` banner, or None."""
    match = _CUDA_BANNER_RE.search(banner or "")
    return match.group(1) if match else None


def cuda_version_from_int(value):
    """NVML encodes CUDA 13.0 as 13000: major*1000 + minor*10."""
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _nvml_optional(call, nvml, *args):
    """Call an NVML getter, mapping 'not supported on this GPU' to None."""
    try:
        return call(*args)
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) == getattr(nvml, "NVML_ERROR_NOT_SUPPORTED", object()):
            return None
        raise


def collect_nvml(nvml):
    """Read driver and per-GPU facts through an initialised NVML binding (pynvml)."""
    driver = _text(nvml.nvmlSystemGetDriverVersion())
    cuda = cuda_version_from_int(nvml.nvmlSystemGetCudaDriverVersion())
    gpus = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        memory = nvml.nvmlDeviceGetMemoryInfo(handle)
        mig = _nvml_optional(nvml.nvmlDeviceGetMigMode, nvml, handle)
        ecc = _nvml_optional(nvml.nvmlDeviceGetEccMode, nvml, handle)
        power_mw = _nvml_optional(nvml.nvmlDeviceGetPowerManagementLimit, nvml, handle)
        persistence = _nvml_optional(nvml.nvmlDeviceGetPersistenceMode, nvml, handle)
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        max_sm = _nvml_optional(nvml.nvmlDeviceGetMaxClockInfo, nvml, handle, nvml.NVML_CLOCK_SM)
        gpus.append({
            "index": index,
            "name": _text(nvml.nvmlDeviceGetName(handle)),
            "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
            "pci_bus_id": _text(nvml.nvmlDeviceGetPciInfo(handle).busId),
            "memory_total_mib": int(memory.total // _MIB),
            "memory_used_mib": int(memory.used // _MIB),
            "compute_capability": "%d.%d" % (major, minor),
            "mig_mode": "n/a" if mig is None else _mode(str(mig[0])),
            "persistence_mode": bool(persistence),
            "power_limit_w": None if power_mw is None else power_mw / 1000.0,
            "ecc_mode": "n/a" if ecc is None else _mode(str(ecc[0])),
            "max_sm_clock_mhz": max_sm,
        })
    return driver, cuda, gpus


def summarize(source, driver_version, cuda_driver_version, gpus, reason=None):
    """Build the ``vllm_cluster_gpus`` fact: per-GPU list plus the roll-ups preflight checks use."""
    return {
        "source": source,
        "gpu_count": len(gpus),
        "driver_version": driver_version,
        "cuda_driver_version": cuda_driver_version,
        "skus": sorted({gpu["name"] for gpu in gpus}),
        "memory_total_mib": sum(gpu["memory_total_mib"] or 0 for gpu in gpus),
        "mig_enabled": any(gpu["mig_mode"] == "enabled" for gpu in gpus),
        "gpus": sorted(gpus, key=lambda gpu: gpu["index"]),
        "reason": reason,
    }

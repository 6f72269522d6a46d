# Copyright: sparkfleet contributors
# Apache License 2.0
"""Pure parsers and the host class (spark, aarch64-other, not-spark) behind spark_preflight.

Nothing here runs a command or touches a file: the module collects raw text
and these functions turn it into facts, so every rule is unit-tested on
recorded outputs at native speed.
"""

from __future__ import annotations

import re

# What a DGX Spark is, in the terms nvidia-smi and uname use.
SPARK_ARCH = "aarch64"
SPARK_GPU_NAME = "GB10"
SPARK_COMPUTE_CAP = (12, 1)
SPARK_CUDA_MAJOR = 13

CLASS_SPARK = "spark"
CLASS_AARCH64_OTHER = "aarch64-other"
CLASS_NOT_SPARK = "not-spark"

# nvidia-smi prints these where NVML has no value (the Spark's unified memory
# makes several fields "Not Supported").
_NA_VALUES = frozenset({"[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]", ""})
_CUDA_BANNER = re.compile(r"CUDA Version:\s*(\d+)\.(\d+)")
_CAP = re.compile(r"^(\d+)\.(\d+)$")

QUERY_FIELDS = ("name", "compute_cap", "driver_version")
QUERY_ARGS = ("--query-gpu=" + ",".join(QUERY_FIELDS), "--format=csv,noheader")

# The GPU's health, read in the same run (the watch's metrics): the active clock-event reasons (a bitmask, nvml.h's
# nvmlClocksEventReason*, and the four that slow a GPU down by name), the GPU's and its memory's temperature.
# testbed/doubles/nvidia-smi/recordings/h100/health.csv is a real H100's answer to exactly these arguments.
HEALTH_FIELDS = ("clocks_event_reasons.active", "clocks_event_reasons.hw_thermal_slowdown",
                 "clocks_event_reasons.sw_thermal_slowdown", "clocks_event_reasons.hw_power_brake_slowdown",
                 "clocks_event_reasons.sw_power_cap", "temperature.gpu", "temperature.memory")
HEALTH_ARGS = ("--query-gpu=" + ",".join(HEALTH_FIELDS), "--format=csv,noheader,nounits")
# nvml.h's nvmlClocksEventReason* bits, by nvidia-smi's field names (`nvidia-smi --help-query-gpu`).
CLOCK_EVENT_REASONS = (
    (0x1, "gpu_idle"), (0x2, "applications_clocks_setting"), (0x4, "sw_power_cap"), (0x8, "hw_slowdown"),
    (0x10, "sync_boost"), (0x20, "sw_thermal_slowdown"), (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"), (0x100, "display_clock_setting"),
)
# The reasons that mean the GPU runs slower than asked because it is too hot or its power is braked (the alert
# SparkThermalSlowdown): not idle, not the owner's own caps.
SLOWDOWN_REASONS = ("hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")


def parse_key_value_file(text: str) -> dict[str, str]:
    """Parse os-release style KEY=value lines (used by /etc/os-release and /etc/dgx-release).

    Quotes around values are removed; comments, blank and malformed lines are ignored.
    """
    result: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _unused, value = line.partition("=")
        key = key.strip()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        result[key] = value
    return result


def parse_os_release(text: str) -> dict[str, str | None]:
    """The distribution facts later roles key on (ID, ID_LIKE, VERSION_ID, codename)."""
    kv = parse_key_value_file(text)
    return {
        "id": kv.get("ID"),
        "id_like": kv.get("ID_LIKE"),
        "version_id": kv.get("VERSION_ID"),
        "codename": kv.get("VERSION_CODENAME") or kv.get("UBUNTU_CODENAME"),
        "pretty_name": kv.get("PRETTY_NAME"),
    }


def parse_dgx_release(text: str) -> dict[str, str | None]:
    """/etc/dgx-release: DGX_NAME, DGX_SWBUILD_VERSION (the DGX OS version) and the rest as-is."""
    kv = parse_key_value_file(text)
    return {
        "name": kv.get("DGX_NAME"),
        "swbuild_version": kv.get("DGX_SWBUILD_VERSION"),
        "ota_version": kv.get("DGX_OTA_VERSION"),
        "raw": kv,
    }


def _na(value: str) -> str | None:
    value = value.strip()
    return None if value.lower() in _NA_VALUES else value


def parse_compute_cap(value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    match = _CAP.match(value.strip())
    return (int(match.group(1)), int(match.group(2))) if match else None


def parse_gpu_query(stdout: str) -> tuple[list[dict], list[str]]:
    """Parse `nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader`.

    Returns (gpus, problems). A field nvidia-smi reports as [N/A] or
    [Not Supported] becomes None; a line that is not three fields is reported
    in problems, never guessed at.
    """
    gpus: list[dict] = []
    problems: list[str] = []
    for lineno, raw in enumerate(stdout.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        # A GPU name could in principle hold a comma; the last two fields never do.
        parts = line.rsplit(",", len(QUERY_FIELDS) - 1)
        if len(parts) != len(QUERY_FIELDS):
            problems.append(f"line {lineno}: expected {len(QUERY_FIELDS)} comma-separated fields "
                            f"({', '.join(QUERY_FIELDS)}), got {line!r}")
            continue
        name, cap_text, driver = (_na(p) for p in parts)
        cap = parse_compute_cap(cap_text)
        if cap_text is not None and cap is None:
            problems.append(f"line {lineno}: compute capability {cap_text!r} is not MAJOR.MINOR")
            continue
        gpus.append({
            "index": len(gpus),
            "name": name,
            "compute_cap": f"{cap[0]}.{cap[1]}" if cap else None,
            "driver_version": driver,
        })
    return gpus, problems


def _number(value: str | None) -> int | None:
    try:
        return int(float(value)) if value is not None else None
    except ValueError:
        return None


def parse_health(stdout: str) -> tuple[list[dict], list[str]]:
    """Parse nvidia-smi's answer to HEALTH_ARGS: per GPU its active clock-event reasons (named, from the bitmask
    and the fields that name them), the mask as nvidia-smi printed it, and the GPU's and memory's temperatures
    (degrees C; None where nvidia-smi has no value). A line that is not HEALTH_FIELDS' fields, or a mask that is
    not hexadecimal, is a problem, never guessed at."""
    gpus: list[dict] = []
    problems: list[str] = []
    for lineno, raw in enumerate(stdout.splitlines(), start=1):
        if not raw.strip():
            continue
        parts = [_na(p.strip()) for p in raw.split(",")]
        if len(parts) != len(HEALTH_FIELDS):
            problems.append(f"line {lineno}: expected {len(HEALTH_FIELDS)} comma-separated fields "
                            f"({', '.join(HEALTH_FIELDS)}), got {raw.strip()!r}")
            continue
        mask_text, *named, gpu_temp, memory_temp = parts
        try:
            mask = int(mask_text, 16) if mask_text is not None else None
        except ValueError:
            problems.append(f"line {lineno}: clocks_event_reasons.active {mask_text!r} is not a hexadecimal bitmask")
            continue
        reasons = {name for bit, name in CLOCK_EVENT_REASONS if mask is not None and mask & bit}
        reasons |= {HEALTH_FIELDS[1 + i].split(".", 1)[1] for i, value in enumerate(named)
                    if (value or "").lower() == "active"}
        gpus.append({"index": len(gpus), "clock_event_mask": mask_text,
                     "clock_event_reasons": [name for _bit, name in CLOCK_EVENT_REASONS if name in reasons],
                     "temperature_c": _number(gpu_temp), "memory_temperature_c": _number(memory_temp)})
    return gpus, problems


def parse_cuda_banner(stdout: str) -> str | None:
    """The CUDA version the driver supports, from the header of plain `nvidia-smi`."""
    match = _CUDA_BANNER.search(stdout)
    return f"{match.group(1)}.{match.group(2)}" if match else None


def cuda_major(version: str | None) -> int | None:
    if not version:
        return None
    head = version.split(".", 1)[0]
    return int(head) if head.isdigit() else None


def classify(arch: str, gpus: list[dict], cuda_version: str | None) -> tuple[str, list[str]]:
    """Classify a host as spark, aarch64-other or not-spark.

    A Spark is aarch64 with a GB10 GPU (compute capability 12.1) and a driver
    that supports CUDA 13. Returns the class and the reasons a host falls
    short (empty for a Spark), each naming what was found and what a Spark has.
    """
    reasons: list[str] = []
    if arch != SPARK_ARCH:
        reasons.append(f"architecture is {arch}, a DGX Spark is {SPARK_ARCH}")
    want_cap = "{}.{}".format(*SPARK_COMPUTE_CAP)
    if not gpus:
        reasons.append("no NVIDIA GPU reported by nvidia-smi, a DGX Spark has one GB10")
    elif not any(_is_gb10(gpu) for gpu in gpus):
        found = "; ".join(f"{g['name'] or 'unknown'} (compute capability {g['compute_cap'] or 'unknown'})"
                          for g in gpus)
        reasons.append(f"GPU is {found}, a DGX Spark has an NVIDIA GB10 (compute capability {want_cap})")
    major = cuda_major(cuda_version)
    if gpus and major != SPARK_CUDA_MAJOR:
        found = f"CUDA {cuda_version}" if cuda_version else "no CUDA version"
        reasons.append(f"the driver reports {found}, a DGX Spark's driver supports CUDA {SPARK_CUDA_MAJOR}")
    if not reasons:
        return CLASS_SPARK, []
    if arch == SPARK_ARCH:
        return CLASS_AARCH64_OTHER, reasons
    return CLASS_NOT_SPARK, reasons


def _is_gb10(gpu: dict) -> bool:
    """GB10 by compute capability 12.1; by name only where NVML gave no capability."""
    cap = parse_compute_cap(gpu.get("compute_cap"))
    if cap is not None:
        return cap == SPARK_COMPUTE_CAP
    return SPARK_GPU_NAME in (gpu.get("name") or "")


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo values in bytes (MemTotal, MemAvailable, ...)."""
    result: dict[str, int] = {}
    for line in text.splitlines():
        match = re.match(r"^(\w+):\s+(\d+)(?:\s+kB)?\s*$", line)
        if match:
            result[match.group(1)] = int(match.group(2)) * 1024
    return result

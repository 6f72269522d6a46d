# Copyright: sparkfleet contributors
# Apache License 2.0
"""sparkfleet doctor: the paste-able report of one host (pure: redaction and rendering).

The report is built from an allowlist of fields (nothing is copied whole
from `docker info` or a config file), so no registry credential, proxy URL
or token can reach it; hostnames are replaced unless the user keeps them.
"""

from __future__ import annotations

import re
from typing import Any


def redact(value: Any, names: list[str], label: str) -> Any:
    """`value` with every occurrence of each name (whole words, longest first) replaced by `label`."""
    names = sorted({n for n in names if n and len(n) > 1}, key=len, reverse=True)
    if not names:
        return value
    pattern = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])")

    def walk(item: Any) -> Any:
        if isinstance(item, str):
            return pattern.sub(label, item)
        if isinstance(item, list):
            return [walk(i) for i in item]
        if isinstance(item, dict):
            return {walk(k) if isinstance(k, str) else k: walk(v) for k, v in item.items()}
        return item

    return walk(value)


def _row(label: str, value: Any) -> str:
    if value is None or value == "" or value == []:
        value = "-"
    if isinstance(value, list):
        value = ", ".join(str(v) for v in value)
    return f"| {label} | {str(value).replace('|', '/')} |"


def markdown(report: dict) -> str:
    """One host's report as Markdown: a table of facts, then the verification and what to do."""
    system, gpu, docker = report["system"], report["gpu"], report["docker"]
    out = [f"## sparkfleet doctor: {report['host']}", "", "| what | found |", "|---|---|"]
    out += [
        _row("platform", f"{report['platform']}{' (simulated)' if report['simulated'] else ''}"),
        _row("DGX OS", system.get("dgx_os")),
        _row("OS", system.get("os")),
        _row("kernel", system.get("kernel")),
        _row("architecture", system.get("arch")),
        _row("GPU", [f"{g.get('name')} (compute {g.get('compute_cap')})" for g in gpu.get("devices", [])]),
        _row("driver", gpu.get("driver_version")),
        _row("CUDA (driver)", gpu.get("cuda_version")),
        _row("Docker", docker.get("server_version") or docker.get("error")),
        _row("runtimes", docker.get("runtimes")),
        _row("default runtime", docker.get("default_runtime")),
        _row("CDI", docker.get("cdi")),
        _row("toolkit packages", [f"{p['name']} {p['version'] or 'not installed'}{' (held)' if p['held'] else ''}"
                                  for p in report["toolkit"]]),
    ]
    out += [_row(f"image {i['name']}", f"{i['ref']} {'present' if i['present'] else 'MISSING'}")
            for i in report["images"]] or [_row("images", "none pinned on this host")]
    venv = report.get("venv") or {}
    out.append(_row("venv", f"{venv['path']} ({venv.get('matrix')}, fingerprint {venv.get('fingerprint')})"
                    if venv.get("path") else "none active"))
    verification = report["verification"]
    out += ["", f"Verification: **{verification.get('verdict') or 'never run'}**"
            + (f" (recorded {verification['written_at']})" if verification.get("written_at") else ""), ""]
    out += [f"- {line}" for line in verification.get("lines", [])]
    if report["abi_findings"]:
        out += ["", "ABI findings:", ""] + [f"- {f}" for f in report["abi_findings"]]
    if report["problems"]:
        out += ["", "Could not read:", ""] + [f"- {p}" for p in report["problems"]]
    return "\n".join(out) + "\n"

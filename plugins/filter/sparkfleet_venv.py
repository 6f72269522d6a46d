# Copyright: sparkfleet contributors
# Apache License 2.0
"""Filters for spark_venv: whether a new venv passed its verification, and what is active after it.
(ansible-doc reads each filter's documentation from plugins/filter/<filter>.yml.)
"""

from __future__ import annotations

import os

BUILT = ("build", "reuse")  # spark_venv actions after which a venv waits for its verification


def spark_venv_verdict(build: dict, gpu: dict | None, abi: dict | None, simulated: bool = False) -> dict:
    """Whether the venv spark_venv built (or found built) passed: the GPU line and the ABI scan must both be ok.

    Returns C(passed), the C(verification) recorded in the venv's marker, and the C(failure) message that
    names both checks and what stays active.
    """
    gpu, abi = gpu or {}, abi or {}
    gpu_line = f"{gpu.get('verdict', 'error')}: {gpu.get('line') or gpu.get('msg', 'no line')}"
    if gpu.get("hypothesis"):
        gpu_line += f" ({gpu['hypothesis']}: {gpu.get('evidence')})"
    abi_text = f"{abi.get('verdict', 'error')} {'; '.join(abi.get('findings', []))}{abi.get('msg', '')}".rstrip()
    active = build.get("active")
    failure = (f"the new venv {build.get('path')} failed verification (gpu {gpu_line}; abi {abi_text}); "
               + (f"the active venv {active['path']} is untouched" if active else "no venv is active"))
    return {
        "passed": gpu.get("verdict") == "ok" and abi.get("verdict") == "ok",
        "verification": {
            "line": gpu.get("line"), "gpu": gpu.get("verdict", "error"), "abi": abi.get("verdict", "error"),
            "abi_findings": abi.get("findings", []), "torch": gpu.get("torch_version"), "simulated": bool(simulated),
            "verified_by": "stand-in torch on a simulated host (test bed)" if simulated else "GPU probe and ABI scan",
            # the GPU frameworks the probe did not exercise, and ABI evidence that is not a finding
            "notes": [*gpu.get("notes", []), *abi.get("notes", [])],
        },
        "failure": failure,
    }


def spark_venv_active(build: dict, switch: dict | None, verdict: dict, matrix_file: str) -> dict:
    """The venv active on the host after this run, with the matrix file, its staleness and whether a new one failed."""
    active = (switch or {}).get("active") or build.get("active") or {}
    return {**active, "matrix_file": os.path.basename(matrix_file), "staleness": build.get("staleness"),
            "new_venv_failed": build.get("action") in BUILT and not verdict.get("passed")}


class FilterModule:
    def filters(self):
        return {"spark_venv_verdict": spark_venv_verdict, "spark_venv_active": spark_venv_active}

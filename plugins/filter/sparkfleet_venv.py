# Copyright: sparkfleet contributors
# Apache License 2.0
"""Filters for spark_venv: whether a new venv passed its verification, and what is active after it.
(ansible-doc reads each filter's documentation from plugins/filter/<filter>.yml.)
"""

from __future__ import annotations

import os

from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _verification as verification

BUILT = ("build", "reuse")  # spark_venv actions after which a venv waits for its verification


def spark_venv_verdict(build: dict, gpu: dict | None, abi: dict | None, simulated: bool = False) -> dict:
    """Whether the venv spark_venv built (or found built) passed (module_utils/verification/_verification.py's
    venv_verdict)."""
    return verification.venv_verdict(build, gpu, abi, simulated)


def spark_venv_active(build: dict, switch: dict | None, verdict: dict, matrix_file: str, read: bool = False) -> dict:
    """The venv active on the host after this run, with the matrix file, its staleness and whether a new one failed.
    `read` (sparkfleet verify: `build` is spark_venv's answer in check mode): with C(drift), how the active venv
    differs from the matrix, and the command that moves it."""
    active = (switch or {}).get("active") or build.get("active") or {}
    out = {**active, "matrix_file": os.path.basename(matrix_file), "staleness": build.get("staleness"),
           "new_venv_failed": build.get("action") in BUILT and not verdict.get("passed")}
    if read and build.get("contents_drift"):  # this matrix's venv, and what is installed in it differs
        out["new_venv_failed"] = False
        out["drift"] = [f"venv {active.get('path')}: {line} - `sparkfleet provision` builds the matrix's venv anew "
                        "beside it, verifies it and makes it active (this one is kept)"
                        for line in build["contents_drift"]]
        return out
    if read:
        out["new_venv_failed"] = False
        out["drift"] = [] if build.get("action") not in BUILT else [
            f"venv: the active venv {active['path']} is not built from {os.path.basename(matrix_file)} (its "
            f"fingerprint is {str(active.get('fingerprint'))[:12]}, the matrix's {str(build.get('fingerprint'))[:12]})"
            if active.get("path") else f"venv: no venv built from {os.path.basename(matrix_file)} is active"]
        if out["drift"]:
            out["drift"][0] += " - `sparkfleet provision` builds it, verifies it and makes it active"
    return out


class FilterModule:
    def filters(self):
        return {"spark_venv_verdict": spark_venv_verdict, "spark_venv_active": spark_venv_active}

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


def spark_venv_active(build: dict, switch: dict | None, verdict: dict, matrix_file: str) -> dict:
    """The venv active on the host after this run, with the matrix file, its staleness and whether a new one failed."""
    active = (switch or {}).get("active") or build.get("active") or {}
    return {**active, "matrix_file": os.path.basename(matrix_file), "staleness": build.get("staleness"),
            "new_venv_failed": build.get("action") in BUILT and not verdict.get("passed")}


class FilterModule:
    def filters(self):
        return {"spark_venv_verdict": spark_venv_verdict, "spark_venv_active": spark_venv_active}

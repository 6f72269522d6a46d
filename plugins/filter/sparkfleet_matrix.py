# Copyright: sparkfleet contributors
# Apache License 2.0
"""Filters over the stack matrix: the hash lock its check resolves to, the mirrors a venv would be built from.
(ansible-doc reads each filter's documentation from plugins/filter/<filter>.yml.)
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkfleet.spark.plugins.module_utils._stack_matrix import (
    MatrixError,
    lock_from_sequence,
    mirrors,
)


def spark_matrix_lock(results: list[dict], matrix: dict) -> dict:
    """The hash lock from the matrix check's registered step results (playbooks/matrix_check.yml)."""
    sequence = [step for result in results or [] for step in result.get("sequence") or []]
    try:
        return lock_from_sequence(matrix, sequence)
    except MatrixError as exc:
        raise AnsibleFilterError(str(exc)) from None


def spark_matrix_mirrors(matrix: dict, overrides: dict) -> list[str]:
    """The mirrors off the host's loopback the matrix's steps would be installed from ('upstream -> mirror'):
    a venv built from any of them needs the hash lock (spark_venv)."""
    if not isinstance(matrix, dict):
        raise AnsibleFilterError(f"spark_matrix_mirrors: the matrix is a {type(matrix).__name__}, expected a mapping")
    return mirrors(matrix, overrides if isinstance(overrides, dict) else {})


class FilterModule:
    def filters(self):
        return {"spark_matrix_lock": spark_matrix_lock, "spark_matrix_mirrors": spark_matrix_mirrors}

# Copyright: sparkfleet contributors
# Apache License 2.0
"""Filters over the stack matrix's check: the hash lock it resolves to.
(ansible-doc reads each filter's documentation from plugins/filter/<filter>.yml.)
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkfleet.spark.plugins.module_utils._stack_matrix import MatrixError, lock_from_sequence


def spark_matrix_lock(results: list[dict], matrix: dict) -> dict:
    """The hash lock from the matrix check's registered step results (playbooks/matrix_check.yml)."""
    sequence = [step for result in results or [] for step in result.get("sequence") or []]
    try:
        return lock_from_sequence(matrix, sequence)
    except MatrixError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule:
    def filters(self):
        return {"spark_matrix_lock": spark_matrix_lock}

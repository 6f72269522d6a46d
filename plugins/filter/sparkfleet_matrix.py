# Copyright: sparkfleet contributors
# Apache License 2.0
"""Filters over the stack matrix: the hash lock its check resolves to, the mirrors a venv would be built from, and
a proposal's proof (its verdict, and the matrix written with its evidence).
(ansible-doc reads each filter's documentation from plugins/filter/<filter>.yml.)
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._hash_lock import lock_from_sequence, render
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._indexes import mirrors
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._matrix_proposal import blame, evidence, judge
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import MatrixError


def spark_matrix_lock(results: list[dict], matrix: dict, file_from: str | None = None) -> dict | str:
    """The hash lock from the matrix check's registered step results (playbooks/matrix_check.yml); with `file_from`
    (the matrix file's name), the text of its file, its text inert (Ansible loads the file from group_vars,
    and it holds what an index said)."""
    sequence = [step for result in results or [] for step in result.get("sequence") or []]
    try:
        lock = lock_from_sequence(matrix, sequence)
    except MatrixError as exc:
        raise AnsibleFilterError(str(exc)) from None
    return lock if file_from is None else render(lock, str(file_from))


def spark_matrix_mirrors(matrix: dict, index_mirrors: dict) -> list[str]:
    """The mirrors off the host's loopback the matrix's steps would be installed from ('upstream -> mirror'):
    a venv built from any of them needs the hash lock (spark_venv)."""
    if not isinstance(matrix, dict):
        raise AnsibleFilterError(f"spark_matrix_mirrors: the matrix is a {type(matrix).__name__}, expected a mapping")
    return mirrors(matrix, index_mirrors if isinstance(index_mirrors, dict) else {})


def spark_matrix_blame(rows: list, text: str, step: str | None = None) -> list[str]:
    """The moved or given pins a failure's text names (else the step's, else all moved)."""
    return blame(rows or [], str(text or ""), step)


def spark_matrix_proof(build: dict, rows: list, gpu: dict | None, smoke: dict | None, require_gpu: bool) -> dict:
    """The verdict on a candidate venv, stage by stage (build, import, gpu, smoke): ok, stage, detail, blame."""
    return judge(build or {}, gpu, smoke, rows or [], bool(require_gpu))


def spark_matrix_proved(candidate: dict, facts: dict, gpu: dict | None, smoke: dict, lock: dict, version: str,
                        today: str) -> dict:
    """The candidate as it is written once proved: its evidence block, and verified_on naming the canary."""
    proof = evidence(facts or {}, gpu, smoke or {}, lock or {}, version=str(version), today=str(today),
                     proposed_from=str(candidate.get("proposed_from")))
    where = " ".join(str(v) for v in (proof["canary"]["os"], proof["canary"]["arch"]) if v)
    return {**candidate, "verified_on": [f"{where} (bare-pip venv, canary)" if where else "a canary (bare-pip venv)"],
            "evidence": proof}


class FilterModule:
    def filters(self):
        return {"spark_matrix_lock": spark_matrix_lock, "spark_matrix_mirrors": spark_matrix_mirrors,
                "spark_matrix_blame": spark_matrix_blame, "spark_matrix_proof": spark_matrix_proof,
                "spark_matrix_proved": spark_matrix_proved}

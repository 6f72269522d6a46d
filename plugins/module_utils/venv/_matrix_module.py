# Copyright: sparkfleet contributors
# Apache License 2.0
"""The start every module that takes a stack matrix shares (spark_matrix_check, spark_matrix_propose, spark_venv,
spark_wheelhouse): its Pythons isolated, the matrix's and pip environment's secrets masked in the whole result, the
matrix checked, or the module failed saying what was not done."""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.module_utils.common._isolated import isolate
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._pip_dry_run import NotForTarget, resolver
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._secrets import env_secrets, matrix_secrets
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import MatrixError, check


def start(module, not_done: str) -> dict:
    """The checked matrix of module.params["matrix"]; fails the module with the matrix's problem and `not_done`
    ("Nothing was checked.") when it is not one."""
    # Every Python it starts runs in "/", without the caller's PYTHONPATH or caches (common/_isolated.py).
    isolate()
    params = module.params
    # A token in an index URL (a private mirror's) or a secret of pip's environment is masked in the whole
    # result, module_args included.
    module.no_log_values.update(matrix_secrets(params["matrix"], params.get("index_mirrors") or {}))
    module.no_log_values.update(env_secrets(params.get("pip_env") or {}))
    try:
        return check(params["matrix"])
    except MatrixError as exc:
        module.fail_json(msg=f"{exc}. {not_done}")


def resolvable(module, matrix: dict, not_done: str) -> None:
    """Fails the module, before anything is asked, where no resolver here evaluates markers for the matrix's
    target (module_utils/venv/_pip_dry_run.py: pip on an x86_64 controller would resolve x86_64's packages)."""
    try:
        resolver(matrix["target"])
    except NotForTarget as exc:
        module.fail_json(msg=f"{exc}. {not_done}")

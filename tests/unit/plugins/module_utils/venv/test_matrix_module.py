"""The start the matrix modules share (module_utils/venv/_matrix_module.py): secrets masked before anything can
fail, the matrix checked, a bad one failing the module with what was not done."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._matrix_module import start

SHIPPED = yaml.safe_load((Path(__file__).resolve().parents[5] / "matrix" / "spark-stack.yml").read_text())


class Failed(Exception):
    pass


class FakeModule:
    """The part of AnsibleModule start() uses: params, no_log_values, fail_json (which does not return)."""

    def __init__(self, **params):
        self.params = {"index_mirrors": {}, **params}
        self.no_log_values = set()

    def fail_json(self, msg, **_kw):
        raise Failed(msg)


def test_the_shipped_matrix_starts_and_a_mirror_token_is_masked_first():
    module = FakeModule(matrix=copy.deepcopy(SHIPPED), pip_env={"PIP_PASSWORD": "hunter22"},
                        index_mirrors={"https://pypi.org/simple": "https://user:s3cr3t-token@mirror.example/simple"})
    matrix = start(module, "Nothing was checked.")
    assert [step["id"] for step in matrix["steps"]] == [step["id"] for step in SHIPPED["steps"]]
    assert {"s3cr3t-token", "hunter22"} <= module.no_log_values


def test_a_matrix_that_is_not_one_fails_saying_what_was_not_done_with_its_secrets_already_masked():
    broken = {**copy.deepcopy(SHIPPED), "steps": "pip install torch"}
    module = FakeModule(matrix=broken, index_mirrors={"https://pypi.org/simple": "https://u:tok3n@m.example/s"})
    with pytest.raises(Failed) as failed:
        start(module, "Nothing was fetched.")
    assert str(failed.value).endswith(". Nothing was fetched.") and "steps" in str(failed.value)
    assert "tok3n" in module.no_log_values

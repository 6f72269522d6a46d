"""spark_matrix_check and playbooks/matrix_check.yml: every pin asked of its index, nothing installed."""

from __future__ import annotations

import copy
import subprocess

import pytest
import yaml

from conftest import BIN, REPO, ansible_env, run_module

MATRIX = yaml.safe_load((REPO / "matrix" / "spark-stack.yml").read_text())




def test_every_pin_of_the_matrix_is_on_the_test_beds_index(pyindex):
    result = run_module("spark_matrix_check", {"matrix": MATRIX, "index_overrides": pyindex.overrides,
                                               "today": "2026-08-01"})
    assert not result["failed"], result.get("msg")
    assert [(r["package"], r["status"]) for r in result["rows"]][:2] == [("torch", "available"),
                                                                         ("transformers", "available")]
    assert result["missing"] == [] and result["unreachable"] == []
    assert result["staleness"]["stale"] is False
    assert not any(r.endswith(".whl") for r in pyindex.requests), "metadata only: no wheel is downloaded"


def test_a_missing_pin_and_an_unreachable_index_are_told_apart(pyindex):
    matrix = copy.deepcopy(MATRIX)
    matrix["steps"][1]["packages"][4] = "trl==9.9.9"
    overrides = {**pyindex.overrides, "https://download.pytorch.org/whl/cu130": "http://127.0.0.1:9/cu130"}
    result = run_module("spark_matrix_check", {"matrix": matrix, "index_overrides": overrides, "timeout": 3})
    rows = {r["package"]: r for r in result["rows"]}
    assert rows["trl"]["status"] == "missing"
    assert rows["trl"]["detail"] == "no wheel for this target; the index offers 1.8.0, 1.9.0"
    assert rows["torch"]["status"] == "unreachable"
    assert result["missing"] == ["trl==9.9.9 (stack)"]
    assert result["unreachable"] == ["http://127.0.0.1:9/cu130"]
    assert result["staleness"]["stale"] is True  # today, 2026-11-30 or later


def test_the_playbook_fails_on_a_missing_pin_and_says_which(pyindex, tmp_path):
    matrix = copy.deepcopy(MATRIX)
    matrix["steps"][3]["packages"] = ["torchao==0.99.0"]
    candidate = tmp_path / "candidate.yml"
    candidate.write_text(yaml.safe_dump(matrix))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "playbooks/matrix_check.yml",
                           "-e", f"matrix_check_file={candidate}",
                           "-e", "{\"matrix_check_index_overrides\": " + __import__("json").dumps(pyindex.overrides)
                           + "}"],
                          cwd=REPO, capture_output=True, text=True, env=ansible_env(), check=False)
    assert proc.returncode == 2
    assert "no wheel for the target: torchao==0.99.0 (torchao)" in proc.stdout
    assert "torchao      0.99.0       missing" in proc.stdout


@pytest.mark.network
def test_the_real_pins_exist_on_real_pypi_for_cp312_aarch64():
    """The matrix's PyPI pins, asked of pypi.org (metadata only). The cu130 torch index is
    download.pytorch.org, which this machine cannot reach: skipped here, checked on a Spark."""
    result = run_module("spark_matrix_check", {"matrix": MATRIX, "skip_steps": ["torch"], "timeout": 30})
    rows = {r["package"]: r for r in result["rows"]}
    assert result["missing"] == [] and result["unreachable"] == [], result["table"]
    assert rows["torch"]["status"] == "skipped"
    # The two packages with native code have aarch64 wheels of their own.
    assert "manylinux_2_24_aarch64" in rows["bitsandbytes"]["wheel"]
    assert "aarch64" in rows["hf_transfer"]["wheel"]
    assert rows["unsloth"]["wheel"] == "unsloth-2026.7.2-py3-none-any.whl"

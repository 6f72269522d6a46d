"""The summary's tables are one tuple of named columns each (_fleet_table.COLUMNS, TARGET_COLUMNS): the headers,
the cells, the order in which a narrow terminal leaves columns out and the folding widths all come from them."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _fleet_table as table

ENTRY = {"simulated": True, "override": None, "host_class": "spark", "history": "converged",
         "runtime": {"registered": True}, "images": [{"name": "ngc", "ref": "r/x@sha256:" + "ab" * 32}],
         "venv": {"matrix": "unsloth-2026.7.2", "status": "verified", "stale": False},
         "verification": {"verdict": "ok", "gpu": [{"line": "True 13.0"}]}, "abi_findings": [], "reachable": True,
         "counts": {"changed": 2, "failed": 0}}


@pytest.mark.parametrize("columns", [table.COLUMNS, table.TARGET_COLUMNS], ids=["hosts", "targets"])
def test_each_column_has_its_own_place_in_the_order_a_narrow_terminal_keeps_them(columns):
    ranks = sorted(c.priority for c in columns)
    assert ranks == list(range(1, len(columns) + 1)), (
        f"priorities {[(c.name, c.priority) for c in columns]}: give each column one place from 1 (kept longest) "
        f"to {len(columns)}, in _fleet_table.py")
    assert table.priority(columns)[0] == "host"
    assert all(c.fold is None or c.fold >= 8 for c in columns), "a folding width under 8 columns cannot be read"


def test_a_host_row_is_its_columns_cells_by_name():
    row = dict(zip(table.HEADERS, table.row("spark-01", ENTRY), strict=True))
    expected = {
        "host": "spark-01", "class": "spark (simulated)", "history": "converged", "runtime": "registered",
        "images (digest)": "ngc@abababababab", "venv": "unsloth-2026.7.2 verified", "verdict": "ok",
        "line": "True 13.0", "ABI findings": "0", "changed": "2", "failed": "0"}
    assert sorted(row) == sorted(expected), (
        f"COLUMNS of _fleet_table.py and the cells expected in {__file__} differ in "
        f"{sorted(set(row) ^ set(expected))}: give each column its expected cell here")
    assert row == expected
    assert table.cell("spark-01", ENTRY, "verdict") == "ok"
    assert table.priority(table.COLUMNS)[:4] == ("host", "verdict", "changed", "failed"), (
        "what an Ansible user reads first stays at any width")


def test_the_runtime_cell_says_docker_did_not_answer_rather_than_not_registered():
    """A box whose Docker is not installed or not running: its runtime is unknown, not missing (the GPU suite's
    H100 had no Docker; the table said NOT registered)."""
    facts = {"spark_preflight": {"host_class": "not-spark", "simulated": False},
             "spark_container_runtime_registered": {"registered": False, "runtimes": [],
                                                    "unanswered": "Cannot connect to the Docker daemon at\n"
                                                                  "unix:///var/run/docker.sock."}}
    entry = table.host_entry(facts)
    assert entry["runtime"]["unanswered"] == "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
    assert table.cell("box", entry, "runtime") == "Docker did not answer"
    facts["spark_container_runtime_registered"] = {"registered": False, "runtimes": ["runc"]}
    assert table.cell("box", table.host_entry(facts), "runtime") == "NOT registered"

"""bench/suite_timings.py: the table CI's log ends with (issue 37). Molecule's scenarios run at once
(testbed/molecule.sh): each is shown under the stage that ran them, and the sum counts the stage, not its parts."""

from __future__ import annotations

import importlib.util

from conftest import REPO


def test_scenarios_run_at_once_are_shown_under_their_stage_and_counted_once(tmp_path):
    spec = importlib.util.spec_from_file_location("suite_timings", REPO / "bench" / "suite_timings.py")
    suite_timings = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(suite_timings)
    stages = [("lint: ruff", "10.0", "0"), ("+ molecule: venv", "250.2", "0"), ("+ molecule: default", "280.4", "1"),
              ("molecule: default and venv, at once", "290.0", "1")]
    (tmp_path / "stages.tsv").write_text("".join("\t".join(s) + "\n" for s in stages))
    rows = suite_timings.table(tmp_path)
    assert rows[2:] == ["| lint: ruff | 10 | 3% |", "| molecule: default and venv, at once (exit 1) | 290 | 97% |",
                        "| &nbsp;&nbsp;molecule: venv | 250 | |", "| &nbsp;&nbsp;molecule: default (exit 1) | 280 | |",
                        "| **all stages** | **300** | |"]

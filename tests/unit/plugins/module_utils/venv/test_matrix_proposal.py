"""What pip is asked for a step of a proposal, a pin held back by its set's closure, and how the screen says what
held it (issue 48; the propose over the test bed's index is tests/integration/test_spark_matrix_propose.py)."""

from __future__ import annotations

import datetime

from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._matrix_proposal import (
    added_lines,
    blame,
    candidate,
    changes,
    diff_lines,
    held_lines,
    step_specs,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import check

STEP = {"id": "stack", "packages": ["transformers==5.13.1", "datasets==4.3.0", "trl==1.8.0"]}
HOLD = {"name": "datasets", "specifier": "!=4.0.*,!=4.1.0,<4.4.0,>=3.4.1", "declarer": "unsloth",
        "version": "2026.7.2", "requirement": "datasets!=4.0.*,!=4.1.0,<4.4.0,>=3.4.1"}


def test_each_pin_at_its_version_or_newer_a_given_one_exactly():
    assert step_specs(STEP, {"trl": "1.9.0"}) == ["transformers>=5.13.1", "datasets>=4.3.0", "trl==1.9.0"]


def test_a_held_pin_is_asked_within_what_its_declarers_declare_older_than_the_matrix_s_if_it_must():
    torch = {**HOLD, "name": "torch", "specifier": "<2.15.0,>=2.4.0", "requirement": "torch<2.15.0,>=2.4.0"}
    zoo = {**torch, "declarer": "unsloth_zoo", "specifier": "<2.13.0,>=2.4.0"}
    step = {"id": "torch", "packages": ["torch==2.14.1"]}
    assert step_specs(step, {}, {"torch": [torch, zoo]}) == ["torch<2.15.0,>=2.4.0,<2.13.0"]
    assert step_specs(STEP, {}, {"datasets": [HOLD, {**HOLD, "declarer": "unsloth_zoo"}]}) == [
        "transformers>=5.13.1", "datasets!=4.0.*,!=4.1.0,<4.4.0,>=3.4.1", "trl>=1.8.0"]


def test_a_given_pin_is_never_held():
    assert step_specs(STEP, {"datasets": "4.7.0"}, {"datasets": [HOLD]})[1] == "datasets==4.7.0"


def test_the_screen_names_each_hold_and_who_declared_it():
    assert held_lines({"datasets": [HOLD]}) == [
        "held back: datasets!=4.0.*,!=4.1.0,<4.4.0,>=3.4.1 - unsloth 2026.7.2 declares "
        "datasets!=4.0.*,!=4.1.0,<4.4.0,>=3.4.1"]


HELD = {"id": "unsloth_deps", "hold": True, "packages": ["triton==3.6.0", "tyro==1.0.17"]}
JSON5 = {"name": "json5", "specifiers": [">=0.9.25"], "declared_by": ["unsloth 2026.10.9"]}


def test_a_held_step_is_asked_for_what_the_set_declares_and_no_step_installs_within_what_is_declared():
    assert step_specs(HELD, {}, {}, {"json5": JSON5}) == ["triton>=3.6.0", "tyro>=1.0.17", "json5>=0.9.25"]
    # held back too where another package declares a bound on it; a pin the step has already is not asked twice
    hold = {**HOLD, "name": "json5", "specifier": "<0.10"}
    assert step_specs(HELD, {}, {"json5": [hold]}, {"json5": JSON5, "tyro": {**JSON5, "name": "tyro"}}) == [
        "triton>=3.6.0", "tyro>=1.0.17", "json5>=0.9.25,<0.10"]
    # only a held step takes them: the others keep the matrix's package list
    assert step_specs(STEP, {}, {}, {"json5": JSON5}) == ["transformers>=5.13.1", "datasets>=4.3.0", "trl>=1.8.0"]


def test_an_added_pin_is_written_in_the_held_step_shown_as_new_and_said_why():
    matrix = check({"schema": 1, "name": "m", "last_verified": "2026-07-14", "target": {"python": "3.12", "arch": "aarch64", "glibc": "2.39"},
                    "steps": [{**STEP, "index_url": "https://pypi.org/simple"},
                              {**HELD, "index_url": "https://pypi.org/simple"}],
                    "accepted": [{"declared_by": "unsloth", "requires": "trl", "reason": "r"}]})
    chosen = {"transformers": "5.13.1", "datasets": "4.3.0", "trl": "1.9.0", "triton": "3.6.0", "tyro": "1.0.17",
              "json5": "0.9.28"}
    proposed = candidate(matrix, chosen, datetime.date(2026, 12, 4), ["json5"], [])
    assert proposed["steps"][1]["packages"] == ["triton==3.6.0", "tyro==1.0.17", "json5==0.9.28"]
    assert "accepted" not in proposed, "a deviation the candidate's closure no longer has is left out"
    rows = changes(matrix, proposed)
    assert rows[-1] == {"step": "unsloth_deps", "package": "json5", "old": None, "new": "0.9.28", "moved": True,
                        "added": True}
    assert [r["package"] for r in rows if r["moved"] and not r["added"]] == ["trl"]
    lines = [" ".join(line.split()) for line in diff_lines(rows, {"json5==0.9.28": "2025-03-01"})]
    assert lines[-1] == "unsloth_deps json5 new 0.9.28 (2025-03-01)"
    assert added_lines({"json5": JSON5}) == [
        "added: json5>=0.9.25 - unsloth 2026.10.9 declares it and no step installed it"]
    assert blame(rows, "No module named json5") == ["json5==0.9.28 (new)"]


def test_a_why_that_names_the_old_set_is_marked_for_review_and_one_that_still_holds_is_left_alone():
    """Issue 57, item 8: a proposed matrix kept 'torchvision 0.25.0 declares torch==2.10.0' and 'the accepted
    deviations below' beside torch 2.14.1 and no accepted deviations."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import yaml
    from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import normalize, parse_pin

    from conftest import REPO

    shipped = check(yaml.safe_load((REPO / "matrix" / "spark-stack.yml").read_text()))
    chosen = {normalize(parse_pin(p)[0]): parse_pin(p)[1] for s in shipped["steps"] for p in s["packages"]}
    chosen.update({"torch": "2.14.1", "torchvision": "0.29.1", "unsloth": "2026.10.9", "unsloth-zoo": "2026.10.9"})
    proposed = candidate(shipped, chosen, datetime.date(2026, 12, 4), [], [])
    why = {step["id"]: step["why"] for step in proposed["steps"]}
    assert why["torch"].startswith("REVIEW (written for unsloth-2026.7.2; it names torch 2.10.0 (proposed: 2.14.1), "
                                   "torchvision 0.25.0 (proposed: 0.29.1)): "), why["torch"]
    assert why["unsloth"].startswith("REVIEW (written for unsloth-2026.7.2; it names unsloth 2026.7.2 (proposed: "
                                     "2026.10.9), the accepted deviations (the proposed set has none)): ")
    assert why["stack"] == "The training stack, every version pinned.", "a why that still holds is left alone"
    assert why["torchao"] == next(s["why"] for s in shipped["steps"] if s["id"] == "torchao")

"""What pip is asked for a step of a proposal, a pin held back by its set's closure, and how the screen says what
held it (issue 48; the propose over the test bed's index is tests/integration/test_matrix_propose.py)."""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._matrix_proposal import held_lines, step_specs

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

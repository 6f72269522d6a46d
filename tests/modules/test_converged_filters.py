"""The filters that let a converged run skip a module call judge as the module does: spark_state_unchanged
against what spark_state wrote, spark_docker_registration_gaps against spark_docker_runtime's own gaps."""

from __future__ import annotations

import json

from ansible_collections.sparkfleet.spark.plugins.filter.sparkfleet_runtime import spark_docker_registration_gaps
from ansible_collections.sparkfleet.spark.plugins.filter.sparkfleet_verify import spark_state_unchanged

from conftest import run_module

CONTENT = {"verification": {"verdict": "not verified", "images": [{"name": "ngc", "ref": "r@sha256:" + "a" * 64}],
                            "count": 3}}


def test_a_state_file_the_module_wrote_is_unchanged_for_the_same_content_and_changed_for_other(tmp_path):
    path = tmp_path / "state.json"
    written = run_module("spark_state", {"path": str(path), "content": CONTENT})
    assert written["changed"] is True
    again = run_module("spark_state", {"path": str(path), "content": CONTENT})
    kept = spark_state_unchanged(path.read_text(), CONTENT, str(path))
    assert kept is not None and again["changed"] is False
    assert {k: kept[k] for k in ("changed", "status", "previous", "recorded")} == {
        k: again[k] for k in ("changed", "status", "previous", "recorded")}, "the same result the module gives"
    assert kept["recorded"] == again["previous"], "the state kept is the file's"
    other = {"verification": {**CONTENT["verification"], "verdict": "failed"}}
    assert spark_state_unchanged(path.read_text(), other, str(path)) is None
    assert run_module("spark_state", {"path": str(path), "content": other})["changed"] is True


def test_no_damaged_or_edited_state_file_is_taken_for_unchanged(tmp_path):
    path = tmp_path / "state.json"
    run_module("spark_state", {"path": str(path), "content": CONTENT})
    text = path.read_text()
    assert spark_state_unchanged(None, CONTENT, str(path)) is None
    assert spark_state_unchanged(text[:-20], CONTENT, str(path)) is None
    assert spark_state_unchanged(json.dumps(json.loads(text)), CONTENT, str(path)) is None, "re-rendered: rewrite"


def test_the_registration_gaps_are_the_modules_and_unknown_when_the_facts_cannot_tell(tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}},
                                  "log-driver": "journald"}))
    facts = {"path": str(daemon), "registration": {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}},
             "error": None}
    assert spark_docker_registration_gaps(facts, str(daemon)) == []
    module = run_module("spark_docker_runtime", {"path": str(daemon), "enable_cdi": True}, "--check")
    assert spark_docker_registration_gaps(facts, str(daemon), False, True) == module["gaps"] != []
    assert spark_docker_registration_gaps(facts, "/etc/docker/other.json") is None
    assert spark_docker_registration_gaps({"path": str(daemon), "registration": None, "error": "not JSON"},
                                          str(daemon)) is None
    assert spark_docker_registration_gaps(None, str(daemon)) is None

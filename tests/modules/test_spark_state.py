"""spark_state: the host's record, written only when it changes."""

from __future__ import annotations

import json

from conftest import run_module


def test_created_then_unchanged_then_updated(tmp_path):
    path = tmp_path / "sub" / "state.json"
    first = run_module("spark_state", {"path": str(path), "content": {"verdict": "ok"}})
    assert (first["changed"], first["status"], first["previous"]) == (True, "created", None)
    written = json.loads(path.read_text())
    assert written["verdict"] == "ok"
    assert written["written_at"] == written["first_written_at"]
    assert first["recorded"] == written, "the result says what was recorded (Ansible's file facts beside it)"
    mtime = path.stat().st_mtime_ns
    second = run_module("spark_state", {"path": str(path), "content": {"verdict": "ok"}})
    assert (second["changed"], second["status"]) == (False, "unchanged")
    assert path.stat().st_mtime_ns == mtime
    third = run_module("spark_state", {"path": str(path), "content": {"verdict": "failed"}}, "--diff")
    assert (third["changed"], third["status"]) == (True, "updated")
    assert third["previous"]["verdict"] == "ok"
    assert json.loads(path.read_text())["first_written_at"] == written["first_written_at"]
    assert '-  "verdict": "ok"' in third["_stdout"]


def test_check_mode_writes_nothing(tmp_path):
    path = tmp_path / "state.json"
    result = run_module("spark_state", {"path": str(path), "content": {"verdict": "ok"}}, "--check")
    assert result["changed"] is True
    assert not path.exists()


def test_a_damaged_state_file_is_kept_aside_with_a_warning_and_a_new_one_written(tmp_path):
    path = tmp_path / "state.json"
    path.write_text("{half")
    checked = run_module("spark_state", {"path": str(path), "content": {"verdict": "ok"}}, "--check")
    assert path.read_text() == "{half" and len(list(tmp_path.iterdir())) == 1, "check mode moved nothing"
    result = run_module("spark_state", {"path": str(path), "content": {"verdict": "ok"}})
    assert result["status"] == "created"
    assert json.loads(path.read_text())["verdict"] == "ok"
    (aside,) = tmp_path.glob("state.json.damaged-*")
    assert aside.read_text() == "{half", "what was there is kept, not lost"
    assert "is not a sparkfleet state" in result["_stderr"] + result["_stdout"] + checked["_stdout"]
    assert f"kept as {aside}" in result["_stderr"] + result["_stdout"]


def test_a_rewrite_keeps_the_files_mode(tmp_path):
    path = tmp_path / "state.json"
    run_module("spark_state", {"path": str(path), "content": {"verdict": "ok"}})
    path.chmod(0o600)
    run_module("spark_state", {"path": str(path), "content": {"verdict": "failed"}})
    assert json.loads(path.read_text())["verdict"] == "failed"
    assert path.stat().st_mode & 0o777 == 0o600

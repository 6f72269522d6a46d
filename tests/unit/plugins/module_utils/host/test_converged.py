"""The record of a host module's converged run (module_utils/host/_converged.py, issue 49): used only while every
file that holds the state it made is as the run left it, and for a day at most."""

from __future__ import annotations

import json
import os
import time

from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _converged as converged

KEY, OTHER = "a" * 64, "b" * 64


def test_a_record_is_used_while_its_files_are_as_the_run_left_them(tmp_path):
    launcher, gone = tmp_path / "spark-ngc", tmp_path / "old.list"
    launcher.write_text("#!/bin/sh\n")
    records = tmp_path / "converged"
    assert converged.remember("spark_launchers", KEY, [str(launcher), str(gone)], {"changed": False}, str(records))
    assert converged.unchanged(str(records)) == {KEY: {"module": "spark_launchers", "result": {"changed": False}}}
    assert oct(records.stat().st_mode & 0o777) == "0o700", "root's alone"

    # an edit by hand, even of the same size with its mtime put back, moves the file's change time
    before = launcher.stat()
    time.sleep(0.01)
    launcher.write_text("#!/bin/s\n\n")
    os.utime(launcher, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (launcher.stat().st_size, launcher.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert converged.unchanged(str(records)) == {}
    assert converged.remember("spark_launchers", KEY, [str(launcher), str(gone)], {}, str(records))
    gone.write_text("deb http://example/ /\n")  # a file the run removed is back
    assert converged.unchanged(str(records)) == {}


def test_one_record_a_module_the_last_and_a_run_given_its_key_starts_by_removing_it(tmp_path):
    path = tmp_path / "keyring.gpg"
    path.write_bytes(b"key")
    records = tmp_path / "converged"
    converged.remember("spark_apt_keyring", KEY, [str(path)], {}, str(records))
    converged.remember("spark_launchers", KEY, [str(path)], {}, str(records))
    converged.remember("spark_apt_keyring", OTHER, [str(path)], {}, str(records))
    assert sorted(os.listdir(records)) == [f"spark_apt_keyring.{OTHER}.json", f"spark_launchers.{KEY}.json"]
    converged.forget("spark_apt_keyring", KEY, str(records))  # another's key: not its record
    converged.forget("spark_apt_keyring", None, str(records))  # a run without a key touches none
    assert sorted(os.listdir(records)) == [f"spark_apt_keyring.{OTHER}.json", f"spark_launchers.{KEY}.json"]
    converged.forget("spark_apt_keyring", OTHER, str(records))
    assert sorted(converged.unchanged(str(records))) == [KEY]


def test_a_record_is_not_used_after_a_day_nor_one_dated_ahead(tmp_path):
    path = tmp_path / "keyring.gpg"
    path.write_bytes(b"key")
    records = tmp_path / "converged"
    converged.remember("spark_apt_keyring", KEY, [str(path)], {}, str(records))
    assert converged.unchanged(str(records), now=time.time() + converged.MAX_AGE_S + 1) == {}
    assert converged.unchanged(str(records), now=time.time() - 60) == {}, "a record from the future is not trusted"
    assert KEY in converged.unchanged(str(records))


def test_nothing_is_recorded_without_a_key_or_with_one_of_another_shape_and_bad_records_are_left_out(tmp_path):
    records = tmp_path / "converged"
    assert not converged.remember("spark_launchers", None, [], {}, str(records))
    assert not converged.remember("spark_launchers", "not-a-sha256", [], {}, str(records))
    assert not converged.remember("../escape", KEY, [], {}, str(records))
    assert not converged.remember("spark_launchers", KEY, ["relative/path"], {}, str(records))
    assert not records.exists()
    records.mkdir()
    now = time.time()
    (records / f"spark_image_pull.{KEY}.json").write_text("{not json")
    (records / f"spark_launchers.{KEY}.json").write_text(json.dumps(  # its content names another key
        {"module": "spark_launchers", "key": OTHER, "watched": {}, "recorded_at": now}))
    (records / f"Bad-Name.{KEY}.json").write_text(json.dumps(
        {"module": "Bad-Name", "key": KEY, "watched": {}, "recorded_at": now}))
    (records / f"spark_launchers.{OTHER}.json").write_text(json.dumps(  # no time: not trusted
        {"module": "spark_launchers", "key": OTHER, "watched": {}}))
    assert converged.unchanged(str(records)) == {}
    assert converged.unchanged(str(tmp_path / "none")) == {}


def test_a_folder_that_cannot_be_written_records_nothing_and_fails_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert not converged.remember("spark_launchers", KEY, [], {}, str(blocker / "converged"))
    assert os.path.isfile(blocker)

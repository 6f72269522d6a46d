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


# Issue 56, item 2: the records follow the rule of every folder and file root trusts (module_utils/common/_trusted.py).
# Each attack below was a record root's preflight returned as converged before the rule.
NOBODY = 65534


def _recorded(tmp_path):
    launcher = tmp_path / "spark-ngc"
    launcher.write_text("#!/bin/sh\n")
    records = tmp_path / "lib" / "converged"
    assert converged.remember("spark_launchers", KEY, [str(launcher)], {"changed": False}, str(records))
    assert converged.unchanged(str(records)), "the genuine record is used"
    return launcher, records


def test_the_records_folders_are_closed_to_others_whatever_the_umask_and_an_open_one_is_closed_again(tmp_path):
    old = os.umask(0)
    try:
        launcher, records = _recorded(tmp_path)
    finally:
        os.umask(old)
    assert oct(records.stat().st_mode & 0o777) == "0o700"
    assert records.parent.stat().st_mode & 0o022 == 0, "/var/lib/sparkfleet is writable by root alone"
    records.parent.chmod(0o777)  # as an earlier sparkfleet's makedirs left it under umask 000
    assert converged.unchanged(str(records)) == {}, "a record under a folder others can write is not used"
    assert converged.remember("spark_launchers", KEY, [str(launcher)], {}, str(records))
    assert records.parent.stat().st_mode & 0o022 == 0 and converged.unchanged(str(records))
    records.chmod(0o755)  # readable by others: not used, and closed again by the next record
    assert converged.unchanged(str(records)) == {}
    assert converged.remember("spark_launchers", KEY, [str(launcher)], {}, str(records))
    assert oct(records.stat().st_mode & 0o777) == "0o700" and converged.unchanged(str(records))


def test_a_folder_a_stranger_made_in_place_of_the_records_is_not_read(tmp_path):
    launcher, records = _recorded(tmp_path)
    forged = json.loads(next(records.glob("*.json")).read_text())
    forged["result"] = {"pinned": [{"ref": "evil.example/x@sha256:" + "0" * 64}]}
    records.rename(tmp_path / "away")
    records.mkdir(mode=0o700)
    (records / f"spark_launchers.{KEY}.json").write_text(json.dumps(forged))
    os.chown(records / f"spark_launchers.{KEY}.json", NOBODY, NOBODY)
    assert converged.unchanged(str(records)) == {}, "a record of another user's"
    os.chown(records, NOBODY, NOBODY)
    assert converged.unchanged(str(records)) == {}, "a folder of another user's"
    assert not converged.remember("spark_launchers", KEY, [str(launcher)], {}, str(records)), "nothing written there"


def test_a_record_that_is_a_link_a_fifo_a_hard_link_or_writable_by_others_is_not_used(tmp_path):
    _launcher, records = _recorded(tmp_path)
    record = next(records.glob("*.json"))
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(record.read_text())
    record.unlink()
    record.symlink_to(elsewhere)
    assert converged.unchanged(str(records)) == {}, "a link"
    record.unlink()
    os.link(elsewhere, record)
    assert converged.unchanged(str(records)) == {}, "a hard link"
    record.unlink()
    os.mkfifo(record)
    started = time.monotonic()
    assert converged.unchanged(str(records)) == {} and time.monotonic() - started < 5, "a FIFO, never waited on"
    record.unlink()
    record.write_text(elsewhere.read_text())
    assert converged.unchanged(str(records)), "the same record as a file of root's"
    record.chmod(0o666)
    assert converged.unchanged(str(records)) == {}, "writable by others"


def test_a_record_that_watches_nothing_is_not_used(tmp_path):
    _launcher, records = _recorded(tmp_path)
    record = next(records.glob("*.json"))
    data = json.loads(record.read_text())
    data["watched"] = {}
    record.write_text(json.dumps(data))
    assert converged.unchanged(str(records)) == {}

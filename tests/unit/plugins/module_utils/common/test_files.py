"""module_utils/common/_files.py: every writer of the lock, state, daemon.json, launchers and keyrings writes through
atomic_write: a temporary file beside the target, fsync, rename, fsync of the directory, the file's mode and owner
kept. The attacks: a reader (or a power cut) catching a half-written file, a rewrite that makes a 0600 file
world-readable or hands a user's file to root."""

from __future__ import annotations

import os
import stat

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _files
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._files import atomic_write


def test_the_file_and_then_its_directory_are_synced_around_the_rename(tmp_path, monkeypatch):
    target = tmp_path / "lock.yml"
    target.write_text("old\n")
    order = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        order.append(("fsync", "dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"))
        real_fsync(fd)

    def replace(src, dst):
        order.append(("replace", os.path.dirname(src) == str(tmp_path) and dst == str(target)))
        real_replace(src, dst)

    monkeypatch.setattr(_files.os, "fsync", fsync)
    monkeypatch.setattr(_files.os, "replace", replace)
    atomic_write(str(target), "new\n")
    assert order == [("fsync", "file"), ("replace", True), ("fsync", "dir")]
    assert target.read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["lock.yml"], "no temporary file is left beside it"


def test_an_existing_file_keeps_its_mode_and_owner_and_a_new_one_gets_the_mode_asked(tmp_path):
    secret = tmp_path / "daemon.json"
    secret.write_text("{}")
    secret.chmod(0o600)
    if os.getuid() == 0:
        os.chown(secret, 1234, 5678)
    atomic_write(str(secret), '{"runtimes": {}}')
    info = secret.stat()
    assert stat.S_IMODE(info.st_mode) == 0o600
    if os.getuid() == 0:
        assert (info.st_uid, info.st_gid) == (1234, 5678)
    atomic_write(str(tmp_path / "bin" / "spark-ngc"), "#!/bin/sh\n", mode=0o755)
    assert stat.S_IMODE((tmp_path / "bin" / "spark-ngc").stat().st_mode) == 0o755


def test_a_write_that_fails_leaves_the_old_file_whole_and_no_temporary_file(tmp_path, monkeypatch):
    target = tmp_path / "state.json"
    target.write_text('{"kept": true}\n')

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_files.os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        atomic_write(str(target), '{"kept": false}\n')
    assert target.read_text() == '{"kept": true}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]

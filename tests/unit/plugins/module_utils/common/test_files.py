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
    atomic_write(str(secret), '{"runtimes": {}}')
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    atomic_write(str(tmp_path / "bin" / "spark-ngc"), "#!/bin/sh\n", mode=0o755)
    assert stat.S_IMODE((tmp_path / "bin" / "spark-ngc").stat().st_mode) == 0o755


@pytest.mark.skipif(os.getuid() != 0, reason="a file of another user's is made by root")
def test_a_strangers_file_or_link_is_replaced_by_sparkfleets_own_never_given_back_or_followed(tmp_path):
    """Issue 46, finding 1: a record another user made (0666, theirs) kept its owner and mode when root rewrote it,
    so they could edit what the next run trusts; and the old file's owner was read through a link."""
    theirs = tmp_path / "spark-1.json"
    theirs.write_text("{}")
    theirs.chmod(0o666)
    os.chown(theirs, 1234, 5678)
    atomic_write(str(theirs), "ours\n", mode=0o600)
    info = theirs.stat()
    assert (info.st_uid, stat.S_IMODE(info.st_mode)) == (0, 0o600)
    victim = tmp_path / "victim"
    victim.write_text("root's")
    link = tmp_path / "state.json"
    link.symlink_to(victim)
    atomic_write(str(link), "ours\n")
    assert victim.read_text() == "root's" and not link.is_symlink() and link.read_text() == "ours\n"
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(_files.trusted.Untrusted, match="can be written by other users"):
        atomic_write(str(shared / "x.json"), "ours\n")
    assert list(shared.iterdir()) == []


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

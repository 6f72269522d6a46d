# Copyright: sparkfleet contributors
# Apache License 2.0
"""Writing files the way sparkfleet's modules must: atomically, durably, into a trusted folder, never through a
link."""

from __future__ import annotations

import os
import stat
import tempfile

from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _trusted as trusted


def atomic_write(path: str, text: str, mode: int = 0o644) -> None:
    """Write text to path through a temporary file in the same directory, fsync, a rename and an fsync of the
    directory.

    A reader never sees a half-written file, and an interrupted run or a power cut leaves the old one or the new
    one whole. The folder is made where missing and must be trusted (module_utils/common/_trusted.py: root's or
    the user's, writable by nobody else), else Untrusted before anything is written. A file that exists keeps its
    mode, less any write bit for others, and its owner where that is root or the user; a stranger's file (or a
    link planted in its name) is replaced by sparkfleet's own, with `mode`, never followed or given back to them.
    """
    directory = os.path.dirname(os.path.abspath(path))
    trusted.make_dir(directory, 0o755)
    try:
        existing = os.lstat(path)
    except FileNotFoundError:
        existing = None
    ours = existing is not None and stat.S_ISREG(existing.st_mode) and existing.st_uid in trusted.trusted_owners()
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
            if ours:
                os.fchmod(handle.fileno(), existing.st_mode & 0o7755)
                if (existing.st_uid, existing.st_gid) != (os.getuid(), os.getgid()):
                    os.fchown(handle.fileno(), existing.st_uid, existing.st_gid)
            else:
                os.fchmod(handle.fileno(), mode)
        os.replace(tmp, path)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)

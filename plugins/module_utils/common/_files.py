# Copyright: sparkfleet contributors
# Apache License 2.0
"""Writing files the way sparkfleet's modules must: atomically, durably, keeping the file's mode and owner."""

from __future__ import annotations

import os
import tempfile


def atomic_write(path: str, text: str, mode: int = 0o644) -> None:
    """Write text to path through a temporary file in the same directory, fsync, a rename and an fsync of the
    directory.

    A reader never sees a half-written file, an interrupted run or a power cut leaves the old one or the new
    one whole, and a file that exists keeps its mode and owner (`mode` is for a new file).
    """
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    try:
        existing = os.stat(path)
    except FileNotFoundError:
        existing = None
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        if existing is not None:
            os.chmod(tmp, existing.st_mode & 0o7777)
            if (existing.st_uid, existing.st_gid) != (os.getuid(), os.getgid()):
                os.chown(tmp, existing.st_uid, existing.st_gid)
        else:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)

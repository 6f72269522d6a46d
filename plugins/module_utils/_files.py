# Copyright: sparkfleet contributors
# Apache License 2.0
"""Writing files the way sparkfleet's modules must: atomically, with a known mode."""

from __future__ import annotations

import os
import tempfile


def atomic_write(path: str, text: str, mode: int = 0o644) -> None:
    """Write text to path through a temporary file in the same directory and a rename.

    A reader never sees a half-written file, and an interrupted run leaves the old one.
    """
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o755, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)

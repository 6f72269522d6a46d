"""The test store: what the tests build once - the real-wheel venvs and sites, the ansible-core venvs, ansible-test's
HOME with its tool venvs, the release tools, downloaded wheels and packages - kept outside the clone, so that a
clean clone on a machine that ran the suite before reuses them (issue 71: rebuilt in every clone, they cost about
five minutes).

SPARKFLEET_TEST_CACHE names the store; by default ~/.cache/sparkfleet/test-store. `make test-cold` runs the suite
with an empty one, as CI's first run on a new machine meets it. Each entry is a folder named by what it is; what it
was built from (its pins, its interpreter, a hash of the code that builds it) is its stamp(), compared on reuse: an
entry whose stamp differs or is missing (a build cut off half-way) is built anew. One builder of an entry at a
time (locked()): two workers of a run, or two clones of this machine, wait for each other. Nothing depends on the
store being there: an empty one is filled.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import inspect
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

ROOT = Path(os.environ.get("SPARKFLEET_TEST_CACHE") or Path.home() / ".cache" / "sparkfleet" / "test-store")


def root() -> Path:
    ROOT.mkdir(parents=True, exist_ok=True, mode=0o700)
    return ROOT


@contextlib.contextmanager
def locked(name: str):
    """The entry `name` (a path in the store), held alone while the block builds or uses it."""
    lock_path = root() / f"{name}.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield ROOT / name


def interpreter(python: str) -> str:
    """What an interpreter is, for a stamp: the real one behind it (a clone's venv links to the same pyenv or
    Debian Python as every other clone's, and a venv made from it is made from that one) and its full version (a
    pyenv rebuild of 3.12 is another)."""
    found = subprocess.run([python, "-c", "import sys; print(getattr(sys, '_base_executable', sys.executable)); "
                            "print(sys.version)"], capture_output=True, text=True, check=False).stdout.split("\n", 1)
    return f"{os.path.realpath(found[0])} {found[1].strip() if len(found) > 1 else ''}"


def stamp(*parts: object, code: str | Path | Callable) -> str:
    """An entry's stamp: what it was built from (`parts`: pins, interpreter()) and a hash of `code`: the file whose
    code builds it, or the function that does (a builder inside a test file: the file's other tests change it not)."""
    text = inspect.getsource(code).encode() if callable(code) else Path(code).read_bytes()
    name = code.__name__ if callable(code) else Path(code).name
    return repr([*parts, f"code {name} {hashlib.sha256(text).hexdigest()[:16]}"])


def current(entry: Path, want: str, name: str = ".sparkfleet-store") -> bool:
    """Whether `entry` was built whole from `want` (its stamp file, written last by done())."""
    mark = entry / name
    return mark.is_file() and mark.read_text() == want


def done(entry: Path, want: str, name: str = ".sparkfleet-store") -> None:
    (entry / name).write_text(want)

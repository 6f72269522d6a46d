"""The ansible-core releases the collection admits, each in a venv of its own in the test store (testbed/store.py;
the test venv's own for its core): for the tests that run the same thing on every core (ansible-test, the inert
writers)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import store
from ansible.release import __version__ as ansible_version

from conftest import BIN, python_of

# Each core the collection admits, and the Python it runs on here (2.20 and later need 3.12).
CORES = {"2.19": "3.11", "2.20": "3.12", "2.21": "3.12"}
TEST_VENV_CORE = ".".join(ansible_version.split(".")[:2])
TEST_VENV_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"


def core_bin(core: str) -> Path:
    """The bin/ of a venv with ansible-core `core` (the test venv's own for its core), made once in the store."""
    python = CORES[core]
    if core == TEST_VENV_CORE and python == TEST_VENV_PYTHON:
        return BIN
    interpreter = python_of(python)
    if interpreter is None:
        pytest.skip(f"ansible-core {core} needs Python {python}: no python{python} on PATH or under ~/.pyenv "
                    f"(pyenv install {python})")
    want = store.stamp(f"ansible-core=={core}.*", store.interpreter(interpreter), code=core_bin)
    # Two test files (two xdist workers, or two clones) may ask for the same core at once: one makes it, the other
    # waits.
    with store.locked(f"ansible-core-{core}-py{python}") as venv:
        if not store.current(venv, want):
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([interpreter, "-m", "venv", str(venv)], check=True, capture_output=True)
            subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", f"ansible-core=={core}.*"],
                           check=True, capture_output=True)
            store.done(venv, want)
    return venv / "bin"

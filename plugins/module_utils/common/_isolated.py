# Copyright: sparkfleet contributors
# Apache License 2.0
"""Every Python a sparkfleet module starts (a probe, the smoke step, pip, venv, the ABI scan's program) runs
isolated from where the module was started and from the caller's Python environment.

Python puts the directory it was started in first on sys.path for `python -` and `python -c` (and a script's own
folder for a script): run from a folder another user can write to, a torch.py they left there is imported as
root. And PYTHONPATH, PYTHONSTARTUP, a cache folder of the caller's (HF_HOME, TRITON_CACHE_DIR) reach every
program started under a local connection. A module that starts Python calls isolate() first: its working
directory becomes "/" (root's, writable by nobody else), PYTHONSAFEPATH asks Python 3.11+ not to put it on
sys.path at all, and the variables below leave its environment - every process it starts inherits both. A value
the inventory sets (a module's `environment` option) is given again by the module, after this.

The compilers' caches are not left to their defaults either: without TORCHINDUCTOR_CACHE_DIR, Inductor keeps its
cache in /tmp/torchinductor_<user>, a name any local user can make first and fill with pickles and shared objects
root would load (issue 70). Each isolated module gets a folder of its own for them (made exclusively, 0700, in a
folder the trust rule takes), removed when the module ends.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _trusted as trusted

# What a caller's environment must not bring into a Python run as root: code to load (PYTHONWARNINGS imports
# the modules its categories name) and folders to load from.
LEFT_OUT = ("PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONUSERBASE", "PYTHONINSPECT", "PYTHONBREAKPOINT",
            "PYTHONEXECUTABLE", "PYTHONPLATLIBDIR", "PYTHONPYCACHEPREFIX", "PYTHONWARNINGS", "HF_HOME", "HF_HUB_CACHE",
            "HF_MODULES_CACHE", "TRANSFORMERS_CACHE", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR",
            "TORCH_EXTENSIONS_DIR", "CUPY_CACHE_DIR", "NUMBA_CACHE_DIR", "XDG_CACHE_HOME")
SAFE_DIR = "/"
# The compilers' caches a probe or the smoke step may fill: each a folder of the module's own (private_caches()).
PRIVATE_CACHES = {"TORCHINDUCTOR_CACHE_DIR": "inductor", "TRITON_CACHE_DIR": "triton"}


def isolate(environ=None) -> list[str]:
    """Isolate this module's process (and so every process it starts): work in "/", leave LEFT_OUT out of the
    environment, PYTHONSAFEPATH set. Returns the names left out (for a note where a module reports them)."""
    environ = os.environ if environ is None else environ
    left = [name for name in LEFT_OUT if name in environ]
    for name in left:
        del environ[name]
    environ["PYTHONSAFEPATH"] = "1"
    environ.update(private_caches())
    os.chdir(SAFE_DIR)
    return left


def private_caches() -> dict[str, str]:
    """PRIVATE_CACHES, each a folder in one made for this process alone (0700, O_EXCL by mkdtemp) in the first of
    the temporary directory, HOME and / that the trust rule takes, removed when the process ends."""
    for base in (tempfile.gettempdir(), os.path.expanduser("~"), SAFE_DIR):
        try:
            trusted.check_dir(base, "the caches' folder", sticky_ok=True)
        except trusted.Untrusted:
            continue
        folder = tempfile.mkdtemp(prefix="sparkfleet-caches-", dir=base)
        atexit.register(shutil.rmtree, folder, True)
        return {name: os.path.join(folder, sub) for name, sub in PRIVATE_CACHES.items()}
    return {}

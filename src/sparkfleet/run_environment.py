"""The environment a run's processes get: what the shell that started sparkfleet passes on, less what would load
code into, or change the trust of, every Python the run starts as root.

ansible-runner starts ansible-playbook with this process's environment, and under a local connection each
module's interpreter inherits it: a PYTHONPATH, PYTHONSTARTUP or PYTHONWARNINGS (whose categories are imported) of
the shell's loaded a sitecustomize.py of the caller's into ansible-playbook and into every module on localhost,
and HOME's user site into each (`sudo -E sparkfleet ...` keeps a user's). They never reach the run: the variables
are left out, and the user site is off (PYTHONNOUSERSITE) where another user may write to it. A file named as a
trust store or credentials (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, NETRC, ...) is passed on only where root or the user
running sparkfleet owns it and its folder and nobody else may write them (a CA another user can edit would let them
answer for any registry or index).

sparkfleet itself was started with that environment already: a PYTHONPATH set there ran in it before any of its
code. That boundary is the shell's (SECURITY.md); what is drawn here is that the run adds nothing to it.
"""

from __future__ import annotations

import os
import site

from sparkfleet.collection_home import collection_module

_isolated = collection_module("common._isolated")
_trusted = collection_module("common._trusted")
# Code a Python loads because the environment says so: never passed to a run. The same variables every Python a
# module starts goes without (module_utils/common/_isolated.py; its cache folders a module drops itself).
CODE = tuple(name for name in _isolated.LEFT_OUT if name.startswith("PYTHON"))
# Files the run's Pythons (and curl, git, pip) trust or take credentials from: passed on only when trusted.
TRUST = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NETRC")


def untrusted(path: str) -> str | None:
    """Why `path` cannot be trusted by root's processes, or None: the one rule of module_utils/common/_trusted.py,
    over its whole path (each folder and link on the way root's or the user's, none writable by another user but
    with the sticky bit), and the file or folder itself writable by nobody else."""
    try:
        _trusted.check_path(path, "the file", "any")
    except _trusted.Untrusted as exc:
        return str(exc)
    return None


def for_run(environ: dict[str, str] | None = None) -> list[str]:
    """Takes out of `environ` (this process's by default, which ansible-runner copies for the run) what must not
    reach the run; returns each as a sentence, for a note."""
    environ = os.environ if environ is None else environ
    said = []
    for name in CODE:
        if name in environ:
            del environ[name]
            said.append(f"{name} (it would load code into ansible-playbook and every module on localhost)")
    for name in TRUST:
        value = environ.get(name)
        if value is None:
            continue
        why = untrusted(value)
        if why:
            del environ[name]
            said.append(f"{name}={value} ({why})")
    # HOME's user site (a `pip install --user` of sparkfleet's own needs it): off where another user may write it.
    user_site = site.getusersitepackages()
    why = untrusted(user_site) if os.path.isdir(user_site) else None
    if why:
        environ["PYTHONNOUSERSITE"] = "1"
        said.append(f"the user site {user_site} ({why})")
    return said

# Copyright: sparkfleet contributors
# Apache License 2.0
"""The package manager as dpkg keeps it: who holds its locks, and what its database says of some packages.

Read-only and without running dpkg: the locks through the kernel (fcntl F_GETLK, the locks apt and dpkg take,
never taken here), the packages from dpkg's database file (/var/lib/dpkg/status, what dpkg-query reads), so
the preflight facts answer both in the one module call they already are.
"""

from __future__ import annotations

import fcntl
import os
import struct

LOCKS = ("/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock", "/var/lib/apt/lists/lock",
         "/var/cache/apt/archives/lock")
STATUS_FILE = "/var/lib/dpkg/status"
# The packages sparkfleet installs or checks on a host, whose dpkg state the preflight facts report:
# spark_container_runtime's toolkit (the doctor reports these) and what checks its signing key
# (tests/unit/roles/test_role_contracts.py holds the role's vars to these lists).
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base", "libnvidia-container-tools",
                    "libnvidia-container1")
PACKAGES = (*TOOLKIT_PACKAGES, "gpg", "ca-certificates")
_FLOCK = "hhqqi"
# dpkg-query's ${db:Status-Abbrev}: the wanted state, the current state, the error flag.
_WANT = {"unknown": "u", "install": "i", "hold": "h", "deinstall": "r", "purge": "p"}
_STATE = {"not-installed": "n", "installed": "i", "config-files": "c", "unpacked": "U", "half-configured": "F",
          "half-installed": "H", "triggers-awaited": "W", "triggers-pending": "t"}
_ERROR = {"ok": " ", "reinstreq": "R"}


def lock_holder(path: str) -> dict | None:
    """Who holds a write-conflicting lock on path: {path, pid, command}; None when free or missing."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        query = struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        kind, _unused, _unused, _unused, pid = struct.unpack(_FLOCK, fcntl.fcntl(fd, fcntl.F_GETLK, query))
    finally:
        os.close(fd)
    if kind == fcntl.F_UNLCK:
        return None
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8") as handle:
            command = handle.read().strip()
    except OSError:
        command = "unknown"
    return {"path": path, "pid": pid, "command": command}


def lock_holders(paths=LOCKS) -> list[dict]:
    return [h for h in (lock_holder(path) for path in paths) if h]


def status_lines(text: str, packages) -> list[str]:
    """dpkg's database (the status file's text) as `dpkg-query --show --showformat='${Package} ${Version}
    ${db:Status-Abbrev}\\n' PACKAGES` prints it: one "name version abbrev" line per package dpkg knows, in the
    file's order (abbrev: 'ii ' installed, 'hi ' installed and held, 'iU ' unpacked, ...)."""
    wanted = set(packages)
    lines = []
    for stanza in text.split("\n\n"):
        fields = {}
        for line in stanza.splitlines():
            if line and not line[0].isspace() and ":" in line:
                key, _sep, value = line.partition(":")
                fields[key] = value.strip()
        if fields.get("Package") not in wanted:
            continue
        want, error, state = [*fields.get("Status", "").split(), "", "", ""][:3]
        abbrev = _WANT.get(want, "u") + _STATE.get(state, "n") + _ERROR.get(error, " ")
        lines.append(f"{fields['Package']} {fields.get('Version', '')} {abbrev}")
    return lines


def parse_lines(lines) -> dict[str, tuple[str, str]]:
    """{name: (version, abbrev)} of status lines ("name version abbrev", as status_lines and dpkg-query give
    them); abbrev's first letter is the wanted action (i install, h hold), its second the state (i installed),
    its third the error flag (blank, or R: reinstall required)."""
    found = {}
    for line in lines or []:
        parts = line.split(" ", 2)
        if len(parts) == 3:
            found[parts[0]] = (parts[1], parts[2].rstrip())
    return found


def read_status(packages, path: str = STATUS_FILE) -> dict:
    """{"asked": [...], "lines": [...]} for the packages; lines None when the database cannot be read (no dpkg:
    not a Debian-family host)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return {"asked": list(packages), "lines": None}
    return {"asked": list(packages), "lines": status_lines(text, packages)}

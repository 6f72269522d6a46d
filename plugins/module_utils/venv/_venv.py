# Copyright: sparkfleet contributors
# Apache License 2.0
"""The venv's files, apart from pip: its marker, the link to the active venv, its activate script, pruning.

spark_venv drives pip and the import check; what it keeps on disk, and how a
venv is switched to and pruned, lives here (unit-tested without pip).
"""

from __future__ import annotations

import datetime
import json
import os
import shutil

from ansible_collections.sparkfleet.spark.plugins.module_utils.common._files import atomic_write
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import normalize, parse_pin
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._dist_info import parse_metadata

MARKER = "sparkfleet-venv.json"
CONSTRAINTS = "sparkfleet-constraints.txt"
ENV_BEGIN = "# >>> sparkfleet: the stack matrix's environment (this venv only) >>>"
ENV_END = "# <<< sparkfleet <<<"
FINISHED = ("built", "verified", "failed")  # a marker status after which a venv is whole

_PIP_NOISE = ("Looking in ", "Collecting ", "Downloading ", "Using cached ", "Requirement already satisfied",
              "INFO: pip is looking", "WARNING: Retrying", "Obtaining ", "To fix this you could try",
              "1. loosen the range", "2. remove package versions",
              # uv's progress lines
              "Using Python ", "Resolved ", "Prepared ", "Installed ", "Uninstalled ", "Audited ")


def now() -> str:
    return datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()


def pip_error(stdout: str, stderr: str) -> str:
    """pip's (or uv's) own explanation: its error lines (stderr) and the conflict report pip prints to stdout."""
    lines = [line.rstrip() for line in (stdout + "\n" + stderr).splitlines()]
    # without its last full stop: the caller's sentence goes on after it
    return "\n".join(line for line in lines if line.strip() and not line.lstrip().startswith(_PIP_NOISE)).rstrip(".")


def read_marker(path: str) -> dict | None:
    """The venv's marker, or None when there is none or it cannot be read."""
    try:
        with open(os.path.join(path, MARKER), encoding="utf-8") as handle:
            data = json.load(handle)
        return data if isinstance(data, dict) else None
    except (OSError, ValueError):
        return None


def write_marker(path: str, data: dict) -> None:
    atomic_write(os.path.join(path, MARKER), json.dumps(data, indent=2, sort_keys=True) + "\n")


def active(link: str) -> dict | None:
    """The venv the link points to, from its marker; None without a link. Raises ValueError when the path
    exists and is not a link (sparkfleet never replaces what it did not make)."""
    if not os.path.islink(link):
        if os.path.lexists(link):
            raise ValueError(f"{link} exists and is not a symlink; expected the link sparkfleet manages to the "
                             "active venv. Move it away (it is left untouched).")
        return None
    target = os.path.realpath(link)
    marker = read_marker(target) or {}
    return {"path": target, "python": os.path.join(link, "bin", "python"),
            "fingerprint": marker.get("fingerprint"), "matrix": marker.get("matrix"),
            "last_verified": marker.get("last_verified"), "status": marker.get("status", "unknown"),
            "verification": marker.get("verification")}


def installed(path: str) -> dict[str, str]:
    """{normalized name: version} of every distribution in the venv at `path`, read from its dist-info METADATA
    headers (no Python started, no pip: a converged run reads a few hundred small files)."""
    import glob

    found: dict[str, str] = {}
    for meta in sorted(glob.glob(os.path.join(path, "lib", "python3*", "site-packages", "*.dist-info", "METADATA"))):
        try:
            with open(meta, encoding="utf-8", errors="replace") as handle:
                head = handle.read(16384)
        except OSError:
            continue
        name, version, _requires = parse_metadata(head)
        if name:
            found[normalize(name)] = version or "?"
    return found


def contents_drift(now_installed: dict[str, str], built: dict[str, str], pinned: dict[str, str]) -> list[str]:
    """How a venv differs from what its build installed (`built`: its marker's packages, as pip listed them) and
    from the matrix's pins (`pinned`: pins()), a line a package: 'peft: missing; the matrix pins 0.19.1',
    'transformers 5.14.0: the matrix pins 5.13.1', 'rich 14.2.0: installed after the build' (where the marker
    recorded what the build installed)."""
    built = {normalize(name): version for name, version in (built or {}).items()}
    pinned_versions = {name: parse_pin(spec)[1] for name, spec in pinned.items()}
    said = []
    for name in sorted(set(built) | set(pinned_versions) | set(now_installed)):
        have, want, made = now_installed.get(name), pinned_versions.get(name), built.get(name)
        expected = want or made
        source = "the matrix pins" if want else "the build installed"
        if expected is None:
            if built:  # a marker that recorded no packages (an older sparkfleet's) is held to the pins alone
                said.append(f"{name} {have}: installed after the build")
        elif have is None:
            said.append(f"{name}: missing; {source} {expected}")
        elif have != expected and have.split("+", 1)[0] != expected:
            said.append(f"{name} {have}: {source} {expected}")
    return said


def switch_link(link: str, path: str) -> None:
    """Point the link at path atomically: it is the old venv or the new one, never missing."""
    tmp = f"{link}.sparkfleet-new"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(path, tmp)
    os.replace(tmp, link)


def with_environment(activate: str, environment: dict) -> str:
    """The activate script with the matrix's environment exported at its end (this venv only)."""
    # Always single-quoted (a ' inside closed, escaped and reopened), so no value runs as code when sourced.
    exports = ["export {}='{}'".format(k, str(v).replace("'", "'\"'\"'")) for k, v in sorted(environment.items())]
    return activate.rstrip("\n") + "\n\n" + "\n".join([ENV_BEGIN, *exports, ENV_END]) + "\n"


def to_prune(root: str, current: str, previous: str | None, keep: int) -> list[str]:
    """The venvs under root to remove: all but current, the one it replaced and the `keep` newest others.

    The replaced venv counts first among the kept, then the newest. Only directories holding
    sparkfleet's marker are ever candidates.
    """
    current = os.path.realpath(current)
    others = []
    for entry in os.scandir(root) if os.path.isdir(root) else []:
        marker = read_marker(entry.path) if entry.is_dir(follow_symlinks=False) else None
        if marker and os.path.realpath(entry.path) != current:
            when = marker.get("verified_at") or marker.get("built_at") or marker.get("started_at") or ""
            others.append((os.path.realpath(entry.path) == previous, when, entry.path))
    others.sort(reverse=True)  # the replaced venv first, then the newest
    return sorted(path for _replaced, _when, path in others[keep:])


def remove(paths: list[str]) -> None:
    for path in paths:
        shutil.rmtree(path, ignore_errors=True)

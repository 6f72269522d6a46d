# Copyright: sparkfleet contributors
# Apache License 2.0
"""The stack matrix's hash lock: made from a resolved sequence, checked against the matrix and the host's
Python, written as hashed requirements."""

from __future__ import annotations

import re

from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import inert_dump, template_markers
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import (
    MatrixError,
    _SHA256,
    check,
    fingerprint,
    normalize,
    parse_pin,
)


# The hash lock (sparkfleet matrix lock): every package each step resolves to, with its wheel's sha256, so the
# venv's steps can run with pip's --require-hashes. Written from the matrix check's resolution, never by hand.
LOCK_VERSION = 1


_LOCK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


_LOCK_VERSION_TEXT = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")

# A wheel's file name (PEP 427: name-version[-build]-python-abi-platform.whl): it comes from an index's answer, is
# written into the lock and names a file of the wheelhouse, so it is one file name of a wheel's alphabet.
_WHEEL = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+!-]{0,250}\.whl$")
# The fields of the lock, of a package entry.
_LOCK_FIELDS = ("lock_version", "matrix", "fingerprint", "target", "steps")
_ENTRY_FIELDS = ("name", "version", "sha256", "wheel")
_VARIABLE = "spark_venv_lock"


def render(lock: dict, source: str) -> str:
    """The hash lock's file (the inventory's group_vars/all/spark_venv_lock.yml): its one variable, written so
    Ansible, which loads the file as a variable, never renders what an index said (inert_dump)."""
    header = (f"# Written by sparkfleet matrix lock from {source}: every package each step of\n"
              "# the sequence resolves to, with the sha256 of its wheel as its index gave it. Review its diff like the\n"
              "# matrix's and commit it with the inventory; the venv installs it with pip's --require-hashes (always\n"
              "# when its indexes are mirrors, else with spark_venv_require_hashes: true).\n")
    return inert_dump({_VARIABLE: lock}, header)


def lock_from_sequence(matrix, sequence: list[dict]) -> dict:
    """The lock of a checked matrix from spark_matrix_check's sequence results (every step, each resolved).

    Raises MatrixError naming each step that did not resolve or a package whose index gave no sha256.
    """
    checked = check(matrix)
    by_step = {s["step"]: s for s in sequence}
    problems = []
    steps = {}
    for step in checked["steps"]:
        result = by_step.get(step["id"])
        if not result or result.get("status") != "resolves":
            status = result.get("status", "not asked") if result else "not asked"
            problems.append(f"step {step['id']}: {status}" + (f" ({result['detail']})" if result and
                                                              result.get("detail") else ""))
            continue
        entries = sorted(result.get("locked") or [], key=lambda e: normalize(e["name"]))
        unhashed = [f"{e['name']}=={e['version']}" for e in entries if not e.get("sha256")]
        if unhashed:
            problems.append(f"step {step['id']}: the index gave no sha256 for {', '.join(unhashed)}")
        steps[step["id"]] = [{"name": normalize(e["name"]), "version": e["version"], "sha256": e.get("sha256"),
                              "wheel": e.get("wheel")} for e in entries]
        problems += [f"step {step['id']}: {problem}" for e in steps[step["id"]] if (problem := _entry_problem(e))]
    if problems:
        raise MatrixError("cannot lock the matrix: " + "; ".join(problems) + ". Nothing was written")
    return {"lock_version": LOCK_VERSION, "matrix": checked["name"], "fingerprint": fingerprint(checked, []),
            "target": checked["target"], "steps": steps}


def lock_python_mismatch(lock: dict | None, version: str) -> tuple[list[str], int]:
    """For a host whose Python is `version` (3.11): the hash lock's wheels built for another CPython (their
    file names, whose python tag is cpXY), and how many wheels the lock has in all. Pure-Python wheels
    (py3-none-any) install on any Python 3; a lock resolved for the matrix's target (cp312) that holds compiled
    wheels cannot be installed by another Python's pip, whatever the warning says."""
    major, _sep, minor = str(version).partition(".")
    have = (int(major), int(minor.split(".")[0])) if major.isdigit() and minor.split(".")[0].isdigit() else None
    wheels = [str(e.get("wheel") or "") for entries in (lock or {}).get("steps", {}).values() for e in entries]
    other = []
    for wheel in wheels:
        parts = wheel[:-len(".whl")].split("-") if wheel.endswith(".whl") else []
        if len(parts) < 5 or have is None:
            continue
        pythons, abis = parts[-3].split("."), parts[-2].split(".")
        built = [(int(t[2]), int(t[3:])) for t in pythons if re.fullmatch(r"cp\d\d+", t)]
        if not built or len(built) != len(pythons):
            continue  # py3, py2.py3: pure Python
        # cp38-abi3: the stable ABI, for that CPython and every later one; cp312-cp312: that CPython alone
        if not any(v == have or ("abi3" in abis and v <= have) for v in built):
            other.append(wheel)
    return other, len(wheels)


def _entry_problem(entry: dict) -> str | None:
    """What is wrong with one package of the lock (what an index said of it), None when nothing."""
    name, version, sha = (str(entry.get(k, "")) for k in ("name", "version", "sha256"))
    wheel = entry.get("wheel")
    if (not _LOCK_NAME.match(name) or not _LOCK_VERSION_TEXT.match(version) or not _SHA256.match(sha)
            or (wheel is not None and not _WHEEL.match(str(wheel)))):
        return (f"{dict(entry)!r} is not name, version and a sha256 of 64 hex digits, with its wheel's file name "
                "(name-version-python-abi-platform.whl, no folder)")
    unknown = [str(k) for k in entry if k not in _ENTRY_FIELDS]
    return f"{name} has {', '.join(unknown)}, no field of a locked package ({', '.join(_ENTRY_FIELDS)})" if unknown \
        else None


def validate_lock(lock, matrix) -> list[str]:
    """What is wrong with a hash lock for this matrix (empty: nothing). Every value that reaches pip's
    requirements file is checked here, where it enters; text that would be a template, or a field the lock does
    not have, is refused."""
    if not isinstance(lock, dict):
        return [f"the lock is a {type(lock).__name__}, expected a mapping written by sparkfleet matrix lock"]
    errors = [f"{where} would run as a template; the hash lock holds data only: run sparkfleet matrix lock again"
              for where in template_markers(lock)]
    errors += [f"the lock has {key!r}, which is no field of the hash lock ({', '.join(_LOCK_FIELDS)})"
               for key in lock if key not in _LOCK_FIELDS]
    if lock.get("lock_version") != LOCK_VERSION:
        errors.append(f"lock_version is {lock.get('lock_version')!r}, expected {LOCK_VERSION}")
    want = fingerprint(check(matrix), [])
    if lock.get("fingerprint") != want:
        errors.append(f"the lock was written for another matrix (fingerprint {str(lock.get('fingerprint'))[:12]}, "
                      f"the matrix's is {want[:12]}): run sparkfleet matrix lock after changing the matrix")
    steps = lock.get("steps")
    ids = [s["id"] for s in matrix["steps"]]
    if not isinstance(steps, dict) or sorted(steps) != sorted(ids):
        errors.append(f"the lock's steps are {sorted(steps) if isinstance(steps, dict) else steps!r}, the "
                      f"matrix's {sorted(ids)}")
        return errors
    for step_id, entries in steps.items():
        if not isinstance(entries, list) or not entries:
            errors.append(f"step {step_id}: expected a list of packages")
            continue
        for entry in entries:
            if not isinstance(entry, dict):
                errors.append(f"step {step_id}: {entry!r} is not a package entry")
                continue
            if (problem := _entry_problem(entry)):
                errors.append(f"step {step_id}: {problem}")
        pinned = {normalize(parse_pin(spec)[0]): parse_pin(spec)[1]
                  for spec in next(s for s in matrix["steps"] if s["id"] == step_id)["packages"]}
        locked = {normalize(str(e.get("name"))): str(e.get("version")) for e in entries if isinstance(e, dict)}
        moved = [f"{n} {v} (locked {locked.get(n)})" for n, v in pinned.items()
                 if locked.get(n) != v and str(locked.get(n)).split("+", maxsplit=1)[0] != v]
        if moved:
            errors.append(f"step {step_id}: the lock does not hold the matrix's pins: {', '.join(moved)}")
    return errors


def hashed_requirements(entries: list[dict]) -> str:
    """A requirements file for pip --require-hashes: one `name==version --hash=sha256:...` per package."""
    return "".join(f"{e['name']}=={e['version']} --hash=sha256:{e['sha256']}\n" for e in entries)

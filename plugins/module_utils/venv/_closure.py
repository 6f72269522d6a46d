# Copyright: sparkfleet contributors
# Apache License 2.0
"""The declared closure of a stack: what every package the matrix's steps install declares it needs (its
METADATA's Requires-Dist, markers evaluated for the matrix's target), judged against what the steps install.

pip's `--no-deps` (Unsloth's step) keeps pip from re-resolving torch or triton, and also from saying that the
packages it installs ask for versions the set does not have, or for packages no step installs. The closure says
it, installing nothing, from what the indexes publish (pip's dry-run report carries each package's metadata). Two
kinds of finding, each naming who declares what and what is installed:

- a violation: a package of the set declares a requirement the installed version of another does not meet
  (unsloth 2026.7.2 declares transformers<=5.5.0; the stack step installs transformers 5.13.1);
- a missing requirement: a package declares one that no step installs (unsloth_zoo declares tyro).

A matrix that pins outside a declared range on purpose says so: each deviation in its `accepted:` list, with
who declares it, what it requires and the reason. A violation not accepted fails the matrix check; a missing
requirement is said, each declarer's on one line.
"""

from __future__ import annotations

import re

try:
    from packaging.markers import InvalidMarker
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.version import InvalidVersion, Version
    HAS_PACKAGING = True
except ImportError:  # pragma: no cover - ansible-core brings packaging to the controller
    HAS_PACKAGING = False


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", str(name)).lower()


def environment(target: dict) -> dict[str, str]:
    """The marker environment of the matrix's target (CPython X.Y on Linux, its architecture): what pip evaluates
    for `--python-version X.Y --platform manylinux_*_ARCH`."""
    python = str(target.get("python") or "3.12")
    return {"python_version": ".".join(python.split(".")[:2]), "python_full_version": f"{python}.0"
            if python.count(".") == 1 else python, "implementation_name": "cpython",
            "implementation_version": f"{python}.0" if python.count(".") == 1 else python,
            "platform_python_implementation": "CPython", "sys_platform": "linux", "platform_system": "Linux",
            "os_name": "posix", "platform_machine": str(target.get("arch") or "aarch64"), "platform_release": "",
            "platform_version": "", "extra": ""}


def declared(requires_dist: list[str], target: dict) -> list[Requirement]:
    """The requirements that hold for the target: each Requires-Dist whose marker is true there, extras not asked
    for left out. A line that is not a requirement is left out too (pip would refuse the package first)."""
    env = environment(target)
    out = []
    for line in requires_dist or []:
        try:
            requirement = Requirement(str(line))
        except InvalidRequirement:
            continue
        try:
            if requirement.marker is not None and not requirement.marker.evaluate(env):
                continue
        except (InvalidMarker, ValueError, TypeError):
            continue
        out.append(requirement)
    return out


def installed_set(steps: list[dict]) -> dict[str, dict]:
    """What the sequence leaves installed, by normalized name: each step's packages (as its dry run resolved them,
    with their metadata), a later step's version over an earlier's (torchao upgraded last)."""
    found: dict[str, dict] = {}
    for step in steps:
        for package in step.get("declared") or []:
            key = normalize(package["name"])
            if key not in found or found[key]["version"] != package["version"]:  # the same again: the first step's
                # Whether what it declares and no step installs is missing: where pip installed it without its
                # dependencies (--no-deps), or resolved its step whole; not where the step did not resolve (pip
                # would have brought them) or was not asked (skipped: its pins alone are known).
                found[key] = {**package, "step": step.get("step"),
                              "judge_missing": bool(step.get("no_deps") or step.get("resolved"))}
    return found


def _matches(accepted: dict, finding: dict) -> bool:
    by, needs = str(accepted.get("declared_by", "")), str(accepted.get("requires", ""))
    name, _sep, version = by.partition("==")
    return (normalize(name) == normalize(finding["declarer"]) and (not version or version == finding["version"])
            and normalize(needs) == normalize(finding["name"]))


def judge(steps: list[dict], target: dict, accepted: list[dict] | None = None) -> dict:
    """The closure of the sequence's steps (spark_matrix_check's results, each with `declared`): every finding,
    which the matrix accepts (with its reason) and which it does not, and the lines a user reads."""
    if not HAS_PACKAGING:
        return {"checked": False, "findings": [], "unaccepted": [], "lines": [
            "the closure was not checked: this Python lacks the packaging library (pip install packaging)"]}
    installed = installed_set(steps)
    findings = []
    for key, package in sorted(installed.items()):
        for requirement in declared(package.get("requires_dist") or [], target):
            need = normalize(requirement.name)
            if need == key:
                continue
            have = installed.get(need)
            base = {"declarer": package["name"], "version": package["version"], "name": requirement.name,
                    "requirement": str(requirement).split(";", maxsplit=1)[0].strip(), "step": package.get("step")}
            if have is None:
                if not package.get("judge_missing", True):
                    continue
                findings.append({**base, "kind": "missing", "installed": None, "text": (
                    f"{package['name']} {package['version']} declares {base['requirement']}; no step installs "
                    f"{requirement.name}")})
                continue
            try:
                met = requirement.specifier.contains(Version(have["version"]), prereleases=True)
            except InvalidVersion:
                met = True  # a version pip itself would not compare: left to pip
            if not met:
                # the clauses the installed version breaks (transformers<=5.5.0 of fifteen), each whole
                broken = [str(s) for s in requirement.specifier
                          if not s.contains(Version(have["version"]), prereleases=True)]
                clauses = len(list(requirement.specifier))
                of = f" (of {clauses} clauses)" if clauses > len(broken) else ""
                said = f"{requirement.name}{','.join(broken)}{of}"
                findings.append({**base, "kind": "violation", "installed": have["version"], "text": (
                    f"{package['name']} {package['version']} declares {said}; step {have['step']} installs "
                    f"{have['name']} {have['version']}")})
    for finding in findings:
        reason = next((a.get("reason") for a in accepted or [] if isinstance(a, dict) and _matches(a, finding)), None)
        finding["accepted"] = reason
    # A violation the matrix does not accept fails it; so does a requirement no step installs, once every step
    # resolved (a venv without it fails at import: `--no-deps` leaves it out, and a later step must install it).
    # Where a step did not resolve, what it would have brought is not known: the missing list is provisional, said
    # so, and fails nothing.
    unresolved = [str(s.get("step")) for s in steps if not s.get("resolved") and not s.get("no_deps")]
    # Where a step did not resolve, a violated package that no step pins may be one that step would have moved (the
    # stack step's pip downgrades the fsspec torch's step brought to what datasets declares): provisional too. A
    # violation of a pinned version holds whatever the steps resolve to. (`pins`: each step's pinned names, where
    # the caller gives them; without them nothing is provisional.)
    pinned = {normalize(name) for s in steps for name in s.get("pins") or []}
    known = all("pins" in s for s in steps)
    for f in findings:
        f["provisional"] = bool(f["kind"] == "violation" and unresolved and known
                                and normalize(f["name"]) not in pinned)
    unaccepted = [f for f in findings if not f["accepted"] and not f["provisional"]
                  and (f["kind"] == "violation" or (f["kind"] == "missing" and not unresolved))]
    lines = [f"{'ACCEPTED' if f['accepted'] else 'VIOLATION'} {f['text']}"
             + (f" (accepted: {f['accepted']})" if f["accepted"] else "")
             + (f" (provisional: step {', '.join(unresolved)} did not resolve, and may move {f['name']}, which no "
                "step pins)" if f["provisional"] and not f["accepted"] else "")
             for f in findings if f["kind"] == "violation"]
    missing: dict[str, list[str]] = {}
    for f in findings:
        if f["kind"] == "missing":
            missing.setdefault(f"{f['declarer']} {f['version']}", []).append(f["requirement"])
    provisional = (f" (provisional: step {', '.join(unresolved)} did not resolve, and what it would install is "
                   "not known)") if unresolved else ""
    lines += [f"MISSING {who} declares, and no step installs: {', '.join(needs)}{provisional}"
              for who, needs in missing.items()]
    if not findings:
        lines = [f"clean: the {len(installed)} packages the steps install meet every requirement they declare"]
    _kept, stale = still_accepted(accepted, findings)
    lines += [f"note: accepted deviation {a.get('declared_by')} -> {a.get('requires')} no longer happens; remove it "
              "from the matrix" for a in stale]
    return {"checked": True, "packages": len(installed), "findings": findings, "unaccepted": unaccepted,
            "lines": lines, "provisional": unresolved}


def still_accepted(accepted: list[dict] | None, findings: list[dict]) -> tuple[list[dict], list[dict]]:
    """A matrix's accepted deviations split by a closure's findings: those that still happen, and those that no
    longer do (a newer set meets the requirement: a candidate leaves them out)."""
    entries = [a for a in accepted or [] if isinstance(a, dict)]
    kept = [a for a in entries if any(_matches(a, f) for f in findings)]
    return kept, [a for a in entries if a not in kept]


def accepted_problems(accepted) -> list[str]:
    """What is wrong with a matrix's `accepted:` list (empty: nothing)."""
    if accepted is None:
        return []
    if not isinstance(accepted, list):
        return [f"accepted is {type(accepted).__name__}; expected a list of deviations (declared_by, requires, "
                "reason)"]
    problems = []
    for index, entry in enumerate(accepted):
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) and entry.get(k).strip()
                                                  for k in ("declared_by", "requires", "reason")):
            problems.append(f"accepted[{index}] is {entry!r}; expected declared_by (a package, or name==version), "
                            "requires (the package it declares) and reason (why the matrix pins outside it)")
    return problems


# What `pip check` says of a built venv (pip's own wording, one line a problem): a requirement the installed version
# does not meet, a requirement not installed, or a package that does not fit the platform.
_PIP_CHECK_VIOLATION = re.compile(r"^(?P<declarer>\S+) (?P<version>\S+) has requirement (?P<requirement>.+), but you "
                                  r"have (?P<name>\S+) (?P<installed>[^\s]+?)\.?$")
_PIP_CHECK_MISSING = re.compile(r"^(?P<declarer>\S+) (?P<version>\S+) requires (?P<name>\S+?), which is not "
                                r"installed\.?$")


def pip_check(text: str, accepted: list[dict] | None = None) -> dict:
    """The built venv's own check (`python -m pip check`'s output), judged as the closure is: each problem with the
    matrix's reason where it accepts it (`accepted:`), and the ones it does not accept, which fail the venv's
    verification. A line pip prints that is neither kind is a problem the matrix cannot accept."""
    findings = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("No broken requirements"):
            continue
        if found := _PIP_CHECK_VIOLATION.match(line):
            f = found.groupdict()
            findings.append({**f, "kind": "violation", "text": (
                f"{f['declarer']} {f['version']} declares {f['requirement']}; the venv has {f['name']} "
                f"{f['installed']}")})
        elif found := _PIP_CHECK_MISSING.match(line):
            f = found.groupdict()
            findings.append({**f, "kind": "missing", "requirement": f["name"], "installed": None, "text": (
                f"{f['declarer']} {f['version']} declares {f['name']}; the venv does not have it")})
        else:
            findings.append({"kind": "other", "declarer": "", "version": "", "name": "", "text": line})
    for finding in findings:
        finding["accepted"] = next((a.get("reason") for a in accepted or []
                                    if isinstance(a, dict) and finding["kind"] != "other" and _matches(a, finding)),
                                   None)
    return {"checked": True,
            "accepted": [f"{f['text']} (accepted: {f['accepted']})" for f in findings if f["accepted"]],
            "unaccepted": [f["text"] for f in findings if not f["accepted"]]}

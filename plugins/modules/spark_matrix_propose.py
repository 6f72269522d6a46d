#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Work out a candidate stack matrix: the newest set its indexes offer that resolves together, or a set given."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_matrix_propose
short_description: Work out a candidate stack matrix, the newest set that resolves together or a set given
description:
  - Asks the resolver, installing nothing, step by step in the matrix's order, for the matrix's target (Python,
    linux architecture, glibc) - each pin at its version or newer (never older), or exactly at the version given in
    O(pins), with the step's own arguments (C(--no-deps) and C(-U) kept) and the earlier steps' chosen pins as
    constraints, from the step's index (torch from its own, the cu130 one) and the earlier steps'. The resolver (uv,
    for the target's platform and Python, as spark_matrix_check) picks the newest release the step's other pins and
    the earlier steps accept.
  - Returns the candidate matrix (named C(spark-stack-YYYY-MM-DD), C(last_verified) today, C(proposed_from) the
    matrix's name, no evidence until a proof writes it), one row per pin (old, new, moved) and the date each
    release was uploaded where the index says (PEP 691 JSON, C(upload-time); PyPI does, an index of plain pages
    does not).
  - The set respects its declared closure (what every package of the steps declares, the C(--no-deps) step's
    included) - a pin that violates a requirement another package declares, and the matrix does not accept, is
    held within it and the set asked again (older than the matrix's pin if it must be), each hold said in
    RV(lines) with who declared it. A set given (O(pins)) that violates one is kept as given, its violations shown
    and written in the candidate as accepted deviations.
  - A step that does not resolve is named with the resolver's own account of the conflict and the pins to blame;
    the later steps are not asked. Nothing is written anywhere; playbooks/matrix_propose.yml builds, proves and writes.
version_added: "0.2.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes, sparkfleet.spark.sparkfleet_read_only]
options:
  matrix:
    description: The stack matrix in use (matrix/spark-stack.yml, loaded).
    type: dict
    required: true
  pins:
    description:
      - A set the user gives, C(name==version) each, for packages the matrix pins; the others are proposed as
        above. A pin the matrix does not have is refused, nothing asked.
    type: list
    elements: str
    default: []
  index_mirrors:
    aliases: [index_overrides]
    description: Upstream index URL -> the URL to ask instead (a mirror, the test bed's index).
    type: dict
    default: {}
  today:
    description: The candidate's date (YYYY-MM-DD); default today.
    type: str
  timeout:
    description: Seconds pip and the date requests wait for an index.
    type: int
    default: 20
"""

EXAMPLES = r"""
- name: The newest set the indexes offer
  sparkfleet.spark.spark_matrix_propose:
    matrix: "{{ lookup('ansible.builtin.file', 'matrix/spark-stack.yml') | from_yaml }}"
  register: proposal

- name: A set of my own
  sparkfleet.spark.spark_matrix_propose:
    matrix: "{{ lookup('ansible.builtin.file', 'matrix/spark-stack.yml') | from_yaml }}"
    pins: [trl==1.9.0, datasets==4.7.0]
"""

RETURN = r"""
candidate:
  description: The candidate matrix (null when a step does not resolve).
  returned: success
  type: dict
rows:
  description: One per pin of the candidate - step, package, old (null for a pin added to the held step), new,
    moved, added, given (the pin was in O(pins)).
  returned: success
  type: list
  elements: dict
released:
  description: C(name==version) -> the day its files were uploaded (null where the index does not say).
  returned: success
  type: dict
lines:
  description: The diff as the screen shows it, one line per pin (C(old (date) -> new (date)), C(= old (date)) or
    C(new version (date)) for a pin added), then what held a pin back, what was added and which accepted
    deviation was left out, and why.
  returned: success
  type: list
  elements: str
moved:
  description: How many of the matrix's pins the candidate moves.
  returned: success
  type: int
added:
  description: How many pins the candidate adds to the held step.
  returned: success
  type: int
resolves:
  description: Every step resolved.
  returned: success
  type: bool
failure:
  description: Where it did not resolve - step, status (conflict, missing, unreachable, error), detail (the resolver's
    words) and blame (the pins given or moved that the failure names); null when every step resolved.
  returned: success
  type: dict
held:
  description: Each pin held back by what another package of the set declares (the closure) - name, specifier
    (what it was held within), declarer, version, requirement (as declared). The screen says each in RV(lines).
  returned: success
  type: list
  elements: dict
closure:
  description: The candidate's declared closure - lines (each finding, accepted or not, and each requirement no
    step installs) and clean (no violation but those the matrix accepts and those of a set given, which the
    candidate carries as accepted deviations); null when a step did not resolve.
  returned: success
  type: dict
"""

import datetime
import json
import re
import sys
import urllib.parse
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv import _closure as closure
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._indexes import mirrored, step_indexes
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._matrix_module import resolvable, start
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._matrix_proposal import (
    added_lines,
    blame,
    candidate,
    changes,
    diff_lines,
    given_pins,
    held_lines,
    public,
    step_specs,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._pip_dry_run import (
    dry_run,
    failure,
    held_constraints,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import (
    MatrixError,
    normalize,
    parse_pin,
)

SIMPLE_JSON = "application/vnd.pypi.simple.v1+json"
DAY = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[T ]|$)")


def released(index: str, name: str, version: str, timeout: int) -> str | None:
    """The day the index says the release's files were uploaded (PEP 691 JSON with PEP 700's upload-time), the
    earliest of its files; None where it does not say. The index's own credentials go to it alone (no redirect)."""
    parts = urllib.parse.urlsplit(index)
    bare = urllib.parse.urlunsplit((parts.scheme, parts.hostname + (f":{parts.port}" if parts.port else ""),
                                    parts.path.rstrip("/") + f"/{normalize(name)}/", "", ""))
    try:
        response = open_url(bare, headers={"Accept": f"{SIMPLE_JSON}, text/html;q=0.01"}, timeout=timeout,
                            url_username=urllib.parse.unquote(parts.username or "") or None,
                            url_password=urllib.parse.unquote(parts.password or "") or None,
                            force_basic_auth=bool(parts.username), follow_redirects="none")
        if SIMPLE_JSON not in (response.headers.get("Content-Type") or ""):
            return None
        files = json.loads(response.read()).get("files") or []
    except Exception:  # pylint: disable=broad-except  # any failure: the date is unknown, the proposal goes on
        return None
    return release_day(files, name, version)


def release_day(files, name: str, version: str) -> str | None:
    """The earliest upload day of the release's files, from an index's PEP 691 `files`: what the index says is
    checked before it is shown or written (an ISO day, PEP 700's upload-time), anything else is unknown."""
    if not isinstance(files, list):
        return None
    times = sorted(f["upload-time"][:10] for f in files
                   if isinstance(f, dict) and isinstance(f.get("upload-time"), str) and DAY.match(f["upload-time"])
                   and file_version(str(f.get("filename", "")), name) in (version, public(version)))
    return times[0] if times else None


def file_version(filename: str, name: str) -> str | None:
    """The (public) version in a wheel's or sdist's file name, for the project `name`."""
    stem = filename[:-4] if filename.endswith(".whl") else filename.rsplit(".tar", 1)[0].rsplit(".zip", 1)[0]
    prefix = normalize(name).replace("-", "_")
    head, _sep, rest = stem.partition("-")
    if normalize(head).replace("-", "_") != prefix or not rest:
        return None
    return public(rest.split("-", 1)[0])


# How many times the set is asked again, each time held back by what the last one's closure found.
CLOSURE_ROUNDS = 4


def respecting_closure(module: AnsibleModule, matrix: dict, given: dict, index_mirrors: dict, timeout: int) -> dict:
    """The newest set in which no package's declared requirement is violated (but those the matrix accepts, and
    those of a pin the user gave), and, where the matrix has a held step (hold: true), none is missing: asked,
    judged (module_utils/venv/_closure.py), and asked again with each violated package held within what its
    declarer declares and each missing one added to the held step, until the closure is clean or nothing more can
    be held or added. {chosen, failure, holds, additions, closure}."""
    holds: dict[str, list[dict]] = {}
    # What the set declares and no step installs (a --no-deps step's packages: what a newer Unsloth newly asks
    # for), by normalized name: {name, specifiers, declared_by}, asked of the held step.
    additions: dict[str, dict] = {}
    takes_additions = any(step.get("hold") for step in matrix["steps"])
    for _round in range(CLOSURE_ROUNDS):
        found = propose(module, matrix, given, index_mirrors, timeout, holds, additions)
        if found["failure"]:
            return {**found, "holds": holds, "additions": additions, "closure": None}
        judged = closure.judge(found["steps"], matrix["target"], matrix.get("accepted"))
        new = []
        for finding in judged["unaccepted"]:
            key = normalize(finding["name"])
            if key in given or normalize(finding["declarer"]) in given:
                continue  # the user's own pin: shown and written as an accepted deviation, never moved
            specifier = str(closure.Requirement(finding["requirement"]).specifier)
            held = holds.setdefault(key, [])
            if any(h["declarer"] == finding["declarer"] and h["specifier"] == specifier for h in held):
                continue
            if not any(h["specifier"] == specifier for h in held):
                new.append(key)  # a new bound: ask again (a second declarer of the same one is only named)
            held.append({**finding, "specifier": specifier})
        for finding in judged["findings"] if takes_additions else []:
            if finding["kind"] != "missing":
                continue
            # The name as declared, within what each declarer asks (extras are not pinned: a held step installs
            # each package with its own dependencies, not its extras').
            specifier = str(closure.Requirement(finding["requirement"]).specifier)
            entry = additions.setdefault(normalize(finding["name"]), {"name": finding["name"], "specifiers": [],
                                                                      "declared_by": []})
            entry["declared_by"] = list(dict.fromkeys([*entry["declared_by"],
                                                       f"{finding['declarer']} {finding['version']}"]))
            if specifier not in entry["specifiers"]:
                entry["specifiers"].append(specifier)
                new.append(normalize(finding["name"]))
        if not new:
            break
    return {**found, "holds": holds, "additions": additions, "closure": judged}


def given_deviations(judged: dict | None, given: dict) -> list[dict]:
    """The violations a set the user gave leaves, as the candidate's accepted deviations (written only with them)."""
    return [{"declared_by": f"{f['declarer']}=={f['version']}", "requires": f["name"],
             "reason": f"pinned as given to matrix propose, outside what {f['declarer']} {f['version']} declares "
                       f"({f['requirement']})"}
            for f in (judged or {}).get("unaccepted") or []
            if normalize(f["name"]) in given or normalize(f["declarer"]) in given]


def propose(module: AnsibleModule, matrix: dict, given: dict, index_mirrors: dict, timeout: int,
            holds: dict | None = None, additions: dict | None = None) -> dict:
    """Each step in order, as pip would choose: {chosen, failure, steps (each with what it declares, for the
    closure)}."""
    pip = [sys.executable, "-m", "pip"]
    chosen: dict[str, str] = {}
    declared: list[dict] = []
    # What the steps so far installed, in order: a held step (hold: true) resolves with it as constraints, as matrix
    # check asks it.
    installed: list[tuple[str, str]] = []
    steps = matrix["steps"]
    for position, step in enumerate(steps):
        indexes = step_indexes(step, steps[:position], index_mirrors)
        constraints = [f"{parse_pin(spec)[0]}=={chosen[normalize(parse_pin(spec)[0])]}"
                       for earlier in steps[:position] for spec in earlier["packages"]]
        if step.get("hold"):
            constraints = held_constraints(constraints, installed, step["packages"])
        proc, report = dry_run(pip, [*step.get("args", []), *step_specs(step, given, holds, additions)],
                               matrix["target"],
                               indexes, timeout, constraints)
        if report is None:
            return {"chosen": chosen, "failure": {"step": step["id"], **failure(proc.stdout, proc.stderr)},
                    "steps": declared}
        installs = {normalize(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}
        installed += list(installs.items())
        declared.append({"step": step["id"], "resolved": True, "no_deps": "--no-deps" in step.get("args", []),
                         "declared": [{"name": i["metadata"]["name"], "version": i["metadata"]["version"],
                                       "requires_dist": i["metadata"].get("requires_dist") or []}
                                      for i in report["install"]]})
        for spec in step["packages"] + [e["name"] for e in (additions or {}).values() if step.get("hold")]:
            name = normalize(spec.split("==", 1)[0])
            if name not in installs:
                module.fail_json(msg=f"pip's report for step {step['id']} does not install {name}, which the step "
                                     "pins; nothing was proposed")
            chosen[name] = installs[name]
    return {"chosen": chosen, "failure": None, "steps": declared}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "matrix": {"type": "dict", "required": True},
            "pins": {"type": "list", "elements": "str", "default": []},
            "index_mirrors": {"type": "dict", "default": {}, "aliases": ["index_overrides"],
                              "deprecated_aliases": [{"name": "index_overrides", "version": "1.0.0",
                                                      "collection_name": "sparkfleet.spark"}]},
            "today": {"type": "str"},
            "timeout": {"type": "int", "default": 20},
        },
        supports_check_mode=True,
    )
    p = module.params
    matrix = start(module, "Nothing was proposed.")
    resolvable(module, matrix, "Nothing was proposed.")
    try:
        given = given_pins(matrix, p["pins"])
        today = datetime.date.fromisoformat(p["today"]) if p["today"] else datetime.date.today()
    except (MatrixError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    found = respecting_closure(module, matrix, given, p["index_mirrors"], p["timeout"])
    chosen = {**{normalize(parse_pin(s)[0]): parse_pin(s)[1] for st in matrix["steps"] for s in st["packages"]},
              **{name: public(version) for name, version in found["chosen"].items()}}
    for name, version in given.items():  # a step not reached keeps the given pin in the diff
        chosen.setdefault(name, version)
        if found["failure"]:
            chosen[name] = version
    judged = found["closure"] or {}
    deviations = given_deviations(found["closure"], given)
    accepted, stale = None, []
    if judged:
        # The matrix's deviations the candidate's closure still has, then the given set's own; one that no longer
        # happens is left out of the candidate (said), and its closure judged with what the candidate carries.
        kept, stale = closure.still_accepted(matrix.get("accepted"), judged["findings"])
        accepted = [*kept, *deviations]
        judged = closure.judge(found["steps"], matrix["target"], kept)
    added = [entry["name"] for entry in found["additions"].values()]
    proposed = candidate(matrix, chosen, today, added, accepted)
    rows = [{**row, "given": normalize(row["package"]) in given} for row in changes(matrix, proposed)]
    indexes = {parse_pin(spec)[0]: mirrored(step["index_url"], p["index_mirrors"])
               for step in proposed["steps"] for spec in step["packages"]}
    asked = sorted({(row["package"], version) for row in rows for version in (row["old"], row["new"]) if version})
    with ThreadPoolExecutor(max_workers=4) as pool:
        days = list(pool.map(lambda pv: released(indexes[pv[0]], pv[0], pv[1], p["timeout"]), asked))
    dates = {f"{normalize(package)}=={version}": day for (package, version), day in zip(asked, days, strict=True)}
    result = {"changed": False, "rows": rows, "released": dates,
              "lines": diff_lines(rows, dates) + held_lines(found["holds"])
              + added_lines({k: e for k, e in found["additions"].items() if not found["failure"]})
              + [f"left out: accepted deviation {a['declared_by']} -> {a['requires']} (the candidate's closure no "
                 "longer has it)" for a in stale],
              "moved": sum(1 for r in rows if r["moved"] and not r["added"]),
              "added": sum(1 for r in rows if r["added"]), "resolves": found["failure"] is None,
              "candidate": proposed if found["failure"] is None else None, "failure": None,
              "held": [{k: f[k] for k in ("name", "specifier", "declarer", "version", "requirement")}
                       for key in sorted(found["holds"]) for f in found["holds"][key]],
              "closure": {"lines": judged.get("lines") or [], "clean": not [
                  f for f in judged.get("unaccepted") or [] if not any(
                      d["requires"] == f["name"] and d["declared_by"] == f"{f['declarer']}=={f['version']}"
                      for d in deviations)]} if judged else None}
    if found["failure"]:
        fail = found["failure"]
        fail["blame"] = blame(rows, fail.get("detail") or "", fail["step"])
        result["failure"] = fail
    module.exit_json(**result)


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Ask the configured indexes whether every pin of the stack matrix exists as a wheel for the target."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_matrix_check
short_description: Check that every pin of the stack matrix exists for the Spark target and the steps resolve
description:
  - For each pinned package of each step, asks the step's index (or its
    override) with C(pip install --dry-run --no-deps --report) for a wheel of that exact
    version for the matrix's target (Python version, linux architecture, every
    manylinux glibc level up to the target's). Installs nothing; pip reads
    metadata, not whole wheels. A step's pins are asked in one pip run; where
    a pin is missing, each pin alone, so that each row says which and why.
  - Each package is C(available) (with the wheel's file name), C(missing)
    (with the versions the index offers) or C(unreachable) (the index could
    not be asked). pip runs isolated from the host's pip configuration.
  - Then resolves each step of the sequence as a whole, as the installer runs
    it on the Spark (its own arguments; its dependencies unless C(--no-deps)),
    with the earlier steps' pins as constraints and their indexes as extra
    indexes. A step with its dependencies is resolved by uv for the target
    (C(uv pip compile --python-platform aarch64-manylinux_2_39
    --python-version 3.12)), so every dependency's environment marker is
    evaluated for the Spark, never for the controller (pip's C(--platform)
    would bring x86_64's C(nvidia-*-cu12) wheels on an x86_64 controller).
    Without uv, only a controller of the target's architecture and Python
    resolves (with pip); any other fails, saying so. Each step C(resolves)
    (with what it installs), or is a C(conflict) (the resolver's own account
    of which requirements collide, e.g. an Unsloth that asks for another trl
    once C(--no-deps) is dropped),
    C(missing) (a dependency with no wheel for the target) or C(unreachable).
    A package a later step pins, installed at another version, is only a
    note, since the later step moves it on purpose (C(-U torchao) last).
    A held step (C(hold) true, Unsloth's dependencies) is resolved after the
    others, with every pin of the matrix and what the earlier steps resolved
    to as constraints (what it would find installed); where an earlier step
    does not resolve, it is C(unjudged).
  - Also reports the matrix's staleness against O(max_age_days).
  - With O(step), checks that one step (its pins and its place in the sequence); a loop over the steps
    shows a run's progress step by step (playbooks/matrix_check.yml).
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes, sparkfleet.spark.sparkfleet_read_only]
options:
  matrix:
    description: The stack matrix (matrix/spark-stack.yml, loaded).
    type: dict
    required: true
  index_mirrors:
    aliases: [index_overrides]
    description: Upstream index URL -> the URL to ask instead.
    type: dict
    default: {}
  skip_steps:
    description: Step ids not to check (e.g. an index this machine cannot reach).
    type: list
    elements: str
    default: []
  max_age_days:
    description: Age in days after which the matrix counts as stale.
    type: int
    default: 90
  today:
    description: The date to measure staleness against (YYYY-MM-DD); default today.
    type: str
  timeout:
    description: Seconds pip waits for an index before it counts as unreachable.
    type: int
    default: 20
  step:
    description:
      - Check only this step (its id) - its pins and its resolution after the earlier steps' pins. The
        results then hold that step's rows and sequence entry, and RV(table) its lines without the heading.
      - Default, every step.
    type: str
  buildable:
    description:
      - Only whether a venv can be built from the matrix, asked before the build downloads anything (role
        spark_venv) - the sequence resolved on its indexes (O(index_mirrors) applied) and its declared closure
        judged, no pin asked alone, no table. Fails naming each step that does not resolve and each violation the
        matrix does not accept; an index this machine cannot ask is a warning and RV(checked) false.
    type: bool
    default: false
  closure_of:
    description:
      - The sequence this module resolved before (each step's RV(sequence) entry, with what it C(declared)). Judge
        its declared closure instead of asking any index - what every package the steps install declares it needs
        (Requires-Dist, markers evaluated for the matrix's target) against what the steps install. A requirement
        the set violates, or that no step installs, is a finding; one the matrix's C(accepted) list names (who
        declares it, what it requires, why) is accepted.
      - Returns RV(closure) and RV(closure_lines) (and an empty RV(rows)).
    type: list
    elements: dict
"""

EXAMPLES = r"""
- name: Check the pins against PyPI
  sparkfleet.spark.spark_matrix_check:
    matrix: "{{ lookup('ansible.builtin.file', 'matrix/spark-stack.yml') | from_yaml }}"
"""

RETURN = r"""
rows:
  description: One per pinned package - step, package, version, index, status, wheel or detail.
  returned: success
  type: list
missing:
  description: The pins that have no wheel for the target, as C(name==version (step)).
  returned: success
  type: list
unasked_indexes:
  description: The indexes that could not be asked (not C(unreachable), which Ansible reads as the host's).
  returned: success
  type: list
staleness:
  description: C(last_verified), C(age_days), C(stale), C(message).
  returned: success
  type: dict
table:
  description:
    - The rows and the sequence as aligned text lines - RV(heading), RV(pin_lines), RV(sequence_heading),
      RV(sequence_lines).
    - With O(step), that step's RV(pin_lines) and RV(sequence_lines) only.
  returned: success
  type: list
  elements: str
heading:
  description: The table's heading, three lines in one string - the matrix and its target, its age, how it was proved.
  returned: success
  type: str
pin_lines:
  description: One line per pin checked - step, package, version, status, the wheel or what the index said.
  returned: success
  type: list
  elements: str
sequence_heading:
  description: The line before the sequence's lines.
  returned: success
  type: str
sequence_lines:
  description: One line per step resolved (status, what it installs or why not), and its notes.
  returned: success
  type: list
  elements: str
sequence:
  description:
    - One per step - step, status (resolves, conflict, missing, unreachable, error, skipped), constraints
      (the earlier pins), installs (C(name==version), when it resolves), notes, detail, and locked (each
      package it resolves to with its wheel's name and the sha256 its index gave, what C(sparkfleet matrix lock)
      records; the sha256 is null for an index that gives none), and declared (each package it installs - for a
      step that does not resolve, each of its pins - with its name, version and requires_dist, as its index
      publishes them, what O(closure_of) judges).
  returned: success
  type: list
  elements: dict
closure:
  description:
    - With O(closure_of), the declared closure - C(packages) (how many the steps install), C(findings) (each with
      C(kind) violation or missing, C(declarer), C(version), C(requirement), C(installed), C(step), C(text) and
      C(accepted), the matrix's reason or null) and C(unaccepted) (the findings the matrix does not accept).
  returned: with O(closure_of)
  type: dict
closure_lines:
  description: With O(closure_of) or O(buildable), one line per finding (or that the closure is clean), for the table.
  returned: with O(closure_of) or O(buildable)
  type: list
  elements: str
checked:
  description: With O(buildable), whether the matrix was checked (false when an index could not be asked from here).
  returned: with O(buildable)
  type: bool
unaccepted:
  description: With O(buildable), each violation of the declared closure the matrix does not accept.
  returned: with O(buildable)
  type: list
  elements: str
conflicts:
  description: "The steps that do not resolve after the earlier ones, as C(step <id>: <the resolver's account>)."
  returned: success
  type: list
  elements: str
  sample:
    - "step stack: Because trl==1.8.0 depends on datasets>=4.7.0 and you require datasets==4.3.0, we can conclude
      that your requirements and trl==1.8.0 are incompatible. And because you require trl==1.8.0, we can conclude
      that your requirements are unsatisfiable."
"""

import datetime
import sys
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv import _closure as closure
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._indexes import mirrored, step_indexes
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._matrix_module import resolvable, start
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._pip_dry_run import (
    dry_run,
    failure,
    held_constraints,
    locked_entries,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._secrets import redact_url
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import (
    MatrixError,
    normalize,
    parse_pin,
    staleness,
)

SEQUENCE_HEADING = "the sequence, each step resolved with its dependencies after the earlier steps' pins:"
CLOSURE_HEADING = ("the declared closure, what each package the steps install declares it needs (for the target), "
                   "--no-deps or not:")


def available(item: dict) -> dict:
    """A pin's row from pip's report of it: its wheel, and what it declares."""
    return {"status": "available", "wheel": item["download_info"]["url"].rsplit("/", 1)[-1],
            "declared": {"name": item["metadata"]["name"], "version": item["metadata"]["version"],
                         "requires_dist": list(item["metadata"].get("requires_dist") or [])}}


def ask(pip: list[str], spec: str, index: str, target: dict, timeout: int) -> dict:
    """One pin, alone: is there a wheel of exactly this version for the target?"""
    proc, report = dry_run(pip, ["--no-deps", spec], target, [index], timeout)
    if report is None:
        answer = failure(proc.stdout, proc.stderr)
        answer["detail"] = answer["detail"].split(": ", 1)[-1] if answer["status"] == "missing" else answer["detail"]
        return answer
    return available(report["install"][0])


def ask_together(pip: list[str], specs: list[str], index: str, target: dict, timeout: int) -> list[dict]:
    """The pins of one step, each of them on the step's index: one pip run for all of them (--no-deps, so each is
    read as it would be alone). Where the index did not answer, that is every pin's row (asking each again would
    wait out the timeout once a pin); where the run failed otherwise (a pin missing), each pin is asked alone, so
    that the row says which and why."""
    if len(specs) > 1:
        proc, report = dry_run(pip, ["--no-deps", *specs], target, [index], timeout)
        items = {normalize(i["metadata"]["name"]): i for i in (report or {}).get("install", [])}
        found = [items.get(normalize(parse_pin(spec)[0])) for spec in specs]
        if report is not None and all(found):
            return [available(item) for item in found]
        if report is None and (answer := failure(proc.stdout, proc.stderr))["status"] == "unreachable":
            return [dict(answer) for _spec in specs]
    return [ask(pip, spec, index, target, timeout) for spec in specs]


def resolve_step(pip: list[str], step: dict, constraints: list[str], indexes: list[str],
                 later_pins: dict[str, tuple[str, str]], target: dict, timeout: int) -> dict:
    """One step of the sequence as a whole, as pip would run it after the earlier steps.

    constraints: the earlier steps' pins (pip may not move them); indexes:
    the step's own, then the earlier steps' (what they installed is there).
    A package that a later step pins, installed here at another version, is
    a note: the later step moves it on purpose (torchao last).
    """
    proc, report = dry_run(pip, [*step.get("args", []), *step["packages"]], target, indexes, timeout, constraints)
    result = {"step": step["id"], "constraints": constraints}
    if report is None:
        return {**result, **failure(proc.stdout, proc.stderr)}
    installs = {normalize(i["metadata"]["name"]): i["metadata"]["version"] for i in report["install"]}
    locked = locked_entries(report)  # what `sparkfleet matrix lock` records
    # What each package declares it needs, as its index publishes it: the closure's (module_utils/venv/_closure.py)
    declared = [{"name": i["metadata"]["name"], "version": i["metadata"]["version"],
                 "requires_dist": list(i["metadata"].get("requires_dist") or [])} for i in report["install"]]
    notes = [f"installs {name} {version}, which step {later_pins[name][0]} then moves to {later_pins[name][1]}"
             for name, version in sorted(installs.items())
             if name in later_pins and version.split("+")[0] != later_pins[name][1]]
    return {**result, "status": "resolves", "installs": [f"{n}=={v}" for n, v in sorted(installs.items())],
            "notes": notes, "locked": locked, "declared": declared}


def resolve_sequence(pip: list[str], matrix: dict, index_mirrors: dict, skip: list[str], timeout: int,
                     only: str | None = None) -> list[dict]:
    """Every step in order (or only the step `only`, after the earlier ones' pins); a skipped step's pins still
    hold for the later ones, its index is not asked. Each step's dry run depends on the earlier steps' pins, not on
    their answers: they run side by side (four at a time), the results in the sequence's order. A held step (hold:
    true) runs after them, with every pin of the matrix and everything the earlier steps resolved to as
    constraints (pip keeps what is installed; a dry run, which installs nothing, must be told): where an earlier
    step does not resolve, what the held step would find installed is not known, and it is not judged. A held step
    asked alone (`only`, the playbook's loop) asks the steps before it again: their answers are its constraints."""
    jobs = []
    steps = matrix["steps"]
    ids = [s["id"] for s in steps]
    held_alone = only is not None and only in ids and steps[ids.index(only)].get("hold")
    for position, step in enumerate(steps):
        if only is not None and step["id"] != only and not (held_alone and position < ids.index(only)):
            continue
        if step["id"] in skip:
            jobs.append({"step": step["id"], "status": "skipped"})
            continue
        earlier = steps[:position]
        indexes = step_indexes(step, [e for e in earlier if e["id"] not in skip], index_mirrors)
        # A held step (hold: true) runs with every pin of the matrix as a constraint, the later steps' too.
        constraints = [spec for e in (steps if step.get("hold") else earlier) for spec in e["packages"]
                       if e is not step]
        later = {normalize(parse_pin(spec)[0]): (after["id"], parse_pin(spec)[1])
                 for after in steps[position + 1:] for spec in after["packages"]}
        jobs.append((step, constraints, indexes, later))
    asked = [j for j in jobs if isinstance(j, tuple) and not j[0].get("hold")]
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = dict(zip([id(j) for j in asked], pool.map(
            lambda job: resolve_step(pip, *job, matrix["target"], timeout), asked), strict=True))
    results = []
    for job in jobs:
        if not isinstance(job, tuple):
            results.append(job)
            continue
        if id(job) in answers:
            results.append(answers[id(job)])
            continue
        step, constraints, indexes, later = job
        unresolved = [r["step"] for r in results if r["status"] not in ("resolves", "skipped")]
        if unresolved:
            results.append({"step": step["id"], "constraints": constraints, "status": "unjudged", "detail": (
                f"not resolved: it holds what step {', '.join(unresolved)} installs, which does not resolve")})
            continue
        installed = [tuple(spec.split("==", 1)) for r in results for spec in r.get("installs", [])]
        held = held_constraints(constraints, installed, step["packages"])
        results.append(resolve_step(pip, step, held, indexes, later, matrix["target"], timeout))
    return [r for r in results if only is None or r["step"] == only]


def buildable(module: AnsibleModule, matrix: dict, index_mirrors: dict, timeout: int) -> None:
    """Whether a venv can be built from the matrix, asked before anything is downloaded (spark_venv's build): every
    step resolves on its indexes and the declared closure holds nothing the matrix does not accept. Fails naming
    the conflict and the way forward; an index this machine cannot ask is a warning (the build, on the host, asks
    it, and the venv's own pip check judges what it installed)."""
    sequence = resolve_sequence([sys.executable, "-m", "pip"], matrix, index_mirrors, [], timeout)
    unasked = [s for s in sequence if s["status"] in ("unreachable",)]
    if unasked:
        module.warn("the matrix was not checked before the build: " + "; ".join(
            f"step {s['step']}: {s.get('detail', 'unreachable')}" for s in unasked) + " from the controller")
        module.exit_json(changed=False, checked=False, conflicts=[], closure_lines=[], unaccepted=[])
    conflicts = [f"step {s['step']}: {s.get('detail', s['status'])}" for s in sequence if s["status"] != "resolves"]
    judged = closure.judge(closure_steps(matrix, sequence), matrix["target"], matrix.get("accepted"))
    unaccepted = [f["text"] for f in judged["unaccepted"]]
    if conflicts or unaccepted:
        said = ((["its steps do not resolve on its indexes: " + " | ".join(conflicts)] if conflicts else [])
                + (["its packages declare what it does not accept: " + " | ".join(unaccepted)] if unaccepted else []))
        module.fail_json(
            msg=f"the matrix {matrix['name']} cannot be built: {'; '.join(said)}. Nothing was downloaded or built "
                "and the active venv is untouched. Renew the set (sparkfleet matrix propose -i INVENTORY --canary "
                "HOST), or accept a deviation in the matrix's accepted: list with its reason; sparkfleet matrix "
                "check shows the whole table.",
            conflicts=conflicts, unaccepted=unaccepted, closure_lines=judged["lines"])
    module.exit_json(changed=False, checked=True, conflicts=[], unaccepted=[], closure_lines=judged["lines"])


def closure_steps(matrix: dict, sequence: list[dict]) -> list[dict]:
    """The sequence's steps as the closure judges them (module_utils/venv/_closure.py): a step that resolved, all
    it installs; one that did not, its own pins' metadata; one not asked (skipped), its pins at their versions,
    declaring nothing known. Each with whether it runs --no-deps, whether it resolved and the names it pins."""
    by_id = {s.get("step"): s for s in sequence or []}
    out = []
    for step in matrix["steps"]:
        entry = by_id.get(step["id"])
        if entry is None:
            continue
        declared = entry.get("declared") or []
        if entry.get("status") == "skipped":
            declared = [{"name": parse_pin(spec)[0], "version": parse_pin(spec)[1], "requires_dist": []}
                        for spec in step["packages"]]
        out.append({"step": step["id"], "declared": declared, "resolved": entry.get("status") == "resolves",
                    "no_deps": "--no-deps" in (step.get("args") or []),
                    "pins": [parse_pin(spec)[0] for spec in step["packages"]]})
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "matrix": {"type": "dict", "required": True},
            "index_mirrors": {"type": "dict", "default": {}, "aliases": ["index_overrides"],
                              "deprecated_aliases": [{"name": "index_overrides", "version": "1.0.0",
                                                      "collection_name": "sparkfleet.spark"}]},
            "skip_steps": {"type": "list", "elements": "str", "default": []},
            "max_age_days": {"type": "int", "default": 90},
            "today": {"type": "str"},
            "timeout": {"type": "int", "default": 20},
            "step": {"type": "str"},
            "closure_of": {"type": "list", "elements": "dict"},
            "buildable": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    matrix = start(module, "Nothing was checked.")
    try:
        today = datetime.date.fromisoformat(p["today"]) if p["today"] else datetime.date.today()
        stale = staleness(matrix, today, p["max_age_days"])
    except (MatrixError, ValueError) as exc:
        module.fail_json(msg=f"{exc}. Nothing was checked.")
    if p["closure_of"] is not None:
        judged = closure.judge(closure_steps(matrix, p["closure_of"]), matrix["target"], matrix.get("accepted"))
        module.exit_json(changed=False, rows=[], table=[CLOSURE_HEADING, *judged["lines"]], closure=judged,
                         closure_lines=judged["lines"], closure_heading=CLOSURE_HEADING)
    resolvable(module, matrix, "Nothing was checked.")
    if p["buildable"]:
        buildable(module, matrix, p["index_mirrors"], p["timeout"])
    ids = [s["id"] for s in matrix["steps"]]
    unknown = sorted(set(p["skip_steps"]) - set(ids))
    if unknown:
        module.fail_json(msg=f"skip_steps names {', '.join(unknown)}, which the matrix does not have; its steps are "
                             + ", ".join(ids))
    if p["step"] is not None and p["step"] not in ids:
        module.fail_json(msg=f"step is {p['step']!r}, which the matrix does not have; its steps are {', '.join(ids)}")
    jobs = []
    for step in matrix["steps"]:
        for spec in step["packages"]:
            name, version = parse_pin(spec)
            index = mirrored(step["index_url"], p["index_mirrors"])
            jobs.append({"step": step["id"], "package": name, "version": version, "index": index, "spec": spec})
    width = max(len(j["package"]) for j in jobs)  # the whole matrix's, so that steps checked apart align
    step_width = max(8, *(len(i) for i in ids))
    if p["step"] is not None:
        jobs = [j for j in jobs if j["step"] == p["step"]]
    pip = [sys.executable, "-m", "pip"]
    todo = [j for j in jobs if j["step"] not in p["skip_steps"]]
    # Each step's pins in one pip run (ask_together), the steps side by side.
    groups = [[j for j in todo if j["step"] == step_id] for step_id in ids]
    groups = [g for g in groups if g]
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda g: ask_together(pip, [j["spec"] for j in g], g[0]["index"], matrix["target"],
                                                       p["timeout"]), groups))
    for group, said in zip(groups, answers, strict=True):
        for job, answer in zip(group, said, strict=True):
            job.update(answer)
    for job in jobs:
        job.setdefault("status", "skipped")
        job.pop("spec")
    sequence = resolve_sequence(pip, matrix, p["index_mirrors"], p["skip_steps"], p["timeout"], p["step"])
    for entry in sequence:  # a step that does not resolve: its pins' own metadata, for the closure
        if entry["status"] != "resolves":
            entry["declared"] = [j["declared"] for j in jobs if j["step"] == entry["step"] and j.get("declared")]
    for job in jobs:  # not a row's: the sequence carries it
        job.pop("declared", None)
    target = matrix["target"]
    # What the matrix is for on its first line, its age and proof under it: each line short enough for a terminal
    # of 100 columns (one long line wrapped into the table below it).
    heading = (f"matrix {matrix['name']} for cp{target['python'].replace('.', '')} linux {target['arch']} glibc "
               f"{target['glibc']}\n  last verified {stale['last_verified']}, {stale['age_days']} days ago"
               f"\n  {stale['proof']}")
    pin_lines = [f"{j['step']:<{step_width}} {j['package']:<{width}} {j['version']:<12} {j['status']:<11} "
                 f"{j.get('wheel') or j.get('detail') or ''}" for j in jobs]
    sequence_lines = []
    for step in sequence:
        said = (f"{len(step['installs'])} packages" if step["status"] == "resolves" else step.get("detail", ""))
        sequence_lines.append(f"{step['step']:<{step_width}} {step['status']:<11} {said}")
        sequence_lines += [f"{'':<{step_width}} {'':<11} note: {note}" for note in step.get("notes", [])]
    # Checked step by step, the table is heading + every step's pin_lines + SEQUENCE_HEADING + every step's
    # sequence_lines (playbooks/matrix_check.yml, the CLI).
    table = (pin_lines + sequence_lines if p["step"] is not None
             else [heading, *pin_lines, SEQUENCE_HEADING, *sequence_lines])
    if stale["stale"] and p["step"] in (None, ids[0]):  # once per run, also when a loop asks step by step
        module.warn(stale["message"])
    missing = [f"{j['package']}=={j['version']} ({j['step']})" for j in jobs if j["status"] == "missing"]
    # A step that could not ask its indexes says so in its row; the pins' rows name those indexes.
    conflicts = [f"step {s['step']}: {s['detail']}" for s in sequence
                 if s["status"] in ("conflict", "missing", "error")]
    unasked = sorted({redact_url(j["index"]) for j in jobs if j["status"] in ("unreachable", "error")})
    for job in jobs:
        job["index"] = redact_url(job["index"])
    module.exit_json(changed=False, rows=jobs, table=table, heading=heading, sequence_heading=SEQUENCE_HEADING,
                     pin_lines=pin_lines, sequence_lines=sequence_lines, staleness=stale, missing=missing,
                     sequence=sequence, conflicts=conflicts, unasked_indexes=unasked)


if __name__ == "__main__":
    main()

# Copyright: sparkfleet contributors
# Apache License 2.0
"""A candidate stack matrix (`sparkfleet matrix propose`): what pip is asked for the newest set, the candidate
written from what it chose, the diff against the matrix in use, the evidence a proof records, which changed pin a
failure is blamed on, and how a matrix says whether sparkfleet proved it.

Pure logic, no I/O: spark_matrix_propose and the playbook's filters call it.
"""

from __future__ import annotations

import copy
import datetime
import hashlib
import json
import re

from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import (
    MatrixError,
    check,
    normalize,
    parse_pin,
)

# The smoke step's figures an evidence block keeps.
SMOKE_FIELDS = ("device", "verdict", "first_loss", "last_loss", "drop", "losses", "seconds_per_step",
                "peak_gpu_memory_mb")


def given_pins(matrix: dict, pins: list) -> dict[str, str]:
    """The user's set (`name==version` each) as {normalized name: version}; MatrixError for a pin that is not
    `name==version` or names a package the matrix does not pin (propose changes the matrix's pins, nothing else)."""
    pinned = {normalize(parse_pin(spec)[0]) for step in matrix["steps"] for spec in step["packages"]}
    given, problems = {}, []
    for spec in pins or []:
        try:
            name, version = parse_pin(str(spec).strip())
        except MatrixError as exc:
            problems.append(str(exc))
            continue
        if normalize(name) not in pinned:
            problems.append(f"{name} is not pinned by the matrix (its pins: {', '.join(sorted(pinned))}); a "
                            "proposal changes the matrix's pins only")
            continue
        given[normalize(name)] = version
    if problems:
        raise MatrixError("the pins given (matrix_propose_pins) cannot be used: " + "; ".join(problems)
                          + ". Nothing was asked")
    return given


def step_specs(step: dict, given: dict[str, str], holds: dict[str, list[dict]] | None = None,
               additions: dict[str, dict] | None = None) -> list[str]:
    """What pip is asked for one step: a pin the user gave exactly, every other pin at its version or newer
    (never older), so that pip's resolver picks the newest set the step's other pins and the earlier steps accept;
    a pin held back by what another package of the set declares (holds: the closure's findings for it) within
    each such requirement instead, older than the matrix's if it must be. A held step (hold: true) is asked too for
    what the set declares and no step installs (additions: {name: {name, specifiers, declared_by}}), within what
    its declarers declare."""
    def within(key: str, clauses: list[str]) -> str:
        clauses = [*clauses, *(c for h in (holds or {}).get(key) or [] for c in h["specifier"].split(","))]
        return ",".join(dict.fromkeys(c for c in clauses if c))

    specs = []
    for spec in step["packages"]:
        name, version = parse_pin(spec)
        key = normalize(name)
        if key in given:
            specs.append(f"{name}=={given[key]}")
        elif (holds or {}).get(key):
            specs.append(f"{name}{within(key, [])}")
        else:
            specs.append(f"{name}>={version}")
    if step.get("hold"):
        own = {normalize(parse_pin(spec)[0]) for spec in step["packages"]}
        specs += [f"{entry['name']}{within(key, entry['specifiers'])}" for key, entry in (additions or {}).items()
                  if key not in own]
    return specs


def held_lines(holds: dict[str, list[dict]]) -> list[str]:
    """'held back: datasets!=4.0.*,<4.4.0 - unsloth 2026.7.2 declares datasets!=4.0.*,...': what held each pin."""
    return [f"held back: {finding['name']}{finding['specifier']} - {finding['declarer']} {finding['version']} "
            f"declares {finding['requirement']}" for key in sorted(holds) for finding in holds[key]]


def added_lines(additions: dict[str, dict]) -> list[str]:
    """'added: json5>=0.9.25 - unsloth 2026.10.9 declares it and no step installed it': why a pin is new."""
    return [f"added: {entry['name']}{','.join(entry['specifiers'])} - {', '.join(entry['declared_by'])} declare"
            f"{'s' if len(entry['declared_by']) == 1 else ''} it and no step installed it"
            for _key, entry in sorted(additions.items())]


def public(version: str) -> str:
    """A version without its local label (2.10.0+cu130 -> 2.10.0), as the matrix pins it."""
    return version.split("+", 1)[0]


def _stale_words(why: str, moved: dict[str, tuple[str, str]], deviations: bool) -> list[str]:
    """What a step's `why`, written by a person for the old set, says of it that the proposed set no longer holds:
    each moved pin's old version it names ('torch==2.10.0', 'torch 2.10.0'), and the accepted deviations where the
    proposed set has none."""
    found = []
    for name, (old, new) in moved.items():
        spelled = "[-_.]".join(re.escape(part) for part in re.split(r"[-_.]", name))
        if re.search(rf"(?i)\b{spelled}\s*(==|<=|>=|<|>|~=|\s)\s*{re.escape(old)}(?![\w.])", why):
            found.append(f"{name} {old} (proposed: {new})")
    if not deviations and re.search(r"(?i)accepted deviation", why):
        found.append("the accepted deviations (the proposed set has none)")
    return found


def candidate(matrix: dict, chosen: dict[str, str], today: datetime.date, added: list[str] | tuple = (),
              accepted: list[dict] | None = None) -> dict:
    """The matrix with each pin at the version chosen for it ({normalized name: version}), named and dated for
    today, proposed_from the matrix's name; its evidence (the old matrix's) removed until a proof writes its own.
    What the set declares and no step installed (added, names as declared) is pinned in its held step, at the version
    chosen; accepted (when given) replaces the matrix's deviations."""
    new = copy.deepcopy(matrix)
    old_pins = {normalize(name): version for step in matrix["steps"] for name, version in
                (parse_pin(spec) for spec in step["packages"])}
    moved = {name: (version, public(chosen[name])) for name, version in old_pins.items()
             if name in chosen and public(chosen[name]) != version}
    deviations = bool(accepted if accepted is not None else matrix.get("accepted"))
    for step in new["steps"]:
        pins = [parse_pin(spec) for spec in step["packages"]]
        step["packages"] = [f"{name}=={public(chosen.get(normalize(name), version))}" for name, version in pins]
        stale = _stale_words(str(step.get("why") or ""), moved, deviations)
        if stale:  # a person's words about the old set: kept, and marked for the review the proposal asks for
            step["why"] = (f"REVIEW (written for {matrix['name']}; it names {', '.join(stale)}): "
                           + str(step["why"]))
        if step.get("hold"):
            own = {normalize(name) for name, _version in pins}
            step["packages"] += [f"{name}=={public(chosen[normalize(name)])}" for name in added
                                 if normalize(name) not in own and normalize(name) in chosen]
    new["name"] = f"spark-stack-{today.isoformat()}"
    new["last_verified"] = today.isoformat()
    new["proposed_from"] = matrix["name"]
    new.pop("evidence", None)
    if accepted is not None:
        new["accepted"] = accepted
        if not accepted:
            new.pop("accepted")
    return check(new)


def changes(matrix: dict, proposed: dict) -> list[dict]:
    """Every pin of the candidate, old and new, in its order: {step, package, old, new, moved, added}; a pin the
    matrix did not have (added to the held step) has old None."""
    old_pins = {normalize(parse_pin(spec)[0]): parse_pin(spec)[1] for step in matrix["steps"]
                for spec in step["packages"]}
    rows = []
    for step in proposed["steps"]:
        for spec in step["packages"]:
            name, version = parse_pin(spec)
            old = old_pins.get(normalize(name))
            rows.append({"step": step["id"], "package": name, "old": old, "new": version, "moved": old != version,
                         "added": old is None})
    return rows


def diff_lines(rows: list[dict], released: dict[str, str | None]) -> list[str]:
    """One line per pin: `step package old (date) -> new (date)`, `= old (date)` when it did not move, or
    `new version (date)` for a pin the matrix did not have. released: {"name==version": YYYY-MM-DD or None (the index gives no date)}."""
    def dated(name: str, version: str) -> str:
        return f"{version} ({released.get(f'{normalize(name)}=={version}') or 'date unknown'})"

    width = max((len(r["package"]) for r in rows), default=0)
    step_width = max((len(r["step"]) for r in rows), default=0)
    return [f"{r['step']:<{step_width}} {r['package']:<{width}} "
            + (f"new {dated(r['package'], r['new'])}" if r.get("added")
               else f"{dated(r['package'], r['old'])} -> {dated(r['package'], r['new'])}" if r["moved"]
               else f"= {dated(r['package'], r['old'])}")
            for r in rows]


def blame(rows: list[dict], text: str, step: str | None = None) -> list[str]:
    """The pins to blame for a failure: the moved or given pins (a row's `given`) its text names; none where it
    names only pins the candidate keeps; else those of the step that failed; else all of them. Each as
    `name old -> new`, or `name==version (given)` for a pin the user gave at the matrix's own version."""
    moved = [r for r in rows if r["moved"] or r.get("given")]
    lowered = (text or "").lower().replace("_", "-")

    def names(row: dict) -> bool:
        return bool(re.search(rf"(?<![a-z0-9_-]){re.escape(normalize(row['package']))}(?![a-z0-9_-])", lowered))

    named = [r for r in moved if names(r)]
    kept = [r for r in rows if r not in moved and names(r)]
    if not named and kept:
        # The failure is in a pin the candidate keeps (an import of transformers that did not move): none of the
        # moved pins is to blame for it.
        said = ", ".join(f"{r['package']} {r['old']}" for r in kept)
        return [f"none of the moved pins: the failure names {said}, which the candidate keeps at the matrix's "
                "version"]
    chosen = named or [r for r in moved if step and r["step"] == step] or moved

    def label(row: dict) -> str:
        # Where the failure names none of them, each is only a suspect: said so.
        notes = ([] if row["moved"] else ["given"]) + ([] if named else ["not named by the failure"])
        notes = (["new"] if row.get("added") else []) + notes
        text = (f"{row['package']} {row['old']} -> {row['new']}" if row["moved"] and not row.get("added")
                else f"{row['package']}=={row['new']}")
        return text + (f" ({', '.join(notes)})" if notes else "")

    return [label(r) for r in chosen]


def judge(build: dict, gpu: dict | None, smoke: dict | None, rows: list[dict], require_gpu: bool) -> dict:
    """The proof of a candidate venv, stage by stage (build, import, gpu, smoke): {ok, stage, detail, blame}.
    The GPU verification blocks only where a GPU is required (require_gpu): a canary without one proves the set on
    its CPU, and the evidence says so."""
    def failed(stage: str, detail: str, step: str | None = None) -> dict:
        return {"ok": False, "stage": stage, "detail": detail, "blame": blame(rows, detail, step)}

    if build.get("failed"):
        detail = str(build.get("msg") or "the build failed")
        step = re.match(r"step (\S+) failed", detail)
        return failed("build", detail, step.group(1) if step else None)
    broken = [i for i in build.get("imports") or [] if not i.get("ok")]
    if broken:
        return failed("import", "; ".join(f"import {i.get('module')}: {i.get('error')}" for i in broken))
    if require_gpu and (not gpu or gpu.get("verdict") != "ok"):
        gpu = gpu or {}
        return failed("gpu", f"{gpu.get('line') or 'no answer'}: {gpu.get('hypothesis') or 'unexplained'} - "
                             f"{gpu.get('evidence') or gpu.get('msg') or ''} (fix: {gpu.get('fix') or '-'})")
    if not smoke or smoke.get("verdict") != "ok":
        smoke = smoke or {}
        return failed(f"smoke ({smoke.get('stage') or 'not run'})",
                      f"{smoke.get('error') or smoke.get('msg') or 'the smoke step did not run'}"
                      + (f" (fix: {smoke['fix']})" if smoke.get("fix") else ""))
    return {"ok": True, "stage": None, "detail": "", "blame": []}


def evidence(facts: dict, gpu: dict | None, smoke: dict, lock: dict, *, version: str, today: str,
             proposed_from: str) -> dict:
    """The evidence block written into a proved matrix: the canary (from its preflight facts), whether the GPU
    was verified, the smoke step's figures, the hash lock's fingerprint, sparkfleet's version."""
    gpus = facts.get("gpus") or [{}]
    os_release = facts.get("os") or {}
    dgx = facts.get("dgx") or {}
    canary = {"host_class": facts.get("host_class"), "simulated": bool(facts.get("simulated")), "arch": facts.get("arch"),
              "os": (f"{dgx['name']} {dgx.get('swbuild_version') or ''}".strip() if dgx.get("name")
                     else os_release.get("pretty_name")),
              "gpu": gpus[0].get("name"), "compute_capability": gpus[0].get("compute_cap"),
              "driver": gpus[0].get("driver_version"), "cuda": facts.get("cuda_driver_version")}
    gpu_ok = bool(gpu and gpu.get("verdict") == "ok") and bool(smoke.get("gpu_verified")) \
        and not canary["simulated"]
    return {"proved_on": today, "sparkfleet": version, "proposed_from": proposed_from, "canary": canary,
            "gpu_verified": gpu_ok,
            "gpu_line": (gpu or {}).get("line"),
            "smoke": {k: smoke.get(k) for k in SMOKE_FIELDS},
            "lock_fingerprint": hashlib.sha256(json.dumps(lock, sort_keys=True).encode()).hexdigest()}

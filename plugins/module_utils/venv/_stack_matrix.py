# Copyright: sparkfleet contributors
# Apache License 2.0
"""The bare-pip stack matrix (matrix/spark-stack.yml) itself: what it may hold, its pins, age and proof,
the policy for extra packages and its fingerprint.

Pure logic, no I/O. Where its packages come from is _indexes.py, its secrets _secrets.py, each step's command
_pip_commands.py, its hash lock _hash_lock.py.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re

from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _validate
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._closure import accepted_problems
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._secrets import redact_url

POLICIES = ("matrix", "install", "refuse", "source_build", "index", "warn")


# pip options a matrix step may carry; anything else is refused so that a
# typo cannot silently change how a step resolves.
STEP_ARGS = ("--no-deps", "-U", "--upgrade", "--pre", "--force-reinstall")


# The installers a matrix's installer step may name: it is installed first, beside the venvs (never into one),
# and runs the other steps (`uv pip install`); without one, pip does.
INSTALLERS = ("uv",)


_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"


_PIN = re.compile(rf"^(?P<name>{_NAME})==(?P<version>[A-Za-z0-9.+!_-]+)$")


_REQUIREMENT = re.compile(rf"^\s*(?P<name>{_NAME})\s*(?P<extras>\[[^\]]*\])?\s*(?P<spec>[^;]*?)\s*(?:;.*)?$")


_URL = re.compile(r"^https?://[^\s/]+(/\S*)?$")


_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")


class MatrixError(Exception):
    """The matrix (or a request against it) is not usable; str() says what and what to do."""


def normalize(name: str) -> str:
    """PEP 503 name normalization (Unsloth_Zoo -> unsloth-zoo)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_pin(spec: str) -> tuple[str, str]:
    match = _PIN.match(spec.strip())
    if not match:
        raise MatrixError(f"'{spec}' is not an exact pin; every matrix package is NAME==VERSION")
    return match.group("name"), match.group("version")


def parse_requirement(spec: str) -> tuple[str, str]:
    """A requirement a user asks for ('xformers', 'vllm>=0.11') -> (normalized name, specifier)."""
    match = _REQUIREMENT.match(spec) if isinstance(spec, str) else None
    if not match or not spec.strip():
        raise MatrixError(f"'{spec}' is not a package requirement; expected e.g. 'xformers' or 'vllm>=0.11'")
    return normalize(match.group("name")), match.group("spec")


def parse_date(value, what: str) -> datetime.date:
    text = value.isoformat() if isinstance(value, datetime.date) else str(value)
    if not _DATE.match(text):
        raise MatrixError(f"{what} is '{value}'; expected a date as YYYY-MM-DD")
    try:
        return datetime.date.fromisoformat(text)
    except ValueError as exc:
        raise MatrixError(f"{what} is '{value}': {exc}") from None


def dated_file_problems(data, what: str, example: str, date_field: str) -> tuple[list[str], bool]:
    """The opening the dated files share (the stack matrix, the advisories): a mapping, of schema 1, dated in
    `date_field`. (The problems found, whether the rest can be read: False where `data` is not a mapping.)"""
    if not isinstance(data, dict):
        return [f"the {what} is a {type(data).__name__}; expected a mapping (see {example})"], False
    errors = []
    if data.get("schema") != 1:
        errors.append(f"schema is {data.get('schema')!r}; this sparkfleet reads schema 1")
    try:
        parse_date(data.get(date_field), date_field)
    except MatrixError as exc:
        errors.append(str(exc))
    return errors, True


def validate(matrix) -> list[str]:
    """Every problem in the matrix, each naming the field, what was found and what is expected."""
    errors, readable = dated_file_problems(matrix, "matrix", "matrix/spark-stack.yml", "last_verified")
    if not readable:
        return errors
    if not isinstance(matrix.get("name"), str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", matrix["name"]):
        errors.append(f"name is {matrix.get('name')!r}; expected a short name of letters, digits, '.', '_', '-'")
    target = matrix.get("target")
    if not isinstance(target, dict) or not all(isinstance(target.get(k), str) for k in ("python", "arch", "glibc")):
        errors.append(f"target is {target!r}; expected python, arch and glibc as strings (e.g. '3.12', "
                      "'aarch64', '2.39')")
    errors += accepted_problems(matrix.get("accepted"))
    steps = matrix.get("steps")
    if not isinstance(steps, list) or not steps:
        errors.append("steps is missing or empty; expected the pip steps in order")
        steps = []
    seen_ids, seen_pkgs = set(), {}
    for index, step in enumerate(steps, 1):
        where = f"step {index}"
        if not isinstance(step, dict):
            errors.append(f"{where} is {step!r}; expected a mapping with id, index_url, packages")
            continue
        sid = step.get("id")
        where = f"step {index} ({sid})"
        if not isinstance(sid, str) or not sid:
            errors.append(f"step {index} has no id; expected a short name such as 'torch'")
        elif sid in seen_ids:
            errors.append(f"{where}: the id is used twice; step ids must be unique")
        seen_ids.add(sid)
        if not isinstance(step.get("index_url"), str) or not _URL.match(step["index_url"]):
            errors.append(f"{where}: index_url is {step.get('index_url')!r}; expected an http(s) URL")
        args = step.get("args", [])
        if not isinstance(args, list) or any(a not in STEP_ARGS for a in args):
            errors.append(f"{where}: args are {args!r}; allowed: {', '.join(STEP_ARGS)}")
        packages = step.get("packages")
        if not isinstance(packages, list) or not packages:
            errors.append(f"{where}: packages is missing or empty")
            continue
        if "installer" in step:
            errors += _installer_problems(step, where, index == len(steps))
        if "hold" in step and not isinstance(step["hold"], bool):
            errors.append(f"{where}: hold is {step['hold']!r}; expected true (every pin of the matrix held as a "
                          "constraint while this step resolves its own dependencies) or false")
        if step.get("hold") and "--no-deps" in args:
            errors.append(f"{where}: hold and --no-deps together; hold is for a step that resolves its packages' "
                          "dependencies (with every pin held), --no-deps for one that does not")
        for spec in packages:
            try:
                name, _unused = parse_pin(str(spec))
            except MatrixError as exc:
                errors.append(f"{where}: {exc}")
                continue
            if normalize(name) in seen_pkgs:
                errors.append(f"{where}: {name} is already pinned in step {seen_pkgs[normalize(name)]}")
            seen_pkgs[normalize(name)] = sid
    errors += _held_components(steps, matrix.get("components"))
    imports = matrix.get("imports", [])
    if not isinstance(imports, list) or not all(isinstance(i, str) and i.isidentifier() for i in imports):
        errors.append(f"imports is {imports!r}; expected a list of module names")
    env = matrix.get("environment", {})
    if not isinstance(env, dict) or not all(isinstance(k, str) and re.fullmatch(r"[A-Z_][A-Z0-9_]*", k)
                                            and isinstance(v, str) for k, v in env.items()):
        errors.append(f"environment is {env!r}; expected NAME: 'value' strings")
    else:  # each is exported by the venv's activate script: a one-line string
        errors += [f"environment {k} {problem}" for k, v in env.items() if (problem := _validate.env_value(v))]
    if "evidence" in matrix:
        errors += evidence_problems(matrix["evidence"])
    components = matrix.get("components", {})
    if not isinstance(components, dict):
        errors.append("components is not a mapping of package name to {policy, note}")
        components = {}
    for name, comp in components.items():
        policy = comp.get("policy") if isinstance(comp, dict) else None
        if policy not in POLICIES:
            errors.append(f"components.{name}: policy is {policy!r}; expected one of {', '.join(POLICIES)}")
        elif policy == "index" and not _URL.match(str(comp.get("index_url", ""))):
            errors.append(f"components.{name}: policy index needs an index_url")
        elif policy == "source_build" and not isinstance(comp.get("build_env", {}), dict):
            errors.append(f"components.{name}: build_env must be a mapping")
    return errors


def _held_components(steps: list, components) -> list[str]:
    """A held step (Unsloth's dependencies, installed with their own) installs plain wheels from its index: a
    package whose component policy says otherwise (refused on Spark, built from source, from another index) is
    refused there, the policy's note given."""
    if not isinstance(components, dict):
        return []
    by_name = {normalize(name): (name, comp) for name, comp in components.items() if isinstance(comp, dict)}
    problems = []
    for step in steps:
        if not isinstance(step, dict) or not step.get("hold") or not isinstance(step.get("packages"), list):
            continue
        for spec in step["packages"]:
            name = str(spec).split("==", 1)[0]
            _unused, comp = by_name.get(normalize(name), (None, {}))
            if comp.get("policy") in ("refuse", "source_build", "index"):
                problems.append(f"step {step.get('id')}: {name} is policy {comp['policy']} in components "
                                f"({comp.get('note', 'no note')}); a held step installs plain wheels from its index, "
                                "so install it as its policy says (spark_venv_extra_packages) or change the policy")
    return problems


def _installer_problems(step: dict, where: str, last: bool) -> list[str]:
    """What is wrong with a step marked `installer: true` (the tool that runs the other steps)."""
    if step["installer"] is not True:
        return [f"{where}: installer is {step['installer']!r}; expected true (or no installer key)"]
    problems = [] if last else [f"{where}: the installer step must be the last (it resolves alone and moves no "
                                "other step's indexes or constraints; it is installed first)"]
    names = [normalize(str(spec).split("==", 1)[0]) for spec in step["packages"]]
    if len(names) != 1 or names[0] not in INSTALLERS:
        problems.append(f"{where}: the installer step pins {', '.join(map(str, step['packages']))}; expected one "
                        f"pin of {' or '.join(INSTALLERS)} (e.g. uv==0.13.9)")
    return problems


def installer(matrix) -> dict | None:
    """The matrix's installer step (uv), or None: pip runs the steps."""
    return next((step for step in matrix["steps"] if step.get("installer")), None)


def venv_steps(matrix) -> list[dict]:
    """The steps that install into the venv, in order (all but the installer's)."""
    return [step for step in matrix["steps"] if not step.get("installer")]


def check(matrix) -> dict:
    errors = validate(matrix)
    if errors:
        raise MatrixError("the stack matrix is not valid: " + "; ".join(errors))
    return matrix


def pins(matrix) -> dict[str, str]:
    """{normalized name: 'Name==version'} for every package the matrix pins."""
    return {normalize(parse_pin(p)[0]): p for step in matrix["steps"] for p in step["packages"]}


def aged(value, what: str, today: datetime.date, max_age_days: int) -> dict:
    """{what: the date, age_days, max_age_days, stale} for a dated file's date field."""
    when = parse_date(value, what)
    days = (today - when).days
    return {what: when.isoformat(), "age_days": days, "max_age_days": max_age_days, "stale": days > max_age_days}


# What the evidence block of a matrix proved by `sparkfleet matrix propose` holds (evidence_problems checks it).
EVIDENCE_FIELDS = ("proved_on", "sparkfleet", "proposed_from", "canary", "gpu_verified", "smoke", "lock_fingerprint")


NOT_PROVED = "dated, not proved by sparkfleet"


def evidence_problems(evidence) -> list[str]:
    """What is wrong with a matrix's evidence block (empty: nothing)."""
    if not isinstance(evidence, dict):
        return [f"evidence is {type(evidence).__name__}; expected the mapping sparkfleet matrix propose writes"]
    problems = [f"evidence lacks {field}" for field in EVIDENCE_FIELDS if field not in evidence]
    if not problems:
        if not isinstance(evidence["canary"], dict):
            problems.append("evidence.canary is not a mapping")
        if not isinstance(evidence["smoke"], dict):
            problems.append("evidence.smoke is not a mapping")
        if not isinstance(evidence["gpu_verified"], bool):
            problems.append("evidence.gpu_verified is not true or false")
        try:
            datetime.date.fromisoformat(str(evidence["proved_on"]))
        except ValueError:
            problems.append(f"evidence.proved_on is {evidence['proved_on']!r}; expected YYYY-MM-DD")
    return problems


def proof(matrix: dict) -> str:
    """How the matrix was verified, in a few words: who proved it, when, on what; or NOT_PROVED (a date alone)."""
    evidence = matrix.get("evidence")
    if evidence is None or evidence_problems(evidence):
        return NOT_PROVED
    canary = evidence["canary"]
    where = canary.get("gpu") or f"a host ({canary.get('arch') or 'architecture unknown'}) without a GPU"
    how = ("GPU verified" if evidence["gpu_verified"]
           else f"not GPU verified: the smoke step ran on the {evidence['smoke'].get('device') or 'CPU'}")
    simulated = ", simulated" if canary.get("simulated") else ""
    return f"proved by sparkfleet {evidence['sparkfleet']} on {evidence['proved_on']} on {where}{simulated} ({how})"


def staleness(matrix, today: datetime.date, max_age_days: int) -> dict:
    """The matrix's age against max_age_days, how it was verified (proof()) and, when stale, what to do."""
    found = aged(matrix["last_verified"], "last_verified", today, max_age_days)
    found["proof"] = proof(matrix)
    found["message"] = (
        f"the stack matrix {matrix['name']} was last verified on {found['last_verified']} ({found['proof']}), "
        f"{found['age_days']} days ago (older than {max_age_days}): renew it with `sparkfleet matrix propose -i "
        "INVENTORY --canary HOST` (a candidate set built and proved on one Spark, written as a new matrix to review "
        "and commit); sparkfleet never updates a pin by itself") if found["stale"] else ""
    return found


def plan_extras(matrix, requested: list[str]) -> list[dict]:
    """How each extra package will be installed, or MatrixError naming the matrix's reason."""
    components = {normalize(k): v for k, v in matrix.get("components", {}).items()}
    pinned = pins(matrix)
    plan, refused = [], []
    for spec in requested:
        name, _unused = parse_requirement(spec)
        comp = components.get(name, {"policy": "install", "note": "not in the matrix's component table"})
        policy = comp["policy"]
        if name in pinned or policy == "matrix":
            refused.append(f"{spec}: already pinned by the matrix ({pinned.get(name, name)}); change the matrix "
                           "and its last_verified date instead")
            continue
        if policy == "refuse":
            refused.append(f"{spec}: refused on Spark: {comp.get('note', '')}")
            continue
        entry = {"requirement": spec.strip(), "name": name, "policy": policy, "note": comp.get("note", ""),
                 "args": [], "env": {}, "index_url": None}
        if policy == "source_build":
            entry["args"] = ["--no-binary", name, "--no-build-isolation"]
            entry["env"] = {k: str(v) for k, v in comp.get("build_env", {}).items()}
            entry["says"] = (f"{spec}: built from source with "
                             + " ".join(f"{k}={v}" for k, v in entry["env"].items()) + f" ({entry['note']})")
        elif policy == "index":
            entry["index_url"] = comp["index_url"]
            entry["args"] = ["--pre"]
            entry["says"] = (f"{spec}: from {redact_url(comp['index_url'])} only, then its dependencies from the "
                             f"matrix's index ({entry['note']})")
        elif policy == "warn":
            entry["says"] = f"{spec}: installed, but {entry['note']}"
        else:
            entry["says"] = f"{spec}: installed from the matrix's index, the matrix's pins held ({entry['note']})"
        plan.append(entry)
    if refused:
        raise MatrixError("extra packages refused: " + "; ".join(refused))
    return plan


def fingerprint(matrix, extras: list[dict], lock: dict | None = None) -> str:
    """What the venv is built from: the target, the steps verbatim, the environment, the extras, and the hash
    lock's packages when the steps install from it.

    Notes, dates and the component table are left out: they change no byte of the venv.
    """
    content = {
        "target": matrix["target"],
        "steps": [{"id": s["id"], "index_url": s["index_url"], "args": s.get("args", []), "packages": s["packages"],
                   **({"hold": True} if s.get("hold") else {})} for s in matrix["steps"]],
        "environment": matrix.get("environment", {}),
        "extras": [{k: e[k] for k in ("requirement", "args", "env", "index_url")} for e in extras],
    }
    if lock is not None:
        content["hashes"] = lock["steps"]
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


_SHA256 = re.compile(r"^[0-9a-f]{64}$")

# Copyright: sparkfleet contributors
# Apache License 2.0
"""The bare-pip stack matrix (matrix/spark-stack.yml): validation, fingerprint,
staleness, the policy for extra packages, and the exact pip commands.

Pure logic, no I/O: modules spark_venv and spark_matrix_check call it.
"""

from __future__ import annotations

import datetime
import hashlib
import ipaddress
import json
import re
import urllib.parse

from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _validate
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._closure import accepted_problems

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


def validate(matrix) -> list[str]:
    """Every problem in the matrix, each naming the field, what was found and what is expected."""
    if not isinstance(matrix, dict):
        return [f"the matrix is a {type(matrix).__name__}; expected a mapping (see matrix/spark-stack.yml)"]
    errors = []
    if matrix.get("schema") != 1:
        errors.append(f"schema is {matrix.get('schema')!r}; this sparkfleet reads schema 1")
    if not isinstance(matrix.get("name"), str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9._-]*$", matrix["name"]):
        errors.append(f"name is {matrix.get('name')!r}; expected a short name of letters, digits, '.', '_', '-'")
    try:
        parse_date(matrix.get("last_verified"), "last_verified")
    except MatrixError as exc:
        errors.append(str(exc))
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


def override(url: str, overrides: dict) -> str:
    """The index URL to use: a configured mirror for the upstream URL, else the URL itself."""
    table = {k.rstrip("/"): v.rstrip("/") for k, v in (overrides or {}).items()}
    return table.get(url.rstrip("/"), url.rstrip("/"))


def redact_url(url: str) -> str:
    """The URL with its credentials (https://user:TOKEN@host/ or https://TOKEN@host/) masked, for what is shown."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    user, _sep, where = parts.netloc.rpartition("@")
    shown = f"{user.split(':', 1)[0]}:***" if ":" in user else "***"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{shown}@{where}"))


def url_secrets(urls) -> set[str]:
    """The credentials in these URLs (the TOKEN of https://user:TOKEN@host/ or https://TOKEN@host/, and the
    user:TOKEN pair), for a module's no_log_values: Ansible then masks them wherever they would appear in its
    result, the invocation's module_args included (what -vvv, runner's job events and callbacks show)."""
    found = set()
    for url in urls:
        if not isinstance(url, str):
            continue
        netloc = urllib.parse.urlsplit(url).netloc
        if "@" not in netloc:
            continue
        userinfo = netloc.rpartition("@")[0]
        found.add(userinfo)
        for part in (userinfo.split(":", 1)[1] if ":" in userinfo else userinfo,
                     urllib.parse.unquote(userinfo.split(":", 1)[-1])):
            if part:
                found.add(part)
    return found


_SECRET_NAME = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|KEY|AUTH|CREDENTIAL", re.I)


def env_secrets(env) -> set[str]:
    """The secrets in an environment given for pip (spark_venv_pip_env): the value of a name that says it is one,
    and the credentials in a URL value (a proxy's); not every value, as a masked short value (a timeout of 30)
    would be masked in every string of the result."""
    if not isinstance(env, dict):
        return set()
    values = {str(v) for k, v in env.items() if _SECRET_NAME.search(str(k)) and str(v)}
    return values | url_secrets(str(v) for v in env.values())


def matrix_secrets(matrix, overrides) -> set[str]:
    """url_secrets of every index a matrix and its overrides name (steps, components, the overrides' both
    sides); a malformed matrix gives what it has."""
    urls = list(overrides.items()) if isinstance(overrides, dict) else []
    urls = [u for pair in urls for u in pair]
    if isinstance(matrix, dict):
        steps, components = matrix.get("steps"), matrix.get("components")
        entries = (steps if isinstance(steps, list) else []) + (
            list(components.values()) if isinstance(components, dict) else [])
        urls += [entry.get("index_url") for entry in entries if isinstance(entry, dict)]
    return url_secrets(urls)


# Each installer's names for the indexes it asks (the first, the others, the plain-http hosts it may use) and
# what else it needs to ask them as pip does.
_INDEX_ENV = {"pip": ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", {}),
              # uv's own default stops at the first index that has a package: pip takes the best version any
              # index offers, and the matrix check resolved the set as pip does.
              "uv": ("UV_DEFAULT_INDEX", "UV_INDEX", "UV_INSECURE_HOST", {"UV_INDEX_STRATEGY": "unsafe-best-match"})}


def index_env(indexes: list[str], tool: str = "pip") -> dict:
    """pip's (or uv's: tool) index options as its environment: the first index is PIP_INDEX_URL, the others
    PIP_EXTRA_INDEX_URL, plus PIP_TRUSTED_HOST for a plain-http mirror (pip caches nothing from an untrusted
    http origin, and a rebuild must not fetch a wheel twice).

    In the environment, not the argv: a process's argv is readable by every user of the host (ps,
    /proc/PID/cmdline), its environment only by its owner and root, and an index URL may carry a token.
    """
    if not indexes:  # from a wheelhouse (--no-index): no index at all
        return {}
    first, others, trusted, more = _INDEX_ENV[tool]
    env = {first: indexes[0], **more}
    if indexes[1:]:
        env[others] = " ".join(indexes[1:])
    hosts = [urllib.parse.urlsplit(url).hostname for url in indexes if url.startswith("http://")]
    if hosts:
        env[trusted] = " ".join(dict.fromkeys(h for h in hosts if h))
    return env


def uv_env(indexes: list[str]) -> dict:
    """index_env for `uv pip install` (UV_DEFAULT_INDEX, UV_INDEX, UV_INSECURE_HOST, as pip asks them)."""
    return index_env(indexes, "uv")


def loopback(host: str) -> bool:
    """An address of the host itself (127.0.0.0/8, ::1, localhost): the owner's own, reached by no one else."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def mirrors(matrix: dict, overrides: dict) -> list[str]:
    """The mirrors (spark_venv_index_overrides) the matrix's steps would be installed from instead of their own
    indexes, each as 'upstream -> mirror' (credentials masked), leaving out mirrors on the host's own loopback.

    A mirror is another party between the index the matrix was verified against and the host: it can serve other
    bytes under the same name and version. Its wheels are trusted only against the hash lock (written by
    `sparkfleet matrix lock` through the same mirrors, then reviewed), so a venv built from one needs the lock. An
    index on the loopback is the owner's own (as a loopback registry is Docker's): no lock is asked of it.
    """
    found = []
    for step in matrix.get("steps") or []:
        url = step.get("index_url") if isinstance(step, dict) else None
        if not isinstance(url, str):
            continue
        used = override(url, overrides)
        if used != url.rstrip("/") and not loopback(urllib.parse.urlsplit(used).hostname or ""):
            found.append(f"{redact_url(url.rstrip('/'))} -> {redact_url(used)}")
    return list(dict.fromkeys(found))


def plain_http_refused(indexes: list[str], allowed: list[str]) -> list[str]:
    """The plain-http indexes pip would be told to trust (PIP_TRUSTED_HOST: no TLS, anyone on the path may swap a
    wheel) that are neither on the loopback nor named in `allowed` (host or host:port, like Docker's insecure
    registries); each as a sentence."""
    refused = []
    for url in dict.fromkeys(indexes):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http":
            continue
        host = parts.hostname or ""
        if loopback(host) or host in allowed or parts.netloc.rpartition("@")[2] in allowed:
            continue
        refused.append(f"{redact_url(url)} is plain http (no TLS: anyone on the path can swap a wheel); use https, "
                       f"or name {parts.netloc.rpartition('@')[2]} in spark_venv_insecure_indexes to accept that, "
                       "with spark_venv_require_hashes so each wheel is checked against the hash lock")
    return refused


def hashes_file(directory: str, step_id: str) -> str:
    """Where a step's --require-hashes requirements are written in the venv."""
    return f"{directory}/hashes-{step_id}.txt"


def pip_steps(matrix, extras: list[dict], overrides: dict, constraints_file: str, lock: dict | None = None,
              hashes_dir: str = "", wheelhouse: str | None = None) -> list[dict]:
    """The pip install commands, in order: [{id, why, indexes, args, env}] (args after `python -m pip install`;
    the indexes reach pip through index_env, never its argv).

    A step marked `hold` runs with the matrix's pins as constraints (`--constraint constraints_file`): it resolves
    its packages' own dependencies, and torch, transformers or any other pin installed before it cannot move.

    With a hash lock, each step installs exactly its locked set (`--require-hashes --no-deps -r
    hashes-<id>.txt`, the file in `hashes_dir`) from the indexes the matrix check resolved it against (its own,
    then the earlier steps'): the sha256 of every file pip takes is the lock's, whichever index serves it.
    With a wheelhouse too (the lock's wheels, fetched once for the fleet by spark_wheelhouse), from it alone:
    `--no-index --find-links WHEELHOUSE`, no index asked.
    """
    steps = []
    tool = "uv" if installer(matrix) else "pip"
    for position, step in enumerate(matrix["steps"]):
        indexes = [override(step["index_url"], overrides)]
        args = [*step.get("args", []), *step["packages"]]
        if step.get("hold"):  # every pin of the matrix held: what the steps before installed cannot move
            args = ["--constraint", constraints_file, *args]
        if lock is not None:
            indexes += [url for url in dict.fromkeys(override(e["index_url"], overrides)
                                                     for e in matrix["steps"][:position]) if url not in indexes]
            args = ["--require-hashes", "--no-deps", "-r", hashes_file(hashes_dir, step["id"])]
            if wheelhouse:
                indexes, args = [], ["--no-index", "--find-links", wheelhouse, *args]
        # The installer itself is installed by pip (into a venv of its own, beside the venvs).
        steps.append({"id": step["id"], "why": step.get("why", ""), "indexes": indexes, "args": args, "env": {},
                      "tool": "pip" if step.get("installer") else tool, "installer": bool(step.get("installer"))})
    default_index = override(venv_steps(matrix)[-1]["index_url"], overrides)
    for extra in extras:
        # The matrix's pins are held: an extra that wants another torch fails instead of replacing it.
        args = ["--constraint", constraints_file, *extra["args"], extra["requirement"]]
        step = {"id": f"extra:{extra['name']}", "why": extra["says"], "indexes": [default_index], "args": args,
                "env": extra["env"], "tool": tool, "installer": False}
        if extra["index_url"]:
            # Never one pip command over both indexes: pip takes the highest version either offers, so a package
            # of the same name on the matrix's index (PyPI) would win over the one the component table names.
            # The package alone from its own index, then its dependencies from the matrix's index (the package,
            # installed, is not fetched again).
            steps.append({**step, "indexes": [override(extra["index_url"], overrides)],
                          "args": ["--no-deps", *args]})
            step = {**step, "id": f"extra:{extra['name']}:dependencies"}
        steps.append(step)
    return steps


def display(step: dict) -> str:
    """The step as the user would type it."""
    env = " ".join(f"{k}={v}" for k, v in step["env"].items())
    options = ([f"--index-url {redact_url(step['indexes'][0])}"] if step["indexes"] else []) + [
        f"--extra-index-url {redact_url(url)}" for url in step["indexes"][1:]]
    words = " ".join([*options, *(f'"{a}"' if "=" in a or "<" in a or ">" in a else a for a in step["args"])])
    tool = "uv pip" if step.get("tool") == "uv" else "pip"
    return f"{env + ' ' if env else ''}{tool} install {words}"


def platform_tags(target: dict) -> list[str]:
    """pip --platform values for the target: pip matches manylinux_2_N exactly, so every N up to glibc."""
    arch = target["arch"]
    top = int(target["glibc"].split(".")[1])
    return [f"manylinux_2_{n}_{arch}" for n in range(top, 16, -1)] + [f"manylinux2014_{arch}"]


# The hash lock (sparkfleet matrix lock): every package each step resolves to, with its wheel's sha256, so the
# venv's steps can run with pip's --require-hashes. Written from the matrix check's resolution, never by hand.
LOCK_VERSION = 1
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_LOCK_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_LOCK_VERSION_TEXT = re.compile(r"^[0-9][0-9A-Za-z.+!_-]*$")


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


def validate_lock(lock, matrix) -> list[str]:
    """What is wrong with a hash lock for this matrix (empty: nothing). Every value that reaches pip's
    requirements file is checked here, where it enters."""
    if not isinstance(lock, dict):
        return [f"the lock is a {type(lock).__name__}, expected a mapping written by sparkfleet matrix lock"]
    errors = []
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
            name, version, sha = (str(entry.get(k, "")) for k in ("name", "version", "sha256"))
            if not _LOCK_NAME.match(name) or not _LOCK_VERSION_TEXT.match(version) or not _SHA256.match(sha):
                errors.append(f"step {step_id}: {entry!r} is not name, version and a sha256 of 64 hex digits")
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

#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Ask the configured indexes whether every pin of the stack matrix exists as a wheel for the target."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_matrix_check
short_description: Check that every pin of the stack matrix exists as a wheel for the Spark target
description:
  - For each pinned package of each step, asks the step's index (or its
    override) with C(pip install --dry-run --report) for a wheel of that exact
    version for the matrix's target (Python version, linux architecture, every
    manylinux glibc level up to the target's). Installs nothing; pip reads
    metadata, not whole wheels.
  - Each package is C(available) (with the wheel's file name), C(missing)
    (with the versions the index offers) or C(unreachable) (the index could
    not be asked). pip runs isolated from the host's pip configuration.
  - Also reports the matrix's staleness against O(max_age_days).
version_added: "0.1.0"
author: sparkfleet contributors
options:
  matrix:
    description: The stack matrix (matrix/spark-stack.yml, loaded).
    type: dict
    required: true
  index_overrides:
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
attributes:
  check_mode:
    support: full
    details: Reads only; the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
"""

EXAMPLES = r"""
- name: Check the pins against PyPI
  spark_matrix_check:
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
unreachable:
  description: The indexes that could not be asked.
  returned: success
  type: list
staleness:
  description: C(last_verified), C(age_days), C(stale), C(message).
  returned: success
  type: dict
table:
  description: The rows as aligned text lines.
  returned: success
  type: list
"""

import datetime
import json
import os
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils._stack_matrix import MatrixError, check, override, parse_pin, platform_tags, staleness
from ansible.module_utils.basic import AnsibleModule

_UNREACHABLE = re.compile(r"(Could not fetch URL|Max retries exceeded|NewConnectionError|Connection refused|"
                          r"Failed to establish|Temporary failure in name resolution|timed out|"
                          r"Network is unreachable|HTTP error (?:5\d\d|403|401))", re.I)
_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")


def ask(pip: list[str], spec: str, index: str, target: dict, timeout: int) -> dict:
    with tempfile.TemporaryDirectory() as work:
        report = os.path.join(work, "report.json")
        argv = [*pip, "install", "--dry-run", "--ignore-installed", "--no-deps", "--only-binary=:all:",
                "--target", os.path.join(work, "t"), "--report", report, "--quiet",
                "--python-version", target["python"], "--implementation", "cp",
                *[a for tag in platform_tags(target) for a in ("--platform", tag)],
                "--index-url", index, "--timeout", str(timeout), "--retries", "1", spec]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if proc.returncode == 0:
            with open(report, encoding="utf-8") as handle:
                item = json.load(handle)["install"][0]
            return {"status": "available", "wheel": item["download_info"]["url"].rsplit("/", 1)[-1]}
        err = proc.stderr
        versions = _VERSIONS.search(err)
        offered = [v.strip() for v in versions.group(1).split(",")] if versions else []
        offered = [v for v in offered if v and v != "none"]
        if _UNREACHABLE.search(err) and not offered:  # pip says "not found" too when it could not ask at all
            line = next((ln for ln in err.splitlines() if _UNREACHABLE.search(ln)), err.strip())
            return {"status": "unreachable", "detail": line.strip()[:300]}
        if "No matching distribution" in err or "Could not find a version" in err:
            detail = ("no wheel for this target; the index offers " + ", ".join(offered[-6:])
                      if offered else "the index has no wheel of it for this target")
            return {"status": "missing", "detail": detail}
        return {"status": "error", "detail": err.strip()[-400:]}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "matrix": {"type": "dict", "required": True},
            "index_overrides": {"type": "dict", "default": {}},
            "skip_steps": {"type": "list", "elements": "str", "default": []},
            "max_age_days": {"type": "int", "default": 90},
            "today": {"type": "str"},
            "timeout": {"type": "int", "default": 20},
        },
        supports_check_mode=True,
    )
    p = module.params
    try:
        matrix = check(p["matrix"])
        today = datetime.date.fromisoformat(p["today"]) if p["today"] else datetime.date.today()
        stale = staleness(matrix, today, p["max_age_days"])
    except (MatrixError, ValueError) as exc:
        module.fail_json(msg=f"{exc}. Nothing was checked.")
    unknown = sorted(set(p["skip_steps"]) - {s["id"] for s in matrix["steps"]})
    if unknown:
        module.fail_json(msg=f"skip_steps names {', '.join(unknown)}, which the matrix does not have; its steps are "
                             + ", ".join(s["id"] for s in matrix["steps"]))
    jobs = []
    for step in matrix["steps"]:
        for spec in step["packages"]:
            name, version = parse_pin(spec)
            index = override(step["index_url"], p["index_overrides"])
            jobs.append({"step": step["id"], "package": name, "version": version, "index": index, "spec": spec})
    pip = [sys.executable, "-m", "pip"]
    todo = [j for j in jobs if j["step"] not in p["skip_steps"]]
    with ThreadPoolExecutor(max_workers=4) as pool:
        answers = list(pool.map(lambda j: ask(pip, j["spec"], j["index"], matrix["target"], p["timeout"]), todo))
    for job, answer in zip(todo, answers, strict=True):
        job.update(answer)
    for job in jobs:
        job.setdefault("status", "skipped")
        job.pop("spec")
    target = matrix["target"]
    width = max(len(j["package"]) for j in jobs)
    table = [f"matrix {matrix['name']} (last verified {stale['last_verified']}, {stale['age_days']} days ago), "
             f"target cp{target['python'].replace('.', '')} linux {target['arch']} glibc {target['glibc']}"]
    table += [f"{j['step']:<8} {j['package']:<{width}} {j['version']:<12} {j['status']:<11} "
              f"{j.get('wheel') or j.get('detail') or ''}" for j in jobs]
    if stale["stale"]:
        module.warn(stale["message"])
    missing = [f"{j['package']}=={j['version']} ({j['step']})" for j in jobs if j["status"] == "missing"]
    module.exit_json(changed=False, rows=jobs, table=table, staleness=stale, missing=missing,
                     unreachable=sorted({j["index"] for j in jobs if j["status"] in ("unreachable", "error")}))


if __name__ == "__main__":
    main()

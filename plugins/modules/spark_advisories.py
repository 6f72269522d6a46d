#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Upstream advisories: warn about what is about to be used, or list upstream issues to review."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_advisories
short_description: Warn when an image, a pin or a playbook about to be used has an upstream advisory
description:
  - Reads the advisories file (C(matrix/advisories.yml)), dated like the stack
    matrix, and reports each advisory that affects one of O(images) (by
    C(repository:tag) or digest), O(packages) (C(name==version)) or
    O(playbooks), with the advisory's summary, link and what to do, as a
    warning - or as a failure with O(strict=true).
  - Warns when the file's C(checked_on) is older than O(max_age_days).
  - With O(upstream=true) (opt-in network) it asks GitHub's issues API for the
    issues of O(repository) created or updated since C(checked_on), every page,
    waiting out a short rate limit, and lists them for review. It never
    changes the file or a pin.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes, sparkfleet.spark.sparkfleet_read_only]
options:
  path:
    description: The advisories file.
    type: path
    required: true
  images:
    description: Images about to be used - C(repository), C(tag) and C(digest) or C(index_digest).
    type: list
    elements: dict
    default: []
  packages:
    description: Package pins about to be installed, C(name==version).
    type: list
    elements: str
    default: []
  playbooks:
    description: Upstream playbooks about to be followed.
    type: list
    elements: str
    default: []
  strict:
    description: Fail, instead of warning, when something is affected.
    type: bool
    default: false
  max_age_days:
    description: Age of C(checked_on) in days after which the file counts as stale.
    type: int
    default: 90
  today:
    description: The date to measure the age against (YYYY-MM-DD); default today.
    type: str
  upstream:
    description: Ask GitHub's issues API for the issues since C(checked_on) (network).
    type: bool
    default: false
  api_url:
    description: GitHub's API.
    type: str
    default: https://api.github.com
  repository:
    description: The upstream repository whose issues are listed.
    type: str
    default: NVIDIA/dgx-spark-playbooks
  timeout:
    description: Seconds to wait for each API answer.
    type: int
    default: 20
notes:
  - A GitHub token for a higher rate limit is read from the controller's C(GITHUB_TOKEN) environment variable,
    never from an option, so it reaches no command line and no log.
"""

EXAMPLES = r"""
- name: Warn about the images about to be pinned
  sparkfleet.spark.spark_advisories:
    path: "{{ playbook_dir }}/../matrix/advisories.yml"
    images: "{{ resolved.images }}"

- name: List the upstream issues since the file was last reviewed
  sparkfleet.spark.spark_advisories:
    path: matrix/advisories.yml
    upstream: true
"""

RETURN = r"""
affected:
  description: The advisories that affect what is about to be used - id, url, matched, summary, action, message.
  returned: success
  type: list
  elements: dict
age:
  description: C(checked_on), C(age_days), C(max_age_days), C(stale), C(message).
  returned: success
  type: dict
issues:
  description: With O(upstream), the upstream issues since C(checked_on) - number, title, url, created_at, state.
  returned: success
  type: list
  elements: dict
upstream:
  description: Whether GitHub's issues API was asked (O(upstream)).
  returned: success
  type: bool
lines:
  description: What to show, one line per advisory or issue.
  returned: success
  type: list
  elements: str
"""

import datetime
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._advisories import (
    AdvisoryError,
    affected,
    age,
    check,
    github_issues,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import require_yaml, yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import MatrixError


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "images": {"type": "list", "elements": "dict", "default": []},
            "packages": {"type": "list", "elements": "str", "default": []},
            "playbooks": {"type": "list", "elements": "str", "default": []},
            "strict": {"type": "bool", "default": False},
            "max_age_days": {"type": "int", "default": 90},
            "today": {"type": "str"},
            "upstream": {"type": "bool", "default": False},
            "api_url": {"type": "str", "default": "https://api.github.com"},
            "repository": {"type": "str", "default": "NVIDIA/dgx-spark-playbooks"},
            "timeout": {"type": "int", "default": 20},
        },
        supports_check_mode=True,
    )
    require_yaml(module)
    p = module.params
    try:
        with open(p["path"], encoding="utf-8") as handle:
            data = check(yaml.safe_load(handle))
        today = datetime.date.fromisoformat(p["today"]) if p["today"] else datetime.date.today()
        how_old = age(data, today, p["max_age_days"])
    except OSError as exc:
        module.fail_json(msg=f"cannot read the advisories file {p['path']}: {exc.strerror}; expected "
                             "matrix/advisories.yml (set spark_advisories_file)")
    except (AdvisoryError, MatrixError, ValueError, yaml.YAMLError) as exc:
        module.fail_json(msg=f"{p['path']}: {exc}")
    found = affected(data, p["images"], p["packages"], p["playbooks"])
    lines = [entry["message"] for entry in found]
    issues = []
    if p["upstream"]:
        try:
            answer = github_issues(p["api_url"], p["repository"], data["checked_on"],
                                   token=os.environ.get("GITHUB_TOKEN") or None, timeout=p["timeout"])
        except AdvisoryError as exc:
            module.fail_json(msg=str(exc), affected=found, age=how_old)
        issues = answer["issues"]
        lines.append(f"{len(issues)} issue(s) of {p['repository']} created or updated since {data['checked_on']} "
                     f"({answer['pages']} page(s)); review each, record what affects you in the advisories file "
                     "and set checked_on:")
        lines += [f"#{i['number']} {i['created_at'][:10] if i['created_at'] else ''} {i['state']}: {i['title']} "
                  f"{i['url']}" for i in issues]
        if answer["truncated"]:
            lines.append("more issues than the pages read: review them on GitHub")
    if how_old["stale"]:
        module.warn(how_old["message"])
    if found and p["strict"]:
        module.fail_json(msg="affected by upstream advisories (spark_advisories_strict): " + " | ".join(lines),
                         affected=found, age=how_old, lines=lines, issues=issues)
    for line in lines[:len(found)]:
        module.warn(line)
    module.exit_json(changed=False, affected=found, age=how_old, issues=issues, lines=lines, upstream=p["upstream"])


if __name__ == "__main__":
    main()

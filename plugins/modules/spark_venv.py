#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Build the pinned bare-pip venv from the stack matrix; switch to it only once verified."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_venv
short_description: Build, switch and record the pinned bare-pip venv of the stack matrix
description:
  - O(state=built) builds a venv at a new versioned path
    (C(<root>/<matrix name>-<fingerprint>); venvs cannot be moved, their
    scripts hold absolute paths) and runs the matrix's pip steps in order,
    exactly as written, then any extra packages by the matrix's policy, then
    imports every module the matrix lists and runs the venv's own
    C(pip check) (RV(dependencies) - what the matrix accepts, with its reason,
    and what it does not, which the caller's verification fails on). A step
    marked C(hold) runs with every pin of the matrix as a constraint (nothing
    installed before it can move). The active venv (the O(link)) is
    not touched. A step that fails removes the half-built venv and fails
    with the step, its command and pip's own error.
  - Idempotent by fingerprint (the matrix's target, steps, environment and
    extras). When the active venv was built from the same fingerprint, no pip
    runs at all. A venv already built from it but not yet active is reused.
  - O(state=active) switches O(link) atomically to a built venv (after the
    caller verified it) and removes older venvs beyond O(keep); O(state=failed)
    records that a built venv failed verification and leaves the link alone.
  - pip runs isolated from the host's pip configuration (no pip.conf, no
    PIP_CONSTRAINT such as NGC images set), with one wheel cache under O(root)
    so a rebuild fetches no wheel twice.
  - Where the matrix has an installer step (C(installer) true, e.g. C(uv==0.13.9)),
    pip installs it first into C(<root>/.installer/), never into the venv, and
    it runs the other steps (C(uv pip install --python <venv>)) with the same
    arguments, asking the indexes as pip does, compiling bytecode as pip does,
    without the host's uv configuration. A later build from the same pin reuses it.
  - The venv's activate script, and nothing system-wide, exports the matrix's
    environment (TRITON_PTXAS_PATH, HF_XET_HIGH_PERFORMANCE).
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes]
options:
  matrix:
    description: The stack matrix (matrix/spark-stack.yml, loaded).
    type: dict
    required: true
  state:
    description: C(built), C(active) or C(failed), see the description.
    type: str
    choices: [built, active, failed]
    default: built
  path:
    description: The built venv to switch to (O(state=active)) or mark failed (O(state=failed)).
    type: path
  reason:
    description: Why verification failed (O(state=failed)).
    type: str
  verification:
    description: The verification that passed, recorded in the venv (O(state=active)).
    type: dict
  root:
    description: Where the versioned venvs live.
    type: path
    default: /opt/sparkfleet/venvs
  link:
    description: The symlink users activate; always points at a verified venv.
    type: path
    default: /opt/sparkfleet/venv
  python:
    description: The interpreter the venv is made from.
    type: str
    default: python3
  index_mirrors:
    aliases: [index_overrides]
    description:
      - Upstream index URL -> the URL to use instead (a mirror, the test bed's index).
      - A mirror off the host's loopback is used only with O(lock) (its wheels checked against the lock's sha256);
        without it the module fails before anything is made.
    type: dict
    default: {}
  insecure_indexes:
    description:
      - Hosts (C(host) or C(host:port)) whose plain-http index pip may use. Any other C(http://) index is refused
        (the loopback's are accepted, as Docker accepts loopback registries).
    type: list
    elements: str
    default: []
  extra_packages:
    description: Requirements to add after the matrix, judged by the matrix's component table.
    type: list
    elements: str
    default: []
  pip_env:
    description:
      - Extra environment for pip and uv (a proxy, a CA bundle, a timeout).
      - The values of names that say they are secret (TOKEN, PASSWORD, SECRET, KEY, AUTH, CREDENTIAL) and the
        credentials in a URL (C(http://user:secret@proxy:3128)) are masked wherever the result would show them;
        the other values are not (masked, a short one such as a timeout of C(30) would hide every C(30) in the
        result, the venv's path included).
    type: dict
    default: {}
  lock:
    description:
      - The matrix's hash lock (C(sparkfleet matrix lock) writes it beside the matrix). Each step then installs
        exactly its locked set with pip's C(--require-hashes --no-deps), so a wheel whose bytes differ from the
        ones the lock recorded fails the build, and the active venv stays.
      - Refused, nothing changed, when it was written for another matrix (its fingerprint), does not hold the
        matrix's pins, or a value is not a name, a version and a sha256; and with O(extra_packages), which it
        does not cover. The lock's packages are part of the venv's fingerprint.
    type: dict
  wheelhouse:
    description:
      - A folder on the host holding the hash lock's wheels (spark_wheelhouse fetched them once for the fleet, and
        spark_venv copied them here). Each step then installs from it alone (C(--no-index --find-links), still
        C(--require-hashes)) - no index is asked, so a host that cannot reach them builds all the same.
      - Only with O(lock).
    type: path
  keep:
    description: How many previous venvs to keep besides the active one.
    type: int
    default: 1
  max_age_days:
    description: A matrix last verified longer ago than this is stale; a warning in every run.
    type: int
    default: 90
  strict_age:
    description: A stale matrix fails the call before anything is built or switched.
    type: bool
    default: false
  today:
    description: The date staleness is measured against (YYYY-MM-DD, the controller's); default the host's.
    type: str
attributes:
  check_mode:
    support: full
    details: Reports the versioned path and the pip commands it would run; creates nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Same fingerprint as the active venv, no pip and changed=false.
"""

EXAMPLES = r"""
- name: Build the venv from the matrix
  sparkfleet.spark.spark_venv:
    matrix: "{{ lookup('ansible.builtin.file', 'matrix/spark-stack.yml') | from_yaml }}"
  register: built

- name: Switch to it once verified
  sparkfleet.spark.spark_venv:
    matrix: "{{ lookup('ansible.builtin.file', 'matrix/spark-stack.yml') | from_yaml }}"
    state: active
    path: "{{ built.path }}"
"""

RETURN = r"""
path:
  description: The versioned venv of this matrix.
  returned: success
  type: str
  sample: /opt/sparkfleet/venvs/unsloth-2026.7.2-3fa9c0d1e2b4
contents_drift:
  description:
    - How the active venv of this matrix differs from what its build installed and from the matrix's pins, read
      from its dist-info, a line a package (C(peft) missing, the matrix pinning C(0.19.1)); empty when it does
      not, or when another matrix's venv is active.
    - Where it is not empty the venv is built anew beside the active one (RV(path) ends in C(-2), C(-3), ...), which
      stays until the new one is verified and active.
  returned: state=built
  type: list
  elements: str
fingerprint:
  description: sha256 of what the venv is built from.
  returned: success
  type: str
action:
  description: C(none) (active already), C(reuse) (built before, not active), C(build), C(switch), C(mark-failed).
  returned: success
  type: str
steps:
  description: The pip steps in order, each with C(id), C(command) (as typed) and, when run, C(seconds).
  returned: success
  type: list
extras:
  description: How each extra package is installed, as the matrix's policy says.
  returned: success
  type: list
imports:
  description: Each import of the matrix with C(ok) and, when it failed, C(error).
  returned: when built
  type: list
packages:
  description: The venv's installed distributions (name -> version), as pip lists them.
  returned: when built
  type: dict
dependencies:
  description: >-
    The venv's C(pip check), judged against the matrix's C(accepted:) deviations - C(checked), C(accepted) (each
    problem the matrix accepts, with its reason) and C(unaccepted) (each it does not: the venv fails verification).
  returned: when built or reused
  type: dict
  sample: {"checked": true, "accepted": ["unsloth 2026.7.2 declares transformers<=5.5.0,>=4.51.3; the venv has
           transformers 5.13.1 (accepted: the source document's set ...)"], "unaccepted": []}
staleness:
  description: C(last_verified), C(age_days), C(max_age_days), C(stale), C(message) of the matrix.
  returned: success
  type: dict
active:
  description: >-
    The active venv after this call (C(path), C(python), C(fingerprint), C(matrix), C(status),
    C(verification)); null when none.
  returned: success
  type: dict
python_warning:
  description: Set when the host's Python is not the one the matrix was verified for.
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._builder import Venv
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._matrix_module import start


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "matrix": {"type": "dict", "required": True},
            "state": {"type": "str", "choices": ["built", "active", "failed"], "default": "built"},
            "path": {"type": "path"},
            "reason": {"type": "str"},
            "verification": {"type": "dict"},
            "root": {"type": "path", "default": "/opt/sparkfleet/venvs"},
            "link": {"type": "path", "default": "/opt/sparkfleet/venv"},
            "python": {"type": "str", "default": "python3"},
            "index_mirrors": {"type": "dict", "default": {}, "aliases": ["index_overrides"],
                              "deprecated_aliases": [{"name": "index_overrides", "version": "1.0.0",
                                                      "collection_name": "sparkfleet.spark"}]},
            "insecure_indexes": {"type": "list", "elements": "str", "default": []},
            "wheelhouse": {"type": "path"},
            "extra_packages": {"type": "list", "elements": "str", "default": []},
            "pip_env": {"type": "dict", "default": {}, "no_log": False},
            "lock": {"type": "dict"},
            "keep": {"type": "int", "default": 1},
            "max_age_days": {"type": "int", "default": 90},
            "strict_age": {"type": "bool", "default": False},
            "today": {"type": "str"},
        },
        required_if=[("state", "active", ["path"]), ("state", "failed", ["path"])],
        supports_check_mode=True,
    )
    venv = Venv(module, start(module, "Nothing was changed."))
    {"built": venv.built, "active": venv.switch, "failed": venv.mark_failed}[module.params["state"]]()


if __name__ == "__main__":
    main()

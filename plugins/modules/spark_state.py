#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Write the host's sparkfleet state file, only when its content changed."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_state
short_description: Record what sparkfleet provisioned and verified on a host
description:
  - Writes O(content) as JSON to O(path) (atomically, mode 0644), with
    C(written_at) and C(first_written_at) timestamps. When the content is the
    same as the file's, nothing is written and the timestamp is kept, so a
    converged re-run reports C(changed=false).
  - Returns the previous state, so later runs and reports can tell a fresh
    host (no state before) from a converged one (same state) from one whose
    state changed.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes]
options:
  path:
    description: The state file.
    type: path
    default: /var/lib/sparkfleet/state.json
  content:
    description: What to record (digests, verdicts, versions).
    type: dict
    required: true
attributes:
  check_mode:
    support: full
    details: Reports whether the file would change, writes nothing.
  diff_mode:
    support: full
    details: Shows the file before and after.
  idempotent:
    support: full
    details: Same content, same file (timestamps kept).
"""

EXAMPLES = r"""
- name: Record the verification
  sparkfleet.spark.spark_state:
    content:
      platform: spark
      verification: {verdict: ok, line: True 13.0}
"""

RETURN = r"""
path:
  description: The state file.
  returned: success
  type: str
status:
  description: C(created) (no state before), C(updated) or C(unchanged).
  returned: success
  type: str
  sample: unchanged
previous:
  description: The state before this run; null when there was none.
  returned: success
  type: dict
recorded:
  description: The state now recorded (not C(state), which Ansible fills with the file facts of C(path)).
  returned: success
  type: dict
"""

import datetime
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _trusted as trusted
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._files import atomic_write
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._state import STATE_FILE, merge, parse, render


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "default": STATE_FILE},
            "content": {"type": "dict", "required": True},
        },
        supports_check_mode=True,
    )
    path = module.params["path"]
    # The controller's records live in the inventory's .sparkfleet/hosts/: a folder another user could write to
    # would let them plant the history the next run trusts (how a reinstalled host is told from a known one).
    try:
        folder = os.path.dirname(os.path.abspath(path))
        if not module.check_mode:
            trusted.make_dir(folder, 0o700, "the state file's folder")
        elif os.path.lexists(folder):
            trusted.check_dir(folder, "the state file's folder")
    except trusted.Untrusted as exc:
        module.fail_json(msg=str(exc))
    try:
        fd = trusted.open_file(path, os.O_RDONLY, what="the state file")
        with os.fdopen(fd, encoding="utf-8") as handle:
            before_text = handle.read()
    except FileNotFoundError:
        before_text = None
    except trusted.Untrusted as exc:
        # Another user's file (or a link) in sparkfleet's own folder: its history is not trusted, and it is
        # replaced by sparkfleet's own, never written through or given back to them.
        module.warn(f"{exc}: its content is not read, and sparkfleet's own replaces it")
        before_text = None
    except OSError as exc:
        module.fail_json(msg=f"cannot read the state file {path}: {exc.strerror}; expected a readable file "
                             f"or none. Check its permissions.")
    previous = parse(before_text)
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()
    if before_text and previous is None:  # damaged (a truncated write, an edit): kept aside, never lost
        aside = f"{path}.damaged-{now.replace(':', '')}"
        module.warn(f"the state file {path} is not a sparkfleet state (damaged or edited); "
                    + (f"kept as {aside}, and a new one is written" if not module.check_mode
                       else f"it would be kept as {aside}, and a new one written"))
        if not module.check_mode:
            os.replace(path, aside)
        before_text = None
    state, status = merge(previous, module.params["content"], now)
    changed = status != "unchanged" or before_text != render(state)
    # Not "state": Ansible adds a result's path's file facts, its state ("file") among them, over the module's.
    result = {"changed": changed, "path": path, "status": status, "previous": previous, "recorded": state}
    if changed:
        result["diff"] = {"before": before_text or "", "after": render(state), "before_header": path,
                          "after_header": path}
        if not module.check_mode:
            try:
                atomic_write(path, render(state), mode=0o600)
            except trusted.Untrusted as exc:
                module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()

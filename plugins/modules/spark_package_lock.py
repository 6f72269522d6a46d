#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Wait until no other process holds the package manager's locks, or fail saying who holds them."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_package_lock
short_description: Wait for apt/dpkg's locks to be free, up to a timeout, naming the process that holds them
description:
  - Asks the kernel (C(fcntl F_GETLK), the locks apt and dpkg take) whether another process holds any of
    O(paths), without taking them. While one does, polls until O(timeout) seconds have passed.
  - A fresh DGX OS runs unattended-upgrades after its first boot; provisioning then would fail half-way in the
    first apt task. This waits for it, warns how long it waited and for whom, and fails before anything is
    changed when the wait runs out, naming the holder (pid and command).
version_added: "0.2.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes, sparkfleet.spark.sparkfleet_read_only]
options:
  timeout:
    description: Seconds to wait for the locks; 0 checks once.
    type: int
    default: 600
  paths:
    description: The lock files (missing ones are skipped).
    type: list
    elements: path
    default: [/var/lib/dpkg/lock-frontend, /var/lib/dpkg/lock, /var/lib/apt/lists/lock, /var/cache/apt/archives/lock]
  poll:
    description: Seconds between checks.
    type: float
    default: 2.0
"""

EXAMPLES = r"""
- name: Wait for the package manager
  sparkfleet.spark.spark_package_lock:
    timeout: 600
"""

RETURN = r"""
waited:
  description: Seconds spent waiting for the locks.
  returned: success
  type: float
holders:
  description: The holders seen while waiting, C(path), C(pid) and C(command).
  returned: always
  type: list
  elements: dict
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._dpkg import LOCKS, lock_holder


def describe(held: list[dict]) -> str:
    return "; ".join(f"{h['path']} is held by pid {h['pid']} ({h['command']})" for h in held)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "timeout": {"type": "int", "default": 600},
            "paths": {"type": "list", "elements": "path", "default": list(LOCKS)},
            "poll": {"type": "float", "default": 2.0},
        },
        supports_check_mode=True,
    )
    p = module.params
    started = time.monotonic()
    seen: list[dict] = []
    while True:
        held = [h for h in (lock_holder(path) for path in p["paths"]) if h]
        for h in held:
            if h not in seen:
                seen.append(h)
        waited = round(time.monotonic() - started, 1)
        if not held:
            if seen:
                module.warn(f"waited {waited} s for the package manager: {describe(seen)}")
            module.exit_json(changed=False, waited=waited, holders=seen)
        if waited >= p["timeout"]:
            module.fail_json(msg=f"the package manager is busy: {describe(held)}, still after {waited} s "
                                 f"(timeout {p['timeout']} s). Nothing was changed. Let it finish (a fresh DGX OS "
                                 "runs unattended-upgrades after its first boot: 'systemctl status "
                                 "unattended-upgrades') and run again, or raise spark_preflight_package_lock_timeout.",
                             waited=waited, holders=seen)
        time.sleep(min(p["poll"], max(0.1, p["timeout"] - waited)))


if __name__ == "__main__":
    main()

#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Plan each host's pulls from the image lock (controller side; the action plugin runs it in process)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_image_plan
short_description: Plan the pulls of a host's images from the image lock
description:
  - Reads the image lock from O(path), the file C(sparkfleet pin) writes (the module spark_image_lock),
    validates it as every reader of the lock does, and returns it (RV(lock)) and what a host of these
    O(images) pulls, by digest.
  - O(inventory_lock) is the variable C(spark_images_lock) as the inventory gives it; left out, the action
    plugin reads that variable as the inventory holds it, never rendered (text in a hand-edited lock never runs
    as a template). Where the lock file
    is in the inventory's C(group_vars/all), Ansible loaded that same file into it; a variable that holds
    another lock (the file was moved, or the variable set elsewhere) is refused naming both, so a run never
    pulls from one lock while pin writes the other. Without O(path) (a host list has no inventory
    directory) the variable is the lock.
  - A malformed entry or a digest that is not C(sha256:) and 64 hex digits fails with the file and the
    entry. An image whose tag is moving (O(moving_tags)) and has no entry fails before any pull, telling
    the user to run C(sparkfleet pin). Other unlocked images are listed in RV(unlocked), to be resolved for
    this run.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
options:
  path:
    description: The lock file (C(spark_images_lock_file)); empty where the inventory is a host list.
    type: path
    required: true
  images:
    description: The host's configured images (name, registry, repository, tags).
    type: list
    elements: dict
    required: true
  inventory_lock:
    description:
      - The variable C(spark_images_lock) as the inventory loaded it; null where none sets it.
      - Left out, the action plugin reads the variable unrendered. A value given here is rendered by
        Ansible before the module sees it.
    type: raw
  moving_tags:
    description: Tags that move under the same name; such images are never pulled without a lock entry.
    type: list
    elements: str
    default: [latest]
notes:
  - Runs in the controller's own process through the collection's action plugin of the same name (no module
    process on every run); as a module it does the same.
extends_documentation_fragment:
  - sparkfleet.spark.sparkfleet_attributes
  - sparkfleet.spark.sparkfleet_read_only
seealso:
  - module: sparkfleet.spark.spark_image_lock
"""

EXAMPLES = r"""
- name: Plan the pulls
  sparkfleet.spark.spark_image_plan:
    path: "{{ spark_images_lock_file }}"
    images: "{{ spark_images_catalog }}"
    moving_tags: "{{ spark_images_moving_tags }}"
  delegate_to: localhost
"""

RETURN = r"""
plan:
  description: Per locked image, what to pull.
  returned: success
  type: list
  elements: dict
  sample: [{name: ngc, registry: nvcr.io, repository: nvidia/pytorch, tag: 25.11-py3, index_digest: "sha256:...",
            digests: {linux/arm64: "sha256:..."}, fallback: null}]
unlocked:
  description: Configured images without a lock entry whose tags do not move.
  returned: success
  type: list
  elements: dict
lock:
  description:
    - The lock as every run reads it, validated, each entry in today's fields (its digests keyed by platform);
      empty where there is no lock yet.
    - With O(images=[]) this is all the module does (a refresh and C(cluster verify) read the lock so).
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import require_yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._lock import PLAN_OPTIONS, LockRefused, load, plan


def main() -> None:
    module = AnsibleModule(argument_spec=PLAN_OPTIONS, supports_check_mode=True)
    require_yaml(module)
    p = module.params
    try:
        module.exit_json(**plan(load(p["path"], p["inventory_lock"]), p["images"], p["moving_tags"], p["path"]))
    except LockRefused as exc:
        module.fail_json(msg=exc.msg, problems=exc.problems)


if __name__ == "__main__":
    main()

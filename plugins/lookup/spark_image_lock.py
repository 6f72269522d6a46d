# Copyright: sparkfleet contributors
# Apache License 2.0
"""The image lock as every reader has it (a refresh, cluster verify): module_utils/images/_lock.py's load()."""

from __future__ import annotations

DOCUMENTATION = r"""
---
name: spark_image_lock
short_description: The image lock, read and validated as every run reads it
description:
  - Reads the image lock from the file C(sparkfleet pin) writes (C(spark_images_lock_file)) on the controller,
    validates it as the plan does (the module spark_image_plan) and returns it in today's fields (each entry's
    digests keyed by platform).
  - Fails when the inventory's variable C(spark_images_lock) holds another lock than the file, naming both, and
    when an entry is malformed, naming the file and the entry.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
options:
  _terms:
    description: The lock file; empty where the inventory is a host list (then O(inventory_lock) is the lock).
    required: true
    type: list
    elements: str
  inventory_lock:
    description: The variable C(spark_images_lock) as the inventory loaded it; null where none sets it.
    type: raw
"""

EXAMPLES = r"""
- name: The image of the lock NCCL runs in
  ansible.builtin.debug:
    msg: "{{ lookup('sparkfleet.spark.spark_image_lock', spark_images_lock_file,
                    inventory_lock=spark_images_lock | default(none)).ngc.index_digest }}"
"""

RETURN = r"""
_raw:
  description: The lock, a mapping of image name to entry (empty where there is no lock yet).
  type: list
  elements: dict
"""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._lock import LockRefused, load


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        self.set_options(var_options=variables, direct=kwargs)
        try:
            return [load(term or "", self.get_option("inventory_lock")) for term in terms]
        except LockRefused as exc:
            raise AnsibleLookupError(exc.msg) from exc

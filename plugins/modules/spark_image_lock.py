#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Write the image lock into the inventory (controller side): the lock's one writer."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_image_lock
short_description: Write the image lock from resolved digests
description:
  - Writes O(resolved) (from spark_image_resolve) as the image lock at O(path), the file C(sparkfleet pin)
    writes and every run reads (by default C(group_vars/all/spark_images_lock.yml) in the inventory). Run
    it on the controller, once. The plan of the pulls is the module spark_image_plan.
  - Entries in a stable key order, so the diff of the file is the review of a refresh. An entry whose
    digest did not change keeps its C(resolved_at). Each entry's digests are keyed by platform
    (C(digests), e.g. C(linux/arm64)); a lock written with the earlier C(arm64_digest) is rewritten so,
    which RV(changes) says.
  # make docs: lock-fields
  - >-
    Each entry holds, in this order - C(requested), the reference pin asked for, C(registry/repository:tag), before
    any mirror; C(registry), the registry the tag was resolved at; C(repository), the repository there; C(tag), the
    blessed tag locked: the newest that resolved; C(index_digest), the digest of the tag's index (or of its one
    manifest): what every host pulls; C(digests), each platform's manifest digest, C(linux/arm64: sha256:...);
    C(media_type), the index's media type, as the registry served it; C(platforms), the platforms the index lists;
    C(sizes), each platform's download size in bytes, checked against a host's free space before a pull; C(fallback),
    where an older blessed tag was locked: the tag wanted, the one used and why; C(resolved_at), when the digest was
    resolved, kept while it does not change; C(derived), each derived image built on this entry: its recipe's hash and
    its tag.
  # end make docs
  - A lock file that is not one (a malformed entry, a digest that is not C(sha256:) and 64 hex digits)
    fails naming the file and the entry, and is left untouched; so is a resolution that would not pass
    the plan. In check mode it shows the diff and writes nothing.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes]
options:
  path:
    description: The lock file.
    type: path
    required: true
  resolved:
    description: The images as spark_image_resolve returned them.
    type: list
    elements: dict
    required: true
  derived:
    description:
      - The derived images (spark_images_derived, checked by the spark_images_derived_recipes filter).
      - Each is recorded under its base's entry as C(derived.<name>) with its recipe hash and tag, computed from the
        base's new digest and the recipe's files as this controller has them.
    type: list
    elements: dict
    default: []
attributes:
  check_mode:
    support: full
    details: Shows the diff and writes nothing.
  diff_mode:
    support: full
    details: The lock file before and after.
  idempotent:
    support: full
    details: The same digests write the same file.
seealso:
  - module: sparkfleet.spark.spark_image_plan
"""

EXAMPLES = r"""
- name: Write the lock into the inventory
  sparkfleet.spark.spark_image_lock:
    path: "{{ spark_images_lock_file }}"
    resolved: "{{ resolved.images }}"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
changes:
  description: >-
    One line per image whose pin changed, C(name registry/repository:tag: old -> new), as
    the filter spark_images_lock_diff shows it; a derived recipe that moved; an image removed; entries
    rewritten in today's fields.
  returned: success
  type: list
  elements: str
  sample: ["unsloth docker.io/unsloth/unsloth:dgxspark-latest: sha256:aaa... -> sha256:bbb..."]
lock:
  description: The lock as written (or, in check mode, as it would be).
  returned: success
  type: dict
path:
  description: The lock file (O(path)).
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import require_yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._lock import LockRefused, write


def main() -> None:
    module = AnsibleModule(argument_spec={
        "path": {"type": "path", "required": True},
        "resolved": {"type": "list", "elements": "dict", "required": True},
        "derived": {"type": "list", "elements": "dict", "default": []},
    }, supports_check_mode=True)
    require_yaml(module)
    p = module.params
    try:
        module.exit_json(**write(p["path"], p["resolved"], p["derived"], check_mode=module.check_mode))
    except LockRefused as exc:
        module.fail_json(msg=exc.msg, problems=exc.problems)


if __name__ == "__main__":
    main()

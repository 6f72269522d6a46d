#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Read (plan) or write the image lock kept in the inventory (controller side)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_image_lock
short_description: Plan pulls from the image lock, or write the lock from resolved digests
description:
  - The lock is a YAML file inside the inventory (C(group_vars/all/spark_images_lock.yml)),
    so it is versioned with the inventory and loaded like any inventory variable
    (C(spark_images_lock)). Run this module on the controller, once.
  - With O(state=plan), checks the loaded lock (O(lock)) against the configured
    images and returns what each host pulls, by digest. A malformed entry or a
    digest that is not C(sha256:) and 64 hex digits fails with the file and the
    entry. An image whose tag is moving (O(moving_tags)) and has no entry fails
    before any pull, telling the user to run C(playbooks/pin.yml). Other unlocked
    images are listed in RV(unlocked), to be resolved for this run.
  - With O(state=write), writes O(resolved) (from spark_image_resolve) as the new
    lock, in a stable key order so the diff of the file is the review of a
    refresh. An entry whose digest did not change keeps its C(resolved_at). In
    check mode it shows the diff and writes nothing.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
options:
  state:
    description: C(plan) reads, C(write) writes.
    type: str
    choices: [plan, write]
    default: plan
  path:
    description: The lock file.
    type: path
    required: true
  images:
    description: The configured images (name, registry, repository, tags).
    type: list
    elements: dict
    required: true
  lock:
    description: The lock as loaded by the inventory (O(state=plan)); null when there is none.
    type: raw
  moving_tags:
    description: Tags that move under the same name; such images are never pulled without a lock entry.
    type: list
    elements: str
    default: [latest]
  resolved:
    description: The images as spark_image_resolve returned them (O(state=write)).
    type: list
    elements: dict
    default: []
  derived:
    description:
      - The derived images (spark_images_derived, checked by the spark_images_derived_recipes filter), O(state=write).
      - Each is recorded under its base's entry as C(derived.<name>) with its recipe hash and tag, computed from the
        base's new digest and the recipe's files as this controller has them.
    type: list
    elements: dict
    default: []
notes:
  - C(state=plan) reads no file and runs in the controller's own process through the collection's action
    plugin of the same name (no module process on every run); C(state=write) runs this module.
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
    support: full
    details: Plans the same; a write shows its diff and writes nothing.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in
      diff mode.
    support: full
    details: The lock file before and after.
  idempotent:
    description: When run twice in a row outside check mode, with the same arguments, the second invocation
      indicates no change.
    support: full
    details: The same digests write the same file.
"""

EXAMPLES = r"""
- name: Plan the pulls
  sparkfleet.spark.spark_image_lock:
    path: "{{ spark_images_lock_file }}"
    images: "{{ spark_images }}"
    lock: "{{ spark_images_lock | default(none) }}"
    moving_tags: "{{ spark_images_moving_tags }}"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
plan:
  description: Per locked image, what to pull (O(state=plan)).
  returned: success
  type: list
  elements: dict
  sample: [{name: ngc, registry: nvcr.io, repository: nvidia/pytorch, tag: 25.11-py3, index_digest: "sha256:...",
            arm64_digest: "sha256:...", fallback: null}]
unlocked:
  description: Configured images without a lock entry whose tags do not move (O(state=plan)).
  returned: success
  type: list
  elements: dict
changes:
  description: >-
    One line per image whose pin changed, C(name registry/repository:tag: old -> new), as
    the filter spark_images_lock_diff shows it (O(state=write)).
  returned: success
  type: list
  elements: str
  sample: ["unsloth docker.io/unsloth/unsloth:dgxspark-latest: sha256:aaa... -> sha256:bbb..."]
"""

import datetime

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils._derived import recipe_hash, tag_for
from ansible_collections.sparkfleet.spark.plugins.module_utils._files import atomic_write
from ansible_collections.sparkfleet.spark.plugins.module_utils._lock import ARGUMENT_SPEC, LockRefused, removed
from ansible_collections.sparkfleet.spark.plugins.module_utils._lock import diff as lock_diff
from ansible_collections.sparkfleet.spark.plugins.module_utils._lock import plan as plan_pulls
from ansible_collections.sparkfleet.spark.plugins.module_utils._pinned import lock_entry, validate_lock
from ansible_collections.sparkfleet.spark.plugins.module_utils._yaml import require_yaml, yaml

HEADER = ("# Written by playbooks/pin.yml: the images every host pulls, by digest.\n"
          "# Review a refresh by its diff; edit only through pin.yml.\n")


def render(lock: dict) -> str:
    class Dumper(yaml.SafeDumper):
        pass

    Dumper.add_representer(dict, lambda d, data: d.represent_mapping("tag:yaml.org,2002:map", data.items()))
    body = yaml.dump({"spark_images_lock": lock}, Dumper=Dumper, sort_keys=False, default_flow_style=False,
                     width=200)
    return "---\n" + HEADER + body


def plan(module: AnsibleModule) -> dict:
    try:
        return plan_pulls(module.params["lock"], module.params["images"], module.params["moving_tags"],
                          module.params["path"])
    except LockRefused as exc:
        module.fail_json(msg=exc.msg, problems=exc.problems)


def write(module: AnsibleModule) -> dict:
    path = module.params["path"]
    try:
        with open(path, encoding="utf-8") as handle:
            before_text = handle.read()
        old = (yaml.safe_load(before_text) or {}).get("spark_images_lock") or {}
    except FileNotFoundError:
        before_text, old = "", {}
    except (OSError, yaml.YAMLError, AttributeError) as exc:
        module.fail_json(msg=f"{path} cannot be read as a lock ({exc}); it was left untouched. Fix or remove it.")
    problems = validate_lock(old, path)
    if problems:  # the plan refuses it: so does the writer, rather than replace what someone must review
        module.fail_json(msg="; ".join(problems) + ". The lock was left untouched: fix the entry (or remove the "
                             "file to start over), then run pin again.", problems=problems)
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()
    rows = lock_diff(old, module.params["resolved"])
    changes = [row["line"] for row in rows if row["changed"]]
    new = {}
    for image, row in zip(module.params["resolved"], rows, strict=True):
        previous = old.get(image["name"]) if isinstance(old, dict) else None
        entry = lock_entry(image)
        kept = not row["changed"] and isinstance(previous, dict) and previous.get("resolved_at")
        entry["resolved_at"] = previous["resolved_at"] if kept else (image.get("resolved_at") or now)
        new[image["name"]] = entry
    for recipe in module.params["derived"]:
        base = new.get(recipe["base"])
        if base is None:
            module.fail_json(msg=f"derived image {recipe['name']}: base {recipe['base']!r} is not among the images "
                                 f"resolved ({', '.join(new) or 'none'}); the lock was left untouched.")
        files = {}
        for name, src in (recipe.get("files") or {}).items():
            try:
                with open(src, "rb") as handle:
                    files[name] = handle.read()
            except OSError as exc:
                module.fail_json(msg=f"derived image {recipe['name']}: file {name} ({src}) cannot be read ({exc}); "
                                     "the lock was left untouched.")
        sha = recipe_hash(base["index_digest"], recipe.get("apt_packages") or [], recipe.get("dockerfile") or "",
                          files)
        previous = ((old.get(recipe["base"]) or {}).get("derived") or {}).get(recipe["name"]) \
            if isinstance(old, dict) else None
        base.setdefault("derived", {})[recipe["name"]] = {"recipe": sha, "tag": tag_for(recipe["name"], sha)}
        if not isinstance(previous, dict) or previous.get("recipe") != sha:
            before = previous.get("recipe") if isinstance(previous, dict) else "(none)"
            changes.append(f"{recipe['name']} (derived from {recipe['base']}) {before} -> {sha}")
    changes += removed(old, list(new))
    problems = validate_lock(new, path)
    if problems:  # what a registry or the catalog gave must be as safe as what the plan accepts
        module.fail_json(msg="; ".join(problems) + ". Nothing was written.", problems=problems)
    after_text = render(new)
    changed = after_text != before_text
    result = {"changed": changed, "changes": changes, "lock": new}
    if changed:
        result["diff"] = {"before": before_text, "after": after_text, "before_header": path, "after_header": path}
        if not module.check_mode:
            atomic_write(path, after_text)
    return result


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    require_yaml(module)
    module.exit_json(**(plan(module) if module.params["state"] == "plan" else write(module)))


if __name__ == "__main__":
    main()

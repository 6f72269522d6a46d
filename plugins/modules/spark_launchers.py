#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Install every launcher of a host in one call, each written only when its text or attributes differ."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_launchers
short_description: Install a launcher per pinned image, all in one module call
description:
  - Writes one shell script per image of O(images) into O(dir), named by the image's C(launcher), that runs
    exactly the image's pinned C(ref) (a digest, or a derived image's ID), never a tag, with O(run_flags),
    O(environment) and ./O(workdir) mounted at C(/workspace/<last part of workdir>).
  - One module call for all of a host's launchers (the template loop it replaces cost two module calls per
    launcher). Each launcher is compared with the file on the host and written, atomically, only when its text
    differs; owner C(root), group C(root), mode C(0755) are set only when they differ. A converged host
    reports C(changed=false) and writes nothing.
  - Every value that reaches a script (launcher names, the reference, the working directory, the environment,
    the flags) is checked first; a bad one fails the task before any file is written, and says which value and
    what was expected.
  - Launchers no longer in O(images) are left in place (a user's own script of the same directory is never
    removed).
version_added: "0.2.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes, sparkfleet.spark.sparkfleet_converged]
options:
  dir:
    description: The directory of the launchers.
    type: path
    default: /usr/local/bin
  images:
    description:
      - The pinned images (the role's C(spark_images_pinned)). Each needs C(launcher) and C(ref); C(registry),
        C(repository), C(tag), C(resolved_at) (or C(derived), C(image_tag), C(recipe), C(base_ref)) go into
        the script's comment.
    type: list
    elements: dict
    required: true
  workdir:
    description: The relative directory the launchers mount (a plain relative path, no C(..)).
    type: str
    default: finetuning
  run_flags:
    description: The docker run flags every launcher passes.
    type: list
    elements: str
    default: []
  environment:
    description: Environment variables every launcher passes (C(--env NAME=VALUE)).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    details: Says which launchers would change, writes nothing.
  diff_mode:
    support: full
    details: Each changed launcher's text before and after.
  idempotent:
    support: full
    details: Same text and attributes, nothing written.
"""

EXAMPLES = r"""
- name: Install the launchers
  sparkfleet.spark.spark_launchers:
    dir: /usr/local/bin
    images: "{{ spark_images_pinned }}"
    workdir: finetuning
    run_flags: [--runtime=nvidia, --gpus, all]
    environment: {HF_HOME: /workspace/finetuning/.hf}
"""

RETURN = r"""
launchers:
  description: One entry per image, in the order of O(images).
  returned: success
  type: list
  elements: dict
  contains:
    name:
      description: The launcher's file name.
      type: str
    path:
      description: Its path on the host.
      type: str
    ref:
      description: The reference it runs.
      type: str
    changed:
      description: Whether its text or attributes were (or, in check mode, would be) changed.
      type: bool
    present:
      description: Whether a launcher was on the host before this call.
      type: bool
    running:
      description:
        - The reference the launcher on the host ran before this call (its last line), null where there was none
          or it names no image. In check mode, what the host runs now (C(sparkfleet verify) compares it with
          the lock).
      type: str
  sample: [{name: spark-ngc, path: /usr/local/bin/spark-ngc, ref: nvcr.io/nvidia/pytorch@sha256:..., changed: false,
            present: true, running: nvcr.io/nvidia/pytorch@sha256:...}]
"""

import os
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._files import atomic_write
from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _converged as converged
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._launchers import (
    UNBUILT,
    problems,
    running,
    script,
)


def _read(module: AnsibleModule, path: str) -> str | None:
    """The launcher as it is, read without following a link (a link planted there would show its target's bytes in
    the diff) or waiting on a FIFO; such a file is named, not read, and replaced by the launcher."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if os.path.islink(path):
            return f"(a symbolic link to {os.readlink(path)}: not read, replaced by the launcher)\n"
        module.fail_json(msg=f"cannot read the launcher {path}: {exc}; expected a text file or none. "
                             "Move it away (it is replaced by sparkfleet's launcher) and run again.")
        raise AssertionError("unreachable") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "(not a regular file: not read, replaced by the launcher)\n"
        with os.fdopen(fd, encoding="utf-8", closefd=False) as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        module.fail_json(msg=f"cannot read the launcher {path}: {exc}; expected a text file or none. "
                             "Move it away (it is replaced by sparkfleet's launcher) and run again.")
        raise AssertionError("unreachable") from exc
    finally:
        os.close(fd)


NAME = "spark_launchers"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "dir": {"type": "path", "default": "/usr/local/bin"},
            "images": {"type": "list", "elements": "dict", "required": True},
            "workdir": {"type": "str", "default": "finetuning"},
            "run_flags": {"type": "list", "elements": "str", "default": []},
            "environment": {"type": "dict", "default": {}},
            "converged_key": {"type": "str", "no_log": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    if not module.check_mode:
        converged.forget(NAME, module.params["converged_key"])
    images, workdir, environment, flags = p["images"], p["workdir"], p["environment"], p["run_flags"]
    said = [f"image {i + 1}: {problem}" for i, image in enumerate(images)
            for problem in problems(image, workdir, environment, flags, module.check_mode)]
    names = [image.get("launcher") for image in images]
    said += [f"launcher {name!r} is named by more than one image; expected one image per launcher"
             for name in sorted({n for n in names if names.count(n) > 1})]
    if said:
        module.fail_json(msg="no launcher was written: " + "; ".join(said)
                             + ". Fix the catalog (spark_images_catalog) or the role's variables and run again.",
                         problems=said)

    launchers, diffs = [], []
    for image in images:
        image = {**image, "ref": image.get("ref") or UNBUILT}  # UNBUILT only in check mode (checked above)
        path = os.path.join(p["dir"], image["launcher"])
        text = script(image, workdir, environment, flags)
        before = _read(module, path)
        changed = before != text
        if changed:
            diffs.append({"before": before or "", "after": text, "before_header": path, "after_header": path})
            if not module.check_mode:
                atomic_write(path, text, mode=0o755)
        file_args = {"path": path, "mode": "0755", "owner": "root", "group": "root", "attributes": None,
                     "seuser": None, "serole": None, "setype": None, "selevel": None, "secontext": None}
        if module.check_mode and before is None:
            pass  # the file is not there to compare: it would be created with these attributes
        else:
            changed = module.set_fs_attributes_if_different(file_args, changed)
        launchers.append({"name": image["launcher"], "path": path, "ref": image["ref"], "changed": changed,
                          "present": before is not None, "running": running(before)})
    result = {"changed": any(entry["changed"] for entry in launchers), "launchers": launchers}
    if not module.check_mode:
        # What a converged re-run returns: each launcher there, running its image; the launchers hold the state.
        converged.remember(NAME, p["converged_key"], [entry["path"] for entry in launchers],
                           {"changed": False, "launchers": [{**entry, "changed": False, "present": True,
                                                             "running": running(_read(module, entry["path"]))}
                                                            for entry in launchers]})
    if diffs:
        result["diff"] = diffs
    module.exit_json(**result)


if __name__ == "__main__":
    main()

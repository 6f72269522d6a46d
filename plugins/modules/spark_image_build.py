#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Build a derived image FROM a locked base image, by content hash, only when it is not there yet."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_image_build
short_description: Build a derived image FROM a locked image's digest, tagged by the recipe's content hash
description:
  - Renders a Dockerfile C(FROM <base>@<digest>) with the recipe's apt packages and Dockerfile fragment, and
    builds it with the files of O(context) for O(platform), tagged C(sparkfleet/<name>:<content hash>).
  - The content hash covers the base's digest, the packages, the fragment and every context file, so an image
    is rebuilt only when one of them changes; a host that has the tag builds nothing.
  - Refuses, before building, a recipe that installs or upgrades a component the base pins (torch, triton,
    transformers, xformers, flash-attn, CUDA/NVIDIA packages, or any Python distribution the base already
    has, read from the base itself), with the reasons.
  - A failed build tags nothing, so the host keeps the images it had.
version_added: "0.2.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes, sparkfleet.spark.sparkfleet_docker]
options:
  name:
    description: The derived image's name.
    type: str
    required: true
  base:
    description: The name of the locked image it is built FROM.
    type: str
    required: true
  base_ref:
    description: The base as this host has it, C(REPO@DIGEST).
    type: str
    required: true
  base_digest:
    description: The base's locked index digest (part of the content hash).
    type: str
    required: true
  apt_packages:
    description: Extra system packages, installed with apt-get in one layer.
    type: list
    elements: str
    default: []
  dockerfile:
    description: A Dockerfile fragment appended after the apt step (no FROM).
    type: str
    default: ""
  context:
    description: The build context directory on the host (the recipe's files, copied there beforehand).
    type: path
    required: true
  files:
    description: The names of the recipe's files in O(context) (part of the content hash).
    type: list
    elements: str
    default: []
  platform:
    description: The platform to build for.
    type: str
    default: linux/arm64
  network:
    description: C(docker build --network) for the build's RUN steps (e.g. C(host) to reach a local apt mirror).
    type: str
    default: ""
  read_base:
    description: Read the base's installed Python distributions (a throwaway container) to refuse re-installing them.
    type: bool
    default: true
  locked_recipe:
    description:
      - The recipe hash the lock records for this image; a different one, or an empty one (the lock has none), is
        a warning. Left out, nothing is compared (a refresh, which writes the lock after the host passed).
    type: str
  launcher:
    description: The image's launcher (a file name in O(launcher_dir)), for RV(pinned).
    type: str
  launcher_dir:
    description: Where the launchers are (the role's C(spark_images_launcher_dir)), for RV(pinned).
    type: path
    default: /usr/local/bin
attributes:
  check_mode:
    support: full
    details: Says whether it would build and what the recipe hash is; builds nothing.
  diff_mode:
    support: full
    details: The rendered Dockerfile.
  idempotent:
    support: full
    details: A tag that exists with the same recipe label is never built again.
"""

EXAMPLES = r"""
- name: Build the NGC image with ffmpeg on top
  sparkfleet.spark.spark_image_build:
    name: ngc-ffmpeg
    base: ngc
    base_ref: nvcr.io/nvidia/pytorch@sha256:...
    base_digest: sha256:...
    apt_packages: [ffmpeg]
    context: /var/lib/sparkfleet/build/ngc-ffmpeg
"""

RETURN = r"""
tag:
  description: The image's tag, C(sparkfleet/<name>:<12 hex of the recipe hash>).
  returned: success
  type: str
recipe:
  description: The recipe's content hash.
  returned: success
  type: str
image_id:
  description: The image's ID on this host (what its launcher runs); null in check mode before a build.
  returned: success
  type: str
built:
  description: Whether it was built in this run.
  returned: success
  type: bool
dockerfile:
  description: The rendered Dockerfile.
  returned: success
  type: str
pinned:
  description:
    - What the host runs for this image (module_utils/images/_pinned.py's record). Its C(ref) is the image ID, which
      its launcher runs. The role keeps it in C(spark_images_pinned).
  returned: success
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._files import atomic_write
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._shared_options import DOCKER
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._docker_client import DockerClient
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._derived import (
    INSTALLED_PROBE,
    recipe_hash,
    refusals,
    render,
    tag_for,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._pinned import derived as derived_record


def inspect(docker: DockerClient, ref: str) -> dict | None:
    found = docker.inspect_image(ref)
    return None if found is None else {"id": found["Id"], "labels": found["Labels"]}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "base": {"type": "str", "required": True},
            "base_ref": {"type": "str", "required": True},
            "base_digest": {"type": "str", "required": True},
            "apt_packages": {"type": "list", "elements": "str", "default": []},
            "dockerfile": {"type": "str", "default": ""},
            "context": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "str", "default": []},
            "platform": {"type": "str", "default": "linux/arm64"},
            "network": {"type": "str", "default": ""},
            "read_base": {"type": "bool", "default": True},
            "locked_recipe": {"type": "str"},
            "launcher": {"type": "str"},
            "launcher_dir": {"type": "path", "default": "/usr/local/bin"},
            **DOCKER,
        },
        supports_check_mode=True,
    )
    p = module.params

    def done(**result) -> None:
        """Exit with the result and the record of what the host runs."""
        module.exit_json(pinned=derived_record(name=p["name"], base=p["base"], base_ref=p["base_ref"],
                                               base_digest=p["base_digest"], launcher=p["launcher"],
                                               launcher_dir=p["launcher_dir"], result=result), **result)

    docker = DockerClient(module, required=True)
    contents = {}
    for name in p["files"]:
        path = os.path.join(p["context"], name)
        try:
            with open(path, "rb") as handle:
                contents[name] = handle.read()
        except OSError as exc:
            if module.check_mode and not os.path.exists(path):  # the copy before this one wrote nothing
                done(changed=True, built=False, image_id=None, tag=None, recipe=None,
                     notes=[f"{path} is not on the host yet (check mode copies nothing): the image "
                            "would be built once its files are there"])
            module.fail_json(msg=f"derived image {p['name']}: context file {path} cannot be read ({exc}); nothing "
                                 "was built.")
    recipe = {"name": p["name"], "apt_packages": p["apt_packages"], "dockerfile": p["dockerfile"]}
    sha = recipe_hash(p["base_digest"], p["apt_packages"], p["dockerfile"], contents)
    tag = tag_for(p["name"], sha)
    dockerfile = render(p["base_ref"], recipe, sha, p["base"])
    result = {"tag": tag, "recipe": sha, "dockerfile": dockerfile, "built": False, "image_id": None,
              "base_ref": p["base_ref"]}
    if p["locked_recipe"] and p["locked_recipe"] != sha:
        module.warn(f"derived image {p['name']}: the lock records recipe {p['locked_recipe']}, this run builds "
                    f"{sha} (the recipe or its base changed); run `sparkfleet pin` (playbooks/pin.yml) to lock it.")
    elif p["locked_recipe"] == "":  # left out (None): not compared, as in a refresh, which writes the lock after
        module.warn(f"derived image {p['name']} is not in the lock; run `sparkfleet pin` (playbooks/pin.yml) to "
                    f"record {tag}.")
    problems = refusals(recipe, None, contents)
    if problems:
        module.fail_json(msg="; ".join(problems) + ". Nothing was built: a derived image adds to its base, never "
                                                   "replaces what the base pins; take a newer base image instead.",
                         refusals=problems, **result)
    present = inspect(docker, tag)
    if present and present["labels"].get("io.sparkfleet.recipe") == sha:
        done(changed=False, **{**result, "image_id": present["id"]})
    if p["read_base"] and module.check_mode and inspect(docker, p["base_ref"]) is None:
        result["notes"] = [f"the base {p['base_ref']} is not on the host yet (check mode pulls nothing): the "
                           "recipe is checked against the base's Python distributions when it is built"]
    elif p["read_base"]:
        rc, out, err = docker.run("run", "--rm", "--pull", "never", "--network", "none", "--entrypoint", "python3",
                                  p["base_ref"], "-c", INSTALLED_PROBE)
        if rc != 0:
            module.fail_json(msg=f"derived image {p['name']}: the base's Python distributions could not be read "
                                 f"({p['base_ref']}, rc {rc}: {(err or out).strip()[-400:]}), so the recipe cannot "
                                 "be checked against what the base pins; nothing was built.", **result)
        try:
            installed = json.loads(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            module.fail_json(msg=f"derived image {p['name']}: the base's distributions came back unreadable "
                                 f"({out.strip()[-200:]!r}); nothing was built.", **result)
        problems = refusals(recipe, installed, contents)
        result["base_distributions"] = len(installed)
        if problems:
            module.fail_json(msg="; ".join(problems) + ". Nothing was built: a derived image adds to its base, "
                                                       "never replaces what the base pins; take a newer base "
                                                       "image instead.", refusals=problems, **result)
    result["changed"] = True
    result["diff"] = {"before": "", "after": dockerfile, "after_header": f"{tag} Dockerfile"}
    if module.check_mode:
        done(**result)
    os.makedirs(p["context"], exist_ok=True)
    dockerfile_path = os.path.join(p["context"], ".sparkfleet.Dockerfile")
    atomic_write(dockerfile_path, dockerfile)
    cmd = docker.argv("build", "--platform", p["platform"], "--file", dockerfile_path, "--tag", tag)
    if p["network"]:
        cmd += ["--network", p["network"]]
    # The classic builder takes FROM <repo>@<digest> from the images this host already pulled
    # (no base byte is fetched again) and labels the image for the platform asked.
    rc, out, err = docker.run_argv([*cmd, p["context"]], environ_update={"DOCKER_BUILDKIT": "0"})
    if rc != 0:
        module.fail_json(msg=f"derived image {p['name']}: docker build failed (rc {rc}): "
                             f"{(err or out).strip()[-1200:]}. Nothing was tagged; the host keeps its images.",
                         cmd=cmd, **result)
    built = inspect(docker, tag)
    result.update(built=True, image_id=built["id"] if built else None)
    done(**result)


if __name__ == "__main__":
    main()

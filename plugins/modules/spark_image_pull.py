#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Pull an image by digest, only when absent, and verify what arrived."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_image_pull
short_description: Pull images by digest for the host's platform, only those it does not have, and verify them
description:
  - All of a host's images (O(images)) in one module call, so a converged host asks Docker once per image within a
    single call, not one module call per image.
  - The single-image options (O(repository), O(digest), O(platforms), O(size), O(local_blessed)) are deprecated
    (removed in 1.0.0); they run as O(images) of one entry, their result also at the top level.
  - Looks the digest up in the local engine first; a host that has it pulls
    nothing (C(changed=false), no byte fetched).
  - Otherwise runs C(docker pull --platform linux/arm64 REPO@DIGEST) and then
    checks that the image's C(RepoDigests) contain the locked digest. If they
    do not, it fails closed - the image is not recorded as pinned and nothing
    refers to it.
  - Records each C(REPO@DIGEST) it pulled in O(record) (a JSON list), so that
    only images this project pulled can ever be pruned.
  - A mirror is given as O(repository) (C(<mirror>/<repo>)); digests are the same there, so the lock stays the
    upstream truth.
  - With O(images), every image is tried; when some fail, the module fails naming each, and RV(images) still
    says what the others did.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment:
  - sparkfleet.spark.sparkfleet_attributes
  - sparkfleet.spark.sparkfleet_docker
  - sparkfleet.spark.sparkfleet_converged
options:
  images:
    description:
      - All the images to pull, each a mapping of C(name) (how results name it), C(repository), C(digest) and,
        optionally, C(platforms), C(size) and C(local_blessed) (as the options of the same names; C(local_fallback),
        its old key, is still read).
        O(platform), O(headroom_bytes) and O(record) hold for all of them.
      - A complete request (the filter C(spark_images_pull_requests) makes one from a lock entry) also carries
        C(launcher), C(launcher_path) and C(lock), the lock entry; from them RV(pinned) says what the host runs.
    type: list
    elements: dict
  repository:
    description:
      - Deprecated (removed in 1.0.0; give O(images) one entry with C(repository)). The image's name as locked, e.g.
        C(nvcr.io/nvidia/pytorch), or its mirror's.
    type: str
  digest:
    description: Deprecated (removed in 1.0.0; C(digest) of an entry of O(images)). The locked index digest.
    type: str
  platform:
    description: The platform to pull (the host's own; C(linux/arm64) on a Spark).
    type: str
    default: linux/arm64
  platforms:
    description:
      - Deprecated (removed in 1.0.0; C(platforms) of an entry of O(images)).
      - The platforms the locked index offers (the lock's C(platforms)). When given and O(platform) is not
        among them, nothing is pulled and the module fails, since Docker would otherwise fall back to another
        platform's image and run it under emulation, or not at all.
    type: list
    elements: str
  size:
    description:
      - Deprecated (removed in 1.0.0; C(size) of an entry of O(images)).
      - Bytes the image is for O(platform) in the registry (config and compressed layers, the lock's C(sizes)).
        When given, the free space on Docker's data root is checked before pulling; an image that would not fit
        is refused, nothing pulled.
      - A pull holds the compressed layers and their unpacked content at once; about 3 times the size is asked for.
    type: int
  headroom_bytes:
    description: Bytes to keep free on Docker's data root after the pull.
    type: int
    default: 0
  local_blessed:
    description:
      - Deprecated (removed in 1.0.0; C(local_blessed) of an entry of O(images)).
      - Blessed tags (C(REPO:TAG), newest first) to use when the pull fails, because the registry cannot be
        reached or no longer has the locked digest, and the host already has one of them for O(platform) (a
        local blessed tag).
      - The one used is returned as RV(local_blessed) with the reason and a warning, never recorded as pulled
        (so never pruned), and runs by its own digest.
      - C(local_fallback), its old name, is a deprecated alias (removed in 1.0.0).
    type: list
    elements: str
    aliases: [local_fallback]
    version_added: 0.2.0
  docker_data_root:
    description:
      - Docker's data root (spark_preflight_facts' C(docker_data_root)). With O(converged_key) and
        O(docker_image_store), the image store's C(image/<driver>/repositories.json) under it is the state a
        converged run is recorded by.
    type: path
  docker_image_store:
    description:
      - Where the engine keeps its images (spark_preflight_facts' C(docker_image_store)) - a graph driver's name
        (C(overlay2)), whose C(repositories.json) Docker rewrites on every pull and removal, or C(containerd)
        (the containerd image store), under which nothing is recorded.
      - Left out, nothing is recorded either.
    type: str
    version_added: 0.2.0
  record:
    description: The file listing the images (C(REPO@DIGEST)) this project pulled.
    type: path
    default: /var/lib/sparkfleet/pulled-images.json
  docker_config:
    description:
      - The Docker client configuration the pull authenticates with (the file C(docker login) wrote; C(DOCKER_CONFIG)
        is set to its folder for the pull). When not given, Docker's own default (C(~/.docker/config.json)).
      - spark_images passes C(spark_images_docker_config), so a host logged in at a path of its own pulls with it.
    type: path
attributes:
  check_mode:
    support: full
    details: Says whether it would pull; pulls nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A present digest is never pulled again.
"""

EXAMPLES = r"""
- name: Pull the pinned NGC image
  sparkfleet.spark.spark_image_pull:
    images:
      - name: ngc
        repository: nvcr.io/nvidia/pytorch
        digest: "{{ spark_images_lock.ngc.index_digest }}"
        platforms: "{{ spark_images_lock.ngc.platforms }}"
"""

RETURN = r"""
images:
  description: With O(images), one entry per image in its order - C(name), C(ref), C(pulled), C(repo_digests),
    C(present_before) (the host had the locked digest before this call; in check mode, whether it has it now),
    C(local_blessed) when used (and C(local_fallback), its deprecated old key, until 1.0.0), and C(failed) and
    C(msg) for one that failed.
  returned: always
  type: list
  elements: dict
pinned:
  description:
    - With O(images), what the host runs (module_utils/images/_pinned.py's record), one per image pulled or present, in
      order; an image that failed has none. The role keeps it in C(spark_images_pinned).
  returned: always
  type: list
  elements: dict
ref:
  description: Deprecated (removed in 1.0.0, with O(repository)); the entry's C(ref) in RV(images). What the host runs,
    C(REPO@DIGEST).
  returned: success, with O(repository)
  type: str
pulled:
  description: Deprecated (removed in 1.0.0, with O(repository)); the entry's C(pulled). Whether the image was pulled.
  returned: success, with O(repository)
  type: bool
local_blessed:
  description: Deprecated (removed in 1.0.0, with O(repository)); the entry's C(local_blessed). When a blessed tag
    already on the host was used instead, C(wanted), C(used), C(image_id) and C(reason).
  returned: when used, with O(repository)
  type: dict
  version_added: 0.2.0
local_fallback:
  description: Deprecated, the same as RV(local_blessed) (removed in 1.0.0).
  returned: when used, with O(repository)
  type: dict
repo_digests:
  description: Deprecated (removed in 1.0.0, with O(repository)); the entry's C(repo_digests). The image's RepoDigests
    after the run.
  returned: success, with O(repository)
  type: list
  elements: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._files import atomic_write
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._shared_options import DOCKER
from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _converged as converged
from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _docker_api as docker_api
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._docker_client import DockerClient
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._oci import is_digest
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._pinned import pinned


def short_name(repository: str) -> str:
    """How Docker writes a name in RepoDigests (Docker Hub's prefix and library/ dropped)."""
    for prefix in ("docker.io/library/", "docker.io/"):
        if repository.startswith(prefix):
            return repository[len(prefix):]
    return repository


def repo_digests(docker: DockerClient, ref: str) -> list[str] | None:
    found = docker.inspect_image(ref)
    return None if found is None else found.get("RepoDigests") or []


def blessed_local(docker: DockerClient, refs: list[str], platform: str) -> dict | None:
    """The first of refs (REPO:TAG, newest first) this host has for the platform: ref to run it by, id, tag."""
    arch = platform.rpartition("/")[2]
    for tagged in refs:
        found = docker.inspect_image(tagged)
        if found is None:
            continue
        image_id, architecture, digests = found["Id"], found["Architecture"], found["RepoDigests"]
        if architecture != arch:
            continue
        repository = tagged.rpartition(":")[0]
        names = {repository, short_name(repository)}
        by_digest = [d for d in digests or [] if d.rpartition("@")[0] in names]
        return {"used": tagged, "id": image_id, "repo_digests": digests or [],
                "ref": by_digest[0] if by_digest else image_id}
    return None


UNPACK_FACTOR = 3  # compressed layers + their unpacked content, both on disk while a pull runs


def gib(size: float) -> str:
    return f"{size / 1024 ** 3:.1f} GiB"


def record(path: str, ref: str) -> None:
    try:
        with open(path, encoding="utf-8") as handle:
            known = json.load(handle)
    except (OSError, ValueError):
        known = []
    if ref not in known:
        atomic_write(path, json.dumps(sorted({*known, ref}), indent=2) + "\n")


class PullFailed(Exception):
    def __init__(self, msg: str, **extra) -> None:
        super().__init__(msg)
        self.msg, self.extra = msg, extra


class Puller:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.params = module.params
        # the CLI looked up on first use: a request refused for its inputs asks nothing of the host
        self.docker = DockerClient(module, required=True)
        self._root: str | None = None

    def data_root(self) -> str:
        """Docker's data root, asked once per call."""
        if self._root is None:
            self._root = self.docker.data_root()
        return self._root

    def check_space(self, ref: str, size: int) -> None:
        """Refuse, before any byte is fetched, an image that would not fit on Docker's data root."""
        headroom = self.params["headroom_bytes"]
        root = self.data_root()
        if not root:
            self.module.warn(f"Docker's data root could not be read (docker info); the free space for {ref} was "
                             "not checked.")
            return
        free = docker_api.free_bytes(root)
        if free is None:
            self.module.warn(f"the free space on {root} could not be read; it was not checked for {ref}.")
            return
        needed = size * UNPACK_FACTOR + headroom
        if free < needed:
            raise PullFailed(f"not enough disk for {ref}: it is {gib(size)} to download (about "
                             f"{gib(size * UNPACK_FACTOR)} on disk while it is pulled and unpacked), and Docker's "
                             f"data root {root} has "
                             f"{gib(free)} free, keeping {gib(headroom)} free (spark_images_disk_headroom_gib). "
                             "Nothing was pulled and the images on the host are untouched. Free space there "
                             "('docker image ls', then 'docker image rm' what you no longer need) and run again.",
                             free_bytes=free, needed_bytes=needed)

    def pull(self, image: dict) -> dict:
        """One image: {ref, pulled, repo_digests[, local_blessed]}, or PullFailed saying why."""
        module, platform = self.module, self.params["platform"]
        repository, digest = image.get("repository"), image.get("digest")
        platforms = image.get("platforms") or []
        if not repository:
            raise PullFailed("an image has no repository; expected REGISTRY/REPOSITORY (run `sparkfleet pin`, "
                             "playbooks/pin.yml, again)")
        if not is_digest(digest):
            raise PullFailed(f"digest {digest!r} is not sha256: and 64 hex digits; run `sparkfleet pin` "
                             "(playbooks/pin.yml) again.")
        if platforms and platform not in platforms:
            raise PullFailed(f"{repository}@{digest} is locked for {', '.join(platforms)}; this host is {platform}. "
                             "Nothing was pulled: an image for another platform would run emulated or not at all. "
                             "Remove the image from spark_images_catalog for this host, or pin a tag whose index "
                             f"has {platform}.")
        ref = f"{repository}@{digest}"
        wanted = {f"{short_name(repository)}@{digest}", ref}
        docker = self.docker
        present = repo_digests(docker, ref)
        if present is not None and wanted & set(present):
            return {"changed": False, "pulled": False, "ref": ref, "repo_digests": present}
        if module.check_mode:
            return {"changed": True, "pulled": False, "ref": ref, "repo_digests": present or []}
        if image.get("size"):
            self.check_space(ref, int(image["size"]))
        cmd = docker.argv("pull", "--platform", platform, ref)
        environ = {}
        if self.params.get("docker_config"):
            environ["DOCKER_CONFIG"] = os.path.dirname(self.params["docker_config"])
        rc, out, err = docker.run_argv(cmd, environ_update=environ)
        if rc != 0:
            reason = (err or out).strip()[-800:]
            blessed = image.get("local_blessed") or image.get("local_fallback") or []  # (its old key, still read)
            local = blessed_local(docker, blessed, platform)
            if local:
                module.warn(f"{ref} could not be pulled ({reason[-300:]}); using the blessed tag {local['used']} "
                            f"that this host already has ({local['ref']}), as the rules allow. Pull the locked "
                            "digest when the registry answers again (re-run).")
                used = {"wanted": ref, "used": local["used"], "image_id": local["id"],
                        "reason": reason.splitlines()[-1] if reason else f"rc {rc}"}
                # local_fallback: the deprecated old key, until 1.0.0
                return {"changed": False, "pulled": False, "ref": local["ref"], "repo_digests": local["repo_digests"],
                        "local_blessed": used, "local_fallback": used}
            if "toomanyrequests" in reason.lower() or "429" in reason:
                reason += (" - the registry rate-limits pulls (HTTP 429). Log in to it "
                           "(spark_images_registry_credentials: Docker Hub's limit is higher for an account), pull "
                           "through a mirror (spark_images_mirrors) so the fleet fetches each layer once, or re-run "
                           "later")
            looked = (f" No blessed tag is on the host to run instead (looked for {', '.join(blessed)})."
                      if blessed else "")
            raise PullFailed(f"docker pull {ref} failed (rc {rc}): {reason}. The previously pinned image, if any, "
                             f"is untouched.{looked}", cmd=cmd, rc=rc, stdout=out, stderr=err)
        after = repo_digests(docker, ref) or []
        if not wanted & set(after):
            raise PullFailed(f"pulled {ref} but its RepoDigests are {after}, expected {sorted(wanted)[0]}; the "
                             "registry served other content than the lock pins. Not used: check the registry "
                             "or run `sparkfleet pin --check --diff` (playbooks/pin.yml) to review the change.",
                             repo_digests=after)
        record(self.params["record"], ref)
        return {"changed": True, "pulled": True, "ref": ref, "repo_digests": after}


NAME = "spark_image_pull"
# The single-image options: deprecated, removed in 1.0.0 (one input shape: images).
SINGLE_REMOVED = {"removed_in_version": "1.0.0", "removed_from_collection": "sparkfleet.spark"}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "images": {"type": "list", "elements": "dict"},
            # The single-image form, deprecated: one entry of images, its result also at the top level.
            "repository": {"type": "str", **SINGLE_REMOVED},
            "digest": {"type": "str", **SINGLE_REMOVED},
            "platform": {"type": "str", "default": "linux/arm64"},
            "platforms": {"type": "list", "elements": "str", **SINGLE_REMOVED},
            "local_blessed": {"type": "list", "elements": "str", "aliases": ["local_fallback"], **SINGLE_REMOVED,
                              "deprecated_aliases": [{"name": "local_fallback", "version": "1.0.0",
                                                      "collection_name": "sparkfleet.spark"}]},
            "size": {"type": "int", **SINGLE_REMOVED},
            "headroom_bytes": {"type": "int", "default": 0},
            "record": {"type": "path", "default": "/var/lib/sparkfleet/pulled-images.json"},
            "docker_config": {"type": "path"},
            "docker_data_root": {"type": "path"},
            "docker_image_store": {"type": "str"},
            "converged_key": {"type": "str", "no_log": False},
            **DOCKER,
        },
        mutually_exclusive=[("images", "repository"), ("images", "digest")],
        required_one_of=[("images", "repository")],
        required_together=[("repository", "digest")],
        supports_check_mode=True,
    )
    params = module.params
    if not module.check_mode:
        converged.forget(NAME, module.params["converged_key"])
    puller = Puller(module)
    single = params["images"] is None  # the deprecated single-image form: one entry of images
    images = params["images"] if not single else [
        {"repository": params["repository"], "digest": params["digest"], "platforms": params["platforms"] or [],
         "size": params["size"], "local_blessed": params["local_blessed"] or []}]
    results, failed, records = [], [], []
    for image in images:
        try:
            entry = puller.pull(image)
            records.append(pinned(image, entry))
        except PullFailed as exc:
            entry = {"failed": True, "msg": exc.msg, **{k: v for k, v in exc.extra.items() if k in ("rc", "cmd")}}
            failed.append(f"{image.get('name') or image.get('repository')}: {exc.msg}" if len(images) > 1
                          else exc.msg)
        results.append({"name": image.get("name"), **entry})
    changed = any(entry.get("changed") for entry in results)
    for entry in results:
        if not entry.get("failed"):  # whether the host had the image before this call (check mode: has it now)
            entry["present_before"] = not entry.get("changed") or bool(entry.get("local_blessed"))
        entry.pop("changed", None)
    # The deprecated single-image form's result: its one entry at the top level too (until 1.0.0).
    top = {k: v for k, v in results[0].items() if k not in ("name", "failed", "msg")} if single else {}
    if failed:
        module.fail_json(msg="; ".join(failed), changed=changed, images=results, pinned=records, **top)
    # The one file Docker rewrites on every pull, tag and removal, for the store the engine says it uses (a glob of
    # image/*/ took a stale overlay2 file on a host moved to the containerd image store, and skipped the pull).
    watched = docker_api.store_file(params["docker_data_root"], params["docker_image_store"])
    store = [watched] if watched and os.path.isfile(watched) else []
    if not module.check_mode and store and not any(entry.get("local_blessed") for entry in results):
        # What a converged re-run returns: each image there, none pulled. (A blessed tag used in place of the
        # locked digest is not recorded: the next run tries the digest again. Docker's containerd image store keeps
        # its state in containerd's database, which sparkfleet does not read: not recorded.)
        converged.remember(NAME, params["converged_key"], store,
                           {"changed": False, "pinned": records,
                            "images": [{**entry, "pulled": False, "present_before": True} for entry in results]})
    module.exit_json(changed=changed, images=results, pinned=records, **top)


if __name__ == "__main__":
    main()

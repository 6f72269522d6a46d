#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Fetch the hash lock's wheels once for the fleet into a cache on the controller."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_wheelhouse
short_description: Fetch every wheel of the stack matrix's hash lock once, into a cache the fleet's hosts install from
description:
  - For each package of each step of the hash lock, the wheel for the matrix's target (Python, linux architecture,
    glibc), from the step's index (or its override) and the earlier steps', with pip's C(--require-hashes) against
    the lock's sha256, into O(cache) (C(<cache>/<sha256>/<wheel>), its sha256 read again before it is kept). A wheel
    already there is not fetched again; so across a fleet each wheel crosses from its index once, whichever host
    asked first. The hosts install with C(--require-hashes) too, so a file changed in the cache fails their build.
  - Runs where the cache is (the controller, C(delegate_to localhost)); the hosts then get the files from RV(files)
    and install with C(--no-index) (spark_venv's option C(wheelhouse)). Calls for several hosts at once take turns
    on the cache (a lock file), so none fetches what another is fetching.
  - pip runs isolated from this machine's pip configuration; an index URL (a mirror's token) reaches pip through its
    environment, never its argv, and is masked in the result.
  - With O(bundle), the lock's wheels are also put in one uncompressed tar (RV(bundle), C(<cache>/bundles/<key>.tar),
    the key from the lock's sha256s; made once, reused by every host), so that a host gets them in one transfer
    (C(ansible.builtin.unarchive)) instead of one task per wheel. A bundle unused for a day is removed when another
    is made.
version_added: "0.2.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes]
options:
  lock:
    description: The hash lock (C(sparkfleet matrix lock) writes it).
    type: dict
    required: true
  matrix:
    description: The stack matrix the lock was written for (its target and its steps' indexes).
    type: dict
    required: true
  index_mirrors:
    aliases: [index_overrides]
    description: Upstream index URL -> the URL to use instead (a mirror).
    type: dict
    default: {}
  bundle:
    description: Also put the lock's wheels in one tar (RV(bundle)) for the hosts to unpack; see the description.
    type: bool
    default: false
  cache:
    description: The folder the wheels are kept in, shared by every host of the fleet.
    type: path
    required: true
  timeout:
    description: Seconds pip waits for an index.
    type: int
    default: 60
  pip_env:
    description:
      - Environment for pip's fetch, as the venv's own steps get it (C(spark_venv_pip_env)), such as a proxy
        (C(HTTPS_PROXY)) or a CA bundle (C(PIP_CERT)). A secret in it is masked in the result.
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    details: Says which wheels it would fetch; fetches nothing.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: A wheel in the cache with the lock's sha256 is not fetched again.
"""

EXAMPLES = r"""
- name: Fetch the lock's wheels once for the fleet
  sparkfleet.spark.spark_wheelhouse:
    lock: "{{ spark_venv_lock }}"
    matrix: "{{ lookup('ansible.builtin.file', 'matrix/spark-stack.yml') | from_yaml }}"
    cache: ~/.cache/sparkfleet/wheels
  delegate_to: localhost
  register: wheels
"""

RETURN = r"""
files:
  description: The cache's file of every wheel of the lock (absolute paths), in the lock's order.
  returned: success
  type: list
  elements: str
fetched:
  description: The wheels this call fetched from their index.
  returned: success
  type: list
  elements: str
cached:
  description: The wheels already in the cache.
  returned: success
  type: list
  elements: str
bytes_fetched:
  description: The bytes of the wheels this call fetched.
  returned: success
  type: int
bundle:
  description: >-
    With O(bundle), the tar holding every wheel of the lock (flat, by file name) and, last, an empty
    C(<its name>.done) a host has only once all were unpacked; null in check mode.
  returned: success
  type: str
"""

import contextlib
import fcntl
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _trusted as trusted
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._hash_lock import hashed_requirements, validate_lock
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._indexes import index_env, step_indexes
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._matrix_module import start
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._pip_commands import platform_tags


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def cached(cache: str, entry: dict) -> str | None:
    """The cache's file for a lock entry: a wheel in the folder named by the lock's sha256. A file goes there only
    once pip fetched it with --require-hashes and its sha256 was read again (fetch()); it is not read once more on
    every call (a lock's wheels are gigabytes), since each host installs it with --require-hashes, which fails on
    a file changed since."""
    folder = os.path.join(cache, entry["sha256"])
    wheels = sorted(n for n in os.listdir(folder) if n.endswith(".whl")) if os.path.isdir(folder) else []
    return os.path.join(folder, wheels[0]) if wheels else None


def fetch(module: AnsibleModule, matrix: dict, position: int, entries: list[dict], cache: str) -> list[str]:
    """pip download the step's missing wheels (exactly the lock's, --require-hashes) and keep each by its sha256."""
    step = matrix["steps"][position]
    indexes = step_indexes(step, matrix["steps"][:position], module.params["index_mirrors"])
    target = matrix["target"]
    with tempfile.TemporaryDirectory(dir=cache) as work:
        requirements = os.path.join(work, "requirements.txt")
        with open(requirements, "w", encoding="utf-8") as handle:
            handle.write(hashed_requirements(entries))
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary=:all:",
                "--python-version", target["python"], "--implementation", "cp",
                *[a for tag in platform_tags(target) for a in ("--platform", tag)],
                "--timeout", str(module.params["timeout"]), "--progress-bar", "off", "-d", os.path.join(work, "w"),
                "-r", requirements]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
                   PIP_NO_CACHE_DIR="1")
        env.update({str(k): str(v) for k, v in module.params["pip_env"].items()})  # the owner's proxy, CA
        env.update(index_env(indexes))
        # subprocess: pip's environment of its own (this machine's PIP_* left out), which run_command cannot give.
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)  # pylint: disable=ansible-bad-function
        if proc.returncode != 0:
            module.fail_json(msg=f"step {step['id']}: the lock's wheels could not be fetched from "
                                 f"{', '.join(indexes)}: {(proc.stderr or proc.stdout).strip()[-1500:]}. The cache "
                                 "keeps what it had; nothing on the hosts changed.")
        kept = []
        for name in sorted(os.listdir(os.path.join(work, "w"))):
            path = os.path.join(work, "w", name)
            folder = os.path.join(cache, sha256(path))
            os.makedirs(folder, exist_ok=True)
            shutil.move(path, os.path.join(folder, name))
            kept.append(os.path.join(folder, name))
        return kept


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "lock": {"type": "dict", "required": True},
            "matrix": {"type": "dict", "required": True},
            "index_mirrors": {"type": "dict", "default": {}, "aliases": ["index_overrides"],
                              "deprecated_aliases": [{"name": "index_overrides", "version": "1.0.0",
                                                      "collection_name": "sparkfleet.spark"}]},
            "cache": {"type": "path", "required": True},
            "timeout": {"type": "int", "default": 60},
            "pip_env": {"type": "dict", "default": {}, "no_log": False},
            "bundle": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    matrix = start(module, "Nothing was fetched.")
    errors = validate_lock(p["lock"], matrix)
    if errors:
        module.fail_json(msg="the hash lock cannot be used: " + "; ".join(errors) + ". Nothing was fetched.")
    cache = p["cache"]
    result = {"changed": False, "files": [], "fetched": [], "cached": [], "bytes_fetched": 0}
    try:
        # A cache another user made (or can write to) could hand root a link for its lock or a wheel of theirs:
        # refused before anything in it is touched. In check mode nothing is made, locked or fetched.
        if module.check_mode:
            if os.path.lexists(cache):
                trusted.check_dir(cache, "the wheel cache")
            guard = None
        else:
            trusted.make_dir(cache, 0o755, "the wheel cache")
            guard = os.fdopen(trusted.open_file(os.path.join(cache, ".lock"), os.O_WRONLY | os.O_CREAT, 0o600,
                                                "the wheel cache's lock"), "w")
    except trusted.Untrusted as exc:
        module.fail_json(msg=f"{exc}. Nothing was fetched; nothing on the hosts changed.")
    with guard or contextlib.nullcontext():
        if guard:
            fcntl.flock(guard, fcntl.LOCK_EX)  # the fleet's hosts take turns: none fetches what another fetches
        for position, step in enumerate(matrix["steps"]):
            entries = p["lock"]["steps"][step["id"]]
            found = {e["sha256"]: cached(cache, e) for e in entries}
            missing = [e for e in entries if found[e["sha256"]] is None]
            result["cached"] += [os.path.basename(found[e["sha256"]]) for e in entries if e not in missing]
            if missing and not module.check_mode:
                for path in fetch(module, matrix, position, missing, cache):
                    result["fetched"].append(os.path.basename(path))
                    result["bytes_fetched"] += os.path.getsize(path)
            elif missing:
                result["fetched"] += [e.get("wheel") or e["name"] for e in missing]
            result["changed"] = result["changed"] or bool(missing)
            result["files"] += [cached(cache, e) or "" for e in entries]
        if not module.check_mode and "" in result["files"]:
            module.fail_json(msg="pip fetched the step's wheels but the cache lacks one the lock names (its sha256 "
                                 "differs); nothing on the hosts changed.", **result)
        result["bundle"] = None
        if p["bundle"] and not module.check_mode:
            result["bundle"] = bundle(cache, p["lock"], result["files"])
    module.exit_json(**result)


BUNDLE_KEEP_SECONDS = 86400


def bundle(cache: str, lock: dict, files: list[str]) -> str:
    """The lock's wheels in one uncompressed tar (wheels are zip files already), flat by file name: made once per
    lock (its key is the lock's sha256s), under the cache's lock, written whole or not at all. A bundle of
    another lock unused for a day is removed (the wheels stay in the cache)."""
    hashes = sorted(e["sha256"] for entries in lock["steps"].values() for e in entries)
    key = hashlib.sha256("\n".join(["bundle-2", *hashes]).encode()).hexdigest()[:16]  # 2: with its .done
    folder = os.path.join(cache, "bundles")
    trusted.make_dir(folder, 0o755, "the wheel cache's bundles")
    path = os.path.join(folder, f"{key}.tar")
    if not os.path.isfile(path):
        descriptor, part = tempfile.mkstemp(dir=folder, suffix=".part")
        os.close(descriptor)
        with tarfile.open(part, mode="w", format=tarfile.PAX_FORMAT) as archive:
            for wheel in dict.fromkeys(files):
                info = archive.gettarinfo(wheel, arcname=os.path.basename(wheel))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mode = 0o644
                with open(wheel, "rb") as data:
                    archive.addfile(info, data)
            # Last, so a host has it only once every wheel was unpacked: the role's unarchive `creates` it, and a
            # re-run after a failed build sends no byte again.
            done = tarfile.TarInfo(f"{key}.tar.done")
            done.mode, done.mtime = 0o644, int(time.time())
            archive.addfile(done, io.BytesIO(b""))
        os.chmod(part, 0o644)
        os.replace(part, path)
    os.utime(path)
    now = time.time()
    for name in os.listdir(folder):
        other = os.path.join(folder, name)
        if other != path and (name.endswith(".part") or name.endswith(".tar")) and \
                now - os.stat(other, follow_symlinks=False).st_mtime > BUNDLE_KEEP_SECONDS:
            os.unlink(other)
    return path


if __name__ == "__main__":
    main()

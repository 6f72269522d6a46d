#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""The cluster user's key and the trust between a cluster's nodes, kept in that user's home without following
the user's links (root must never write through them)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_cluster_trust
short_description: Make and read a cluster user's key, and keep the cluster's blocks in its SSH files
description:
  - Without O(authorized_keys) and O(known_hosts) - makes the cluster user's key when there is none (C(ssh-keygen)
    run as that user, never as root) and returns it with the node's host key.
  - With them - sets this cluster's block in the user's C(~/.ssh/authorized_keys) and C(~/.ssh/known_hosts) and
    removes every other sparkfleet cluster block there (a cluster renamed keeps no trust), then records the
    cluster and its user in O(record).
  - With O(state=absent) - the node is in no cluster, and every sparkfleet block is removed from the files of the user
    O(record) names, and the record with them; a node that never joined changes nothing.
  - Root reads and writes in the user's home without following links - each folder opened with C(O_NOFOLLOW), a
    file read only when it is the user's regular file (never a FIFO or a device, at most 1 MiB), a file replaced
    through a new temporary file beside it. A name that is a link, a FIFO, a device or another user's is refused,
    naming it, and nothing is written.
version_added: "0.2.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes]
options:
  user:
    description: The cluster's login user. Required unless O(state=absent).
    type: str
  cluster:
    description: The cluster's name. Required with O(authorized_keys).
    type: str
  key_type:
    description: The type of the user's key, and of the node's host key returned.
    type: str
    choices: [ed25519, ecdsa, rsa]
    default: ed25519
  comment:
    description: The comment of a key made now.
    type: str
    default: sparkfleet cluster
  authorized_keys:
    description: This cluster's block for the user's C(~/.ssh/authorized_keys) (the other nodes' keys).
    type: str
  known_hosts:
    description: This cluster's block for the user's C(~/.ssh/known_hosts) (the other nodes' host keys).
    type: str
  state:
    description: C(present) to join (or read), C(absent) to take every cluster's trust back.
    type: str
    choices: [present, absent]
    default: present
  host_key_dir:
    description: Where the node's host keys are (C(ssh_host_<key_type>_key.pub) is read).
    type: path
    default: /etc/ssh
  record:
    description: Where the node records the cluster it joined and its user.
    type: path
    default: /var/lib/sparkfleet/cluster.json
attributes:
  check_mode:
    support: full
    details: Says what it would make, set or remove; writes nothing (a key not made yet is returned as null).
  diff_mode:
    support: full
    details: Each SSH file before and after.
  idempotent:
    support: full
    details: A key that exists is kept; files that hold the blocks are not written.
"""

EXAMPLES = r"""
- name: Make and read the cluster user's key
  sparkfleet.spark.spark_cluster_trust:
    user: nvidia
  register: keys

- name: Trust the other nodes
  sparkfleet.spark.spark_cluster_trust:
    user: nvidia
    cluster: lab
    authorized_keys: "ssh-ed25519 AAAA... nvidia@spark-02 (sparkfleet cluster lab)"
    known_hosts: "spark-02,198.18.110.11 ssh-ed25519 AAAA..."

- name: Leave every cluster
  sparkfleet.spark.spark_cluster_trust:
    state: absent
"""

RETURN = r"""
public_key:
  description: The cluster user's public key (null in check mode before it is made).
  returned: when reading (no blocks given)
  type: str
host_key:
  description: The node's public host key of O(key_type).
  returned: when reading (no blocks given)
  type: str
made_key:
  description: Whether the user's key was made now (or would be, in check mode).
  returned: when reading (no blocks given)
  type: bool
removed:
  description: The clusters whose blocks were removed (renamed or left).
  returned: when writing or leaving
  type: list
  elements: str
"""

import json
import os
import pwd
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _trust as trust
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._files import atomic_write
from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _user_files as files


class Trust:
    def __init__(self, module: AnsibleModule, user: str):
        self.module = module
        try:
            entry = pwd.getpwnam(user)
        except KeyError:
            module.fail_json(msg=f"the cluster user {user} does not exist on this node; create it "
                                 f"(useradd -m {user}) or name an existing one as the cluster's user")
        self.user, self.home, self.uid, self.gid = entry.pw_name, entry.pw_dir, entry.pw_uid, entry.pw_gid
        self.diff: list[dict] = []

    def key_name(self) -> str:
        return f".ssh/id_{self.module.params['key_type']}"

    def key_exists(self) -> bool:
        try:
            dfd = files.open_dir(self.home, [".ssh"], self.uid)
        except FileNotFoundError:
            return False
        try:
            os.stat(f"id_{self.module.params['key_type']}", dir_fd=dfd, follow_symlinks=False)
            return True
        except FileNotFoundError:
            return False
        finally:
            os.close(dfd)

    def make_key(self) -> None:
        """ssh-keygen as the user: whatever the user put in its ~/.ssh, the key is written with its rights."""
        os.close(files.open_dir(self.home, [".ssh"], self.uid, self.gid, make=True))
        keygen = self.module.get_bin_path("ssh-keygen", required=True)
        as_user = {"user": self.uid, "group": self.gid, "extra_groups": []} \
            if os.geteuid() == 0 and self.uid != 0 else {}
        # subprocess: run_command cannot drop root to the user, and the user's own rights are the point here.
        proc = subprocess.run([keygen, "-q", "-t", self.module.params["key_type"], "-N", "", "-C",  # pylint: disable=ansible-bad-function
                               self.module.params["comment"], "-f", os.path.join(self.home, self.key_name())],
                              capture_output=True, text=True, cwd="/", timeout=60, check=False,
                              stdin=subprocess.DEVNULL, **as_user)
        if proc.returncode != 0:
            self.module.fail_json(msg=f"ssh-keygen could not make {self.user}'s key: {proc.stderr.strip()}",
                                  rc=proc.returncode, stderr=proc.stderr)

    def read(self) -> dict:
        made = not self.key_exists()
        if made and not self.module.check_mode:
            self.make_key()
        public = files.read(self.home, self.key_name() + ".pub", self.uid)
        if public is None and not (made and self.module.check_mode):
            self.module.fail_json(msg=f"{os.path.join(self.home, self.key_name())}.pub is missing beside its "
                                      f"private key; remove {os.path.join(self.home, self.key_name())} (or make "
                                      "the .pub with ssh-keygen -y) and run again")
        host_key_path = os.path.join(self.module.params["host_key_dir"],
                                     f"ssh_host_{self.module.params['key_type']}_key.pub")
        try:
            with open(host_key_path, encoding="utf-8") as handle:
                host_key = handle.read(files.LIMIT).strip()
        except OSError as exc:
            self.module.fail_json(msg=f"cannot read the node's host key {host_key_path}: {exc.strerror}; is "
                                      "openssh-server installed?")
        return {"changed": made, "made_key": made, "public_key": public.strip() if public else None,
                "host_key": host_key}

    def set_blocks(self, cluster: str | None, texts: dict[str, str]) -> list[str]:
        """Each SSH file with this cluster's block (cluster None: with none); the clusters removed."""
        removed, writes = set(), []
        for name, spec in trust.FILES.items():  # both read (and refused) before either is written
            relative = f".ssh/{name}"
            before = files.read(self.home, relative, self.uid)
            removed |= {block[0] for block in trust.blocks(before or "") if block[0] != cluster}
            after = trust.managed(before or "", cluster, spec["what"], texts.get(name, ""))
            if after == (before or ""):
                continue
            self.diff.append({"before_header": os.path.join(self.home, relative), "before": before or "",
                              "after_header": os.path.join(self.home, relative), "after": after})
            writes.append((relative, after, spec["mode"]))
        for relative, after, mode in [] if self.module.check_mode else writes:
            files.write(self.home, relative, after, self.uid, self.gid, mode)
        return sorted(removed)


def read_record(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "user": {"type": "str"},
            "cluster": {"type": "str"},
            "key_type": {"type": "str", "choices": ["ed25519", "ecdsa", "rsa"], "default": "ed25519"},
            "comment": {"type": "str", "default": "sparkfleet cluster"},
            "authorized_keys": {"type": "str", "no_log": False},  # public keys: nothing secret
            "known_hosts": {"type": "str"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "host_key_dir": {"type": "path", "default": "/etc/ssh"},
            "record": {"type": "path", "default": trust.RECORD},
        },
        required_if=[("state", "present", ["user"])],
        required_together=[("authorized_keys", "known_hosts", "cluster")],
        supports_check_mode=True,
    )
    params = module.params
    if params["cluster"] is not None and not trust.MARKER.match(f"# BEGIN sparkfleet cluster {params['cluster']}: x"):
        module.fail_json(msg=f"cluster {params['cluster']!r:.80}: expected a name without spaces or newlines")
    try:
        if params["state"] == "absent":
            record = read_record(params["record"])
            if not record or not record.get("user"):
                module.exit_json(changed=False, removed=[])
            node = Trust(module, record["user"])
            removed = node.set_blocks(None, {})
            if not module.check_mode:
                os.unlink(params["record"])
            module.exit_json(changed=True, removed=removed, diff=node.diff)
        node = Trust(module, params["user"])
        if params["authorized_keys"] is None:
            module.exit_json(**node.read())
        removed = node.set_blocks(params["cluster"], {"authorized_keys": params["authorized_keys"],
                                                      "known_hosts": params["known_hosts"]})
        record = {"cluster": params["cluster"], "user": node.user}
        changed = bool(node.diff)
        if read_record(params["record"]) != record:
            changed = True
            if not module.check_mode:
                atomic_write(params["record"], json.dumps(record) + "\n", mode=0o600)
        module.exit_json(changed=changed, removed=removed, diff=node.diff)
    except files.UnsafeFile as exc:
        module.fail_json(msg=f"{exc}. Nothing was written.")


if __name__ == "__main__":
    main()

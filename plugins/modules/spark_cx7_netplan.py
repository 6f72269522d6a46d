#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Write and apply a Spark's CX-7 netplan (/etc/netplan/40-cx7.yaml), rolling back by itself when it fails."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_cx7_netplan
short_description: Configure a Spark's ConnectX-7 rails with netplan, with an automatic rollback
description:
  - Renders NVIDIA's C(/etc/netplan/40-cx7.yaml) from the node's plan (both halves of each QSFP port, the MTU,
    static addresses or IPv4 link-local) and names no other interface, so the management link is never touched.
    A plan that names the interface of the node's default route, or the address Ansible reaches it at, is
    refused.
  - The candidate is validated with C(netplan generate) in a scratch root beside the node's other netplan files
    before anything is written; an invalid one changes nothing.
  - Applying arms a rollback first (a C(systemd-run) timer that restores the previous file and applies it again
    after O(rollback_seconds)), then runs C(netplan apply) and waits until every rail has its MTU and address. If
    that fails, the previous file is restored and applied at once. If it succeeds, the timer stays armed until a
    second call with O(confirm=true) (after Ansible reached the node again over its management link) disarms it,
    so a node cut off by the change comes back by itself, as C(netplan try) does.
  - The module's action plugin makes that second call itself, in the same task, right after the change, over a
    new connection (O(confirm_after_apply)), so each node is confirmed as soon as it applied, never after the whole
    play did.
version_added: "0.2.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes]
options:
  plan:
    description:
      - The node's plan, as the filter C(sparkfleet.spark.spark_cluster_node_plan) makes it from C(spark_clusters)
        (C(cluster), C(mtu), C(rails) with C(interface), C(hca), C(address)).
      - Required unless O(confirm=true) or O(state=absent).
    type: dict
  state:
    description:
      - C(present) writes and applies the plan. C(absent) (a node that left every cluster) removes the file and
        applies, with the same rollback and confirmation, but only a file sparkfleet wrote (its first line says
        so). A file written by hand, as NVIDIA's guide has owners do, is left as it is (RV(left)).
    type: str
    choices: [present, absent]
    default: present
  path:
    description: The netplan file.
    type: path
    default: /etc/netplan/40-cx7.yaml
  rollback_seconds:
    description: Seconds after which an applied change is undone unless confirmed.
    type: int
    default: 120
  wait_seconds:
    description: Seconds to wait, after C(netplan apply), for every rail's MTU and address.
    type: int
    default: 30
  confirm:
    description: Disarm the rollback of the last change (call it once Ansible reached the node again).
    type: bool
    default: false
  confirm_after_apply:
    description:
      - The action plugin confirms a change at once, in the same task, over a new connection to the node (each host
        right after its own change, not after the whole play applied). Set false to leave the timer armed, to be
        confirmed (O(confirm=true)) or to run out.
    type: bool
    default: true
  management_addresses:
    description:
      - The addresses Ansible reaches the node at (C(ansible_host)); a rail that holds one, or would be given one,
        is refused. A name is resolved on the node (IPv4, within 5 s). C(SSH_CONNECTION)'s is added where the
        module's environment has it.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    details: Validates and shows the file it would write; writes and applies nothing.
  diff_mode:
    support: full
    details: The file before and after.
  idempotent:
    support: full
    details: The same plan on a node that has it, its rails as the file says, writes and applies nothing.
"""

EXAMPLES = r"""
- name: Configure the CX-7 rails
  sparkfleet.spark.spark_cx7_netplan:
    plan: "{{ spark_clusters_model | sparkfleet.spark.spark_cluster_node_plan(inventory_hostname) }}"
  notify: Keep the CX-7 netplan
"""

RETURN = r"""
path:
  description: The netplan file.
  returned: success
  type: str
applied:
  description: Whether C(netplan apply) ran (false when the file was already as planned, and in check mode).
  returned: success
  type: bool
rollback_unit:
  description: The armed rollback timer's unit; null when none is armed (or the action plugin confirmed it).
  returned: success
  type: str
confirmed:
  description: Whether the action plugin reached the node again over a new connection and disarmed the timer.
  returned: when a change was applied with a rollback and O(confirm_after_apply=true)
  type: bool
left:
  description: Why the file was left in place with O(state=absent) (it was not written by sparkfleet); null otherwise.
  returned: success
  type: str
drift:
  description: How the rails differed from the file as written (it is applied again); empty when they did not.
  returned: success
  type: list
  elements: str
"""

import ipaddress
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _model as cluster_model
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _netplan as cluster_netplan
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._files import atomic_write

UNIT = "sparkfleet-cx7-rollback"
STATE_DIR = "/var/lib/sparkfleet"
BACKUP = f"{STATE_DIR}/40-cx7.yaml.previous"
ABSENT = f"{STATE_DIR}/40-cx7.yaml.absent"
ROLLBACK_SCRIPT = f"{STATE_DIR}/cx7-rollback.sh"


def is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def resolve(name: str, seconds: float = 5) -> list[str]:
    """The IPv4 addresses a name resolves to on this node, within `seconds` (a resolver that never answers
    gives none: the other checks still stand)."""
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        found = pool.submit(socket.getaddrinfo, name, None, socket.AF_INET).result(timeout=seconds)
    except (OSError, UnicodeError, FutureTimeout):
        return []
    finally:
        pool.shutdown(wait=False)
    return sorted({entry[4][0] for entry in found})


def rollback_script(path: str) -> str:
    """The rollback the timer runs: the previous file back (or none, if there was none), then netplan apply."""
    return (f"#!/bin/sh\n# Written by sparkfleet (spark_cx7_netplan): undoes a CX-7 netplan change nobody confirmed.\n"
            f"if [ -f '{BACKUP}' ]; then cp -p '{BACKUP}' '{path}'; elif [ -f '{ABSENT}' ]; then rm -f '{path}'; fi\n"
            f"rm -f '{BACKUP}' '{ABSENT}'\nnetplan apply\n")


class Netplan:
    def __init__(self, module: AnsibleModule):
        self.module = module
        self.path = module.params["path"]
        self.netplan = module.get_bin_path("netplan", required=True)
        self.ip = module.get_bin_path("ip", required=True)
        self.systemctl = module.get_bin_path("systemctl")

    def run(self, argv: list[str], timeout: int = 120) -> tuple[int, str, str]:
        # pylint: disable=ansible-bad-function  # a timeout: netplan apply can hang on a wedged networkd
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                                  env={**os.environ, "LC_ALL": "C"})
        except subprocess.TimeoutExpired:
            return 124, "", f"{argv[0]} did not finish in {timeout} s"
        return proc.returncode, proc.stdout, proc.stderr

    def management(self) -> tuple[str | None, list[str], dict[str, list[str]]]:
        """The default route's interface; the addresses Ansible reaches this node at (O(management_addresses), and
        SSH_CONNECTION's where sudo kept it); every interface's IPv4 addresses now."""
        rc, out, _err = self.run([self.ip, "-j", "route", "show", "default"], 10)
        routes = json.loads(out) if rc == 0 and out.strip() else []
        interface = routes[0].get("dev") if routes else None
        connection = os.environ.get("SSH_CONNECTION", "").split()
        addresses = [*self.module.params["management_addresses"], *connection[2:3]]
        # An ansible_host that is a name: the addresses it resolves to here, on the node (a rail must hold none).
        addresses += [found for name in addresses if not is_address(name) for found in resolve(name)]
        rc, out, _err = self.run([self.ip, "-j", "addr", "show"], 10)
        held = {link.get("ifname"): [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info") or []
                                     if a.get("family") == "inet"]
                for link in (json.loads(out) if rc == 0 and out.strip() else [])}
        return interface, addresses, held

    def validate(self, text: str) -> None:
        """netplan generate on the candidate beside the node's other netplan files, in a scratch root."""
        root = tempfile.mkdtemp(prefix="sparkfleet-netplan-")
        try:
            target = os.path.join(root, "etc", "netplan")
            os.makedirs(target)
            for name in sorted(os.listdir("/etc/netplan")) if os.path.isdir("/etc/netplan") else []:
                source = os.path.join("/etc/netplan", name)
                if name.endswith(".yaml") and os.path.isfile(source) and source != self.path:
                    shutil.copy(source, target)
            with open(os.path.join(target, os.path.basename(self.path)), "w", encoding="utf-8") as handle:
                handle.write(text)
            os.chmod(os.path.join(target, os.path.basename(self.path)), 0o600)
            rc, out, err = self.run([self.netplan, "generate", "--root-dir", root], 60)
            if rc != 0:
                self.module.fail_json(msg=f"netplan refuses the CX-7 configuration it would write to {self.path}: "
                                          f"{(err or out).strip()[:1000]}. Nothing was written; check the rails in "
                                          "spark_clusters.", rc=rc, stdout=out, stderr=err, candidate=text)
        finally:
            shutil.rmtree(root, ignore_errors=True)

    def links(self) -> dict[str, dict]:
        rc, out, _err = self.run([self.ip, "-j", "addr", "show"], 10)
        return {link.get("ifname"): link for link in (json.loads(out) if rc == 0 and out.strip() else [])}

    def reached(self, plan: dict | None) -> list[str]:
        """What is still missing on the rails: an interface, its MTU, its address (nothing, for no plan)."""
        missing = []
        if plan is None:
            return missing
        links = self.links()
        for rail in plan["rails"]:
            link = links.get(rail["interface"])
            if link is None:
                missing.append(f"{rail['interface']} is not on this node")
                continue
            if link.get("mtu") != plan["mtu"]:
                missing.append(f"{rail['interface']} has MTU {link.get('mtu')}, not {plan['mtu']}")
            have = [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info") or [] if a.get("family") == "inet"]
            # networkd gives a link without carrier no address: say so, it is the likely cause.
            carrier = ("; no carrier - is the cable in, and the peer's port up"
                       if "NO-CARRIER" in (link.get("flags") or []) else "")
            if rail["address"] and rail["address"] not in have:
                missing.append(f"{rail['interface']} has not {rail['address']} ({', '.join(have) or 'no address'}"
                               f"{carrier})")
            if not rail["address"] and not any(a.startswith("169.254.") for a in have):
                missing.append(f"{rail['interface']} has no link-local address (169.254.0.0/16) yet"
                               + (f" ({carrier[2:]})" if carrier else ""))
        return missing

    def armed(self) -> bool:
        if not self.systemctl:
            return False
        _rc, out, _err = self.run([self.systemctl, "is-active", f"{UNIT}.timer"], 10)
        return out.strip() == "active"

    def stop_timer(self) -> None:
        if self.systemctl:
            self.run([self.systemctl, "stop", f"{UNIT}.timer"], 30)
            self.run([self.systemctl, "reset-failed", f"{UNIT}.timer", f"{UNIT}.service"], 30)

    def disarm(self) -> None:
        """The change is kept: the timer stopped, the previous file forgotten."""
        self.stop_timer()
        for path in (BACKUP, ABSENT):
            if os.path.exists(path):
                os.unlink(path)

    def restore(self, before: str | None) -> None:
        if before is None:
            if os.path.exists(self.path):
                os.unlink(self.path)
        else:
            atomic_write(self.path, before, 0o600)
        self.run([self.netplan, "apply"])
        self.disarm()

    def apply(self, plan: dict | None, text: str | None, before: str | None) -> str | None:
        """Write `text` (None: remove the file), apply, and wait for the plan's rails (none for a removal)."""
        os.makedirs(STATE_DIR, mode=0o755, exist_ok=True)
        self.stop_timer()  # an earlier change's, before its backup is replaced by this one's
        if before is None:
            atomic_write(ABSENT, "", 0o600)
        else:
            atomic_write(BACKUP, before, 0o600)
        atomic_write(ROLLBACK_SCRIPT, rollback_script(self.path), 0o700)
        seconds = self.module.params["rollback_seconds"]
        if seconds > 0:
            systemd_run = self.module.get_bin_path("systemd-run")
            if not systemd_run:
                self.module.fail_json(msg="cannot arm the rollback of the CX-7 netplan: systemd-run is not on this "
                                          "node; nothing was applied. Set spark_cluster_rollback_seconds: 0 to apply "
                                          "without one.")
            rc, out, err = self.run([systemd_run, f"--unit={UNIT}", f"--on-active={seconds}",
                                     "--timer-property=AccuracySec=1s", "/bin/sh", ROLLBACK_SCRIPT], 30)
            if rc != 0:
                self.module.fail_json(msg=f"cannot arm the rollback of the CX-7 netplan (systemd-run: "
                                          f"{(err or out).strip()[:500]}); nothing was applied. Set "
                                          "spark_cluster_rollback_seconds: 0 to apply without one.", rc=rc)
        if text is None:
            os.unlink(self.path)
        else:
            atomic_write(self.path, text, 0o600)
        rc, out, err = self.run([self.netplan, "apply"])
        deadline = time.monotonic() + self.module.params["wait_seconds"]
        missing = [f"netplan apply failed: {(err or out).strip()[:500]}"] if rc != 0 else self.reached(plan)
        while rc == 0 and missing and time.monotonic() < deadline:
            time.sleep(1)
            missing = self.reached(plan)
        if missing:
            self.restore(before)
            self.module.fail_json(msg=f"the CX-7 netplan did not take: {'; '.join(missing)}. The previous "
                                      f"configuration was restored and applied ({self.path} "
                                      f"{'removed' if before is None else 'as it was'}). Check the rails' "
                                      "interfaces with ibdev2netdev and spark_clusters.", rc=rc, stderr=err)
        return f"{UNIT}.timer" if seconds > 0 else None


def leave(module: AnsibleModule, netplan: Netplan) -> None:
    """state=absent: the file removed and applied with a rollback, if sparkfleet wrote it."""
    try:
        with open(netplan.path, encoding="utf-8") as handle:
            before = handle.read()
    except FileNotFoundError:
        module.exit_json(changed=False, path=netplan.path, applied=False, rollback_unit=None, drift=[], left=None)
    result = {"changed": False, "path": netplan.path, "applied": False, "rollback_unit": None, "drift": [],
              "left": None}
    if not before.startswith(cluster_netplan.NETPLAN_MARK):
        result["left"] = (f"{netplan.path} was not written by sparkfleet (its first line is not "
                          f"'{cluster_netplan.NETPLAN_MARK}...'): left as it is")
        module.exit_json(**result)
    result.update(changed=True, diff={"before": before, "after": "", "before_header": netplan.path,
                                      "after_header": f"{netplan.path} (removed: this node is in no cluster)"})
    if not module.check_mode:
        result["rollback_unit"] = netplan.apply(None, None, before)
        result["applied"] = True
    module.exit_json(**result)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "plan": {"type": "dict"},
            "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
            "path": {"type": "path", "default": cluster_netplan.NETPLAN_FILE},
            "rollback_seconds": {"type": "int", "default": 120},
            "wait_seconds": {"type": "int", "default": 30},
            "confirm": {"type": "bool", "default": False},
            "confirm_after_apply": {"type": "bool", "default": True},
            "management_addresses": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    netplan = Netplan(module)
    if module.params["confirm"]:
        armed = netplan.armed()
        if armed and not module.check_mode:
            netplan.disarm()
        module.exit_json(changed=armed, path=netplan.path, applied=False, rollback_unit=None)
    if module.params["state"] == "absent":
        leave(module, netplan)
    plan = module.params["plan"]
    if plan is None:
        module.fail_json(msg="spark_cx7_netplan: plan is required with state=present (the node's plan from "
                             "spark_cluster_node_plan); nothing was written.")
    problem = cluster_model.check_plan(plan)
    if problem:
        module.fail_json(msg=f"spark_cx7_netplan: {problem}")
    interface, addresses, held = netplan.management()
    clash = cluster_netplan.management_clash(plan, interface, addresses, held)
    if clash:
        module.fail_json(msg=f"refused, nothing written: {clash}.")
    absent = [rail["interface"] for rail in plan["rails"] if rail["interface"] not in held]
    if absent:
        module.fail_json(msg=f"refused, nothing written: {', '.join(absent)} {'is' if len(absent) == 1 else 'are'} "
                             f"not on this node (it has {', '.join(sorted(n for n in held if n != 'lo'))}); name the "
                             "CX-7 interfaces ibdev2netdev shows, or cable the port.")
    text = cluster_netplan.render_netplan(plan)
    try:
        with open(netplan.path, encoding="utf-8") as handle:
            before = handle.read()
    except FileNotFoundError:
        before = None
    # Converged: the file as planned and the rails as the file says (an MTU or address changed by hand since is
    # put back by applying the file again).
    drift = netplan.reached(plan) if before == text else []
    result = {"changed": before != text or bool(drift), "path": netplan.path, "applied": False,
              "rollback_unit": None, "drift": drift}
    if result["changed"]:
        result["diff"] = {"before": before or "", "after": text, "before_header": netplan.path,
                          "after_header": netplan.path}
        if drift:  # the file is as planned: the diff is the rails as they are now against it
            now = cluster_netplan.as_they_are(plan, netplan.links())
            result["diff"].update(before=cluster_netplan.render_netplan(now),
                                  before_header=f"the rails now ({'; '.join(drift)})")
        netplan.validate(text)
        if not module.check_mode:
            result["rollback_unit"] = netplan.apply(plan, text, before)
            result["applied"] = True
    module.exit_json(**result)


if __name__ == "__main__":
    main()

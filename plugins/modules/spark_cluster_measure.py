#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Measure the CX-7 rails between cluster nodes: what answers on each cable, reach, jumbo frames, TCP, RDMA, SSH."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_cluster_measure
short_description: Measure a Spark cluster's CX-7 rails from one node to its peers, bounded in time
description:
  - Of each pair of nodes the one listed first measures, the other serves. O(action=serve) runs a one-off
    C(iperf3) server (and an C(ib_write_bw) server where the rail has an RDMA device) bound to this node's
    address on each rail, for each peer listed before it, all at once; each ends after one test or O(timeout)
    seconds, whichever comes first, and the module with the last. Start it with C(async) and C(poll 0), then
    measure from the peers. A server an earlier run left waiting on the same port (its client never came) is
    ended first, so that it cannot take this run's client and stop midway at its own timeout.
  - O(action=measure), towards each peer listed after this node, on each rail - which of the peer's ports
    answer on the cable (an IPv6 all-nodes ping, matched against the peer's link-local addresses by the
    verdict), whether the peer answers at its rail address, whether frames of the full MTU pass unfragmented,
    TCP bandwidth (C(iperf3 -J) for O(tcp_seconds)), RDMA bandwidth (C(ib_write_bw --report_gbits) for
    O(rdma_seconds), where the rail names an RDMA device and perftest is installed), and on the first rail
    whether the cluster user logs in to the peer without a password with its host key pinned
    (C(ssh -o BatchMode=yes -o StrictHostKeyChecking=yes)).
  - A rail addressed by IPv4 link-local (no address planned, C(link_local) true) shares 169.254.0.0/16 with
    the node's other rails, so an IPv4 packet to the peer may leave, or its answer come back, by another
    cable. Reach, frames and TCP are measured there towards the peer's IPv6 link-local address scoped to the
    rail (C(fe80::...%IFACE)), which no other cable carries; SSH still logs in at the IPv4 address.
  - Read-only; every command is bounded.
version_added: "0.2.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes, sparkfleet.spark.sparkfleet_read_only]
options:
  action:
    description: C(serve) for the peers listed before this node, C(measure) towards those after it.
    type: str
    choices: [serve, measure]
    required: true
  index:
    description: This node's place in the cluster's node list.
    type: int
    required: true
  rails:
    description: This node's rails - C(interface), C(address) (without prefix), C(hca) (or null), C(link_local)
      (addressed by IPv4 link-local) and C(address6) (its IPv6 link-local address, or null).
    type: list
    elements: dict
    required: true
  peers:
    description: The other nodes - C(name), C(index), C(addresses) (one per rail, without prefix), C(addresses6)
      (their IPv6 link-local addresses, one per rail or null).
    type: list
    elements: dict
    required: true
  mtu:
    description: The cluster's MTU (frames of this size must pass unfragmented).
    type: int
    default: 9000
  user:
    description: The cluster's login user (the SSH check runs as this user).
    type: str
  tcp_seconds:
    description: Seconds of each C(iperf3) test; 0 leaves TCP out.
    type: int
    default: 3
  rdma_seconds:
    description: Seconds of each C(ib_write_bw) test; 0 leaves RDMA out.
    type: int
    default: 3
  port:
    description: The first TCP port of the test servers (each pair and rail takes its own above it).
    type: int
    default: 5701
  timeout:
    description: Seconds any one command (and a server waiting for its client) may take.
    type: int
    default: 60
  record:
    description:
      - Where the servers started are recorded (pid, start time, owner, command line) while they wait, so that a
        later run ends one an interrupted run left behind only if it is provably that process.
    type: path
    default: /run/sparkfleet/cluster-servers.json
"""

EXAMPLES = r"""
- name: Measure the rails towards the later nodes
  sparkfleet.spark.spark_cluster_measure:
    action: measure
    index: 0
    rails: [{interface: enp1s0f1np1, address: 192.168.100.10, hca: rocep1s0f1}]
    peers: [{name: spark-02, index: 1, addresses: [192.168.100.11]}]
    user: nvidia

- name: The same on a rail of IPv4 link-local addresses (measured over IPv6 link-local)
  sparkfleet.spark.spark_cluster_measure:
    action: measure
    index: 0
    rails: [{interface: enp1s0f1np1, address: 169.254.3.7, hca: null, link_local: true,
             address6: "fe80::5054:ff:fe00:1"}]
    peers: [{name: spark-02, index: 1, addresses: [169.254.9.2], addresses6: ["fe80::5054:ff:fe00:2"]}]
    user: nvidia
"""

RETURN = r"""
measures:
  description: Per peer and rail - peer, rail, interface, address (the one measured towards), neighbors
    (link-local addresses that answered), reach and jumbo (sent, received, too_big; payload, the bytes each
    frame carried), tcp (received_gbps, ... or error), rdma (bw_avg_gbps, ... or
    error; null with rdma_why), ssh (ok, detail; first rail only).
  returned: action=measure
  type: list
  elements: dict
servers:
  description: The servers run - tool, port, address, peer, served (a client came and the test ended), error,
    ended_leftover (the pids of the servers an earlier run recorded and left waiting on that port, ended first).
  returned: action=serve
  type: list
  elements: dict
"""

import contextlib
import ipaddress
import json
import os
import pwd
import select
import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _model as cluster_model
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _tools as cluster_tools
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._files import atomic_write
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._validate import host_name

RDMA_PORT_OFFSET = 64
# A client's tries to reach a server the peer started in the same moment (a second apart).
CONNECT_ATTEMPTS = 5


def scoped(rail: dict, address: str | None, address6: str | None) -> str | None:
    """The address to measure at on a rail: the IPv4 one, or on a rail of IPv4 link-local addresses the IPv6
    link-local one scoped to the rail (fe80::1%enp1s0f1np1), which no other cable carries."""
    if not rail.get("link_local"):
        return address
    return f"{address6}%{rail['interface']}" if address6 else None


def own(rail: dict) -> str | None:
    """This node's address to measure at on the rail."""
    return scoped(rail, rail.get("address"), rail.get("address6"))


def ports(base: int, client: int, rail: int) -> tuple[int, int]:
    """The TCP ports of one client's tests on one rail of a server: iperf3's, ib_write_bw's."""
    tcp = base + client * cluster_model.MAX_RAILS + rail
    return tcp, tcp + RDMA_PORT_OFFSET


def identity(pid: int) -> dict | None:
    """What tells this process from any other that may get its pid later: its start time (clock ticks after
    boot, /proc/PID/stat), its owner and its whole command line; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            argv = handle.read().decode("utf-8", "replace").split("\0")
        uid = os.stat(f"/proc/{pid}").st_uid
    except (OSError, IndexError):
        return None
    if fields[0] == "Z":
        return None
    return {"start": int(fields[19]), "uid": uid, "argv": argv[:-1] if argv and argv[-1] == "" else argv}


def read_record(path: str) -> list[dict]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return []
    return [entry for entry in data if isinstance(entry, dict)] if isinstance(data, list) else []


def write_record(path: str, entries: list[dict]) -> None:
    if not entries:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        return
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    atomic_write(path, json.dumps(entries) + "\n", mode=0o600)


def end(pid: int, recorded: dict) -> bool:
    """End the process only if it is still the one recorded (start time, owner, command line), through a pidfd
    so that a pid reused between the check and the signal is never hit; True when it was ended."""
    if identity(pid) != {key: recorded.get(key) for key in ("start", "uid", "argv")}:
        return False
    try:
        pidfd = os.pidfd_open(pid)
    except OSError:
        return False  # gone since, or no pidfd here: a process not provably ours is left alone
    try:
        if identity(pid) != {key: recorded.get(key) for key in ("start", "uid", "argv")}:
            return False  # the pid was reused before the pidfd was taken
        for number, seconds in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(pidfd, number)
            if select.select([pidfd], [], [], seconds)[0]:  # readable once the process has ended
                return True
        return False
    finally:
        os.close(pidfd)


def spawn(argv: list[str], env: dict[str, str]) -> tuple[int, int, int]:
    """Start argv (a full path) with stdin from /dev/null and its output on pipes: (pid, stdout, stderr)."""
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        pid = os.posix_spawn(argv[0], argv, env, file_actions=[  # pylint: disable=ansible-bad-function
            (os.POSIX_SPAWN_DUP2, null, 0), (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2),
            (os.POSIX_SPAWN_CLOSE, out_r), (os.POSIX_SPAWN_CLOSE, err_r)])
    finally:
        for fd in (out_w, err_w, null):
            os.close(fd)
    return pid, out_r, err_r


def collect(pid: int, out_r: int, err_r: int) -> tuple[int, str, str]:
    """Read both pipes to their end (neither can fill and block the child), then wait: (rc, stdout, stderr)."""
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    open_fds = [out_r, err_r]
    while open_fds:
        for fd in select.select(open_fds, [], [])[0]:
            data = os.read(fd, 65536)
            if data:
                chunks[fd].append(data)
            else:
                open_fds.remove(fd)
                os.close(fd)
    _pid, status = os.waitpid(pid, 0)
    rc = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -os.WTERMSIG(status)
    return rc, b"".join(chunks[out_r]).decode(errors="replace"), b"".join(chunks[err_r]).decode(errors="replace")


class Measure:
    def __init__(self, module: AnsibleModule):
        self.module = module
        self.params = module.params
        self.timeout = module.params["timeout"]

    def run(self, argv: list[str], timeout: int | None = None) -> tuple[int, str, str]:
        # pylint: disable=ansible-bad-function  # a timeout per command: a peer that never answers must not hang
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout or self.timeout,
                                  check=False, env={**os.environ, "LC_ALL": "C"})
        except subprocess.TimeoutExpired:
            return 124, "", f"{os.path.basename(argv[0])} did not finish in {timeout or self.timeout} s"
        return proc.returncode, proc.stdout, proc.stderr

    def serve(self) -> list[dict]:
        timeout = self.module.get_bin_path("timeout", required=True)
        iperf3 = self.module.get_bin_path("iperf3") if self.params["tcp_seconds"] else None
        perftest = self.module.get_bin_path("ib_write_bw") if self.params["rdma_seconds"] else None
        servers = []
        for peer in self.params["peers"]:
            if peer["index"] >= self.params["index"]:
                continue
            for number, rail in enumerate(self.params["rails"]):
                tcp, rdma = ports(self.params["port"], peer["index"], number)
                bind = own(rail)
                if iperf3 and bind:
                    servers.append({"tool": "iperf3", "port": tcp, "address": bind, "peer": peer["name"],
                                    "argv": [iperf3, "-s", "-1", "-p", str(tcp), "-B", bind]})
                if perftest and rail.get("hca"):
                    servers.append({"tool": "ib_write_bw", "port": rdma, "address": rail.get("address"),
                                    "peer": peer["name"], "argv": [perftest, "-d", rail["hca"], "-p", str(rdma), "-D",
                                                                   str(self.params["rdma_seconds"]), "--report_gbits",
                                                                   "-F"]})
        ended = self.end_leftovers(servers)
        # Each until its one client is done, or the timeout: all at once, the module returning with the last.
        # Each is recorded as it starts (its pid, start time, owner and command line), so that a later run ends
        # it only if this very process is still waiting (end_leftovers).
        started = []
        for server in servers:
            argv = [timeout, str(self.timeout), *server.pop("argv")]
            # Spawned, not run_command: the pid is recorded while the server waits, for a later run to check.
            child = spawn(argv, {**os.environ, "LC_ALL": "C"})
            started.append(child)
            server["_record"] = {"pid": child[0], "port": server["port"], **(identity(child[0]) or {})}
        record = self.params["record"]
        write_record(record, read_record(record) + [server["_record"] for server in servers])
        try:
            with ThreadPoolExecutor(max_workers=max(1, len(servers))) as pool:
                outputs = list(pool.map(lambda child: collect(*child), started))
        finally:
            mine = {server["_record"]["pid"] for server in servers}
            write_record(record, [entry for entry in read_record(record) if entry.get("pid") not in mine])
        done = outputs
        for server in servers:
            del server["_record"]
        for index, (rc, _out, err) in enumerate(done):
            servers[index].update(rc=rc, served=rc == 0, error=None if rc == 0 else (err.strip()[-300:] or
                                                                                     f"exit {rc}"),
                                  ended_leftover=ended.get(servers[index]["port"], []))
        return servers

    def end_leftovers(self, servers: list[dict]) -> dict[int, list[int]]:
        """End the servers an earlier run left waiting on these ports, by port: the pids ended.

        A server waits for its one client until its timeout; a run whose client never came (a rail that did not
        answer) leaves it behind. The next run's server cannot bind the port, its client is served by the old
        one, and the old one's timeout ends that test midway ('the server has terminated'). Only a process that
        an earlier run recorded as it started it, and that still is that process (start time, owner, the whole
        command line with its bind address), is ended: never another user's iperf3, nor a program calling
        itself iperf3."""
        ports = {server["port"] for server in servers}
        record = self.params["record"]
        entries = read_record(record)
        found: dict[int, list[int]] = {}
        for entry in entries:
            if entry.get("port") in ports and isinstance(entry.get("pid"), int) and end(entry["pid"], entry):
                found.setdefault(entry["port"], []).append(entry["pid"])
        left = [entry for entry in entries if entry.get("port") not in ports]
        if len(left) != len(entries):
            write_record(record, left)
        return found

    def measure(self) -> list[dict]:
        measures = []
        for peer in self.params["peers"]:
            if peer["index"] <= self.params["index"]:
                continue
            for number, rail in enumerate(self.params["rails"]):
                measures.append(self.rail(peer, number, rail))
        return measures

    def rail(self, peer: dict, number: int, rail: dict) -> dict:
        address = (peer.get("addresses") or [None] * (number + 1))[number]
        target = scoped(rail, address, (peer.get("addresses6") or [None] * (number + 1))[number])
        entry = {"peer": peer["name"], "rail": number, "interface": rail["interface"], "address": target}
        ping = self.module.get_bin_path("ping", required=True)
        rc, out, err = self.run([ping, "-6", "-c", "2", "-i", "0.2", "-W", "1", "-I", rail["interface"], "ff02::1"])
        responders = cluster_tools.parse_ping6_responders(out)
        if responders or rc in (0, 1):
            entry["neighbors"] = responders
        else:
            entry["neighbors"], entry["neighbors_why"] = None, (
                f"no IPv6 link-local ping on {rail['interface']}: {(err or out).strip()[:200]}")
        if not target or not own(rail):
            entry["error"] = (f"{'this node' if not own(rail) else peer['name']} has no address on "
                              f"{rail['interface']}")
            return entry
        family = "-6" if ":" in target else "-4"
        _rc, out, err = self.run([ping, family, "-c", "3", "-i", "0.2", "-W", "1", "-I", rail["interface"], target])
        entry["reach"] = cluster_tools.parse_ping(out + err)
        payload = self.params["mtu"] - (48 if family == "-6" else 28)  # the IPv6 or IPv4 header, and ICMP's
        _rc, out, err = self.run([ping, family, "-c", "3", "-i", "0.2", "-W", "1", "-M", "do", "-s", str(payload),
                                  "-I", rail["interface"], target])
        entry["jumbo"] = {**cluster_tools.parse_ping(out + err), "payload": payload}
        tcp_port, rdma_port = ports(self.params["port"], self.params["index"], number)
        if not entry["reach"]["received"]:  # no bandwidth to measure towards a peer that does not answer here
            entry["tcp"], entry["rdma"] = None, None
            entry["tcp_why"] = entry["rdma_why"] = f"{peer['name']} does not answer on {rail['interface']}"
            return entry
        if self.params["tcp_seconds"]:
            entry["tcp"] = self.tcp(target, own(rail), tcp_port)
        entry["rdma"], entry["rdma_why"] = self.rdma(address, rail, rdma_port)
        if number == 0 and self.params["user"]:
            entry["ssh"] = self.ssh(peer["name"], address)
        return entry

    def tcp(self, address: str, local: str, port: int) -> dict:
        iperf3 = self.module.get_bin_path("iperf3")
        if not iperf3:
            return {"error": "iperf3 is not installed on this node (apt install iperf3; the cluster role does)"}
        seconds = self.params["tcp_seconds"]
        for _attempt in range(CONNECT_ATTEMPTS):  # the peer's server, started at the same time, may not listen yet
            _rc, out, err = self.run([iperf3, "-c", address, "-p", str(port), "-B", local, "-t", str(seconds), "-J",
                                      "--connect-timeout", "3000"], seconds + 20)
            result = cluster_tools.parse_iperf3(out or err)
            if "Connection refused" not in str(result.get("error")):
                break
            time.sleep(1)
        return result

    def rdma(self, address: str, rail: dict, port: int) -> tuple[dict | None, str | None]:
        if not self.params["rdma_seconds"]:
            return None, "left out (rdma_seconds: 0)"
        if not rail.get("hca"):
            return None, "no RDMA device serves the rail (the rail names no hca)"
        perftest = self.module.get_bin_path("ib_write_bw")
        if not perftest:
            return None, "perftest's ib_write_bw is not installed on this node (the cluster role installs it)"
        seconds = self.params["rdma_seconds"]
        for _attempt in range(CONNECT_ATTEMPTS):
            rc, out, err = self.run([perftest, "-d", rail["hca"], "-p", str(port), "-D", str(seconds),
                                     "--report_gbits", "-F", address], seconds + 20)
            parsed = cluster_tools.parse_ib_write_bw(out)
            if parsed is not None or "Couldn't connect" not in out + err:
                break
            time.sleep(1)
        if parsed is None:
            return {"error": f"ib_write_bw gave no result (rc {rc}): {(err or out).strip()[-300:]}"}, None
        return parsed, None

    def ssh(self, peer: str, address: str) -> dict:
        user = self.params["user"]
        ssh = self.module.get_bin_path("ssh")
        if not ssh:
            return {"ok": False, "detail": "the ssh client is not installed on this node"}
        # The host key is looked up under the peer's name (HostKeyAlias), which known_hosts pins it under whatever
        # the addressing: a link-local address may change at a reboot, the name does not.
        argv = [ssh, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5",
                "-o", "LogLevel=ERROR", "-o", f"HostKeyAlias={peer}", address, "true"]
        if pwd.getpwuid(os.geteuid()).pw_name != user:
            runuser = self.module.get_bin_path("runuser", required=True)
            argv = [runuser, "-u", user, "--", *argv]
        rc, out, err = self.run(argv, 30)
        if rc == 0:
            return {"ok": True, "detail": f"{user}@{address}: logged in, host key pinned"}
        # ssh's last line is its verdict; a changed host key comes after a banner of '@' lines.
        said = [line.strip() for line in (err or out).splitlines() if line.strip() and not line.startswith("@")]
        detail = said[-1][:300] if said else f"ssh exited {rc}"
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in err:
            detail = f"its host key is not the one pinned (REMOTE HOST IDENTIFICATION HAS CHANGED): {detail}"
        return {"ok": False, "detail": f"{user}@{address}: {detail}"}


def check(module: AnsibleModule) -> None:
    """The rails and peers reach command lines: names and addresses are checked where they enter."""
    for rail in module.params["rails"]:
        if not cluster_model.INTERFACE.fullmatch(str(rail.get("interface"))) or (
                rail.get("hca") is not None and not cluster_model.HCA.fullmatch(str(rail["hca"]))):
            module.fail_json(msg=f"rail {rail!r:.120}: expected an interface name and an RDMA device name")
    addresses = [rail.get("address") for rail in module.params["rails"]]
    addresses += [a for peer in module.params["peers"] for a in peer.get("addresses") or []]
    for address in addresses:
        if address is not None:
            try:
                ipaddress.IPv4Address(address)
            except ValueError:
                module.fail_json(msg=f"address {address!r:.60}: expected an IPv4 address without a prefix")
    sixes = [rail.get("address6") for rail in module.params["rails"]]
    sixes += [a for peer in module.params["peers"] for a in peer.get("addresses6") or []]
    for address in sixes:
        if address is not None:
            try:
                if not ipaddress.IPv6Address(address).is_link_local:
                    raise ValueError(address)
            except ValueError:
                module.fail_json(msg=f"address {address!r:.60}: expected an IPv6 link-local address (fe80::/10) "
                                     "without a scope")
    if module.params["user"] and not cluster_model.USER.fullmatch(module.params["user"]):
        module.fail_json(msg=f"user {module.params['user']!r:.40}: expected a login name")
    for peer in module.params["peers"]:
        if host_name(peer.get("name")):
            module.fail_json(msg=f"peer name {peer.get('name')!r:.60} {host_name(peer.get('name'))}")


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "action": {"type": "str", "choices": ["serve", "measure"], "required": True},
            "index": {"type": "int", "required": True},
            "rails": {"type": "list", "elements": "dict", "required": True},
            "peers": {"type": "list", "elements": "dict", "required": True},
            "mtu": {"type": "int", "default": 9000},
            "user": {"type": "str"},
            "tcp_seconds": {"type": "int", "default": 3},
            "rdma_seconds": {"type": "int", "default": 3},
            "port": {"type": "int", "default": 5701},
            "timeout": {"type": "int", "default": 60},
            "record": {"type": "path", "default": "/run/sparkfleet/cluster-servers.json"},
        },
        supports_check_mode=True,
    )
    check(module)
    measure = Measure(module)
    if module.params["action"] == "serve":
        module.exit_json(changed=False, servers=measure.serve())
    module.exit_json(changed=False, measures=measure.measure())


if __name__ == "__main__":
    main()

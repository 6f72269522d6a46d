# Copyright: sparkfleet contributors
# Apache License 2.0
"""Sparks joined into a cluster through their ConnectX-7 ports: the inventory's model of it, what each node is
configured with, the tools' outputs read back, and the verdict of `sparkfleet cluster verify`.

Pure Python: no I/O. The modules spark_cx7_netplan, spark_cluster_facts and spark_cluster_measure call it on
the nodes, the filters of role spark_cluster on the controller.

A cluster in the inventory (`spark_clusters`, a list):

    - name: pair
      nodes: [spark-01, spark-02]
      user: nvidia                 # the same login user on every node
      addressing: static           # or link-local (169.254.0.0/16, as NVIDIA's Option 1)
      mtu: 9000
      rails:                       # each QSFP port is two PCIe x4 interfaces: a rail each, a subnet each
        - {interface: enp1s0f1np1, hca: rocep1s0f1, subnet: 192.168.100.0/24}
        - {interface: enP2p1s0f1np1, hca: roceP2p1s0f1, subnet: 192.168.101.0/24}
      host_ids: {spark-01: 10, spark-02: 11}   # static: each node's host number on every rail (default 10, 11, ...)
"""

from __future__ import annotations

import inspect
import ipaddress
import json
import re

from ansible_collections.sparkfleet.spark.plugins.module_utils import _program_nccl_probe

# The program itself is _program_nccl_probe.py; this is its source, as python3 in the locked image reads it.
NCCL_PROBE = inspect.getsource(_program_nccl_probe)

CLUSTER_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
# A network interface name: at most 15 characters (IFNAMSIZ), no '/', no whitespace.
INTERFACE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,14}$")
HCA = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
ADDRESSINGS = ("static", "link-local")
LINK_LOCAL = ipaddress.ip_network("169.254.0.0/16")
DEFAULT_HOST_ID = 10
MAX_RAILS = 4


class ClusterError(ValueError):
    """A cluster the inventory describes wrongly: the message says where, what was found and what is expected."""


def _fail(where: str, found: object, expected: str) -> None:
    shown = repr(found)
    raise ClusterError(f"spark_clusters: {where} is {shown if len(shown) <= 80 else shown[:77] + '...'}; "
                       f"expected {expected}. Fix spark_clusters in your inventory's group_vars.")


def validate(clusters: object, inventory_hosts: list[str]) -> list[dict]:
    """spark_clusters checked and made complete: each cluster with its rails and, per node, the address on
    each rail (None where link-local). Raises ClusterError naming the cluster, the field, what was found and
    what is expected."""
    if clusters in (None, []):
        return []
    if not isinstance(clusters, list):
        _fail("the value", clusters, "a list of clusters, each a mapping with name, nodes, user and rails")
    seen_names, seen_nodes, out = set(), {}, []
    for index, cluster in enumerate(clusters):
        if not isinstance(cluster, dict):
            _fail(f"[{index}]", cluster, "a mapping with name, nodes, user and rails")
        name = cluster.get("name")
        if not isinstance(name, str) or not CLUSTER_NAME.fullmatch(name):
            _fail(f"[{index}].name", name, "a lower-case name (letters, digits, '-'; 32 at most)")
        if name in seen_names:
            _fail(f"{name}.name", name, "a name used once")
        seen_names.add(name)
        out.append(_cluster(name, cluster, inventory_hosts, seen_nodes))
    return out


def _cluster(name: str, cluster: dict, inventory_hosts: list[str], seen_nodes: dict) -> dict:
    unknown = sorted(set(cluster) - {"name", "nodes", "user", "addressing", "mtu", "rails", "host_ids"})
    if unknown:
        _fail(f"{name}", unknown, "only name, nodes, user, addressing, mtu, rails and host_ids")
    nodes = cluster.get("nodes")
    if not isinstance(nodes, list) or len(nodes) < 2 or len(set(map(str, nodes))) != len(nodes):
        _fail(f"{name}.nodes", nodes, "two or more different inventory hosts")
    for node in nodes:
        if node not in inventory_hosts:
            _fail(f"{name}.nodes", node, f"a host of the inventory ({', '.join(sorted(inventory_hosts)[:8])})")
        if node in seen_nodes:
            _fail(f"{name}.nodes", node, f"a node in one cluster only (it is in {seen_nodes[node]} too)")
        seen_nodes[node] = name
    user = cluster.get("user")
    if not isinstance(user, str) or not USER.fullmatch(user):
        _fail(f"{name}.user", user, "the login user every node has (lower-case letters, digits, '_', '-')")
    addressing = cluster.get("addressing", "static")
    if addressing not in ADDRESSINGS:
        _fail(f"{name}.addressing", addressing, "static or link-local")
    mtu = cluster.get("mtu", 9000)
    if not isinstance(mtu, int) or isinstance(mtu, bool) or not 1280 <= mtu <= 9216:
        _fail(f"{name}.mtu", mtu, "a whole number from 1280 to 9216 (9000 for the CX-7 link)")
    rails = _rails(name, cluster.get("rails"), addressing)
    addresses = _addresses(name, nodes, rails, cluster.get("host_ids"), addressing)
    return {"name": name, "nodes": list(nodes), "user": user, "addressing": addressing, "mtu": mtu,
            "rails": rails, "addresses": addresses}


def _rails(name: str, rails: object, addressing: str) -> list[dict]:
    if not isinstance(rails, list) or not 1 <= len(rails) <= MAX_RAILS:
        _fail(f"{name}.rails", rails, f"1 to {MAX_RAILS} rails, each a mapping with interface, hca and (static) "
                                      "subnet; both halves of the port for the full bandwidth")
    out, interfaces, subnets = [], set(), []
    for index, rail in enumerate(rails):
        where = f"{name}.rails[{index}]"
        if not isinstance(rail, dict):
            _fail(where, rail, "a mapping with interface, hca and subnet")
        interface, hca, subnet = rail.get("interface"), rail.get("hca"), rail.get("subnet")
        if not isinstance(interface, str) or not INTERFACE.fullmatch(interface):
            _fail(f"{where}.interface", interface, "a network interface name (15 characters at most, as "
                                                   "ibdev2netdev shows it, e.g. enp1s0f1np1)")
        if interface in interfaces:
            _fail(f"{where}.interface", interface, "an interface used by one rail only")
        interfaces.add(interface)
        if hca is not None and (not isinstance(hca, str) or not HCA.fullmatch(hca)):
            _fail(f"{where}.hca", hca, "the RDMA device of the interface, as ibdev2netdev shows it (rocep1s0f1)")
        network = None
        if addressing == "static":
            try:
                network = ipaddress.IPv4Network(str(subnet), strict=True)
            except ValueError:
                _fail(f"{where}.subnet", subnet, "an IPv4 network such as 192.168.100.0/24 (static addressing)")
            if network.prefixlen > 30:
                _fail(f"{where}.subnet", subnet, "a network of /30 or larger, room for every node")
            clash = next((s for s in subnets if s.overlaps(network)), None)
            if clash is not None:
                _fail(f"{where}.subnet", subnet, f"a subnet of its own (it overlaps {clash}: each rail is a subnet)")
            subnets.append(network)
        elif subnet is not None:
            _fail(f"{where}.subnet", subnet, "no subnet with link-local addressing (169.254.0.0/16 on every rail)")
        out.append({"interface": interface, "hca": hca, "subnet": str(network) if network else None})
    return out


def _addresses(name: str, nodes: list[str], rails: list[dict], host_ids: object, addressing: str) -> dict:
    if addressing == "link-local":
        if host_ids:
            _fail(f"{name}.host_ids", host_ids, "none with link-local addressing")
        return {node: [None] * len(rails) for node in nodes}
    if host_ids is None:
        host_ids = {node: DEFAULT_HOST_ID + i for i, node in enumerate(nodes)}
    if not isinstance(host_ids, dict) or sorted(host_ids) != sorted(nodes):
        _fail(f"{name}.host_ids", host_ids, f"a host number for each node ({', '.join(nodes)})")
    if len(set(host_ids.values())) != len(nodes):
        _fail(f"{name}.host_ids", host_ids, "a different host number for each node")
    addresses = {}
    for node in nodes:
        number = host_ids[node]
        per_rail = []
        for rail in rails:
            network = ipaddress.IPv4Network(rail["subnet"])
            if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < network.num_addresses - 1:
                _fail(f"{name}.host_ids.{node}", number, f"a host number inside {network} (1 to "
                                                         f"{network.num_addresses - 2})")
            per_rail.append(f"{network.network_address + number}/{network.prefixlen}")
        addresses[node] = per_rail
    return addresses


def cluster_of(clusters: list[dict], node: str) -> dict | None:
    return next((c for c in clusters if node in c["nodes"]), None)


def node_plan(cluster: dict, node: str) -> dict:
    """What one node is configured with: its rails (interface, hca, address or None) and its peers."""
    rails = [{**rail, "address": cluster["addresses"][node][i]} for i, rail in enumerate(cluster["rails"])]
    peers = [{"name": peer, "addresses": [a.split("/")[0] if a else None for a in cluster["addresses"][peer]]}
             for peer in cluster["nodes"] if peer != node]
    return {"cluster": cluster["name"], "user": cluster["user"], "addressing": cluster["addressing"],
            "mtu": cluster["mtu"], "rails": rails, "peers": peers}


def check_plan(plan: object) -> str | None:
    """Why a node plan cannot be written as it is (None: it can): its values reach a file and command lines,
    so a module checks them again where they enter."""
    if not isinstance(plan, dict) or not isinstance(plan.get("rails"), list) or not plan["rails"]:
        return f"the plan is {plan!r:.80}; expected a mapping with cluster, mtu and rails"
    if not isinstance(plan.get("cluster"), str) or not CLUSTER_NAME.fullmatch(plan["cluster"]):
        return f"the plan's cluster is {plan.get('cluster')!r:.80}; expected a cluster name"
    mtu = plan.get("mtu")
    if not isinstance(mtu, int) or isinstance(mtu, bool) or not 1280 <= mtu <= 9216:
        return f"the plan's mtu is {mtu!r:.40}; expected 1280 to 9216"
    for rail in plan["rails"]:
        if not isinstance(rail, dict) or not isinstance(rail.get("interface"), str) \
                or not INTERFACE.fullmatch(rail["interface"]):
            return f"a rail is {rail!r:.80}; expected an interface name of 15 characters at most"
        # Every value render_netplan writes is checked: the rail's own mtu and addresses too (a newline there
        # would write another interface's stanza into the file).
        if "mtu" in rail and (not isinstance(rail["mtu"], int) or isinstance(rail["mtu"], bool)
                              or not 1280 <= rail["mtu"] <= 9216):
            return f"rail {rail['interface']}'s mtu is {rail['mtu']!r:.40}; expected 1280 to 9216"
        if "addresses" in rail and not isinstance(rail["addresses"], list):
            return f"rail {rail['interface']}'s addresses are {rail['addresses']!r:.60}; expected a list"
        for address in [rail.get("address"), *rail.get("addresses", [])]:
            if address is not None and not _interface_address(address):
                return f"rail {rail['interface']}'s address is {address!r:.60}; expected an IPv4 address/prefix"
    return None


def _interface_address(address: object) -> bool:
    """An IPv4 address with its prefix, as netplan's addresses take it (198.18.110.10/24), and nothing else."""
    if not isinstance(address, str) or "/" not in address:
        return False
    try:
        return str(ipaddress.IPv4Interface(address)) == address
    except ValueError:
        return False


NETPLAN_FILE = "/etc/netplan/40-cx7.yaml"
# The first line of every file render_netplan writes: a node that leaves its cluster has only such a file removed.
NETPLAN_MARK = "# Written by sparkfleet (role spark_cluster)"


def render_netplan(plan: dict) -> str:
    """The CX-7 rails' netplan, NVIDIA's file (/etc/netplan/40-cx7.yaml) made from the inventory: both halves
    of the port, the MTU, static addresses or IPv4 link-local. The IPv6 link-local address is kept on each
    rail: `cluster verify` finds which peer port is at the other end of each cable through it. No other
    interface is named, so the management link is never touched."""
    lines = [f"{NETPLAN_MARK} for cluster {plan['cluster']}: the CX-7 rails only.",
             "# Edit spark_clusters in the inventory instead; the next run rewrites this file.",
             "network:", "  version: 2", "  ethernets:"]
    for rail in plan["rails"]:
        lines += [f"    {rail['interface']}:", "      dhcp4: false", "      dhcp6: false"]
        addresses = rail.get("addresses", [rail["address"]] if rail["address"] else [])
        if rail["address"]:
            lines += ["      link-local: [ipv6]", f"      addresses: [{', '.join(addresses)}]"]
        else:
            lines.append("      link-local: [ipv4, ipv6]")
            if addresses:
                lines.append(f"      addresses: [{', '.join(addresses)}]")
        lines.append(f"      mtu: {rail.get('mtu', plan['mtu'])}")
    return "\n".join(lines) + "\n"


def as_they_are(plan: dict, links: dict[str, dict]) -> dict:
    """The plan with each rail as `ip -j addr` shows it now (its MTU, its IPv4 addresses; link-local ones left
    out): rendered, it is what --diff shows against the file when the rails drifted from it."""
    rails = []
    for rail in plan["rails"]:
        link = links.get(rail["interface"]) or {}
        held = [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info") or []
                if a.get("family") == "inet" and not a["local"].startswith("169.254.")]
        rails.append({**rail, "mtu": link.get("mtu", "absent"), "addresses": held})
    return {**plan, "rails": rails}


def management_clash(plan: dict, default_interface: str | None, management_addresses: list[str],
                     held: dict[str, list[str]] | None = None) -> str | None:
    """Why this plan would touch the link Ansible reaches the node through (None: it does not): a rail on the
    interface of the default route, a rail that holds (held: interface -> its addresses now) or would be given an
    address Ansible reaches the node at."""
    for rail in plan["rails"]:
        if rail["interface"] == default_interface:
            return (f"rail interface {rail['interface']} carries this node's default route: it is the management "
                    "link, not a CX-7 rail; name the CX-7 interfaces ibdev2netdev shows")
        now = [a for a in (held or {}).get(rail["interface"], []) if a.split("/")[0] in management_addresses]
        if now:
            return (f"rail interface {rail['interface']} holds {now[0]}, the address Ansible reaches this node at: it "
                    "is the management link, not a CX-7 rail; name the CX-7 interfaces ibdev2netdev shows")
        if rail["address"] and rail["address"].split("/")[0] in management_addresses:
            return (f"rail address {rail['address']} is the address Ansible reaches this node at; give the rails "
                    "subnets of their own")
    return None


# The tools' outputs, read back. Each parser takes the text as the tool prints it.

IBDEV2NETDEV = re.compile(r"^(\S+) port (\d+) ==> (\S+) \((\w+)\)\s*$")


def parse_ibdev2netdev(text: str) -> list[dict]:
    """`ibdev2netdev`: 'rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)' per line."""
    found = []
    for line in (text or "").splitlines():
        match = IBDEV2NETDEV.match(line.strip())
        if match:
            found.append({"hca": match.group(1), "port": int(match.group(2)), "netdev": match.group(3),
                          "state": match.group(4)})
    return found


def parse_ethtool(text: str) -> dict:
    """`ethtool IFACE`: the negotiated speed in Mb/s (None when 'Unknown!'), duplex, link detected."""
    speed = re.search(r"^\s*Speed:\s*(\d+)Mb/s", text or "", re.M)
    duplex = re.search(r"^\s*Duplex:\s*(\w+)", text or "", re.M)
    link = re.search(r"^\s*Link detected:\s*(yes|no)", text or "", re.M)
    return {"speed_mbps": int(speed.group(1)) if speed else None, "duplex": duplex.group(1) if duplex else None,
            "link_detected": (link.group(1) == "yes") if link else None}


def parse_ib_write_bw(text: str) -> dict | None:
    """perftest's `ib_write_bw` client output: the device, link type, MTU and the result row (bytes,
    iterations, peak and average bandwidth in Gb/s whatever the unit printed, message rate). None when the
    output has no result row (the test did not run)."""
    text = text or ""
    unit = re.search(r"BW peak\[(Gb|MB)/sec\]", text)
    # Older perftest prints no MsgRate column; with -D (a duration) the peak is 0.00.
    row = re.search(r"^\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)(?:\s+([\d.]+))?\s*$", text, re.M)
    if not unit or not row:
        return None
    # perftest's MB/sec is 2^20 bytes a second.
    scale = 1.0 if unit.group(1) == "Gb" else 1048576 * 8 / 1e9
    device = re.search(r"Device\s*:\s*(\S+)", text)
    link_type = re.search(r"Link type\s*:\s*(\S+)", text)
    mtu = re.search(r"Mtu\s*:\s*(\d+)\[B\]", text)
    return {"device": device.group(1) if device else None, "link_type": link_type.group(1) if link_type else None,
            "mtu": int(mtu.group(1)) if mtu else None, "bytes": int(row.group(1)), "iterations": int(row.group(2)),
            "bw_peak_gbps": round(float(row.group(3)) * scale, 2), "bw_avg_gbps": round(float(row.group(4)) * scale, 2),
            "msg_rate_mpps": float(row.group(5)) if row.group(5) else None}


# A size's row: out-of-place time, algbw, busbw, #wrong, then (most versions) the same in place.
NCCL_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
                      r"(?:\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+))?\s*$")
# mpirun's --tag-output prefix: '[1,0]<stdout>:'.
MPI_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")


def parse_nccl_tests(text: str) -> dict:
    """nccl-tests' output (all_gather_perf, all_reduce_perf, and sparkfleet's probe, which prints the same
    table): each size's row (out-of-place and in-place time, algbw, busbw in GB/s, wrong values), the average
    bus bandwidth, the out-of-bounds count and the ranks with their hosts and GPUs."""
    rows = []
    text = "\n".join(MPI_TAG.sub("", line) for line in (text or "").splitlines())
    for line in text.splitlines():
        match = NCCL_ROW.match(line)
        if match:
            g = match.groups()
            row = {"size": int(g[0]), "count": int(g[1]), "type": g[2], "redop": g[3], "root": int(g[4]),
                   "time_us": float(g[5]), "algbw": float(g[6]), "busbw": float(g[7]), "wrong": _count(g[8])}
            if g[9] is not None:
                row.update(in_place_time_us=float(g[9]), in_place_algbw=float(g[10]), in_place_busbw=float(g[11]),
                           in_place_wrong=_count(g[12]))
            rows.append(row)
    average = re.search(r"^\s*#\s*Avg bus bandwidth\s*:\s*([\d.]+)", text, re.M)
    bounds = re.search(r"^\s*#\s*Out of bounds values\s*:\s*(\d+)", text, re.M)
    ranks = [{"rank": int(m.group(1)), "host": m.group(2), "device": m.group(3)} for m in re.finditer(
        r"^\s*#\s+Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.+?)\s*$",
        text, re.M)]
    return {"rows": rows, "avg_busbw": float(average.group(1)) if average else None,
            "out_of_bounds": int(bounds.group(1)) if bounds else None, "ranks": ranks}


def _count(text: str) -> int | None:
    return None if text == "N/A" else int(text)


def parse_iperf3(text: str) -> dict:
    """`iperf3 -c ... -J`: what the receiver got in Gb/s, what was sent, retransmits; or iperf3's error."""
    try:
        data = json.loads(text or "")
    except ValueError:
        return {"error": f"iperf3 printed no JSON: {(text or '').strip()[:200] or 'nothing'}"}
    if not isinstance(data, dict):
        return {"error": "iperf3 printed JSON that is not its report"}
    if data.get("error"):
        return {"error": str(data["error"])}
    end = data.get("end") or {}
    received, sent = end.get("sum_received") or {}, end.get("sum_sent") or {}
    if "bits_per_second" not in received:
        return {"error": "iperf3's report has no received total"}
    return {"received_gbps": round(received["bits_per_second"] / 1e9, 2),
            "sent_gbps": round(sent.get("bits_per_second", 0) / 1e9, 2),
            "retransmits": sent.get("retransmits"), "seconds": round(received.get("seconds", 0), 1)}


def parse_meminfo(text: str) -> dict:
    """/proc/meminfo in kB: CmaTotal, CmaFree, MemTotal, MemAvailable (those it has)."""
    found = {}
    for line in (text or "").splitlines():
        match = re.match(r"^(CmaTotal|CmaFree|MemTotal|MemAvailable):\s+(\d+)\s*kB", line)
        if match:
            found[match.group(1)] = int(match.group(2))
    return found


def parse_nccl_conf(text: str) -> dict:
    """An nccl.conf: its NCCL_* settings (KEY=VALUE lines; '#' comments)."""
    settings = {}
    for line in (text or "").splitlines():
        line = line.split("#", 1)[0].strip()
        if "=" in line:
            key, _sep, value = line.partition("=")
            if key.strip().startswith("NCCL_"):
                settings[key.strip()] = value.strip()
    return settings


def parse_ping(text: str) -> dict:
    """iputils' `ping` summary: sent, received, loss; and whether a frame was too big to leave (DF set)."""
    stats = re.search(r"(\d+) packets transmitted, (\d+) received", text or "")
    too_big = bool(re.search(r"message too long|Frag needed|mtu = \d+", text or "", re.I))
    sent, received = (int(stats.group(1)), int(stats.group(2))) if stats else (0, 0)
    return {"sent": sent, "received": received, "too_big": too_big}


def parse_ping6_responders(text: str) -> list[str]:
    """The IPv6 link-local addresses that answered `ping -6 ff02::1%IFACE` (each once, in order)."""
    found = []
    for match in re.finditer(r"from (fe80:[0-9a-f:]+)(?:%\S+)?: icmp_seq", text or "", re.I):
        address = match.group(1).lower()
        if address not in found:
            found.append(address)
    return found


# NCCL: the environment a run needs, from the devices found, and a size the unified memory can hold.

def nccl_environment(plan: dict, devices: list[dict]) -> dict:
    """NCCL's environment for this node: NCCL_IB_HCA names the RDMA device of every rail (both halves of the
    port: naming one is the ~3 GB/s of dgx-spark-playbooks #102), the socket interface is the first rail,
    subnet-aware routing as NVIDIA's cluster script sets it."""
    by_netdev = {d["netdev"]: d["hca"] for d in devices}
    hcas = [rail.get("hca") or by_netdev.get(rail["interface"]) for rail in plan["rails"]]
    env = {"NCCL_SOCKET_IFNAME": plan["rails"][0]["interface"], "NCCL_IB_SUBNET_AWARE_ROUTING": "1"}
    if all(hcas):
        env["NCCL_IB_HCA"] = ",".join(hcas)
    return env


GIB = 1024 ** 3
# No cap goes past this: the 16 GB message NVIDIA's NCCL playbook suggests froze a node (unified memory
# exhausted), and 4 GiB already keeps a 200G link busy for a fifth of a second per iteration.
NCCL_CEILING_BYTES = 4 * GIB


def nccl_bytes(mem_available_kb: int | None, ranks: int, cap_bytes: int, headroom: float) -> int:
    """The all_gather's output size: at most cap_bytes (and never past NCCL_CEILING_BYTES), its buffers (output
    plus this rank's input) within `headroom` of the memory available now, rounded down to a power of two; 0
    when not even 64 MiB fits."""
    if not mem_available_kb:
        return 0
    budget = int(mem_available_kb * 1024 * headroom)
    size = min(cap_bytes, NCCL_CEILING_BYTES, budget * ranks // (ranks + 1))
    if size < 64 * 1024 ** 2:
        return 0
    return 1 << (size.bit_length() - 1)


# The verdict. Each check: ok, failed (with its likely cause and the fix), not run or not judged (with why).
# A cluster is ok only when every check ran and passed; a check that could not run (no RDMA device, a virtual
# link, no GPU) makes it "not verified", never ok.

CAUSES = {
    "interface": ("a rail is missing: the interface is not on this node (named otherwise here, or the port's "
                  "driver is not loaded)", "run ibdev2netdev on the node and name its CX-7 interfaces in rails"),
    "link": ("a rail is missing: no carrier (the cable is out of this port, or the port at the other end is down)",
             "seat the QSFP cable in the same port on both nodes; ibdev2netdev says (Up) for a cabled port"),
    "mtu": ("the MTU is below the cluster's: NCCL ran at ~3 GB/s until MTU 9000 (dgx-spark-playbooks #102, PR #103)",
            "provision with the cluster role: it sets the MTU in /etc/netplan/40-cx7.yaml"),
    "address": ("the rail has not the address the inventory gives it (the netplan was not applied, or was edited)",
                "provision with the cluster role; `ip addr show IFACE` on the node"),
    "speed": ("the link negotiated less than 200 Gb/s (the cable, the transceiver, or the peer's port)",
              "reseat or replace the QSFP112 cable; ethtool IFACE shows the speed"),
    "pcie_width": ("the port's PCIe link trained narrower than x4, so it cannot carry its share of 200 Gb/s",
                   "power-cycle the node; if it stays narrow, a support case with NVIDIA (lspci -vv)"),
    "rdma": ("no RDMA device serves this rail (the mlx5_ib driver is not loaded, or rails name another device)",
             "ibdev2netdev lists each RDMA device and its interface: name that device as the rail's hca"),
    "cma": ("CmaTotal is 0 on this kernel: ibv_reg_mr fails with ENOMEM, so RDMA cannot register memory",
            "boot a kernel with a CMA area (DGX OS's own kernel, or the cma= kernel parameter)"),
    "nccl_conf": ("a stale /etc/nccl.conf overrides the environment sparkfleet derives for NCCL",
                  "remove it in a derived image (spark_images_derived: RUN rm /etc/nccl.conf) or from the host"),
    "cable": ("a crossed cable: the rail reaches another port of the peer than the same rail",
              "cable the same port on both nodes (enp1s0f1np1 to enp1s0f1np1), or swap the rails' interfaces"),
    "reach": ("the peer does not answer on this rail (addresses on different subnets, or the rail is down)",
              "provision both nodes with the cluster role; ping -I IFACE PEER on the node"),
    "jumbo": ("frames of the cluster's MTU do not pass between the nodes: one end has a smaller MTU",
              "provision both nodes with the cluster role (mtu in spark_clusters); ip link show IFACE"),
    "tcp": ("TCP is far below the link's speed (PR #108: 200G negotiated, TCP near 13 Gb/s)",
            "check the MTU and both rails above; iperf3 -P 4 to tell a single stream's limit from the link's"),
    "rdma_bw": ("RDMA bandwidth on this rail is below what one PCIe x4 half of the port carries",
                "check the rail's speed and PCIe width above; ib_write_bw -d HCA --report_gbits by hand"),
    "ssh": ("the cluster user cannot log in to the peer without a password, with its host key pinned",
            "provision both nodes with the cluster role (keys exchanged, host keys pinned)"),
    "nccl": ("NCCL's bus bandwidth is below the threshold", "check each rail's RDMA bandwidth and the MTU above"),
}
STATUSES = ("ok", "failed", "not run", "not judged")
LOW_NCCL = ("~3 GB/s is what NCCL gives with NCCL_IB_HCA naming one half of the port, or MTU 1500 "
            "(dgx-spark-playbooks #102, PR #103)")


def _check(checks: list, check: str, where: str, status: str, found: object = None, expected: object = None,
           why: str | None = None, cause: str | None = None) -> None:
    entry = {"check": check, "where": where, "status": status, "found": found, "expected": expected}
    if status == "failed":
        default_cause, fix = CAUSES[check]
        entry.update(cause=cause or default_cause, fix=fix)
    elif why:
        entry["why"] = why
    checks.append(entry)


def _threshold(thresholds: dict, name: str) -> tuple[float, str]:
    entry = thresholds[name]
    text = f">= {entry['value']} {entry['unit']} ({entry['source']}"
    return entry["value"], text + ("" if entry.get("confirmed", True) else "; unconfirmed") + ")"


def judge(cluster: dict, facts: dict, measures: dict, nccl: dict | None, thresholds: dict) -> dict:
    """The verdict of one cluster from each node's facts (spark_cluster_facts), each node's measures towards
    its peers (spark_cluster_measure) and the NCCL run (rank 0's result), against the thresholds (each with
    its source)."""
    checks: list[dict] = []
    for node in cluster["nodes"]:
        _node_checks(checks, cluster, node, facts.get(node) or {}, thresholds)
    for node in cluster["nodes"]:
        for measure in measures.get(node) or []:
            _pair_checks(checks, cluster, node, measure, facts, thresholds)
    _nccl_check(checks, cluster, nccl, thresholds)
    statuses = {c["status"] for c in checks}
    verdict = "failed" if "failed" in statuses else ("not verified" if statuses - {"ok"} else "ok")
    bandwidth = {c["check"]: [] for c in checks if c["check"] in ("tcp", "rdma_bw", "nccl")}
    for c in checks:
        if c["check"] in bandwidth and isinstance(c.get("value"), (int, float)):
            bandwidth[c["check"]].append({"where": c["where"], "value": c["value"]})
    return {"cluster": cluster["name"], "verdict": verdict, "nodes": cluster["nodes"],
            "rails": [{"interface": r["interface"], "hca": r["hca"], "subnet": r["subnet"]} for r in cluster["rails"]],
            "bandwidth": bandwidth, "checks": checks,
            "counts": {s: sum(1 for c in checks if c["status"] == s) for s in STATUSES}}


def _node_checks(checks: list, cluster: dict, node: str, node_facts: dict, thresholds: dict) -> None:
    interfaces = node_facts.get("interfaces") or {}
    devices = node_facts.get("rdma") or []
    hardware = False
    for index, rail in enumerate(cluster["rails"]):
        name, where = rail["interface"], f"{node} {rail['interface']}"
        found = interfaces.get(name) or {}
        if not found.get("exists"):
            others = sorted(n for n, i in interfaces.items() if i.get("exists"))
            _check(checks, "interface", where, "failed", "absent" + (f" (it has {', '.join(others)})" if others
                                                                     else ""), name)
            continue
        _check(checks, "link", where, "ok" if found.get("operstate") == "up" else "failed",
               found.get("operstate"), "up")
        _check(checks, "mtu", where, "ok" if found.get("mtu") == cluster["mtu"] else "failed", found.get("mtu"),
               cluster["mtu"])
        expected = cluster["addresses"][node][index]
        have = found.get("addresses") or []
        if expected:
            _check(checks, "address", where, "ok" if expected in have else "failed", ", ".join(have) or "none",
                   expected)
        else:
            ok = any(ipaddress.ip_interface(a).ip in LINK_LOCAL for a in have)
            _check(checks, "address", where, "ok" if ok else "failed", ", ".join(have) or "none",
                   "an address in 169.254.0.0/16 (link-local)")
        pcie = found.get("pcie")
        if not pcie:
            why = f"a virtual link ({found.get('kind') or 'no PCIe device behind it'}), not a CX-7 port"
            for check in ("speed", "pcie_width", "rdma"):
                _check(checks, check, where, "not run", why=why)
            continue
        hardware = True
        value, text = _threshold(thresholds, "link_speed")
        speed = found.get("speed_mbps")
        _check(checks, "speed", where, "ok" if speed and speed >= value else "failed",
               f"{speed} Mb/s" if speed else "unknown", text)
        value, text = _threshold(thresholds, "pcie_width")
        width = pcie.get("width")
        _check(checks, "pcie_width", where, "ok" if width and width >= value else "failed",
               f"x{width}" if width else "unknown", text)
        device = next((d for d in devices if d["netdev"] == name), None)
        if device is None:
            _check(checks, "rdma", where, "failed", "no RDMA device for " + name, rail["hca"] or "an RDMA device")
        elif rail["hca"] and device["hca"] != rail["hca"]:
            _check(checks, "rdma", where, "failed", device["hca"], rail["hca"],
                   cause=f"rails[{index}].hca is {rail['hca']}, but {name}'s RDMA device is {device['hca']}")
        else:
            _check(checks, "rdma", where, "ok", device["hca"], rail["hca"] or device["hca"])
    cma = (node_facts.get("meminfo") or {}).get("CmaTotal")
    if not devices:
        _check(checks, "cma", node, "not run", why="no RDMA device on this node: no memory to register")
    elif cma is None:
        _check(checks, "cma", node, "not run", why="/proc/meminfo has no CmaTotal line")
    else:
        value, text = _threshold(thresholds, "cma_total")
        _check(checks, "cma", node, "ok" if cma >= value else "failed", f"CmaTotal {cma} kB", text)
    _nccl_conf_check(checks, cluster, node, node_facts, hardware)


def _nccl_conf_check(checks: list, cluster: dict, node: str, node_facts: dict, hardware: bool) -> None:
    conf = node_facts.get("nccl_conf") or {}
    derived = nccl_environment(node_plan(cluster, node), node_facts.get("rdma") or [])
    stale = []
    for source, settings in (conf.get("files") or {}).items():
        for key, value in settings.items():
            if (key in derived and derived[key] != value) or key in ("NCCL_IB_DISABLE", "NCCL_NET"):
                stale.append(f"{source} sets {key}={value}")
    if stale:
        _check(checks, "nccl_conf", node, "failed", "; ".join(stale), "no NCCL setting that overrides "
               + ", ".join(f"{k}={v}" for k, v in derived.items()))
    elif conf.get("image_error"):
        _check(checks, "nccl_conf", node, "not run", why=conf["image_error"])
    else:
        read = ", ".join(conf.get("read") or []) or "no nccl.conf"
        _check(checks, "nccl_conf", node, "ok", f"read: {read}", "no stale NCCL setting")


def _peer_interface(facts: dict, peer: str, address: str) -> str | None:
    for name, found in ((facts.get(peer) or {}).get("interfaces") or {}).items():
        if address in (found.get("link_local6") or []):
            return name
    return None


def _pair_checks(checks: list, cluster: dict, node: str, measure: dict, facts: dict, thresholds: dict) -> None:
    peer, rail = measure["peer"], cluster["rails"][measure["rail"]]
    where = f"{node} -> {peer} {rail['interface']}"
    if measure.get("error"):
        _check(checks, "reach", where, "failed", measure["error"], f"{peer} answering on {rail['interface']}")
        return
    responders = measure.get("neighbors")
    if responders is None:
        _check(checks, "cable", where, "not run", why=measure.get("neighbors_why") or "no IPv6 link-local address")
    else:
        at_other_end = [i for i in (_peer_interface(facts, peer, a) for a in responders) if i]
        if rail["interface"] in at_other_end:
            _check(checks, "cable", where, "ok", f"{peer} {rail['interface']}", f"{peer} {rail['interface']}")
        elif at_other_end:
            _check(checks, "cable", where, "failed", f"{peer} {', '.join(at_other_end)}",
                   f"{peer} {rail['interface']}")
        else:
            _check(checks, "cable", where, "failed", f"nothing of {peer} answers", f"{peer} {rail['interface']}",
                   cause=CAUSES["link"][0])
    reach, jumbo = measure.get("reach") or {}, measure.get("jumbo") or {}
    _check(checks, "reach", where, "ok" if reach.get("received") else "failed",
           f"{reach.get('received', 0)} of {reach.get('sent', 0)} answered", f"{peer} at {measure['address']}")
    if reach.get("received"):
        size = jumbo.get("payload") or cluster["mtu"] - 28  # ICMP's bytes in a frame of the MTU (IPv4 or IPv6)
        _check(checks, "jumbo", where, "ok" if jumbo.get("received") else "failed",
               f"{jumbo.get('received', 0)} of {jumbo.get('sent', 0)} frames of {cluster['mtu']} bytes passed"
               + (" (too big to leave)" if jumbo.get("too_big") else ""), f"{size}-byte pings unfragmented")
    hardware = bool(((facts.get(node) or {}).get("interfaces") or {}).get(rail["interface"], {}).get("pcie"))
    tcp = measure.get("tcp")
    if tcp is not None:
        _bandwidth(checks, "tcp", where, tcp.get("received_gbps"), tcp.get("error"), thresholds, "tcp_bw", hardware)
    elif measure.get("tcp_why"):
        _check(checks, "tcp", where, "not run", why=measure["tcp_why"])
    rdma = measure.get("rdma")
    if rdma is None:
        _check(checks, "rdma_bw", where, "not run", why=measure.get("rdma_why") or "no RDMA device on this rail")
    else:
        _bandwidth(checks, "rdma_bw", where, rdma.get("bw_avg_gbps"), rdma.get("error"), thresholds, "rdma_bw",
                   hardware)
    ssh = measure.get("ssh")
    if ssh is not None:
        _check(checks, "ssh", where, "ok" if ssh.get("ok") else "failed", ssh.get("detail"),
               f"{cluster['user']}@{peer} without a password, its host key pinned")


def _bandwidth(checks: list, check: str, where: str, gbps: float | None, error: str | None, thresholds: dict,
               threshold: str, hardware: bool) -> None:
    value, text = _threshold(thresholds, threshold)
    if error or gbps is None:
        _check(checks, check, where, "failed", error or "no result", text, cause=error)
        return
    if not hardware:
        _check(checks, check, where, "not judged", f"{gbps} Gb/s", text,
               why="a virtual link, not a CX-7 port: measured, not judged")
    else:
        _check(checks, check, where, "ok" if gbps >= value else "failed", f"{gbps} Gb/s", text)
    checks[-1]["value"] = gbps


def _nccl_check(checks: list, cluster: dict, nccl: dict | None, thresholds: dict) -> None:
    where = cluster["name"]
    if not nccl or not nccl.get("ran"):
        _check(checks, "nccl", where, "not run", why=(nccl or {}).get("why") or "NCCL was not run")
        return
    parsed = nccl.get("parsed") or {}
    rows = parsed.get("rows") or []
    value, text = _threshold(thresholds, "nccl_busbw")
    if not rows:
        _check(checks, "nccl", where, "failed", (nccl.get("error") or "no result row")[:300], text,
               cause="the NCCL run ended without a result: " + (nccl.get("error") or "see its output")[:300])
        return
    wrong = sum((r.get("wrong") or 0) + (r.get("in_place_wrong") or 0) for r in rows)
    busbw = max(max(r["busbw"], r.get("in_place_busbw", 0.0)) for r in rows)
    if wrong or parsed.get("out_of_bounds"):
        _check(checks, "nccl", where, "failed", f"{wrong} wrong values", "0 wrong values",
               cause="NCCL moved the data wrongly: a broken build in the image, or failing hardware")
    else:
        _check(checks, "nccl", where, "ok" if busbw >= value else "failed", f"{busbw} GB/s bus bandwidth "
               f"({rows[-1]['size']} bytes)", text, cause=LOW_NCCL if busbw < value / 4 else None)
    checks[-1]["value"] = busbw


def verdict_lines(verdicts: list[dict]) -> list[str]:
    """The verdicts as lines (the play's output, the CLI's screen): each cluster's verdict, each check that failed
    (its cause and the fix), each that did not run or was not judged (why), then the bandwidths measured."""
    lines = []
    for verdict in verdicts or []:
        counts = verdict["counts"]
        lines.append(f"cluster {verdict['cluster']} ({', '.join(verdict['nodes'])}): {verdict['verdict'].upper()} - "
                     f"{counts['ok']} ok, {counts['failed']} failed, {counts['not run'] + counts['not judged']} "
                     "not run or not judged")
        for check in verdict["checks"]:
            if check["status"] == "failed":
                lines.append(f"  FAILED {check['check']} {check['where']}: found {check['found']}, expected "
                             f"{check['expected']}; likely: {check['cause']}; fix: {check['fix']}")
        # What could not run or was not judged, once per reason: the checks, then where.
        groups: dict[tuple[str, str], tuple[list[str], list[str]]] = {}
        for check in verdict["checks"]:
            if check["status"] in ("not run", "not judged"):
                names, wheres = groups.setdefault((check["status"], check.get("why") or ""), ([], []))
                if check["check"] not in names:
                    names.append(check["check"])
                if check["where"] not in wheres:
                    wheres.append(check["where"])
        for (status, why), (names, wheres) in groups.items():
            lines.append(f"  {status}: {', '.join(names)} ({'; '.join(wheres)}): {why}")
        for kind, values in verdict["bandwidth"].items():
            for value in values:
                unit = "GB/s bus bandwidth" if kind == "nccl" else "Gb/s"
                lines.append(f"  {kind} {value['where']}: {value['value']} {unit}")
    return lines

# Copyright: sparkfleet contributors
# Apache License 2.0
"""A cluster of Sparks joined through their ConnectX-7 ports, as the inventory describes it: the model
(validated and made complete) and what each node is configured with. The rest of the cluster is beside it:
_netplan.py (the CX-7 netplan), _tools.py (the tools' outputs read back), _nccl.py (an NCCL run's environment,
size and probe), _verdict.py (the verdict of `sparkfleet cluster verify`), _trust.py (the cluster user's keys).

Pure Python: no I/O. The modules call it on the nodes, the filters of role spark_cluster on the controller.

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

import ipaddress
import re

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

# Copyright: sparkfleet contributors
# Apache License 2.0
"""The CX-7 rails' netplan: the file NVIDIA's guide has owners write (/etc/netplan/40-cx7.yaml), made from a
node's plan (_model.py), the rails as they are now, and the refusal to touch the management link. Pure Python."""

from __future__ import annotations

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

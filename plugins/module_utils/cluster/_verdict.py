# Copyright: sparkfleet contributors
# Apache License 2.0
"""The verdict of `sparkfleet cluster verify`: each check of one cluster against its threshold, ok, failed (with
its likely cause and the fix), not run or not judged (with why). Pure Python."""

from __future__ import annotations

import ipaddress

from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster._model import LINK_LOCAL, node_plan
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster._nccl import nccl_environment

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

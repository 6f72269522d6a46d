# Copyright: sparkfleet contributors
# Apache License 2.0
"""The tools' outputs read back (ibdev2netdev, ethtool, ib_write_bw, nccl-tests, iperf3, /proc/meminfo,
nccl.conf, ping): each parser takes the text as the tool prints it. Pure Python."""

from __future__ import annotations

import json
import re

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

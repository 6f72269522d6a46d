# Copyright: sparkfleet contributors
# Apache License 2.0
"""The cluster's trust in a node's files: the blocks sparkfleet keeps in the cluster user's authorized_keys and
known_hosts, one per cluster and file, and how a node's membership is remembered so that leaving takes it back.

A block is the lines between `# BEGIN sparkfleet cluster NAME: WHAT` and `# END sparkfleet cluster NAME: WHAT`
(the markers Ansible's blockinfile wrote before, so files written then are read the same). Setting a node's
blocks removes every other sparkfleet cluster block from the file: a cluster renamed, or left, keeps no trust.
"""

from __future__ import annotations

import re

MARKER = re.compile(r"^# (BEGIN|END) sparkfleet cluster (\S+): (.+)$")
# Where a node remembers the cluster it joined and its user, for leaving (state=absent) once no cluster names it.
RECORD = "/var/lib/sparkfleet/cluster.json"
FILES = {"authorized_keys": {"what": "the other nodes' keys", "mode": 0o600},
         "known_hosts": {"what": "the other nodes' host keys, each read on the node itself", "mode": 0o644}}


def _spans(lines: list[str]) -> list[tuple[int, int, str, str]]:
    """(first line, last line, cluster, what) of each complete block; a BEGIN without its END (cut by hand)
    stays a line of the user's."""
    spans, opened = [], None
    for index, line in enumerate(lines):
        match = MARKER.match(line)
        if not match:
            continue
        key = (match.group(2), match.group(3))
        if match.group(1) == "BEGIN":
            opened = (index, key)
        elif opened and key == opened[1]:
            spans.append((opened[0], index, *key))
            opened = None
    return spans


def blocks(text: str) -> list[tuple[str, str, list[str]]]:
    """The sparkfleet blocks of a file: (cluster, what, lines between the markers)."""
    lines = text.splitlines()
    return [(cluster, what, lines[first + 1:last]) for first, last, cluster, what in _spans(lines)]


def managed(text: str, cluster: str | None, what: str, block: str) -> str:
    """text with sparkfleet's block for (cluster, what) set to block (in place, or appended) and every other
    sparkfleet cluster block removed; cluster None removes them all. The user's own lines stay as they are."""
    lines = text.splitlines()
    wanted = [f"# BEGIN sparkfleet cluster {cluster}: {what}", *(line for line in block.splitlines() if line.strip()),
              f"# END sparkfleet cluster {cluster}: {what}"] if cluster is not None else []
    starts = {first: (last, (name, kind)) for first, last, name, kind in _spans(lines)}
    out, index, placed = [], 0, False
    while index < len(lines):
        if index in starts:
            last, key = starts[index]
            if key == (cluster, what) and not placed:
                out += wanted
                placed = True
            index = last + 1
            continue
        out.append(lines[index])
        index += 1
    if wanted and not placed:
        out += wanted
    return "".join(f"{line}\n" for line in out)

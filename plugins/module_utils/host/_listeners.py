# Copyright: sparkfleet contributors
# Apache License 2.0
"""Who listens on a port of this host's loopback, from /proc/net/tcp and /proc/net/tcp6 (Linux's table of
sockets: local address, state, the owner's uid).

A mirror on the loopback is trusted without the hash lock (it is the owner's own), but any local user can bind an
unprivileged loopback port while the owner's mirror is down, and serve wheels root then installs. The uid that
listens there now tells the owner's mirror from a stranger's.
"""

from __future__ import annotations

import ipaddress

LISTEN = "0A"
TABLES = ("/proc/net/tcp", "/proc/net/tcp6")


def _address(hex_address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """The kernel's hex (little-endian words) as an address."""
    raw = bytes.fromhex(hex_address)
    if len(raw) == 4:
        return ipaddress.IPv4Address(raw[::-1])
    return ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))


def listeners(port: int, tables: dict[str, str] | None = None) -> list[int]:
    """The uids of the sockets listening on `port` on an address the loopback reaches (a loopback address, or
    every address). `tables`: the tables' texts by path (the files read where not given)."""
    if tables is None:
        tables = {}
        for path in TABLES:
            try:
                with open(path, encoding="ascii") as handle:
                    tables[path] = handle.read()
            except OSError:
                continue
    uids = []
    for text in tables.values():
        for line in text.splitlines()[1:]:
            fields = line.split()
            if len(fields) < 8 or fields[3] != LISTEN:
                continue
            host, _sep, hex_port = fields[1].partition(":")
            if int(hex_port, 16) != port:
                continue
            address = _address(host)
            mapped = getattr(address, "ipv4_mapped", None) or address
            if mapped.is_loopback or mapped.is_unspecified:
                uids.append(int(fields[7]))
    return uids

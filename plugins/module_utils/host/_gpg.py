# Copyright: sparkfleet contributors
# Apache License 2.0
"""Parse `gpg --with-colons` output (pure; gpg is run by the module)."""

from __future__ import annotations

import re

_HEX40 = re.compile(r"^[0-9A-F]{40}$|^[0-9A-F]{64}$")


def primary_fingerprints(colons: str) -> list[str]:
    """Fingerprints of the primary keys (the `fpr` record right after each `pub`)."""
    fingerprints: list[str] = []
    want = False
    for line in colons.splitlines():
        fields = line.split(":")
        if fields[0] == "pub":
            want = True
        elif fields[0] == "fpr" and want and len(fields) > 9:
            fingerprints.append(fields[9].upper())
            want = False
        elif fields[0] in {"sub", "ssb", "sec"}:
            want = fields[0] == "sec"
    return fingerprints


def normalize_fingerprint(text: str) -> str:
    """'70F0 9036 ...' or '0x70f0...' -> '70F09036...'; raises ValueError when it is not one."""
    value = re.sub(r"\s+", "", text).upper()
    value = value.removeprefix("0X")
    if not _HEX40.match(value):
        raise ValueError(f"{text!r} is not a key fingerprint (40 or 64 hex digits)")
    return value

# Copyright: sparkfleet contributors
# Apache License 2.0
"""Filters over what dpkg reports: which packages still need apt (act only where there is drift)."""

from __future__ import annotations

DOCUMENTATION = r"""
name: spark_dpkg_missing
short_description: The packages dpkg does not have installed (at a version), from dpkg-query lines
positional: _input, packages, version, states
options:
  _input:
    description: Lines of C(dpkg-query --show --showformat='${Package} ${Version} ${db:Status-Abbrev}\n').
    type: list
    elements: str
    required: true
  packages:
    description: The packages wanted.
    type: list
    elements: str
    required: true
  version:
    description: The version each must have; any version when omitted.
    type: str
  states:
    description: The dpkg C(Status-Abbrev) that count as there (C([hi]) for installed and held).
    type: list
    elements: str
    default: [ii, hi]
"""


def spark_dpkg_missing(lines: list[str], packages: list[str], version: str | None = None,
                       states: tuple[str, ...] | list[str] = ("ii", "hi")) -> list[str]:
    """Packages not fully installed (held or not: 'ii' or 'hi') at `version`, in the order wanted.

    A package dpkg knows but left half-installed or with an error flag ('iU', 'iF', 'iiR') still needs apt.
    """
    installed = set()
    for line in lines or []:
        parts = line.split(" ", 2)
        if len(parts) < 3:
            continue
        name, have, status = parts
        if status.rstrip() in states and (version is None or have == version):
            installed.add(name)
    return [p for p in packages if p not in installed]


class FilterModule:
    def filters(self):
        return {"spark_dpkg_missing": spark_dpkg_missing}

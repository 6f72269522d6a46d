# Copyright: sparkfleet contributors
# Apache License 2.0
"""Filters over what dpkg reports: which packages still need apt (act only where there is drift).
(ansible-doc reads each filter's documentation from plugins/filter/<filter>.yml.)
"""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.module_utils.host._dpkg import parse_lines


def spark_dpkg_missing(lines: list[str], packages: list[str], version: str | None = None,
                       states: tuple[str, ...] | list[str] = ("ii", "hi")) -> list[str]:
    """Packages not fully installed (held or not: 'ii' or 'hi') at `version`, in the order wanted.

    A package dpkg knows but left half-installed or with an error flag ('iU', 'iF', 'iiR') still needs apt.
    """
    installed = {name for name, (have, status) in parse_lines(lines).items()
                 if status in states and (version is None or have == version)}
    return [p for p in packages if p not in installed]


class FilterModule:
    def filters(self):
        return {"spark_dpkg_missing": spark_dpkg_missing}

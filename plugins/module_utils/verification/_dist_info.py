# Copyright: sparkfleet contributors
# Apache License 2.0
"""An environment as installed: its distributions (dist-info's METADATA and RECORD) and the walk of its shared
objects."""

from __future__ import annotations

import os
from dataclasses import dataclass


def parse_record(text: str) -> list[str]:
    """Paths listed in a dist-info RECORD (CSV; the first field, possibly quoted)."""
    import csv
    import io

    return [row[0] for row in csv.reader(io.StringIO(text)) if row and row[0]]


def parse_metadata(text: str) -> tuple[str | None, str | None, list[str]]:
    """Name, Version and the Requires-Dist entries of a dist-info METADATA (its headers)."""
    name = version = None
    requires = []
    for line in text.splitlines():
        if not line.strip():
            break  # headers end at the first blank line
        if line.startswith("Name:") and name is None:
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:") and version is None:
            version = line.split(":", 1)[1].strip()
        elif line.startswith("Requires-Dist:"):
            requires.append(line.split(":", 1)[1].strip())
    return name, version, requires


def _read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return ""


@dataclass
class DistInfo:
    name: str
    version: str
    requires: list[str]
    shared_objects: list[str]  # normalised paths listed in its RECORD


def installed_distributions(site_packages: str) -> list[DistInfo]:
    """Every distribution a dist-info directory describes, with its shared objects (from RECORD).

    Only shared-object names are kept: torch's RECORD alone lists ~20,000 files.
    """
    found = []
    try:
        entries = sorted(os.scandir(site_packages), key=lambda e: e.name)
    except OSError:
        return found
    for entry in entries:
        if not entry.name.endswith(".dist-info") or not entry.is_dir():
            continue
        name, version, requires = parse_metadata(_read_text(os.path.join(entry.path, "METADATA")))
        if name is None:
            name, _unused, version = entry.name[: -len(".dist-info")].partition("-")
        sos = [os.path.normpath(os.path.join(site_packages, rel))
               for rel in parse_record(_read_text(os.path.join(entry.path, "RECORD")))
               if is_shared_object_name(os.path.basename(rel))]
        found.append(DistInfo(name, version or "?", requires, sos))
    return found


def is_shared_object_name(name: str) -> bool:
    return name.endswith(".so") or ".so." in name


def shared_objects(root: str):
    """Yield regular files under root named like shared objects (symlinks are not followed)."""
    stack = [root]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError:
            continue
        for entry in entries:
            if entry.is_symlink():
                continue
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif is_shared_object_name(entry.name) and entry.is_file(follow_symlinks=False):
                yield entry.path

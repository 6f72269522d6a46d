# Copyright: sparkfleet contributors
# Apache License 2.0
"""pip's own resolver asked, installing nothing: `pip install --dry-run --report` for a matrix's target, and what
a failed run means (unreachable, missing, conflict). spark_matrix_check and spark_matrix_propose ask through it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import urllib.parse

from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._indexes import index_env
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._pip_commands import platform_tags
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import normalize

_UNREACHABLE = re.compile(r"(Could not fetch URL|Max retries exceeded|NewConnectionError|Connection refused|"
                          r"Failed to establish|Temporary failure in name resolution|timed out|"
                          r"Network is unreachable|HTTP error (?:5\d\d|403|401))", re.I)
_VERSIONS = re.compile(r"\(from versions: ([^)]*)\)")
_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")
# pip's ResolutionImpossible report: what it cannot install (an error) and, at its info level, the
# requirements that collide (indented lines after "The conflict is caused by:").
_CANNOT = re.compile(r"ERROR: (Cannot install .*?) because these package versions have conflicting dependencies")
_CAUSES = re.compile(r"The conflict is caused by:\n((?:[ \t]+\S.*\n?)+)")


def dry_run(pip: list[str], args: list[str], target: dict, indexes: list[str], timeout: int,
            constraints: list[str] = ()) -> tuple[subprocess.CompletedProcess, dict | None]:
    """`pip install --dry-run --report` for the target, isolated from this machine's pip configuration.

    indexes: the first is the index, the others extra indexes (in pip's environment, never its argv). Returns
    pip's process and its report (None when pip failed). Not --quiet: pip
    explains a conflict at its info level, on stdout.
    """
    with tempfile.TemporaryDirectory() as work:
        report = os.path.join(work, "report.json")
        argv = [*pip, "install", "--dry-run", "--ignore-installed", "--only-binary=:all:",
                "--target", os.path.join(work, "t"), "--report", report, "--progress-bar", "off",
                "--python-version", target["python"], "--implementation", "cp",
                *[a for tag in platform_tags(target) for a in ("--platform", tag)],
                "--timeout", str(timeout), "--retries", "1"]
        if constraints:
            path = os.path.join(work, "constraints.txt")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("".join(f"{c}\n" for c in constraints))
            argv += ["--constraint", path]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
        env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1",
                   **index_env(indexes))
        # subprocess: an environment of its own (the host's PIP_* left out), which run_command cannot give.
        proc = subprocess.run([*argv, *args], capture_output=True, text=True, env=env, check=False)  # pylint: disable=ansible-bad-function
        if proc.returncode != 0:
            return proc, None
        with open(report, encoding="utf-8") as handle:
            return proc, json.load(handle)


def failure(out: str, err: str) -> dict:
    """What a failed pip run means: unreachable, missing (with what the index offers), conflict or error."""
    versions = _VERSIONS.search(err)
    offered = [v.strip() for v in versions.group(1).split(",")] if versions else []
    offered = [v for v in offered if v and v != "none"]
    if _UNREACHABLE.search(err) and not offered:  # pip says "not found" too when it could not ask at all
        line = next((ln for ln in err.splitlines() if _UNREACHABLE.search(ln)), err.strip())
        return {"status": "unreachable", "detail": line.strip()[:300]}
    cannot = _CANNOT.search(err)
    if cannot:
        causes = _CAUSES.search(out + err)
        caused = [ln.strip() for ln in causes.group(1).splitlines() if ln.strip()] if causes else []
        return {"status": "conflict", "detail": cannot.group(1) + (f": {'; '.join(caused)}" if caused else "")}
    if "No matching distribution" in err or "Could not find a version" in err:
        which = _NO_MATCH.search(err)
        detail = ("no wheel for this target; the index offers " + ", ".join(offered[-6:])
                  if offered else "the index has no wheel of it for this target")
        return {"status": "missing", "detail": f"{which.group(1)}: {detail}" if which else detail}
    return {"status": "error", "detail": err.strip()[-400:]}


def locked_entries(report: dict) -> list[dict]:
    """Each package of a dry run's report with its wheel's name and the sha256 its index gave (PyPI's links carry
    it; None where an index gives none), sorted by name: what `sparkfleet matrix lock` records."""
    entries = []
    for item in report["install"]:
        download = item.get("download_info") or {}
        entries.append({"name": normalize(item["metadata"]["name"]), "version": item["metadata"]["version"],
                        "sha256": (download.get("archive_info") or {}).get("hashes", {}).get("sha256"),
                        "wheel": urllib.parse.unquote(download.get("url", "").rsplit("/", 1)[-1].split("#")[0])
                        or None})
    return sorted(entries, key=lambda e: e["name"])


def held_constraints(pins: list[str], installed: list[tuple[str, str]], own: list[str]) -> list[str]:
    """A held step's constraints (hold: true): the other steps' `pins`, then what the steps before it installed
    (`installed`, (name, version) in the steps' order), each package at the last step's version as the closure
    counts it (datasets' fsspec<=2026.2.0 moves the fsspec torch's step brought), the pinned packages and the
    step's `own` pins aside (it moves them on purpose: pillow, which torchvision brought). A dry run installs
    nothing, so it must be told what pip, installing, would keep."""
    pinned = {normalize(pin.split("==", 1)[0]) for pin in [*pins, *own]}
    last = {normalize(name): f"{name}=={version}" for name, version in installed}
    return [*pins, *(spec for name, spec in last.items() if name not in pinned)]

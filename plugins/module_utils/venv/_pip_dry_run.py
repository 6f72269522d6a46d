# Copyright: sparkfleet contributors
# Apache License 2.0
"""A step resolved for the matrix's target, installing nothing, and what a failed resolution means (unreachable,
missing, conflict). spark_matrix_check and spark_matrix_propose ask through it.

pip's `--platform` and `--python-version` choose wheels for the target, but pip evaluates every dependency's
environment marker for the machine it runs on: on an x86_64 controller, torch 2.10.0's aarch64 wheel brings
fifteen `nvidia-*-cu12` wheels, cuda-bindings 12 and triton, each marked `platform_machine == "x86_64"` - the CUDA
12 wheels a Spark must never get. So a step with its dependencies is resolved by uv for the target
(`uv pip compile --python-platform aarch64-manylinux_2_39 --python-version 3.12`: markers evaluated for the
Spark, whatever the controller is), and pip then reads exactly that set without dependencies (`--no-deps`, where
markers play no part) for what the rest of sparkfleet reads: each package's metadata, its wheel and sha256 (the
hash lock's). A step that is already --no-deps is pip's alone. Without uv, only a machine that is the target
(its architecture and Python) resolves with pip; any other refuses, saying why.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse

try:
    from packaging.markers import Marker
except ImportError:  # pragma: no cover - ansible-core brings packaging to the controller
    Marker = None

from ansible_collections.sparkfleet.spark.plugins.module_utils.venv import _closure as closure
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


# uv's resolver says, failing: why (the lines after "cause:"), what has no wheel, what it could not fetch.
_UV_NO_SOLUTION = "No solution found when resolving dependencies"
_UV_MISSING = re.compile(r"(?:there is no version of (\S+?)(?: and|,| we)|(\S+?) was not found in the package registry|"
                         r"(\S+?) has no (?:usable )?wheels|only (\S+?) (?:is|are) available and \S+ has no wheels)")
_UV_UNREACHABLE = re.compile(r"(Failed to fetch|Request failed|error sending request|dns error|Connection refused|"
                             r"tcp connect error|timed out|Network is unreachable|HTTP status server error|"
                             r"status code 40[13])", re.I)
_UV_TLS = ("UV_NATIVE_TLS", "UV_SYSTEM_CERTS")
_CREDENTIALS = re.compile(r"(://)[^/@\s]+@")


class NotForTarget(Exception):
    """No resolver on this machine evaluates markers for the target."""


def resolver(target: dict) -> list[str] | None:
    """The uv that resolves for the target: the uv wheel's own binary (a dependency of sparkfleet, requirements.txt),
    else a uv on PATH. None where none is found and this machine is the target itself (pip, run here, evaluates
    markers as the target would); NotForTarget where it is not."""
    try:
        import uv  # pylint: disable=import-outside-toplevel
        return [uv.find_uv_bin()]
    except (ImportError, FileNotFoundError, AttributeError):
        pass
    found = shutil.which("uv")
    if found:
        return [found]
    here = (platform.system().lower(), platform.machine().lower(), f"{sys.version_info[0]}.{sys.version_info[1]}")
    wanted = ("linux", str(target.get("arch")), ".".join(str(target.get("python")).split(".")[:2]))
    if here == wanted:
        return None
    raise NotForTarget(
        f"resolving for linux {wanted[1]} CPython {wanted[2]} on this {here[1]} machine (Python {here[2]}) needs uv: "
        "pip evaluates each dependency's markers for the machine it runs on, and would bring what the target never "
        "installs (on x86_64, torch's nvidia-*-cu12 wheels). Install uv into the Python that runs sparkfleet "
        f"({sys.executable} -m pip install 'uv>=0.9,<1', as sparkfleet's requirements.txt says), or run the check "
        f"on a {wanted[1]} machine with Python {wanted[2]}")


def python_platform(target: dict) -> str:
    """uv's --python-platform for the target: ARCH-manylinux_2_N, N its glibc's minor."""
    return f"{target['arch']}-manylinux_{str(target['glibc']).replace('.', '_')}"


def for_target(uv: list[str], args: list[str], target: dict, indexes: list[str], timeout: int,
               constraints: list[str] = ()) -> tuple[subprocess.CompletedProcess, list[str] | None]:
    """The step's packages (args: pip's, its options among them) resolved by uv for the target, with their
    dependencies: (uv's process, ['name==version', ...]) or (process, None) where it does not resolve. Isolated
    from this machine's uv and pip configuration, never downloading a Python; the indexes in uv's environment."""
    with tempfile.TemporaryDirectory() as work:
        requirements = os.path.join(work, "requirements.in")
        with open(requirements, "w", encoding="utf-8") as handle:
            handle.write("".join(f"{a}\n" for a in args if not a.startswith("-")))
        argv = [*uv, "pip", "compile", requirements, "--no-config", "--no-python-downloads", "--python",
                sys.executable, "--python-version", target["python"], "--python-platform", python_platform(target),
                "--only-binary", ":all:", "--no-header", "--no-annotate", "--quiet"]
        if "--pre" in args:
            argv += ["--prerelease", "allow"]
        if constraints:
            path = os.path.join(work, "constraints.txt")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write("".join(f"{c}\n" for c in constraints))
            argv += ["--constraint", path]
        # The host's uv and pip settings left out, but how it trusts TLS (a company's proxy, its CA): the same
        # trust pip has from the system's store.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_")) or k in _UV_TLS}
        env.update(UV_HTTP_TIMEOUT=str(timeout), UV_HTTP_RETRIES="1", UV_NO_PROGRESS="1", NO_COLOR="1",
                   **index_env(indexes, "uv"))
        # subprocess: an environment of its own (the host's UV_* and PIP_* left out), which run_command cannot give.
        proc = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)  # pylint: disable=ansible-bad-function
    if proc.returncode != 0:
        return proc, None
    environment = closure.environment(target)
    pins = []
    for line in proc.stdout.splitlines():
        spec, _sep, marker = line.split("#", 1)[0].partition(";")
        if not spec.strip():
            continue
        if marker.strip() and not Marker(marker.strip()).evaluate(environment):
            continue
        pins.append(spec.strip())
    return proc, pins


def dry_run(pip: list[str], args: list[str], target: dict, indexes: list[str], timeout: int,
            constraints: list[str] = ()) -> tuple[subprocess.CompletedProcess, dict | None]:
    """`pip install --dry-run --report` for the target, isolated from this machine's pip configuration; with its
    dependencies (no --no-deps), of the set uv resolved for the target (for_target).

    indexes: the first is the index, the others extra indexes (in pip's environment, never its argv). Returns
    the process that answered and pip's report (None when the set did not resolve: the process says why). Not
    --quiet: pip explains a conflict at its info level, on stdout. NotForTarget where this machine cannot
    resolve for the target.
    """
    if "--no-deps" not in args:
        uv = resolver(target)
        if uv is not None:
            proc, pins = for_target(uv, args, target, indexes, timeout, constraints)
            if pins is None:
                return proc, None
            args, constraints = ["--no-deps", *pins], ()
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


def uv_failure(err: str) -> dict:
    """What a failed `uv pip compile` means: unreachable (the URL it could not fetch), missing (the requirement no
    wheel for the target meets), conflict (uv's own account, one line) or error. Credentials in a URL masked."""
    err = _CREDENTIALS.sub(r"\1***@", err)
    causes = [ln.strip()[len("cause:"):].strip() if ln.strip().startswith("cause:") else ln.strip()
              for ln in err.splitlines() if ln.strip() and not ln.startswith(("error:", "warning:", "  hint:"))]
    said = " ".join(" ".join(causes).split())
    # uv lists alternatives one per line ("depend on one of:\n    trl>=0.18.2,<0.19.0\n    trl>0.19.0,<=0.24.0"):
    # on one line, commas between them.
    said = re.sub(r"one of: ((?:\S+ )+?)(and|we|,)", lambda m: "one of: " + ", ".join(m.group(1).split()) + " "
                  + m.group(2), said)
    if _UV_NO_SOLUTION in err:
        missing = _UV_MISSING.search(said)
        if missing:
            which = next(g for g in missing.groups() if g)
            alone = said.startswith(f"Because there is no version of {which} and you require {which},")
            return {"status": "missing", "detail": f"{which}: no wheel for this target" + ("" if alone else f" ({said})")}
        return {"status": "conflict", "detail": said}
    if _UV_UNREACHABLE.search(err):
        fetched = re.search(r"Failed to fetch: `?(\S+?)`?$", err, re.M)
        reason = next((c for c in reversed(causes) if _UV_UNREACHABLE.search(c)), causes[-1] if causes else "")
        where = f"could not fetch {fetched.group(1)}: " if fetched else ""
        return {"status": "unreachable", "detail": f"{where}{reason}"[:300]}
    return {"status": "error", "detail": (said or err.strip())[-400:]}


def failure(out: str, err: str) -> dict:
    """What a failed resolution means: unreachable, missing (with what the index offers), conflict or error; uv's
    (a step with its dependencies) or pip's."""
    if err.lstrip().startswith(("error:", "warning:")) or _UV_NO_SOLUTION in err:
        return uv_failure(err)
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

# Copyright: sparkfleet contributors
# Apache License 2.0
"""sparkfleet doctor: the paste-able report of one host (pure: redaction and rendering).

The report is built from an allowlist of fields (nothing is copied whole
from `docker info` or a config file), so no registry credential, proxy URL
or token can reach it; hostnames are replaced unless the user keeps them.
"""

from __future__ import annotations

import re
from typing import Any


def redact(value: Any, names: list[str], label: str) -> Any:
    """`value` with every occurrence of each name (whole words, longest first) replaced by `label`."""
    names = sorted({n for n in names if n and len(n) > 1}, key=len, reverse=True)
    if not names:
        return value
    pattern = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, names)) + r")(?![\w-])")
    return _each_string(value, lambda item: pattern.sub(label, item))


def _each_string(value: Any, change) -> Any:
    """`value` with `change` applied to every string in it, the keys of mappings too."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list):
        return [_each_string(item, change) for item in value]
    if isinstance(value, dict):
        return {_each_string(k, change) if isinstance(k, str) else k: _each_string(v, change) for k, v in value.items()}
    return value


# Candidates for an address in free text (an unreachable host's message, a path): each is checked with
# ipaddress before it is replaced, so versions (13.0), times (05:19:36) and digests stay.
# An IPv4 address may be followed by its port (Go's 'dial tcp 10.20.30.40:5443', a URL's host:port).
_ADDRESS = re.compile(r"(?<![\w.:])(?:\d{1,3}(?:\.\d{1,3}){3}(?=:\d|[^\w.:]|$)|"
                      r"[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}(?![\w.:]))")
# A user's home in a path: /home/alice/inventory -> /home/<user>/inventory (and macOS's /Users/alice).
# A home below another folder too (/export/home/alice, /srv/home/alice).
_HOME = re.compile(r"(?<![\w.-])((?:/[\w.-]+)*?)/(home|Users)/[^/\s\"'`|]+")


# Where a failure message names a host or a user (ssh's, a URL's, Ansible's), whatever the name's form: a DNS name
# given as ansible_host, a login user. Each name found is replaced wherever else it appears too.
_USER_AT_HOST = re.compile(r"(?<![\w.@-])([A-Za-z_][\w.-]*)@([A-Za-z0-9][\w.-]*[A-Za-z0-9])(?=[\s:/'\"),]|$)")
_HOST_SAID = re.compile(r"(?i)(?:connect to host|connection to|could not resolve hostname|resolve host|host key for|"
                        r"hostname|ssh: |host) ([A-Za-z0-9][\w-]*(?:\.[\w-]+)+)(?=[\s:,)]|$)")
# Where ssh, Ansible, urllib3 and sudo name a host whatever its form, a single label too ('spark7', 'gpu-a'):
# 'connect to host spark7 port 22', 'Could not resolve hostname gpu-a:', 'sent to remote host "spark7.corp"',
# "HTTPSConnectionPool(host='mirror.corp.example'", 'for user alice on spark7', 'may not run sudo on spark7'.
_HOST_NAMED = re.compile(r"(?i)(?:connect to host|could not resolve hostname|unable to resolve host|remote host|"
                         r"connection to|\bon) [\"']?([A-Za-z0-9][\w-]*(?:\.[\w-]+)*)[\"']?(?=[\s:,.)]|$)"
                         r"|\bhost=[\"']([A-Za-z0-9][\w-]*(?:\.[\w-]+)*)[\"']")
_USER_NAMED = re.compile(r"(?i)(?:\bfor user|\bsorry, user|\buser) ([a-z_][\w.-]*)(?= (?:on|may|is)\b)")
# Words _HOST_NAMED's ' on X' may take that name no host.
_NOT_HOSTS = {"on", "the", "a", "an", "this", "that", "port", "host", "localhost"}
_URL_HOST = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)(?:[^\s/@]+@)?(\[[^\]\s]+\]|[A-Za-z0-9][\w.-]*)")
# Public services a report may name: where they are said, they identify nobody's site.
PUBLIC_HOSTS = ("nvcr.io", "docker.io", "registry-1.docker.io", "auth.docker.io", "ghcr.io", "pypi.org",
                "files.pythonhosted.org", "download.pytorch.org", "github.com", "api.github.com",
                "nvidia.github.io", "developer.download.nvidia.com", "localhost")


def _is_word_after_on(text: str, match: re.Match) -> bool:
    """' on X' names a host only where sudo says it ('... for user alice on spark7', '... run sudo on spark7')."""
    if not match.group(0).lower().startswith("on"):
        return False
    before = text[:match.start()].rstrip()
    return not re.search(r"(?i)(?:for user [\w.-]+|run sudo|user [\w.-]+ may not run \S+)$", before)


def _site_names(text: str) -> tuple[set[str], set[str]]:
    """The users and host names a text says (user@host, 'connect to host X', a URL's host), public ones left."""
    users, hosts = set(), set()
    for match in _USER_AT_HOST.finditer(text):
        users.add(match.group(1))
        hosts.add(match.group(2))
    hosts |= {m.group(1) for m in _HOST_SAID.finditer(text)}
    hosts |= {m.group(2) for m in _URL_HOST.finditer(text)}
    users |= {m.group(1) for m in _USER_NAMED.finditer(text)}
    hosts |= {name for m in _HOST_NAMED.finditer(text) for name in m.groups()
              if name and name.lower() not in _NOT_HOSTS and not _is_word_after_on(text, m)}
    return users, {h for h in hosts if h.lower() not in PUBLIC_HOSTS and not h.startswith("[")
                   and not h.replace(".", "").isdigit() and h != "<address>"}


def scrub(value: Any, homes: list[str] | None = None) -> Any:
    """`value` with what identifies a site replaced, whatever a host's outcome: every IP address but the
    loopback's by <address>, a user's home in a path by /home/<user> (and each of `homes`, such as the
    controller's own, by ~), and every host name and login user a message names (ssh's user@host, 'connect to
    host X', 'Connection to X port 22', a URL's host and credentials) by <host> and <user>, wherever else they
    appear too. Public services (nvcr.io, pypi.org, ...) stay."""
    import ipaddress

    said: tuple[set[str], set[str]] = (set(), set())

    def gather(item: str) -> str:
        users, hosts = _site_names(item)
        said[0].update(users)
        said[1].update(hosts)
        return item

    _each_string(value, gather)
    users = sorted(said[0], key=len, reverse=True)
    hosts = sorted(said[1], key=len, reverse=True)
    named = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, hosts)) + r")(?![\w-]|\.\w)") if hosts else None
    login = re.compile(r"(?<![\w.-])(" + "|".join(map(re.escape, users)) + r")(?=@)") if users else None

    homes = sorted({h.rstrip("/") for h in homes or [] if h and h.rstrip("/") not in ("", "/")}, key=len,
                   reverse=True)

    def address(match: re.Match) -> str:
        text = match.group(0)
        try:
            found = ipaddress.ip_address(text)
        except ValueError:
            return text
        return text if found.is_loopback or found.is_unspecified else "<address>"

    def text(item: str) -> str:
        for home in homes:
            item = re.sub(r"(?<![\w.-])" + re.escape(home) + r"(?=/|\b|$)", "~", item)
        item = _HOME.sub(lambda m: f"{m.group(1)}/{m.group(2)}/<user>", item)
        item = _URL_HOST.sub(lambda m: m.group(0) if "@" not in m.group(0) else f"{m.group(1)}{m.group(2)}", item)
        if login:
            item = login.sub("<user>", item)
        if users:
            item = re.sub(r"(?<![\w.-])(?:" + "|".join(map(re.escape, users)) + r")(?![\w-])", "<user>", item)
        if named:
            item = named.sub("<host>", item)
        return _ADDRESS.sub(address, item)

    return _each_string(value, text)


def _row(label: str, value: Any) -> str:
    if value is None or value == "" or value == []:
        value = "-"
    if isinstance(value, list):
        value = ", ".join(str(v) for v in value)
    return f"| {label} | {str(value).replace('|', '/')} |"


def markdown(report: dict) -> str:
    """One host's report as Markdown: a table of facts, then the verification and what to do."""
    system, gpu, docker = report["system"], report["gpu"], report["docker"]
    out = [f"## sparkfleet doctor: {report['host']}", "", "| what | found |", "|---|---|"]
    out += [
        _row("class", f"{report['host_class']}{' (simulated)' if report['simulated'] else ''}"),
        _row("DGX OS", system.get("dgx_os")),
        _row("OS", system.get("os")),
        _row("kernel", system.get("kernel")),
        _row("architecture", system.get("arch")),
        _row("GPU", [f"{g.get('name')} (compute {g.get('compute_cap')})" for g in gpu.get("devices", [])]),
        _row("driver", gpu.get("driver_version")),
        _row("CUDA (driver)", gpu.get("cuda_version")),
        _row("Docker", docker.get("server_version") or docker.get("error")),
        _row("runtimes", docker.get("runtimes")),
        _row("default runtime", docker.get("default_runtime")),
        _row("CDI", docker.get("cdi")),
        _row("toolkit packages", [f"{p['name']} {p['version'] or 'not installed'}{' (held)' if p['held'] else ''}"
                                  for p in report["toolkit"]]),
    ]
    out += [_row(f"image {i['name']}", f"{i['ref']} {'present' if i['present'] else 'MISSING'}")
            for i in report["images"]] or [_row("images", "none pinned on this host")]
    venv = report.get("venv") or {}
    out.append(_row("venv", f"{venv['path']} ({venv.get('matrix')}, fingerprint {venv.get('fingerprint')})"
                    if venv.get("path") else "none active"))
    verification = report["verification"]
    out += ["", f"Verification: **{verification.get('verdict') or 'never run'}**"
            + (f" (recorded {verification['written_at']}, when a provision or refresh last changed what the host "
               "runs or how it verified; a run that repaired the host and left those as they were rewrites nothing, "
               "and sparkfleet verify records nothing on the host: its report holds the latest)"
               if verification.get("written_at") else ""), ""]
    out += [f"- {line}" for line in verification.get("lines", [])]
    if report["abi_findings"]:
        out += ["", "ABI findings:", ""] + [f"- {f}" for f in report["abi_findings"]]
    out += ["", f"Problems: **{len(report['problems']) or 'none found'}**", ""]
    out += [f"- **{p['problem']}**: {p['evidence']}. Do: {p['fix']}" for p in report["problems"]]
    if report["unreadable"]:
        out += ["", "Could not read:", ""] + [f"- {p}" for p in report["unreadable"]]
    return "\n".join(out) + "\n"


GIB = 1024 ** 3
# The OOM guards Spark owners use: systemd's, and the userspace ones.
OOM_GUARDS = ("systemd-oomd", "earlyoom", "nohang")
NV_NO_MEMORY = re.compile(r"NV_ERR_NO_MEMORY")


def memory_signs(kernel_log: str | None, swaps: str | None, processes: list[str], pressure: str | None) -> dict:
    """What the host says about unified memory (pure, from the texts the module reads): the kernel log's
    NV_ERR_NO_MEMORY lines, the swap areas (/proc/swaps), a running OOM guard, memory pressure
    (/proc/pressure/memory, 'some avg10'); None where a text could not be read."""
    hits = [line.strip() for line in (kernel_log or "").splitlines() if NV_NO_MEMORY.search(line)]
    areas = [line.split()[0] for line in (swaps or "").splitlines()[1:] if line.strip()]
    some = re.search(r"^some\b.*\bavg10=([0-9.]+)", pressure or "", re.M)
    return {"nv_no_memory": len(hits) if kernel_log is not None else None, "nv_no_memory_last": hits[-1] if hits
            else None, "swap": areas if swaps is not None else None,
            "oom_guard": sorted({p for p in processes if p in OOM_GUARDS}),
            "pressure_some_avg10": float(some.group(1)) if some else None}


# The doctor's checks, one function each, in the order a person should look (the GPU, the runtime, the toolkit,
# the images, the venv, disk, memory). Each is pure: (the report, the preflight facts, the thresholds) -> the
# problems it sees, each {problem, evidence, fix}. To add one: a function here, its line in CHECKS, its test.


def _problem(text: str, evidence: str, fix: str) -> dict:
    return {"problem": text, "evidence": evidence, "fix": fix}


def check_gpu(report: dict, preflight: dict, limits: dict) -> list[dict]:
    """no GPU visible"""
    smi = preflight.get("nvidia_smi") or {}
    if report["gpu"].get("devices") or report["simulated"]:
        return []
    return [_problem("no GPU visible", smi.get("error") or "nvidia-smi listed no GPU",
                     "run nvidia-smi on the host; if it fails, the driver is not loaded: reboot after a kernel "
                     "update, or reinstall the DGX OS driver packages")]


def check_docker(report: dict, preflight: dict, limits: dict) -> list[dict]:
    """Docker not answering, or the nvidia runtime not registered"""
    runtimes = report["docker"].get("runtimes") or []
    if not report["docker"].get("server_version"):
        return [_problem("Docker does not answer", report["docker"].get("error") or "docker info gave no answer",
                         "systemctl status docker; start it, then run the doctor again")]
    if "nvidia" not in runtimes:
        return [_problem("the nvidia runtime is not registered with Docker", f"Docker's runtimes: "
                         f"{', '.join(runtimes)}", "sparkfleet provision (role spark_container_runtime), or: "
                         "nvidia-ctk runtime configure --runtime=docker && systemctl restart docker")]
    return []


def check_toolkit(report: dict, preflight: dict, limits: dict) -> list[dict]:
    """toolkit packages missing or not held"""
    missing = [p["name"] for p in report["toolkit"] if not p["version"]]
    unheld = [p["name"] for p in report["toolkit"] if p["version"] and not p["held"]]
    found = []
    if missing:
        found.append(_problem("NVIDIA Container Toolkit packages not installed", ", ".join(missing),
                              "sparkfleet provision installs them from NVIDIA's repository, pinned and held"))
    if unheld:
        found.append(_problem("toolkit packages not held (an apt upgrade can move them under the runtime)",
                              ", ".join(unheld), f"apt-mark hold {' '.join(unheld)} (sparkfleet provision holds "
                              "them)"))
    return found


def check_images(report: dict, preflight: dict, limits: dict) -> list[dict]:
    """a locked image missing"""
    return [_problem(f"the locked image {image['name']} is missing", image["ref"],
                     "sparkfleet provision -l <this host> pulls it again by its digest")
            for image in report["images"] if not image["present"]]


def check_venv(report: dict, preflight: dict, limits: dict) -> list[dict]:
    """the venv's matrix stale"""
    venv = report.get("venv_state") or {}
    if not venv.get("stale"):
        return []
    return [_problem("the venv's matrix is stale", f"{venv.get('matrix')}: {venv.get('age_days')} days since last "
                     "verified", "renew it: sparkfleet matrix propose -i INVENTORY --canary HOST (a candidate set "
                     "built and proved on one Spark, written as a new matrix beside the inventory to review and "
                     "commit)")]


def check_disk(report: dict, preflight: dict, limits: dict) -> list[dict]:
    """Docker's disk low"""
    free = preflight.get("docker_data_root_free_bytes")
    if not isinstance(free, int) or free >= limits["docker_free_gib"] * GIB:
        return []
    return [_problem("Docker's disk is low", f"{free / GIB:.1f} GiB free on {preflight.get('docker_data_root')} "
                     f"(under {limits['docker_free_gib']} GiB; an NGC image takes about 20 GiB unpacked)",
                     "docker system df; remove images no launcher uses (spark_images_prune: true)")]


def check_gpu_memory(report: dict, preflight: dict, limits: dict) -> list[dict]:
    """NV_ERR_NO_MEMORY in the kernel log (the GPU driver out of unified memory)"""
    memory = report.get("memory") or {}
    if not memory.get("nv_no_memory"):
        return []
    return [_problem("the GPU driver ran out of memory (unified memory)",
                     f"{memory['nv_no_memory']} NV_ERR_NO_MEMORY line(s) in the kernel log, last: "
                     f"{memory['nv_no_memory_last']}",
                     "lower the job's memory (batch size, model size) or free host memory; GPU and CPU share the "
                     "128 GB")]


def check_oom_guard(report: dict, preflight: dict, limits: dict) -> list[dict]:
    """no swap and no OOM guard"""
    memory = report.get("memory") or {}
    if memory.get("swap") != [] or memory.get("oom_guard"):
        return []
    return [_problem("no swap and no OOM guard", "/proc/swaps lists no swap area; none of "
                     f"{', '.join(OOM_GUARDS)} is running", "enable systemd-oomd or earlyoom, or add swap, so a job "
                     "that runs out of memory is stopped rather than the machine hanging")]


def check_memory_pressure(report: dict, preflight: dict, limits: dict) -> list[dict]:
    """memory pressure"""
    pressure = (report.get("memory") or {}).get("pressure_some_avg10")
    if pressure is None or pressure < limits["pressure_avg10"]:
        return []
    return [_problem("memory pressure", f"/proc/pressure/memory some avg10={pressure}",
                     "find the process holding memory (ps -eo rss,cmd --sort=-rss | head) before starting a job")]


CHECKS = (check_gpu, check_docker, check_toolkit, check_images, check_venv, check_disk, check_gpu_memory,
          check_oom_guard, check_memory_pressure)


def diagnose(report: dict, preflight: dict, limits: dict) -> list[dict]:
    """Each problem the report shows, with its evidence and what to do: every check of CHECKS, in order. Pure:
    from the report, the preflight facts and the thresholds (limits: docker_free_gib, pressure_avg10)."""
    return [found for check in CHECKS for found in check(report, preflight, limits)]

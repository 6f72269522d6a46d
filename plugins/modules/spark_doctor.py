#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""What someone debugging a DGX Spark needs, in one paste-able report."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_doctor
short_description: Report what someone debugging a DGX Spark needs, paste-able, without secrets
description:
  - Reads, and changes nothing - the preflight facts of spark_preflight_facts
    (DGX OS release, GPU name and compute capability, driver and CUDA from
    C(nvidia-smi)), the kernel, Docker's version, registered runtimes, default
    runtime and CDI, the NVIDIA Container Toolkit packages' versions and holds,
    each image sparkfleet pinned on the host (its digest, and whether it is
    present), the active venv and its matrix fingerprint, and the last
    verification from the host's state file (the GPU line, the ordered
    diagnosis with its evidence, the ABI findings).
  - Returns the report as data (RV(report)) and as Markdown (RV(markdown)).
    Only named fields are read from Docker and the files, so no registry
    credential, proxy or token reaches it; the host's names (O(hostnames), its
    node name and FQDN) are replaced by O(label) unless O(keep_hostnames).
  # make docs: doctor-checks
  - >-
    Diagnoses, read-only, each problem with its evidence and what to do, in RV(report.problems), in this order - no
    GPU visible; Docker not answering, or the nvidia runtime not registered; toolkit packages missing or not held; a
    locked image missing; the venv's matrix stale; Docker's disk low; NV_ERR_NO_MEMORY in the kernel log (the GPU
    driver out of unified memory); no swap and no OOM guard; memory pressure.
  # end make docs
  - Anything it cannot read is listed under C(unreadable), never a failure.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment:
  - sparkfleet.spark.sparkfleet_attributes
  - sparkfleet.spark.sparkfleet_read_only
  - sparkfleet.spark.sparkfleet_docker
options:
  preflight:
    description: The facts spark_preflight_facts gathered (C(ansible_facts['spark_preflight'])).
    type: dict
    required: true
    aliases: [platform]
    version_added: 0.2.0
  state_file:
    description: The host's sparkfleet state file.
    type: path
    default: /var/lib/sparkfleet/state.json
  venv_link:
    description: The link to the active venv.
    type: path
    default: /opt/sparkfleet/venv
  toolkit_packages:
    description: The NVIDIA Container Toolkit packages to report with their versions and holds; unset, the four
      that role spark_container_runtime installs and holds; an empty list, none.
    type: list
    elements: str
  hostnames:
    description: Names of the host to replace (e.g. its inventory name).
    type: list
    elements: str
    default: []
  keep_hostnames:
    description: Keep the host's names in the report.
    type: bool
    default: false
  label:
    description: What the host's names are replaced by.
    type: str
    default: host
  docker_free_gib:
    description: Free GiB on Docker's data root under which the disk is reported low.
    type: int
    default: 40
  pressure_avg10:
    description: The memory pressure (C(/proc/pressure/memory), some avg10, percent) from which it is reported.
    type: float
    default: 10.0
"""

EXAMPLES = r"""
- name: Gather the preflight facts
  sparkfleet.spark.spark_preflight_facts:

- name: The doctor's report
  sparkfleet.spark.spark_doctor:
    preflight: "{{ ansible_facts['spark_preflight'] }}"
    hostnames: ["{{ inventory_hostname }}"]
"""

RETURN = r"""
report:
  description: The report - host, host_class (C(platform), its old key, is deprecated and goes in 1.0.0),
    simulated, system, gpu, docker, toolkit, images, venv, verification, abi_findings, memory, problems, unreadable.
  returned: success
  type: dict
  contains:
    problems:
      description: What is wrong, most likely cause first; each with problem, evidence (what was read) and fix.
      returned: success
      type: list
      elements: dict
    unreadable:
      description: What the doctor could not read, and why; the report is silent about those parts.
      returned: success
      type: list
      elements: str
markdown:
  description: The report as Markdown, to paste into an issue.
  returned: success
  type: str
"""

import json
import os
import socket

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._shared_options import DOCKER
from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _dpkg as dpkg
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._docker_client import DockerClient
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._docker_daemon import DAEMON_JSON
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._doctor import (
    diagnose,
    markdown,
    memory_signs,
    redact,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._state import STATE_FILE
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._verification import (
    host_class,
    recorded_lines,
)


class Doctor:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.unreadable: list[str] = []
        self.client = DockerClient(module)

    def run(self, argv: list[str]) -> str | None:
        rc, out, err = self.module.run_command(argv, environ_update={"LC_ALL": "C"})
        if rc != 0:
            self.unreadable.append(f"{' '.join(argv[:3])}: rc {rc}: {(err or out).strip()[-300:]}")
            return None
        return out

    def read_json(self, path: str, what: str) -> dict | None:
        try:
            with open(path, encoding="utf-8") as handle:
                return json.load(handle)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            self.unreadable.append(f"{what} {path}: {exc}")
            return None

    def docker(self) -> dict:
        if not self.client.path:
            return {"error": "docker not found"}
        info, why = self.client.info()
        if why:
            self.unreadable.append(why)
        daemon = self.read_json(DAEMON_JSON, "Docker's configuration") or {}
        features = daemon.get("features") if isinstance(daemon.get("features"), dict) else {}
        cdi = features.get("cdi")
        return {"server_version": info.get("ServerVersion"), "runtimes": sorted(info.get("Runtimes") or {}),
                "default_runtime": info.get("DefaultRuntime"),
                "cdi": ("enabled" if cdi else "disabled" if cdi is False else "not set")
                + (f"; spec dirs {', '.join(info['CDISpecDirs'])}" if info.get("CDISpecDirs") else ""),
                "error": None if info else "docker info gave no answer"}

    def toolkit(self) -> list[dict]:
        names = self.module.params["toolkit_packages"]
        if names is None:
            names = list(dpkg.TOOLKIT_PACKAGES)
        lines = dpkg.read_status(names)["lines"] if names else None
        if lines is None:  # nothing asked, or no dpkg database: not a Debian-family host
            return []
        known = dpkg.parse_lines(lines)
        found = []
        for name in names:
            version, abbrev = known.get(name, (None, ""))
            found.append({"name": name, "version": version if abbrev[1:2] == "i" else None,
                          "held": abbrev[:1] == "h"})
        return found

    def images(self, state: dict) -> list[dict]:
        found = []
        for image in (state.get("verification") or {}).get("images") or []:
            present = bool(image.get("ref")) and self.client.inspect_image(image["ref"]) is not None
            found.append({"name": image.get("name"), "ref": image.get("ref"), "present": present})
        return found

    def venv(self) -> dict | None:
        link = self.module.params["venv_link"]
        if not os.path.islink(link) and not os.path.isdir(link):
            return None
        path = os.path.realpath(link)
        marker = self.read_json(os.path.join(path, "sparkfleet-venv.json"), "the venv's marker") or {}
        return {"path": path, "matrix": marker.get("matrix"), "fingerprint": marker.get("fingerprint")}

    def text(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                return handle.read()
        except OSError:
            return None

    def memory(self) -> dict:
        """The unified-memory signs: the kernel log (dmesg; it may need root), swap, an OOM guard, pressure."""
        dmesg = self.module.get_bin_path("dmesg")
        kernel_log = self.run([dmesg, "--kernel"]) if dmesg else None
        comms = []
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            name = self.text(f"/proc/{pid}/comm")
            if name:
                comms.append(name.strip())
        return memory_signs(kernel_log, self.text("/proc/swaps"), comms, self.text("/proc/pressure/memory"))

    def report(self) -> dict:
        p = self.module.params["preflight"]
        state = self.read_json(self.module.params["state_file"], "the state file") or {}
        verification = state.get("verification") or {}
        lines = recorded_lines(verification)  # the judge's own lines, each failure with its fix
        gpus = p.get("gpus") or []
        found = {
            "host": self.module.params["label"],
            "host_class": host_class(p),
            "platform": host_class(p),  # deprecated, the host class under its old key (removed in 1.0.0)
            "simulated": bool(p.get("simulated")),
            "system": {"dgx_os": (p.get("dgx") or {}).get("swbuild_version"),
                       "os": (p.get("os") or {}).get("pretty_name"), "kernel": os.uname().release,
                       "arch": p.get("arch")},
            "gpu": {"devices": [{"name": g.get("name"), "compute_cap": g.get("compute_cap")} for g in gpus],
                    "driver_version": next((g.get("driver_version") for g in gpus), None),
                    "cuda_version": p.get("cuda_driver_version")},
            "docker": self.docker(),
            "toolkit": self.toolkit(),
            "images": self.images(state),
            "venv": self.venv(),
            "verification": {"verdict": verification.get("verdict"), "lines": lines,
                             "written_at": state.get("written_at")},
            "abi_findings": [f for a in verification.get("abi") or [] for f in a.get("findings") or []],
            "venv_state": verification.get("venv"),
            "memory": self.memory(),
        }
        found["problems"] = diagnose(found, p, {"docker_free_gib": self.module.params["docker_free_gib"],
                                                "pressure_avg10": self.module.params["pressure_avg10"]})
        found["unreadable"] = self.unreadable
        return found


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            # platform: the option's old name (a platform is an OCI platform in sparkfleet's words).
            "preflight": {"type": "dict", "required": True, "aliases": ["platform"],
                          "deprecated_aliases": [{"name": "platform", "version": "1.0.0",
                                                  "collection_name": "sparkfleet.spark"}]},
            "state_file": {"type": "path", "default": STATE_FILE},
            "venv_link": {"type": "path", "default": "/opt/sparkfleet/venv"},
            "toolkit_packages": {"type": "list", "elements": "str"},
            **DOCKER,
            "hostnames": {"type": "list", "elements": "str", "default": []},
            "keep_hostnames": {"type": "bool", "default": False},
            "label": {"type": "str", "default": "host"},
            "docker_free_gib": {"type": "int", "default": 40},
            "pressure_avg10": {"type": "float", "default": 10.0},
        },
        supports_check_mode=True,
    )
    report = Doctor(module).report()
    if module.params["keep_hostnames"]:
        report["host"] = module.params["hostnames"][0] if module.params["hostnames"] else os.uname().nodename
    else:
        names = [n for n in (*module.params["hostnames"], os.uname().nodename, socket.getfqdn())
                 if n not in ("localhost", "localhost.localdomain")]
        report = redact(report, names, module.params["label"])
    module.exit_json(changed=False, report=report, markdown=markdown(report))


if __name__ == "__main__":
    main()

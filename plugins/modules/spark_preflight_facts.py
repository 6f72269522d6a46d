#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Gather the facts every sparkfleet role needs and classify the host."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_preflight_facts
short_description: Gather the facts every sparkfleet role reads and classify the host
description:
  - Reads the architecture, C(/etc/os-release), C(/etc/dgx-release), what
    C(nvidia-smi) reports (GPU name, compute capability, driver version and
    the CUDA version the driver supports), the free space on Docker's data
    root and the memory size.
  - Classifies the host as C(spark) (aarch64, a GB10 GPU of compute
    capability 12.1, a CUDA 13 driver), C(aarch64-other) or C(not-spark),
    with the reasons a host falls short.
  - Only reads. Never installs, upgrades or holds the GPU driver (DGX OS
    updates it through OTA).
  - C(nvidia-smi) fields reported as C([N/A]) or C([Not Supported]) (as NVML
    does for memory on the Spark's unified memory) become null, never errors.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes, sparkfleet.spark.sparkfleet_read_only]
options:
  nvidia_smi:
    description:
      - Name or path of C(nvidia-smi). A host without it has no GPU facts
        (and is not a Spark).
    type: str
    default: nvidia-smi
  command_timeout:
    description:
      - Seconds to wait for each C(nvidia-smi) or C(docker) call. A hung call
        is reported in C(ansible_facts.spark_preflight.nvidia_smi.error), not
        left to hang the play.
    type: int
    default: 30
  docker_data_root:
    description:
      - Docker's data root to measure free space on. Default is what
        C(docker info) reports, else C(data-root) from
        C(/etc/docker/daemon.json), else C(/var/lib/docker).
    type: path
  simulated:
    description:
      - Mark the host as simulated (a lab host with an C(nvidia-smi)
        stand-in). Carried into the facts so every report can say so.
    type: bool
    default: false
  packages:
    description:
      - Packages whose state in dpkg's database to report (C(packages)). Default the ones sparkfleet installs
        or checks, so spark_container_runtime asks dpkg nothing more on a converged host.
    type: list
    elements: str
  state_file:
    description:
      - The host's sparkfleet state file to read back (C(state_file)), so spark_verify writes it only when its
        content changes.
    type: path
    default: /var/lib/sparkfleet/state.json
  credential_registries:
    description:
      - The registries (C(host:port), as C(spark_images_registry_credentials) names them) the host will send
        credentials to. For each on the loopback (C(localhost) or a loopback address, port 80 where none is
        named, as a plain-http registry there is reached), the uid of each socket listening on its port is
        returned (C(loopback_listeners)), so the login goes only to a registry root serves, never to a port
        another user took.
    type: list
    elements: str
    default: []
    version_added: 0.2.0
notes:
  - The facts are returned as C(ansible_facts.spark_preflight) and C(ansible_facts.spark_host_class).
  - C(spark_platform) and C(spark_preflight.platform) are the host class under its old name (a platform is an OCI
    platform, C(linux/arm64), everywhere else); deprecated, they go in 1.0.0.
"""

EXAMPLES = r"""
- name: Gather the preflight facts
  sparkfleet.spark.spark_preflight_facts:

- name: Classify a lab host that carries an nvidia-smi stand-in
  sparkfleet.spark.spark_preflight_facts:
    simulated: true

- name: Refuse anything that is not a Spark
  ansible.builtin.assert:
    that: ansible_facts['spark_host_class'] == 'spark'
    fail_msg: "{{ ansible_facts['spark_preflight']['reasons'] | join('; ') }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added to the host.
  returned: always
  type: dict
  contains:
    spark_host_class:
      description: The class of the host.
      type: str
      choices: [spark, aarch64-other, not-spark]
      sample: spark
      version_added: 0.2.0
    spark_platform:
      description: Deprecated, the same as C(spark_host_class) (removed in 1.0.0).
      type: str
    spark_preflight:
      description: Everything gathered.
      type: dict
      contains:
        host_class:
          description: Same as C(spark_host_class).
          type: str
          version_added: 0.2.0
        platform:
          description: Deprecated, the same as C(host_class) (removed in 1.0.0).
          type: str
        reasons:
          description: Why the host is not a Spark; empty for a Spark.
          type: list
          elements: str
          sample: ["architecture is x86_64, a DGX Spark is aarch64"]
        simulated:
          description: The host is a lab stand-in (option O(simulated)).
          type: bool
        arch:
          description: Machine architecture as C(uname -m) prints it.
          type: str
          sample: aarch64
        os:
          description: From C(/etc/os-release).
          type: dict
          sample: {id: ubuntu, id_like: debian, version_id: "24.04", codename: noble, pretty_name: Ubuntu 24.04.3 LTS}
        dgx:
          description: From C(/etc/dgx-release); null when the file is absent.
          type: dict
          sample: {name: DGX Spark, swbuild_version: 7.4.0, ota_version: 7.4.0}
        gpus:
          description: One entry per GPU C(nvidia-smi) reports; null fields were [N/A] or [Not Supported].
          type: list
          elements: dict
          sample: [{index: 0, name: NVIDIA GB10, compute_cap: "12.1", driver_version: 580.95.05}]
        cuda_driver_version:
          description: The CUDA version the driver supports (the C(nvidia-smi) header); null without a driver.
          type: str
          sample: "13.0"
        nvidia_smi:
          description: How the C(nvidia-smi) calls went.
          type: dict
          sample: {path: /usr/bin/nvidia-smi, rc: 0, error: null, problems: []}
        docker_data_root:
          description: Docker's data root (measured on its nearest existing parent).
          type: str
          sample: /var/lib/docker
        docker_data_root_free_bytes:
          description: Bytes free for an unprivileged writer on the data root's file system.
          type: int
        docker_image_store:
          description:
            - Where the engine keeps its images, as its C(/info) says - C(containerd) for Docker's containerd image
              store (the default of a fresh Docker 29 install), else its graph driver's name (C(overlay2)); null
              where the engine did not answer.
            - Under the containerd image store no converged pull is recorded (spark_image_pull).
          type: str
          version_added: 0.2.0
        dockerd:
          description: The Docker engine's binary (C(/usr/bin/dockerd) or C(/usr/sbin/dockerd)), null when absent.
          type: str
          sample: /usr/bin/dockerd
        docker_service:
          description:
            - Whether systemd runs C(docker.service) now (C(active)) and at boot (C(enabled)); each null where
              the host has no C(systemctl). spark_container_runtime starts or enables Docker only when one is
              not true.
          type: dict
          sample: {active: true, enabled: true}
        docker_runtimes:
          description:
            - The runtimes the running Docker engine knows, as C(docker info --format '{{json .Runtimes}}')
              prints them; null when Docker did not answer. Read in the same C(docker info) call as the data
              root, so a converged run asks Docker once.
          type: dict
          sample: {nvidia: {path: nvidia-container-runtime}, runc: {path: runc}}
        docker_daemon_json:
          description:
            - What C(/etc/docker/daemon.json) says of the runtimes (C(path), and of the file the keys
              C(runtimes), C(default-runtime) and C(features) as C(registration), or C(error) when it is not
              JSON). spark_container_runtime registers the runtime only when these fall short.
          type: dict
          sample: {path: /etc/docker/daemon.json, registration: {runtimes: {nvidia: {path: nvidia-container-runtime}}},
                   error: null}
        package_lock_holders:
          description:
            - Who holds apt's or dpkg's locks (C(path), C(pid), C(command)), read without taking them; empty when
              the package manager is free. spark_preflight waits only when one is held.
          type: list
          elements: dict
        packages:
          description:
            - dpkg's state of O(packages) (C(asked)), read from its database as
              C(dpkg-query --show --showformat='${Package} ${Version} ${db:Status-Abbrev}\\n') prints it
              (C(lines), e.g. C(nvidia-container-toolkit 1.18.0-1 hi)); lines null where there is no dpkg.
          type: dict
        state_file:
          description: The state file (C(path)) and its text (C(text), null when there is none).
          type: dict
        memory_total_bytes:
          description: MemTotal from C(/proc/meminfo).
          type: int
        memory_available_bytes:
          description: MemAvailable from C(/proc/meminfo).
          type: int
        gpu_health:
          description:
            - The GPUs' health as nvidia-smi answers its C(--query-gpu) of the clock-event reasons and the
              temperatures (module_utils/host/_host_class.py's HEALTH_ARGS), read in the same run (the metrics
              of C(sparkfleet watch)).
            - Per GPU (C(gpus)) its active clock-event reasons by nvidia-smi's names (C(clock_event_reasons), e.g.
              C(hw_thermal_slowdown)), the bitmask as printed (C(clock_event_mask)), C(temperature_c) and
              C(memory_temperature_c) (null where nvidia-smi has no value); C(problems), the lines it could not
              read; C(error) where nvidia-smi refused the query. Null where no GPU answered.
          type: dict
          sample: {gpus: [{index: 0, clock_event_mask: "0x0000000000000001", clock_event_reasons: [gpu_idle],
                   temperature_c: 40, memory_temperature_c: null}], problems: [], error: null}
        loopback_listeners:
          description:
            - Per registry of O(credential_registries) on the loopback, the uids of the sockets listening on its port
              on an address the loopback reaches (none where no one listens); a registry elsewhere is not listed.
          type: dict
          sample: {"127.0.0.1:5000": [0]}
          version_added: 0.2.0
        oom_guard:
          description: The OOM guards running on the host (C(systemd-oomd), C(earlyoom), C(nohang)), by process name.
          type: list
          elements: str
        cx7_netplan:
          description:
            - Whether the CX-7 netplan (C(/etc/netplan/40-cx7.yaml)) is there (C(exists)) and was written by
              sparkfleet (C(sparkfleet), its first line says so); role spark_cluster removes only such a file from
              a node that left its cluster.
          type: dict
        cluster_trust:
          description:
            - Whether the node holds a cluster's trust (C(exists), the record spark_cluster_trust writes when it joins,
              C(/var/lib/sparkfleet/cluster.json)); role spark_cluster takes it back only from such a node, so a node
              that never joined costs no call.
          type: dict
        converged:
          description:
            - What the host modules recorded of their last converged runs (module_utils/host/_converged.py), by the
              key of the arguments each ran with (a sha256) - C(module) (C(spark_apt_keyring), C(spark_image_pull),
              C(spark_launchers)) and C(result) (what a converged re-run returns) - only where every file that holds
              its state is as the run left it, and the run is less than a day old. A role skips the module where
              this run's key is one of them.
          type: dict
"""

import os
import subprocess
from urllib.parse import urlsplit

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_text
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster._netplan import NETPLAN_FILE, NETPLAN_MARK
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster._trust import RECORD as TRUST_RECORD
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._http import is_loopback
from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _converged as converged
from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _docker_api as docker_api
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._docker_client import DockerClient
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._docker_daemon import (
    DAEMON_JSON,
    REGISTRATION_KEYS,
    DaemonJsonError,
    parse_daemon_json,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._doctor import OOM_GUARDS
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._dpkg import PACKAGES, lock_holders, read_status
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._host_class import (
    HEALTH_ARGS,
    QUERY_ARGS,
    classify,
    parse_cuda_banner,
    parse_dgx_release,
    parse_gpu_query,
    parse_health,
    parse_meminfo,
    parse_os_release,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._listeners import listeners
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._state import STATE_FILE

_C_LOCALE = {"LC_ALL": "C", "LANG": "C"}


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def loopback_listeners(registries: list[str]) -> dict[str, list[int]]:
    """Who listens on the port of each registry on the loopback (common._http's is_loopback, as the controller's
    registry client judges one; port 80 where none is named, a plain-http registry's), by the registry's name."""
    found = {}
    for registry in registries:
        if is_loopback(registry):
            found[registry] = listeners(urlsplit(f"//{registry}").port or 80)
    return found


def _run(argv: list[str], timeout: int) -> tuple[int | None, str, str]:
    """Run argv with a timeout (run_command has none, and a wedged driver hangs nvidia-smi).

    Returns (rc, stdout, stderr); rc is None when the call timed out.
    """
    env = dict(os.environ, **_C_LOCALE)
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=timeout, env=env, check=False)  # pylint: disable=ansible-bad-function
    except subprocess.TimeoutExpired:
        return None, "", f"no answer within {timeout} s"
    except OSError as exc:
        return 127, "", str(exc)
    return proc.returncode, to_text(proc.stdout), to_text(proc.stderr)


class PreflightFacts:
    def __init__(self, module: AnsibleModule) -> None:
        self.module = module
        self.timeout = module.params["command_timeout"]

    def nvidia(self) -> tuple[list[dict], str | None, dict]:
        path = self.module.get_bin_path(self.module.params["nvidia_smi"])
        report: dict = {"path": path, "rc": None, "error": None, "problems": []}
        if path is None:
            report["error"] = f"{self.module.params['nvidia_smi']} not found on PATH"
            return [], None, report
        rc, out, err = _run([path, *QUERY_ARGS], self.timeout)
        report["rc"] = rc
        if rc != 0:
            report["error"] = (err or out).strip() or f"exited {rc}"
            return [], None, report
        gpus, problems = parse_gpu_query(out)
        report["problems"] = problems
        rc, banner, err = _run([path], self.timeout)
        cuda = parse_cuda_banner(banner) if rc == 0 else None
        if cuda is None:
            report["problems"].append("no 'CUDA Version' in the nvidia-smi header"
                                      + (f" (rc {rc}: {err.strip()})" if rc else ""))
        return gpus, cuda, report

    def health(self, nvsmi: dict, gpus: list[dict]) -> dict | None:
        """The GPUs' clock-event reasons and temperatures (parse_health), read where nvidia-smi answered for a GPU;
        its error where it does not answer these fields (an older driver names the field it does not know)."""
        if not gpus or not nvsmi.get("path"):
            return None
        rc, out, err = _run([nvsmi["path"], *HEALTH_ARGS], self.timeout)
        if rc != 0:
            return {"gpus": [], "problems": [], "error": (err or out).strip()[-300:] or f"exited {rc}"}
        found, problems = parse_health(out)
        return {"gpus": found, "problems": problems, "error": None}

    @staticmethod
    def oom_guard() -> list[str]:
        """The OOM guards running on the host (_doctor.OOM_GUARDS, by their processes' names)."""
        running = set()
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            name = (_read(f"/proc/{pid}/comm") or "").strip()
            if name in OOM_GUARDS:
                running.add(name)
        return sorted(running)

    def docker_info(self) -> dict:
        """What the running Docker engine says of itself (its API's /info, else one `docker info`); empty when it
        does not answer."""
        info, _why = DockerClient(self.module, "docker", timeout=self.timeout,
                                  run=lambda argv: _run(argv, self.timeout)).info()
        return info

    def docker_service(self) -> dict:
        """Whether systemd runs Docker now and starts it at boot (null for each where there is no systemctl)."""
        systemctl = self.module.get_bin_path("systemctl")
        if not systemctl:
            return {"active": None, "enabled": None}
        return {state: _run([systemctl, f"is-{state}", "--quiet", "docker.service"], self.timeout)[0] == 0
                for state in ("active", "enabled")}

    @staticmethod
    def daemon_json(path: str = DAEMON_JSON) -> tuple[dict, dict]:
        """(the whole of daemon.json, or {}; what the facts say of it: the runtime registration's keys)."""
        try:
            config = parse_daemon_json(_read(path), path)
        except DaemonJsonError as exc:
            return {}, {"path": path, "registration": None, "error": str(exc)}
        return config, {"path": path, "registration": {k: config[k] for k in REGISTRATION_KEYS if k in config},
                        "error": None}

    def docker_data_root(self, info: dict, config: dict) -> str:
        if self.module.params["docker_data_root"]:
            return self.module.params["docker_data_root"]
        root = info.get("DockerRootDir")
        if isinstance(root, str) and root.startswith("/"):
            return root
        root = config.get("data-root")
        return root if isinstance(root, str) and root.startswith("/") else "/var/lib/docker"

    def gather(self) -> dict:
        arch = os.uname().machine
        gpus, cuda, nvsmi = self.nvidia()
        host_class, reasons = classify(arch, gpus, cuda)
        dgx_text = _read("/etc/dgx-release")
        info = self.docker_info()
        config, daemon_json = self.daemon_json()
        data_root = self.docker_data_root(info, config)
        packages = self.module.params["packages"]
        runtimes = info.get("Runtimes")
        mem = parse_meminfo(_read("/proc/meminfo") or "")
        return {
            "host_class": host_class,
            "platform": host_class,  # deprecated (the host class under its old name), removed in 1.0.0
            "reasons": reasons,
            "simulated": self.module.params["simulated"],
            "arch": arch,
            "os": parse_os_release(_read("/etc/os-release") or ""),
            "dgx": parse_dgx_release(dgx_text) if dgx_text is not None else None,
            "gpus": gpus,
            "cuda_driver_version": cuda,
            "nvidia_smi": nvsmi,
            "docker_data_root": data_root,
            "docker_data_root_free_bytes": docker_api.free_bytes(data_root),
            "docker_image_store": docker_api.image_store(info),
            "dockerd": next((p for p in ("/usr/bin/dockerd", "/usr/sbin/dockerd") if os.path.exists(p)), None),
            "docker_service": self.docker_service(),
            "docker_runtimes": runtimes if isinstance(runtimes, dict) else None,
            "docker_daemon_json": daemon_json,
            "package_lock_holders": lock_holders(),
            "packages": read_status(PACKAGES if packages is None else packages),
            "state_file": {"path": self.module.params["state_file"], "text": _read(self.module.params["state_file"])},
            "memory_total_bytes": mem.get("MemTotal"),
            "memory_available_bytes": mem.get("MemAvailable"),
            "gpu_health": self.health(nvsmi, gpus),
            "oom_guard": self.oom_guard(),
            "loopback_listeners": loopback_listeners(self.module.params["credential_registries"]),
            "cx7_netplan": {"exists": os.path.lexists(NETPLAN_FILE),
                            "sparkfleet": (_read(NETPLAN_FILE) or "").startswith(NETPLAN_MARK)},
            "cluster_trust": {"exists": os.path.lexists(TRUST_RECORD)},
            "converged": converged.unchanged(),
        }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "command_timeout": {"type": "int", "default": 30},
            "docker_data_root": {"type": "path"},
            "simulated": {"type": "bool", "default": False},
            "packages": {"type": "list", "elements": "str"},
            "state_file": {"type": "path", "default": STATE_FILE},
            "credential_registries": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    facts = PreflightFacts(module).gather()
    module.exit_json(
        changed=False,
        # spark_platform: deprecated, the host class under its old name, removed in 1.0.0.
        ansible_facts={"spark_preflight": facts, "spark_host_class": facts["host_class"],
                       "spark_platform": facts["host_class"]},
    )


if __name__ == "__main__":
    main()

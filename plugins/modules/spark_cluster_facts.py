#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Read what a cluster node has for its CX-7 rails: links, speeds, PCIe widths, MTUs, addresses, RDMA devices."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_cluster_facts
short_description: Read a cluster node's CX-7 rails, RDMA devices, CMA and NCCL configuration
description:
  - For each rail interface, from sysfs and C(ip -j addr) - whether it exists, its state, MTU, MAC address,
    IPv4 addresses and IPv6 link-local addresses, the negotiated speed, and the PCIe device behind it (vendor,
    link width and speed); a virtual link (a veth) has no PCIe device and says its kind.
  - The RDMA devices and the interface each serves, from C(ibdev2netdev) where it is installed, else from
    C(/sys/class/infiniband).
  - C(CmaTotal) and C(MemAvailable) from C(/proc/meminfo), whether a GPU answers C(nvidia-smi -L), and the
    C(NCCL_*) settings of C(/etc/nccl.conf), the cluster user's C(~/.nccl.conf) and, when O(image) is given, the
    C(/etc/nccl.conf) inside that image (read from a created, never started, container).
  - Read-only, every command bounded by O(timeout).
version_added: "0.2.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment:
  - sparkfleet.spark.sparkfleet_attributes
  - sparkfleet.spark.sparkfleet_read_only
  - sparkfleet.spark.sparkfleet_docker
options:
  interfaces:
    description: The rails' interfaces.
    type: list
    elements: str
    required: true
  user:
    description: The cluster's login user (its C(~/.nccl.conf) is read).
    type: str
  image:
    description: The locked image NCCL runs in (C(REPOSITORY@DIGEST)); its C(/etc/nccl.conf) is read.
    type: str
  timeout:
    description: Seconds each command may take.
    type: int
    default: 30
"""

EXAMPLES = r"""
- name: Read the node's rails
  sparkfleet.spark.spark_cluster_facts:
    interfaces: [enp1s0f1np1, enP2p1s0f1np1]
    user: nvidia
  register: rails
"""

RETURN = r"""
interfaces:
  description: Per interface - exists, operstate, mtu, mac, addresses, link_local6, speed_mbps, pcie, kind.
  returned: success
  type: dict
rdma:
  description: The RDMA devices - hca, port, netdev, state.
  returned: success
  type: list
  elements: dict
rdma_source:
  description: C(ibdev2netdev), C(sysfs), or null when the node has no RDMA device.
  returned: success
  type: str
meminfo:
  description: CmaTotal, CmaFree, MemTotal, MemAvailable in kB.
  returned: success
  type: dict
gpu:
  description: Whether C(nvidia-smi -L) lists a GPU.
  returned: success
  type: bool
nccl_conf:
  description: C(files) (source -> NCCL_* settings), C(read) (the files read), C(image_error) (why the image's
    could not be read).
  returned: success
  type: dict
user:
  description: The cluster user - name, exists, home.
  returned: when O(user) is given
  type: dict
"""

import io
import json
import os
import pwd
import subprocess
import tarfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _model as cluster_model
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _tools as cluster_tools
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._shared_options import DOCKER
from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _user_files as user_files
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._docker_client import DockerClient

SYS_NET = "/sys/class/net"
SYS_IB = "/sys/class/infiniband"


def read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def number(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


class Facts:
    def __init__(self, module: AnsibleModule):
        self.module = module
        self.timeout = module.params["timeout"]

    def run(self, argv: list[str], stdin: str | None = None) -> tuple[int, str, str]:
        # pylint: disable=ansible-bad-function  # a timeout per command: a wedged driver must not hang the run
        try:
            proc = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=self.timeout,
                                  check=False, env={**os.environ, "LC_ALL": "C"})
        except subprocess.TimeoutExpired:
            return 124, "", f"{os.path.basename(argv[0])} did not answer in {self.timeout} s"
        except OSError as exc:
            return 127, "", str(exc)
        return proc.returncode, proc.stdout, proc.stderr

    def interfaces(self, names: list[str]) -> dict:
        ip = self.module.get_bin_path("ip", required=True)
        rc, out, _err = self.run([ip, "-d", "-j", "addr", "show"])
        links = {link.get("ifname"): link for link in (json.loads(out) if rc == 0 and out.strip() else [])}
        found = {}
        for name in names:
            base, link = os.path.join(SYS_NET, name), links.get(name)
            if link is None or not os.path.isdir(base):
                found[name] = {"exists": False}
                continue
            addresses = [f"{a['local']}/{a['prefixlen']}" for a in link.get("addr_info") or []
                         if a.get("family") == "inet"]
            link_local6 = [a["local"] for a in link.get("addr_info") or []
                           if a.get("family") == "inet6" and a.get("scope") == "link"]
            speed = number(read(os.path.join(base, "speed")))
            device = os.path.join(base, "device")
            pcie = None
            if os.path.exists(os.path.join(device, "current_link_width")):
                pcie = {"vendor": read(os.path.join(device, "vendor")),
                        "width": number(read(os.path.join(device, "current_link_width"))),
                        "speed": read(os.path.join(device, "current_link_speed"))}
            found[name] = {"exists": True, "operstate": read(os.path.join(base, "operstate")),
                           "mtu": link.get("mtu"), "mac": link.get("address"), "addresses": addresses,
                           "link_local6": link_local6, "speed_mbps": speed if speed and speed > 0 else None,
                           "pcie": pcie, "kind": (link.get("linkinfo") or {}).get("info_kind")}
        return found

    def rdma(self) -> tuple[list[dict], str | None]:
        tool = self.module.get_bin_path("ibdev2netdev")
        if tool:
            rc, out, _err = self.run([tool])
            if rc == 0:
                devices = cluster_tools.parse_ibdev2netdev(out)
                return devices, "ibdev2netdev" if devices else None
        devices = []
        for hca in sorted(os.listdir(SYS_IB)) if os.path.isdir(SYS_IB) else []:
            net = os.path.join(SYS_IB, hca, "device", "net")
            for netdev in sorted(os.listdir(net)) if os.path.isdir(net) else []:
                state = read(os.path.join(SYS_NET, netdev, "operstate"))
                devices.append({"hca": hca, "port": 1, "netdev": netdev, "state": "Up" if state == "up" else "Down"})
        return devices, "sysfs" if devices else None

    def gpu(self) -> bool:
        tool = self.module.get_bin_path("nvidia-smi")
        if not tool:
            return False
        rc, out, _err = self.run([tool, "-L"])
        return rc == 0 and "GPU 0" in out

    def image_nccl_conf(self, image: str) -> tuple[dict | None, str | None]:
        """/etc/nccl.conf inside the image, from a container created (never started) and removed again."""
        docker = DockerClient(self.module)
        if not docker.path:
            return None, "Docker is not installed on this node: the image's /etc/nccl.conf was not read"
        rc, out, err = self.run(docker.argv("create", image, "true"))
        if rc != 0:
            return None, f"the image {image} is not on this node ({(err or out).strip()[:200]}); provision first"
        container = out.strip()
        try:
            # pylint: disable=ansible-bad-function  # a tar stream on stdout, read as bytes
            proc = subprocess.run(docker.argv("cp", f"{container}:/etc/nccl.conf", "-"), capture_output=True,
                                  timeout=self.timeout, check=False)
        except subprocess.TimeoutExpired:
            return None, f"reading /etc/nccl.conf from {image} took longer than {self.timeout} s"
        finally:
            self.run(docker.argv("rm", "-f", container))
        if proc.returncode != 0:
            return {}, None  # the image has no /etc/nccl.conf
        with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as archive:
            member = archive.extractfile(archive.getmembers()[0])
            text = member.read().decode(errors="replace") if member else ""
        return cluster_tools.parse_nccl_conf(text), None

    def nccl_conf(self, user: dict | None, image: str | None) -> dict:
        files, read_paths = {}, []
        paths = ["/etc/nccl.conf"] + ([os.path.join(user["home"], ".nccl.conf")] if user and user.get("home") else [])
        for path in paths:
            if path == "/etc/nccl.conf":
                text = read(path)
            else:  # the user's own file, read as root: never through a link, from a FIFO or a device
                try:
                    text = user_files.read(user["home"], ".nccl.conf", user["uid"])
                except (user_files.UnsafeFile, OSError) as exc:
                    self.module.warn(f"NCCL settings not read: {exc}")
                    continue
            if text is not None:
                read_paths.append(path)
                settings = cluster_tools.parse_nccl_conf(text)
                if settings:
                    files[path] = settings
        image_error = None
        if image:
            settings, image_error = self.image_nccl_conf(image)
            if settings is not None:
                read_paths.append(f"{image}:/etc/nccl.conf")
                if settings:
                    files[f"{image}:/etc/nccl.conf"] = settings
        return {"files": files, "read": read_paths, "image_error": image_error}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "interfaces": {"type": "list", "elements": "str", "required": True},
            "user": {"type": "str"},
            "image": {"type": "str"},
            **DOCKER,
            "timeout": {"type": "int", "default": 30},
        },
        supports_check_mode=True,
    )
    bad = [n for n in module.params["interfaces"] if not cluster_model.INTERFACE.fullmatch(n)]
    if bad:
        module.fail_json(msg=f"interfaces {bad!r:.100}: expected interface names of 15 characters at most")
    facts = Facts(module)
    user = None
    if module.params["user"]:
        try:
            entry = pwd.getpwnam(module.params["user"])
            user = {"name": entry.pw_name, "exists": True, "home": entry.pw_dir, "uid": entry.pw_uid}
        except KeyError:
            user = {"name": module.params["user"], "exists": False, "home": None}
    devices, source = facts.rdma()
    meminfo = cluster_tools.parse_meminfo(read("/proc/meminfo") or "")
    result = {"changed": False, "interfaces": facts.interfaces(module.params["interfaces"]), "rdma": devices,
              "rdma_source": source, "meminfo": meminfo, "gpu": facts.gpu(),
              "nccl_conf": facts.nccl_conf(user, module.params["image"])}
    if user is not None:
        result["user"] = {key: value for key, value in user.items() if key != "uid"}
    module.exit_json(**result)


if __name__ == "__main__":
    main()

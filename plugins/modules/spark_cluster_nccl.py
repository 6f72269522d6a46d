#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Run one rank of a bounded NCCL all_gather across a Spark cluster, in the locked NGC image."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_cluster_nccl
short_description: Run one rank of a bounded NCCL all_gather across a Spark cluster, in the locked image
description:
  - Starts the locked NGC image with the container-workflow flags, the host's network and its RDMA devices, and
    runs sparkfleet's NCCL probe in it - an all_gather through torch.distributed (NCCL) of O(bytes), timed out of
    place and in place, every value received checked. Every node of the cluster runs this module in the same task
    (rank 0 on the first node, which the others join at O(master)); rank 0's output is nccl-tests' table.
  - O(bytes) is what the unified memory can hold (the filter C(sparkfleet.spark.spark_cluster_nccl_bytes) caps it
    by the memory available), never the 16 GB that froze a node; O(timeout) bounds the whole run.
  - Read-only for the host (a container removed when it ends).
version_added: "0.2.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment:
  - sparkfleet.spark.sparkfleet_attributes
  - sparkfleet.spark.sparkfleet_read_only
  - sparkfleet.spark.sparkfleet_docker
options:
  image:
    description: The locked image (C(REPOSITORY@DIGEST)).
    type: str
    required: true
  rank:
    description: This node's rank (its place in the cluster's node list).
    type: int
    required: true
  ranks:
    description: How many nodes take part.
    type: int
    required: true
  master:
    description: Rank 0's address on the first rail.
    type: str
    required: true
  port:
    description: The TCP port rank 0 listens on to bring the ranks together.
    type: int
    default: 29511
  bytes:
    description: The all_gather's output size in bytes.
    type: int
    required: true
  iters:
    description: Timed iterations, after O(warmup) untimed ones.
    type: int
    default: 20
  warmup:
    description: Untimed iterations first.
    type: int
    default: 5
  environment:
    description: NCCL's environment (C(NCCL_IB_HCA) naming both halves of the port, C(NCCL_SOCKET_IFNAME), ...).
    type: dict
    default: {}
  run_flags:
    description: The container-workflow flags (spark_images_run_flags).
    type: list
    elements: str
    default: [--runtime=nvidia, --gpus, all, --ipc=host, --ulimit, memlock=-1, --ulimit, stack=67108864]
  timeout:
    description: Seconds the whole run may take, the ranks' meeting included.
    type: int
    default: 300
"""

EXAMPLES = r"""
- name: Run NCCL across the cluster
  sparkfleet.spark.spark_cluster_nccl:
    image: nvcr.io/nvidia/pytorch@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    rank: 0
    ranks: 2
    master: 192.168.100.10
    bytes: 1073741824
    environment: {NCCL_IB_HCA: "rocep1s0f1,roceP2p1s0f1", NCCL_SOCKET_IFNAME: enp1s0f1np1}
"""

RETURN = r"""
ran:
  description: Whether the probe ran to its end with NCCL (false with C(why) otherwise).
  returned: success
  type: bool
why:
  description: Why NCCL did not run (no GPU in the container, the image missing, a timeout).
  returned: when ran is false
  type: str
output:
  description: The probe's output (rank 0 - nccl-tests' table).
  returned: success
  type: str
parsed:
  description: The table read back (rows, avg_busbw, out_of_bounds, ranks).
  returned: success
  type: dict
"""

import ipaddress
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _nccl as cluster_nccl
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _tools as cluster_tools
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._shared_options import DOCKER
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._validate import env_name, env_value
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._docker_client import DockerClient

DOCKER_COULD_NOT_START = 125  # docker run's own exit status when the container did not start


def valid_address(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "image": {"type": "str", "required": True},
            "rank": {"type": "int", "required": True},
            "ranks": {"type": "int", "required": True},
            "master": {"type": "str", "required": True},
            "port": {"type": "int", "default": 29511},
            "bytes": {"type": "int", "required": True},
            "iters": {"type": "int", "default": 20},
            "warmup": {"type": "int", "default": 5},
            "environment": {"type": "dict", "default": {}},
            "run_flags": {"type": "list", "elements": "str",
                          "default": ["--runtime=nvidia", "--gpus", "all", "--ipc=host", "--ulimit", "memlock=-1",
                                      "--ulimit", "stack=67108864"]},
            **DOCKER,
            "timeout": {"type": "int", "default": 300},
        },
        supports_check_mode=True,
    )
    p = module.params
    bad = [f"{k}: {why}" for k, v in p["environment"].items() if (why := env_name(k) or env_value(v))]
    if bad or not valid_address(p["master"]) or not 0 <= p["rank"] < p["ranks"]:
        module.fail_json(msg=f"spark_cluster_nccl: expected NCCL_* names with one-line values, an IPv4 master and "
                             f"0 <= rank < ranks; found {'; '.join(bad) or (p['master'], p['rank'], p['ranks'])}")
    argv = DockerClient(module, required=True).argv("run", "--rm", "-i", "--network", "host", *p["run_flags"])
    if os.path.exists("/dev/infiniband"):
        argv += ["--device", "/dev/infiniband"]
    for key, value in sorted(p["environment"].items()):
        argv += ["-e", f"{key}={value}"]
    argv += [p["image"], "python3", "-", str(p["rank"]), str(p["ranks"]), p["master"], str(p["port"]),
             str(p["bytes"]), str(p["iters"]), str(p["warmup"]), str(p["timeout"])]
    # pylint: disable=ansible-bad-function  # a timeout for the whole run: a rank that never arrives must not hang
    try:
        proc = subprocess.run(argv, input=cluster_nccl.NCCL_PROBE, capture_output=True, text=True,
                              timeout=p["timeout"] + 30, check=False)
    except subprocess.TimeoutExpired:
        module.exit_json(changed=False, ran=False, why=f"the NCCL run did not end in {p['timeout'] + 30} s (a rank "
                         "that never joined, or a hung transfer)", output="", parsed=cluster_tools.parse_nccl_tests(""))
    parsed = cluster_tools.parse_nccl_tests(proc.stdout)
    said = (proc.stderr or proc.stdout).strip()
    if proc.returncode == DOCKER_COULD_NOT_START:
        why = f"Docker could not start the locked image on this node: {said[-400:]}"
        if "runtime" in said.lower() and "nvidia" in said.lower():
            why += (". The nvidia runtime is not registered with Docker here: provision the node "
                    "(spark_container_runtime registers it)")
        module.exit_json(changed=False, ran=False, why=why, output=proc.stdout, parsed=parsed)
    if proc.returncode != 0:
        module.exit_json(changed=False, ran=False, why=f"the NCCL run exited {proc.returncode}: "
                         f"{(proc.stderr or proc.stdout).strip()[-600:]}", output=proc.stdout, parsed=parsed)
    if p["rank"] == 0 and "backend gloo" in proc.stdout:
        module.exit_json(changed=False, ran=False, why="the container sees no GPU, so NCCL did not run (the probe "
                         "gathered through gloo); check the nvidia runtime (sparkfleet verify)", output=proc.stdout,
                         parsed=parsed)
    module.exit_json(changed=False, ran=True, output=proc.stdout, parsed=parsed)


if __name__ == "__main__":
    main()

# Copyright: sparkfleet contributors
# Apache License 2.0
"""NCCL on a cluster: the probe run in the locked image (its source), the environment a run needs from the
devices found, and a size the unified memory can hold. Pure Python."""

from __future__ import annotations

import inspect

from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _program_nccl_probe

# The program itself is _program_nccl_probe.py; this is its source, as python3 in the locked image reads it.
NCCL_PROBE = inspect.getsource(_program_nccl_probe)


def nccl_environment(plan: dict, devices: list[dict]) -> dict:
    """NCCL's environment for this node: NCCL_IB_HCA names the RDMA device of every rail (both halves of the
    port: naming one is the ~3 GB/s of dgx-spark-playbooks #102), the socket interface is the first rail,
    subnet-aware routing as NVIDIA's cluster script sets it."""
    by_netdev = {d["netdev"]: d["hca"] for d in devices}
    hcas = [rail.get("hca") or by_netdev.get(rail["interface"]) for rail in plan["rails"]]
    env = {"NCCL_SOCKET_IFNAME": plan["rails"][0]["interface"], "NCCL_IB_SUBNET_AWARE_ROUTING": "1"}
    if all(hcas):
        env["NCCL_IB_HCA"] = ",".join(hcas)
    return env


GIB = 1024 ** 3
# No cap goes past this: the 16 GB message NVIDIA's NCCL playbook suggests froze a node (unified memory
# exhausted), and 4 GiB already keeps a 200G link busy for a fifth of a second per iteration.
NCCL_CEILING_BYTES = 4 * GIB


def nccl_bytes(mem_available_kb: int | None, ranks: int, cap_bytes: int, headroom: float) -> int:
    """The all_gather's output size: at most cap_bytes (and never past NCCL_CEILING_BYTES), its buffers (output
    plus this rank's input) within `headroom` of the memory available now, rounded down to a power of two; 0
    when not even 64 MiB fits."""
    if not mem_available_kb:
        return 0
    budget = int(mem_available_kb * 1024 * headroom)
    size = min(cap_bytes, NCCL_CEILING_BYTES, budget * ranks // (ranks + 1))
    if size < 64 * 1024 ** 2:
        return 0
    return 1 << (size.bit_length() - 1)

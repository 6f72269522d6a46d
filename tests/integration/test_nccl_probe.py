"""sparkfleet's NCCL probe, run for real across two ranks by a real torch: the CPU build this machine's wheel
store has (torch 2.13.0+cpu, Python 3.11), so the ranks gather through gloo, as the probe does in a container that
sees no GPU. What runs is what spark_cluster_nccl sends into the locked image (module_utils/cluster.NCCL_PROBE);
rank 0's table is read back by the parser that reads nccl-tests' logs. NCCL itself needs the GPU: the device
check runs it there."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

import pytest
import store
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _nccl as cluster_nccl
from ansible_collections.sparkfleet.spark.plugins.module_utils.cluster import _tools as cluster_tools

from conftest import python_of

pytestmark = pytest.mark.network

WHEEL_STORE = Path("/opt/wheels")


@pytest.fixture(scope="module")
def torch_python() -> str:
    wheels = sorted(WHEEL_STORE.glob("torch-*+cpu-cp311-cp311-*x86_64.whl"))
    interpreter = python_of("3.11")
    if not wheels or interpreter is None:
        pytest.skip(f"needs the CPU torch wheel for Python 3.11 in {WHEEL_STORE} and a python3.11")
    return torch_cpu_venv(interpreter, wheels[-1])


def torch_cpu_venv(interpreter: str, wheel: Path) -> str:
    """The CPU torch wheel in a venv of `interpreter`'s, made once in the test store (testbed/store.py)."""
    want = store.stamp(wheel.name, store.interpreter(interpreter), code=torch_cpu_venv)
    with store.locked("tests/torch-cpu-py311") as venv:
        if not store.current(venv, want):
            subprocess.run([interpreter, "-m", "venv", "--clear", str(venv)], check=True, capture_output=True)
            # torch's own requirements (filelock, sympy, networkx, jinja2, fsspec, ...) come from PyPI.
            proc = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--isolated",
                                   str(wheel)], capture_output=True, text=True, check=False)
            assert proc.returncode == 0, f"pip could not install {wheel.name}: {proc.stderr.strip()[-400:]}"
            store.done(venv, want)
    return str(venv / "bin" / "python")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_ranks_gather_every_value_and_rank_0_prints_nccl_tests_table(torch_python):
    port, nbytes = free_port(), 8 * 1024 * 1024
    ranks = [subprocess.Popen([torch_python, "-", str(rank), "2", "127.0.0.1", str(port), str(nbytes), "3", "1",
                               "120"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for rank in (0, 1)]
    for rank in ranks:  # both get the program before either is waited for: rank 0 waits for rank 1 to join
        rank.stdin.write(cluster_nccl.NCCL_PROBE)
        rank.stdin.close()
    outputs = [(rank.stdout.read(), rank.stderr.read()) for rank in ranks]
    for rank in ranks:
        rank.wait(timeout=300)
    assert [rank.returncode for rank in ranks] == [0, 0], [err[-2000:] for _out, err in outputs]
    table, quiet = outputs[0][0], outputs[1][0]
    assert quiet == "", "only rank 0 prints"
    assert "backend gloo (no GPU in the container: not NCCL)" in table, "it says it was not NCCL"
    parsed = cluster_tools.parse_nccl_tests(table)
    (row,) = parsed["rows"]
    assert (row["size"], row["count"], row["type"]) == (nbytes, nbytes // 4, "float")
    assert (row["wrong"], row["in_place_wrong"], parsed["out_of_bounds"]) == (0, 0, 0), "every value arrived"
    assert row["busbw"] > 0 and row["in_place_busbw"] > 0
    assert row["busbw"] == pytest.approx(row["algbw"] / 2, abs=0.011), "busbw = algbw * (ranks - 1) / ranks"
    assert [r["rank"] for r in parsed["ranks"]] == [0, 1] and parsed["avg_busbw"] > 0


def test_rank_0s_store_listens_on_the_masters_address_alone(torch_python):
    """Issue 34, suspected: NCCL's rendezvous listening on every interface - proved: torch's store server binds
    every interface whatever MASTER_ADDR says (`ss` showed *:PORT), so the management network reached it during a
    cluster verify. Rank 0 binds the socket to MASTER_ADDR (the rail's address) itself now: while it waits for
    rank 1, the port is open on that address alone."""
    port = free_port()
    rank0 = subprocess.Popen([torch_python, "-", "0", "2", "127.0.0.1", str(port), "1048576", "1", "0", "60"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    rank0.stdin.write(cluster_nccl.NCCL_PROBE)
    rank0.stdin.close()
    try:
        listening = []
        for _ in range(300):  # until torch is imported and the store is up
            listening = [line.split()[3] for line in subprocess.run(
                ["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True, check=True).stdout.splitlines()]
            if listening or rank0.poll() is not None:
                break
            time.sleep(0.1)
        assert listening == [f"127.0.0.1:{port}"], (listening, rank0.poll() and rank0.stderr.read()[-2000:])
        rank1 = subprocess.run([torch_python, "-", "1", "2", "127.0.0.1", str(port), "1048576", "1", "0", "60"],
                               input=cluster_nccl.NCCL_PROBE, capture_output=True, text=True, timeout=300, check=False)
        assert rank1.returncode == 0, rank1.stderr[-2000:]
        assert rank0.wait(timeout=120) == 0 and "Avg bus bandwidth" in rank0.stdout.read()
    finally:
        rank0.kill()

"""spark_cluster_measure with the real iperf3 on this machine's loopback: a server an earlier run left waiting on the
port (its client never came, as on a rail that did not answer) is ended before this run's own server starts, so that
this run's client is served by this run's server, not by one whose timeout ends it midway.

CI failed once on exactly that: a `cluster verify` a minute after one that had not measured a rail; the old server
took the new client and its `timeout` ended the test ("the server has terminated")."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import run_module

IPERF3 = shutil.which("iperf3")
pytestmark = pytest.mark.skipif(IPERF3 is None, reason="iperf3 is not installed (testbed/tools.sh installs it)")

BASE = 5821  # ports(BASE, client 0, rail 0) == BASE
RAIL = {"interface": "lo", "address": "127.0.0.1"}


def listening(port: int) -> bool:
    """A socket listens on the port (/proc/net/tcp; a connect would be the one client an `iperf3 -s -1` serves)."""
    with open("/proc/net/tcp", encoding="ascii") as table:
        return any(fields[1].endswith(f":{port:04X}") and fields[3] == "0A"  # 0A: LISTEN
                   for fields in (line.split() for line in table.readlines()[1:]))


def wait(predicate, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def start_time(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
        return int(handle.read().rsplit(")", 1)[1].split()[19])


def leftover_server(record: Path) -> subprocess.Popen:
    """The earlier run's server, as the module starts and records it: under timeout, one client, bound to the
    rail's address; its run ended before its client came (the record stays, as a killed run leaves it)."""
    argv = ["/usr/bin/timeout", "60", IPERF3, "-s", "-1", "-p", str(BASE), "-B", "127.0.0.1"]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    record.write_text(json.dumps([{"pid": proc.pid, "port": BASE, "start": start_time(proc.pid),
                                   "uid": os.geteuid(), "argv": argv}]))
    return proc


def serve(record: Path, served: dict) -> threading.Thread:
    thread = threading.Thread(target=lambda: served.update(run_module("spark_cluster_measure", {
        "action": "serve", "index": 1, "rails": [RAIL], "peers": [{"name": "client", "index": 0}],
        "port": BASE, "tcp_seconds": 1, "rdma_seconds": 0, "timeout": 30, "record": str(record)})))
    thread.start()
    return thread


def test_a_server_left_by_an_earlier_run_is_ended_and_this_runs_server_serves_the_client(tmp_path):
    record = tmp_path / "cluster-servers.json"
    leftover = leftover_server(record)
    # Someone else's iperf3 server on another port is none of the module's business.
    other = subprocess.Popen([IPERF3, "-s", "-1", "-p", str(BASE + 200), "-B", "127.0.0.1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait(lambda: listening(BASE)), "the leftover server listens"
        served: dict = {}
        server = serve(record, served)
        assert leftover.wait(timeout=30) != 0, "the earlier run's server was ended"
        assert wait(lambda: listening(BASE)), "this run's server listens in its place"
        ours = json.loads(record.read_text())
        assert [entry["port"] for entry in ours] == [BASE] and ours[0]["pid"] != leftover.pid, \
            "this run's server is recorded while it waits"
        measured = run_module("spark_cluster_measure", {
            "action": "measure", "index": 0, "rails": [RAIL], "mtu": 1500, "port": BASE, "tcp_seconds": 1,
            "rdma_seconds": 0,
            "peers": [{"name": "server", "index": 1, "addresses": ["127.0.0.1"]}]})
        server.join(timeout=60)
        assert not measured["failed"], measured.get("msg")
        (rail,) = measured["measures"]
        assert rail["reach"]["received"] == 3, rail
        assert rail["tcp"].get("received_gbps", 0) > 0, rail["tcp"]
        (iperf3,) = served["servers"]
        assert iperf3["served"] is True and iperf3["error"] is None, iperf3
        assert iperf3["ended_leftover"] == [leftover.pid], iperf3
        assert other.poll() is None, "an iperf3 server on another port is left alone"
        assert not record.exists(), "a run that ended forgets its servers"
    finally:
        for proc in (leftover, other):
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("impostor", ["another user's iperf3 on another address", "a program calling itself iperf3",
                                      "the recorded pid reused by another process"])
def test_only_the_process_an_earlier_run_recorded_is_ended(tmp_path, impostor):
    """Issue 34, finding 4: the killer matched argv[0]'s basename and the flags, ignoring the bind address and the
    owner: an unprivileged user's iperf3 on another address, and `exec -a iperf3 ... -s -1 -p PORT`, were
    killed. Here each waits on the port's command line and must outlive the module's run."""
    record = tmp_path / "cluster-servers.json"
    argv = ["timeout", "60", IPERF3, "-s", "-1", "-p", str(BASE), "-B", "127.0.0.2"]
    if impostor.startswith("another user's"):
        proc = subprocess.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *argv],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    elif impostor.startswith("a program"):
        # A program that takes any arguments and waits: iperf3's own would refuse to start, sleep too.
        (tmp_path / "waits.c").write_text("#include <unistd.h>\nint main(void) { sleep(60); return 0; }\n")
        subprocess.run(["cc", "-o", str(tmp_path / "waits"), str(tmp_path / "waits.c")], check=True)
        proc = subprocess.Popen(["bash", "-c", f"exec -a iperf3 {tmp_path / 'waits'} -s -1 -p {BASE} -B 127.0.0.1"],
                                start_new_session=True)
    else:
        proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
        # What an earlier run recorded of a server long gone, whose pid the kernel has since given to this one.
        record.write_text(json.dumps([{"pid": proc.pid, "port": BASE, "start": start_time(proc.pid) - 1,
                                       "uid": os.geteuid(), "argv": ["sleep", "60"]}]))
    try:
        time.sleep(0.3)
        served: dict = {}
        serve(record, served)
        client = run_module("spark_cluster_measure", {
            "action": "measure", "index": 0, "rails": [RAIL], "mtu": 1500, "port": BASE, "tcp_seconds": 1,
            "rdma_seconds": 0, "peers": [{"name": "server", "index": 1, "addresses": ["127.0.0.1"]}]})
        assert wait(lambda: bool(served), 60)
        assert not client["failed"], client.get("msg")
        assert proc.poll() is None, f"{impostor} was ended"
        assert served["servers"][0]["ended_leftover"] == []
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # the impostor and what it started (timeout's iperf3)
        proc.wait()

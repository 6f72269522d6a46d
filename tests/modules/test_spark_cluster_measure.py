"""spark_cluster_measure with the real iperf3 on this machine's loopback: a server an earlier run left waiting on the
port (its client never came, as on a rail that did not answer) is ended before this run's own server starts, so that
this run's client is served by this run's server, not by one whose timeout ends it midway.

CI failed once on exactly that: a `cluster verify` a minute after one that had not measured a rail; the old server
took the new client and its `timeout` ended the test ("the server has terminated")."""

from __future__ import annotations

import shutil
import subprocess
import threading
import time

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


def test_a_server_left_by_an_earlier_run_is_ended_and_this_runs_server_serves_the_client():
    # The earlier run's server, as the module starts it: under timeout, one client, bound to the rail's address.
    leftover = subprocess.Popen(["timeout", "60", IPERF3, "-s", "-1", "-p", str(BASE), "-B", "127.0.0.1"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    # Someone else's iperf3 server on another port is none of the module's business.
    other = subprocess.Popen([IPERF3, "-s", "-1", "-p", str(BASE + 200), "-B", "127.0.0.1"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait(lambda: listening(BASE)), "the leftover server listens"
        served: dict = {}
        server = threading.Thread(target=lambda: served.update(run_module("spark_cluster_measure", {
            "action": "serve", "index": 1, "rails": [RAIL], "peers": [{"name": "client", "index": 0}],
            "port": BASE, "tcp_seconds": 1, "rdma_seconds": 0, "timeout": 30})))
        server.start()
        assert leftover.wait(timeout=30) != 0, "the earlier run's server was ended"
        assert wait(lambda: listening(BASE)), "this run's server listens in its place"
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
        assert len(iperf3["ended_leftover"]) == 1, iperf3  # the iperf3 under the leftover's timeout
        assert other.poll() is None, "an iperf3 server on another port is left alone"
    finally:
        for proc in (leftover, other):
            proc.kill()
            proc.wait()

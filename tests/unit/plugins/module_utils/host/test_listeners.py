"""module_utils/host/_listeners.py: who listens on a loopback port, from Linux's socket tables (issue 46, suspicion
5a: a loopback index is trusted without the hash lock, and any user can bind a free loopback port)."""

from __future__ import annotations

import os
import socket
import subprocess
import time

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._listeners import listeners

# As /proc/net/tcp and tcp6 print them: 127.0.0.1:3141 listening (uid 4242), 0.0.0.0:8080 (uid 0), an
# established connection on 3141 (not a listener), [::1]:5000 listening (uid 1000).
TCP = """  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:0C45 00000000:0000 0A 00000000:00000000 00:00000000 00000000  4242        0 1 1 0000000000000000
   1: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000
   2: 0100007F:0C45 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 3 1 0000000000000000
"""
TCP6 = "\n".join([
    "  sl  local_address                         remote_address                        st tx_queue rx_queue "
    "tr tm->when retrnsmt   uid  timeout inode",
    "   0: 00000000000000000000000001000000:1388 00000000000000000000000000000000:0000 0A 00000000:00000000 "
    "00:00000000 00000000  1000        0 4 1 0000000000000000", ""])


def test_the_listener_of_a_loopback_port_is_read_with_its_uid():
    tables = {"/proc/net/tcp": TCP, "/proc/net/tcp6": TCP6}
    assert listeners(3141, tables) == [4242]
    assert listeners(8080, tables) == [0], "every address includes the loopback"
    assert listeners(5000, tables) == [1000]
    assert listeners(9, tables) == []


@pytest.mark.skipif(os.getuid() != 0, reason="binds a port as another user")
def test_a_port_another_user_bound_on_this_machine_names_that_user():
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    server = subprocess.Popen(["setpriv", "--reuid=4242", "--regid=4242", "--clear-groups", "/usr/bin/python3", "-c",
                               f"import socket,time; s=socket.socket(); s.bind(('127.0.0.1', {port})); s.listen();"
                               " time.sleep(30)"])
    try:
        for _attempt in range(100):
            if listeners(port):
                break
            time.sleep(0.05)
        assert listeners(port) == [4242]
    finally:
        server.kill()

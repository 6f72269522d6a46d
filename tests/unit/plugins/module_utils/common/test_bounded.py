"""A program run with a hard deadline: it and what it started are killed, what it wrote is kept (issue 47)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from ansible_collections.sparkfleet.spark.plugins.module_utils.common._bounded import run_bounded

# A parent that starts a child, both with the polite signals blocked (as a call stuck in C), writes, and waits.
STUCK = """
import os, signal, subprocess, sys, time
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGTERM, signal.SIGINT})
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print("child", child.pid, flush=True)
sys.stderr.write("waiting on the driver\\n"); sys.stderr.flush()
time.sleep(600)
"""


def test_a_program_stuck_past_its_deadline_is_killed_with_what_it_started():
    started = time.monotonic()
    rc, out, err, seconds = run_bounded([sys.executable, "-c", STUCK], b"", dict(os.environ), 3)
    assert rc is None and 2.9 <= seconds < 10 and time.monotonic() - started < 10
    assert err == "waiting on the driver\n", "what it wrote before the kill is kept"
    child = int(out.split()[1])
    time.sleep(0.2)
    state = subprocess.run(["ps", "-o", "stat=", "-p", str(child)], capture_output=True, text=True, check=False)
    # gone, or a zombie: ps's first letter is the state (a run under `nice` adds N: "ZN")
    assert state.stdout.strip()[:1] in ("", "Z"), f"the program's own child was killed too ({state.stdout!r})"


def test_a_program_that_finishes_gives_its_status_and_output():
    rc, out, err, seconds = run_bounded([sys.executable, "-c", "import sys; print(sys.stdin.read()); exit(3)"],
                                        b"hello", dict(os.environ), 30)
    assert (rc, out, err) == (3, "hello\n", "") and seconds < 30


def test_a_program_that_cannot_start_is_127_with_why():
    rc, _out, err, _seconds = run_bounded(["/nonexistent/python"], b"", dict(os.environ), 5)
    assert rc == 127 and "No such file" in err

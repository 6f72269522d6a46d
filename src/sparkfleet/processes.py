"""Ending every process of a run: ansible-playbook, its workers, and the modules they started.

ansible-runner starts ansible-playbook in a session of its own (a pty) and,
when cancelled, kills only that process group. A module that started a
session of its own (the local connection does) is left running, reparented
to init, after the lock is freed. So before that: the run's whole tree, and
every process in the sessions its members lead, get SIGINT (as Ctrl-C at a
terminal would reach them, so Python's processes run their cleanup: Ansible's
module wrapper removes its payload folder from the temporary directory,
ansible-playbook its ansible-local-* folders), then SIGTERM, then SIGKILL,
each after a grace period. Linux's /proc is read; elsewhere this ends nothing.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def _table() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, session id) of every live process (a zombie has ended: its parent reaps it)."""
    table = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z":
            table[int(entry.name)] = (int(fields[1]), int(fields[3]))
    return table


def run_processes(root: int, sessions: set[int] | None = None) -> tuple[set[int], set[int]]:
    """(the processes below root and in the given sessions, the sessions they lead) - never root's own session."""
    table = _table()
    own_session = os.getsid(0)
    found: set[int] = set()
    frontier = [root]
    while frontier:
        parent = frontier.pop()
        children = [pid for pid, (ppid, _) in table.items() if ppid == parent and pid not in found]
        found.update(children)
        frontier += children
    led = {sid for pid, (_, sid) in table.items() if pid in found and sid == pid} | (sessions or set())
    led.discard(own_session)
    found |= {pid for pid, (_, sid) in table.items() if sid in led}
    found.discard(os.getpid())
    return found, led


def end_run(root: int, grace: float = 5.0, interrupt: float = 2.0) -> set[int]:
    """SIGINT every process of the run below root, SIGTERM what is left after `interrupt` s, SIGKILL what is left
    after `grace` s more; the pids ended. (SIGTERM alone ended the modules before their cleanup: each cancel left
    their payload folders in /tmp and ansible-local-* in ~/.ansible/tmp. A process that ignores SIGINT, as one
    started in a script's background inherits it, meets SIGTERM after `interrupt` s.)"""
    pids, sessions = run_processes(root)
    ended = set(pids)
    for sig, wait in ((signal.SIGINT, interrupt), (signal.SIGTERM, grace), (signal.SIGKILL, 2.0)):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while pids and time.monotonic() < deadline:
            time.sleep(0.1)
            pids, _ = run_processes(root, sessions)
            ended |= pids
        if not pids:
            break
    return ended


def run_ended_with_us(argv: list[str], timeout: float, env: dict[str, str]) -> tuple[int, str]:
    """(exit status, stdout) of a helper command (ansible-inventory) run in a process group of its own, which is
    killed whole when this one is cancelled or the timeout passes: an inventory script it started does not outlive
    sparkfleet. Raises subprocess.TimeoutExpired and OSError as subprocess.run does."""
    import subprocess

    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc.returncode, out

"""A sparkfleet command at a real pseudo-terminal (pexpect), as a person types it, and the screen read back; shared
by the terminal suite and the fleet's (tests/terminal is on pytest's pythonpath)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path

import pexpect
import pytest

from conftest import BIN

SPARKFLEET = str(BIN / "sparkfleet")
ESC = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def user_env(**extra: str) -> dict[str, str]:
    """A person's environment: no ANSIBLE_CONFIG of the test run's (make exports the repository's), and no COLUMNS
    or LINES of the shell the tests run from (an exported COLUMNS=80, as CI's run had, sized a 100-column pty's
    table at 80): a person's terminal is sized by the pty, unless a test says otherwise."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "PY_COLORS", "NO_COLOR")) and k not in ("COLUMNS", "LINES")}
    env.update({"PATH": f"{BIN}{os.pathsep}{env.get('PATH', '')}", "TERM": "xterm-256color"}, **extra)
    return env


class Screen:
    """A command at a pty of `columns` columns, read until it ends (its whole process group ended after a
    deadline)."""

    def __init__(self, args: list[str], cwd: Path, columns: int = 100, timeout: float = 240,
                 program: str = SPARKFLEET, **env: str):
        self.child = pexpect.spawn(program, args, cwd=str(cwd), env=user_env(**env), encoding="utf-8",
                                   codec_errors="replace", dimensions=(50, columns), timeout=timeout)

    def wait(self) -> Screen:
        try:
            self.child.expect(pexpect.EOF)
        finally:
            if self.child.isalive():
                os.killpg(self.child.pid, signal.SIGKILL)
            self.child.close()
        self.raw = self.child.before
        self.text = ESC.sub("", self.raw).replace("\r", "")
        self.rc = self.child.exitstatus
        return self

    def lines(self) -> list[str]:
        return self.text.splitlines()


def piped(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([SPARKFLEET, *args], cwd=cwd, env=user_env(**env), capture_output=True, text=True,
                          timeout=240, check=False)


class SilentRegistry:
    """A TCP listener on 127.0.0.1 that accepts and never answers: a registry that hangs."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"

    def close(self):
        self.sock.close()


def processes_marked(mark: str) -> list[str]:
    """The processes whose environment carries the run's mark (every process the run started inherits it)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if mark.encode() in (entry / "environ").read_bytes():
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{entry.name}: {command}")
        except OSError:
            continue
    return found


def started(mark: str, deadline: float = 60) -> None:
    """Wait until the run's module (the resolver, waiting on the silent registry) is running: a process of the
    run that is neither sparkfleet, nor ansible-playbook (its workers share its command line), nor the
    ansible-inventory sparkfleet reads the inventory with before the playbook starts."""
    end = time.monotonic() + deadline
    while time.monotonic() < end:
        if any(all(name not in p for name in ("sparkfleet", "ansible-playbook", "ansible-inventory"))
               for p in processes_marked(mark)):
            time.sleep(1)
            return
        time.sleep(0.3)
    pytest.fail(f"the run did not start: {processes_marked(mark)}")

# Copyright: sparkfleet contributors
# Apache License 2.0
"""A program run with a hard deadline, and everything it started with it.

subprocess.run's timeout kills the program it started, not what that program started: a GPU probe's framework
processes, a launcher's docker CLI, a trainer's workers would live on, holding the GPU and the pipes. run_bounded
starts the program in a session of its own and, at the deadline, kills the whole process group (SIGKILL: a call
stuck in C cannot be asked), then reads what it had written.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time


def run_bounded(argv: list[str], stdin: bytes, env: dict[str, str], timeout: float
                ) -> tuple[int | None, str, str, float]:
    """(rc, stdout, stderr, seconds); rc None when the deadline killed it, 127 when it could not start."""
    started = time.monotonic()
    try:
        # subprocess: run_command has no timeout, and a wedged driver or image hangs the program.
        child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                 stderr=subprocess.PIPE, env=env, start_new_session=True)
    except OSError as exc:
        return 127, "", str(exc), 0.0
    try:
        out, err = child.communicate(stdin, timeout=timeout)
        rc: int | None = child.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        try:
            out, err = child.communicate(timeout=10)
        except subprocess.TimeoutExpired:  # a process outside the group still holds the pipes
            child.kill()
            out, err = b"", b""
        rc = None
    seconds = round(time.monotonic() - started, 1)
    return rc, out.decode(errors="replace"), err.decode(errors="replace"), seconds

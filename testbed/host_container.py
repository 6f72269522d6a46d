"""A test bed host started as testbed/lab.sh starts its hosts (systemd as PID 1, the host's network, the
capabilities lab.sh lists, a Docker volume), for the tests that need another image than the lab's
(sparkfleet/host-engine) or mounts of their own. The capabilities are read from lab.sh: one list."""

from __future__ import annotations

import contextlib
import re
import subprocess
import time
import uuid
from pathlib import Path

LAB_SH = Path(__file__).with_name("lab.sh")


def capabilities() -> list[str]:
    """lab.sh's CAPS=(...): no --privileged on our machines (it needs CAP_SYS_RESOURCE), an explicit list."""
    found = re.search(r"^CAPS=\(([^)]*)\)", LAB_SH.read_text(), re.M)
    if not found:
        raise RuntimeError(f"{LAB_SH} has no CAPS=(...) line: the capabilities a lab host runs with")
    return found.group(1).split()


@contextlib.contextmanager
def started(image: str, prefix: str, volumes: tuple[str, ...] = (), mounts: tuple[str, ...] = (),
            ready: tuple[str, ...] = ("systemctl", "is-system-running"), timeout: float = 120):
    """A host of `image` named PREFIX-<random>, each of `volumes` (paths in the host) a Docker volume of its own,
    each of `mounts` a `-v` as given; yielded once `ready` (run in it) succeeds (systemd's running or degraded),
    then removed with its volumes."""
    subprocess.run(["docker", "image", "inspect", image], capture_output=True, check=True)
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    owned = [f"{name}-{Path(path).name}" for path in volumes]
    args = [arg for cap in capabilities() for arg in ("--cap-add", cap)]
    args += [arg for volume, path in zip(owned, volumes, strict=True) for arg in ("-v", f"{volume}:{path}")]
    args += [arg for mount in mounts for arg in ("-v", mount)]
    subprocess.run(["docker", "run", "-d", "--name", name, "--label", "io.sparkfleet.lab=1", "--network", "host",
                    *args, "--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "--tmpfs", "/run",
                    "--tmpfs", "/run/lock", "--tmpfs", "/tmp", image], capture_output=True, check=True)
    try:
        deadline = time.monotonic() + timeout
        while True:
            answer = subprocess.run(["docker", "exec", name, *ready], capture_output=True, text=True, check=False)
            if answer.returncode == 0 or answer.stdout.strip() == "degraded":
                break
            if time.monotonic() > deadline:
                logs = subprocess.run(["docker", "logs", name], capture_output=True, text=True, check=False)
                raise AssertionError(f"{name} not ready in {timeout} s: {' '.join(ready)} said "
                                     f"{answer.stdout.strip()!r}\n{logs.stdout[-2000:]}")
            time.sleep(0.5)
        yield name
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
        subprocess.run(["docker", "volume", "rm", "-f", *owned], capture_output=True, check=False)

"""spark_package_lock: real fcntl locks, taken the way apt and dpkg take them (F_SETLK on the lock files).

Natively on temporary lock files, and on the real /var/lib/dpkg/lock-frontend of a native x86_64 Debian host
container, where real apt-get names the same holder as the module.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from conftest import run_module

# Holds an exclusive fcntl lock on argv[1] (what apt does), prints "held", releases after argv[2] seconds.
HOLDER = ("import fcntl, sys, time\n"
          "f = open(sys.argv[1], 'w'); fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True)\n"
          "time.sleep(float(sys.argv[2]))\n")


def hold(path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_lock_runs_out_the_wait_and_names_its_holder(tmp_path):
    lock = tmp_path / "lock-frontend"
    holder = hold(lock, 30)
    try:
        started = time.monotonic()
        result = run_module("spark_package_lock", {"paths": [str(lock), str(tmp_path / "missing")], "timeout": 2,
                                                   "poll": 0.5})
        assert 2 <= time.monotonic() - started < 20
        assert result["failed"]
        assert result["msg"].startswith(f"the package manager is busy: {lock} is held by pid {holder.pid} (python")
        assert "Nothing was changed" in result["msg"] and "spark_preflight_package_lock_timeout" in result["msg"]
    finally:
        holder.kill()


def test_a_lock_released_while_waiting_is_waited_for_and_warned(tmp_path):
    lock = tmp_path / "lock"
    # Held for 6 s from now: ansible's own start (seconds on a loaded 2-core machine) eats into that, so
    # what is asserted is that the module found it held and waited, not for how long.
    holder = hold(lock, 6)
    result = run_module("spark_package_lock", {"paths": [str(lock)], "timeout": 30, "poll": 0.5})
    holder.wait()
    assert not result.get("failed"), result
    assert 0 < result["waited"] < 30
    assert result["holders"][0]["pid"] == holder.pid
    warning = " ".join(result["_stderr"].split())
    assert f"waited {result['waited']} s for the package manager: {lock} is held by pid {holder.pid}" in warning
    assert run_module("spark_package_lock", {"paths": [str(lock)], "timeout": 0})["waited"] == 0


@pytest.mark.testbed
def test_on_a_real_debian_the_module_names_the_holder_apt_names(tmp_path):
    name = "sparkfleet-test-dpkg-lock"
    subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)
    subprocess.run(["docker", "run", "-d", "--name", name, "--init", "sparkfleet/host-amd64:latest"], check=True,
                   capture_output=True)
    try:
        subprocess.run(["docker", "exec", "-d", name, "sh", "-c", 'echo $$ > /tmp/holder.pid; exec python3 -c "$0" '
                        '/var/lib/dpkg/lock-frontend 60', HOLDER], check=True)
        pid = []
        for _ in range(50):
            pid = subprocess.run(["docker", "exec", name, "cat", "/tmp/holder.pid"], capture_output=True,
                                 text=True).stdout.split()
            if pid:
                break
            time.sleep(0.2)
        time.sleep(1)  # the lock is taken right after the exec
        apt = subprocess.run(["docker", "exec", name, "apt-get", "-o", "DPkg::Lock::Timeout=0", "install", "-y", "jq"],
                             capture_output=True, text=True)
        assert apt.returncode != 0
        assert f"It is held by process {pid[0]} (python3)" in apt.stderr, apt.stderr
        inventory = tmp_path / "hosts.yml"
        inventory.write_text(f"all:\n  hosts:\n    {name}:\n      ansible_connection: community.docker.docker\n"
                             "      ansible_python_interpreter: /usr/bin/python3\n")
        from conftest import BIN, REPO, ansible_env
        proc = subprocess.run([str(BIN / "ansible"), name, "-i", str(inventory),
                               "-m", "sparkfleet.spark.spark_package_lock",
                               "-a", "timeout=1 poll=0.5"], cwd=REPO, env=ansible_env(), capture_output=True,
                              text=True)
        assert proc.returncode != 0
        assert f"/var/lib/dpkg/lock-frontend is held by pid {pid[0]} (python3)" in proc.stdout, proc.stdout
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, check=False)

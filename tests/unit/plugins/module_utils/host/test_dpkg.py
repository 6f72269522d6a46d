"""module_utils/host/_dpkg.py against this machine's real dpkg: the status lines read from its database are what
dpkg-query prints for the same packages, and the lock check sees a lock held the way apt holds it."""

from __future__ import annotations

import fcntl
import os
import subprocess

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _dpkg

FORMAT = "${Package} ${Version} ${db:Status-Abbrev}\n"


@pytest.mark.skipif(not os.path.exists(_dpkg.STATUS_FILE), reason="no dpkg database on this machine")
def test_the_status_lines_are_what_dpkg_query_prints():
    installed = subprocess.run(["dpkg-query", "--show", "--showformat=${Package}\n"], capture_output=True,
                               text=True, check=True).stdout.split()
    wanted = [*installed[:40], "bash", "gpg", "ca-certificates", "no-such-package-sparkfleet"]
    real = subprocess.run(["dpkg-query", "--show", f"--showformat={FORMAT}", *wanted], capture_output=True,
                          text=True, check=False).stdout.splitlines()
    ours = _dpkg.read_status(wanted)
    assert ours["asked"] == wanted
    assert sorted(ours["lines"]) == sorted(real)
    assert not any(line.startswith("no-such-package-sparkfleet ") for line in ours["lines"])


@pytest.mark.parametrize(("status", "abbrev"), [
    ("install ok installed", "ii "), ("hold ok installed", "hi "), ("install ok unpacked", "iU "),
    ("install ok half-configured", "iF "), ("install reinstreq half-installed", "iHR"),
    ("deinstall ok config-files", "rc ")])
def test_each_state_reads_as_dpkg_abbreviates_it(status, abbrev):
    text = f"Package: nvidia-container-toolkit\nStatus: {status}\nVersion: 1.18.0-1\nDescription: x\n continued\n"
    assert _dpkg.status_lines(text, ["nvidia-container-toolkit"]) == [f"nvidia-container-toolkit 1.18.0-1 {abbrev}"]


def test_no_database_is_no_lines_not_an_empty_install(tmp_path):
    assert _dpkg.read_status(["gpg"], str(tmp_path / "status")) == {"asked": ["gpg"], "lines": None}


def test_a_lock_held_as_apt_holds_it_is_seen_with_its_holder_and_left_held(tmp_path):
    lock = tmp_path / "lock-frontend"
    lock.write_text("")
    holder = subprocess.Popen(["python3", "-c", f"import fcntl,time; f=open({str(lock)!r},'w'); "
                               "fcntl.lockf(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(30)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        (seen,) = _dpkg.lock_holders([str(lock), str(tmp_path / "missing")])
        assert (seen["pid"], seen["command"]) == (holder.pid, "python3")
        with open(lock, "w") as handle, pytest.raises(OSError):
            fcntl.lockf(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    finally:
        holder.kill()
        holder.wait()
    assert _dpkg.lock_holders([str(lock)]) == []


def test_status_lines_read_back_give_each_packages_version_and_state():
    text = ("Package: nvidia-container-toolkit\nStatus: hold ok installed\nVersion: 1.18.0-1\n\n"
            "Package: gpg\nStatus: install ok unpacked\nVersion: 2.2.40-1.1\n")
    lines = _dpkg.status_lines(text, ["nvidia-container-toolkit", "gpg"])
    assert _dpkg.parse_lines(lines) == {"nvidia-container-toolkit": ("1.18.0-1", "hi"), "gpg": ("2.2.40-1.1", "iU")}
    assert _dpkg.parse_lines(["garbage", "half line"]) == {}

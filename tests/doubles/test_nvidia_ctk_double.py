"""The nvidia-ctk stand-in behaves as NVIDIA documents the real one.

Tests of the role are only as good as this double: if it were kinder than
the real tool (e.g. skipping the rewrite when nothing changes), the role's
"only run when needed" could not be observed.
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import DOUBLES

CTK = DOUBLES / "nvidia-container-toolkit" / "nvidia-ctk"


def ctk(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CTK), *args], capture_output=True, text=True, check=False)


def test_rewrites_the_file_on_every_run_in_nvidia_ctk_format(tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text('{"log-driver":"json-file"}')
    assert ctk("runtime", "configure", "--runtime=docker", f"--config={daemon}").returncode == 0
    first = daemon.read_text()
    assert first == json.dumps({"log-driver": "json-file",
                                "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}},
                               indent=4, sort_keys=True)
    assert not first.endswith("\n")
    mtime = daemon.stat().st_mtime_ns
    proc = ctk("runtime", "configure", "--runtime=docker", f"--config={daemon}")
    assert "Wrote updated config" in proc.stderr
    assert daemon.stat().st_mtime_ns >= mtime
    assert daemon.read_text() == first


def test_dry_run_prints_and_writes_nothing(tmp_path):
    daemon = tmp_path / "daemon.json"
    proc = ctk("runtime", "configure", "--runtime=docker", f"--config={daemon}", "--dry-run",
               "--set-as-default", "--cdi.enabled")
    assert json.loads(proc.stdout) == {
        "default-runtime": "nvidia", "features": {"cdi": True},
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}}}
    assert not daemon.exists()


def test_malformed_config_is_an_error(tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text("{nope")
    proc = ctk("runtime", "configure", "--runtime=docker", f"--config={daemon}")
    assert proc.returncode == 1
    assert "unable to load config" in proc.stderr
    assert daemon.read_text() == "{nope"

"""spark_doctor on this machine, by real Ansible: its real Docker engine, dpkg and files; the host's
state file, venv marker and preflight facts laid out as sparkfleet writes them (the GPU is the GB10
recording of the nvidia-smi double, at the hardware boundary)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess

import pytest
import yaml

from conftest import REPO, run_module

PACKAGES = yaml.safe_load((REPO / "roles" / "spark_container_runtime" / "vars" / "main.yml").read_text())[
    "__spark_container_runtime_packages"]
PREFLIGHT = {"host_class": "spark", "simulated": False, "arch": "aarch64",
             "os": {"pretty_name": "Ubuntu 24.04.3 LTS"}, "dgx": {"swbuild_version": "7.4.0"},
             "gpus": [{"name": "NVIDIA GB10", "compute_cap": "12.1", "driver_version": "580.95.05"}],
             "cuda_driver_version": "13.0"}
PRESENT = "sparkfleet/host-plain:latest"
MISSING = "127.0.0.1:5000/nvidia/pytorch@sha256:" + "0" * 64


@pytest.fixture
def host(tmp_path):
    venv = tmp_path / "venvs" / "unsloth-2026.7.2-0123456789ab"
    venv.mkdir(parents=True)
    (venv / "sparkfleet-venv.json").write_text(json.dumps({"matrix": "unsloth-2026.7.2",
                                                           "fingerprint": "0123456789abcdef"}))
    (tmp_path / "venv").symlink_to(venv)
    state = tmp_path / "state.json"
    state.write_text(json.dumps({"schema": 1, "written_at": "2026-12-01T03:00:00+00:00", "verification": {
        "verdict": "failed",
        "images": [{"name": "ngc", "ref": MISSING}, {"name": "plain", "ref": PRESENT}],
        "gpu": [{"kind": "image", "target": "/usr/local/bin/spark-ngc", "verdict": "failed", "line": None,
                 "hypothesis": "runtime/flags", "evidence": "nvidia-smi inside the container failed on spark-07",
                 "fix": "start the container with --runtime=nvidia --gpus all"}],
        "abi": [{"target": "/opt/sparkfleet/venv/bin/python", "verdict": "mismatch",
                 "findings": ["cupy-cuda12x 14.2.0: links libcublas.so.12 (expected 13)"]}]}}))
    return tmp_path


def doctor(host, **extra) -> dict:
    result = run_module("spark_doctor", {"preflight": PREFLIGHT, "state_file": str(host / "state.json"),
                                         "venv_link": str(host / "venv"), "toolkit_packages": PACKAGES,
                                         "hostnames": ["spark-07"], "label": "host-3", **extra})
    assert not result["failed"], result.get("msg")
    return result


@pytest.mark.testbed
def test_the_report_holds_what_someone_debugging_needs(host):
    result = doctor(host)
    report, text = result["report"], result["markdown"]
    assert "| class | spark |" in text and "| DGX OS | 7.4.0 |" in text
    assert "| GPU | NVIDIA GB10 (compute 12.1) |" in text
    assert "| driver | 580.95.05 |" in text and "| CUDA (driver) | 13.0 |" in text
    assert f"| kernel | {os.uname().release} |" in text
    assert report["docker"]["server_version"] and "runc" in report["docker"]["runtimes"]
    assert [p["name"] for p in report["toolkit"]] == PACKAGES
    assert f"| image ngc | {MISSING} MISSING |" in text
    assert f"| image plain | {PRESENT} present |" in text
    assert report["venv"]["fingerprint"] == "0123456789abcdef"
    # The time is the last change a provision or refresh recorded, said as such (issue 45, item 9: it read as
    # the last verify's)
    # (issue 58, item 6: after a provision that repaired the host and left its state as it was, the time read as
    # that provision's)
    assert ("Verification: **failed** (recorded 2026-12-01T03:00:00+00:00, when a provision or refresh last changed "
            "what the host runs or how it verified; a run that repaired the host and left those as they were "
            "rewrites nothing, and sparkfleet verify records nothing on the host: its report holds the latest)"
            ) in " ".join(text.split()), text
    assert ("- GPU image /usr/local/bin/spark-ngc: FAILED - runtime/flags: nvidia-smi inside the container "
            "failed on host-3. Fix: start the container with --runtime=nvidia --gpus all") in text
    assert "- cupy-cuda12x 14.2.0: links libcublas.so.12 (expected 13)" in text


def test_hostnames_are_replaced_unless_kept(host):
    names = [n for n in ("spark-07", os.uname().nodename, socket.getfqdn()) if n != "localhost"]
    result = doctor(host)
    redacted = json.dumps([result["report"], result["markdown"]])
    assert not [n for n in names if n and n in redacted]
    kept = doctor(host, keep_hostnames=True)
    assert "failed on spark-07" in kept["markdown"]
    assert kept["report"]["host"] == "spark-07"


def test_a_host_never_provisioned_still_gets_a_report(tmp_path):
    """Asked the old way too: the option platform (now preflight) and facts an older sparkfleet gathered (the
    host class under the key platform) still give the host's class, with a deprecation that names the new option."""
    older = {**{k: v for k, v in PREFLIGHT.items() if k != "host_class"}, "platform": "spark"}
    result = run_module("spark_doctor", {"platform": older, "state_file": str(tmp_path / "none.json"),
                                         "venv_link": str(tmp_path / "none")})
    assert result["report"]["host_class"] == "spark" and "| class | spark |" in result["markdown"]
    assert "[DEPRECATION WARNING]" in result["_stderr"] and "platform" in result["_stderr"], result["_stderr"]
    assert "Verification: **never run**" in result["markdown"]
    assert "| venv | none active |" in result["markdown"]
    # Nothing of sparkfleet's is unreadable; Docker's daemon is, where it is stopped (make test-quick starts none),
    # and the report says so rather than leaving it out.
    daemon_down = shutil.which("docker") and subprocess.run(["docker", "info"], capture_output=True).returncode
    unreadable = result["report"]["unreadable"]
    assert [u for u in unreadable if not (daemon_down and " info " in u and "docker" in u)] == [], unreadable
    assert bool(unreadable) == bool(daemon_down), unreadable


@pytest.mark.testbed
def test_a_box_with_no_gpu_and_no_nvidia_runtime_is_diagnosed_in_order_with_what_to_do(tmp_path):
    """This machine as it is: no GPU (nvidia-smi is not installed), Docker without the nvidia runtime,
    the toolkit not installed. The toolkit's packages left to the module, as playbooks/doctor.yml leaves them."""
    bare = {**PREFLIGHT, "gpus": [], "nvidia_smi": {"error": "nvidia-smi not found on PATH"}}
    result = run_module("spark_doctor", {"preflight": bare, "state_file": str(tmp_path / "none.json"),
                                         "venv_link": str(tmp_path / "none")})
    assert [p["name"] for p in result["report"]["toolkit"]] == PACKAGES, "the role's four, by default"
    problems = result["report"]["problems"]
    assert [p["problem"] for p in problems][:3] == [
        "no GPU visible", "the nvidia runtime is not registered with Docker",
        "NVIDIA Container Toolkit packages not installed"]
    assert problems[0]["evidence"] == "nvidia-smi not found on PATH"
    assert "runc" in problems[1]["evidence"] and "nvidia-ctk runtime configure" in problems[1]["fix"]
    assert "- **no GPU visible**: nvidia-smi not found on PATH. Do: run nvidia-smi" in result["markdown"]
    memory = result["report"]["memory"]
    assert memory["nv_no_memory"] == 0 and isinstance(memory["swap"], list), "the kernel log and swaps were read"

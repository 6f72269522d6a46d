"""The doctor's diagnosis (module_utils/host/_doctor.py), pure: from recorded texts of the files and commands it
reads (a kernel log with the driver's NV_ERR_NO_MEMORY, /proc/swaps, /proc/pressure/memory)."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._doctor import GIB, diagnose, memory_signs, scrub

KERNEL_LOG = """\
[  812.112233] NVRM: nvAssertOkFailedNoLog: Assertion failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)
[  812.112300] NVRM: GPU0 nvCheckOkFailedNoLog: Check failed: Out of memory [NV_ERR_NO_MEMORY] (0x00000051)
[  900.000001] usb 1-1: new high-speed USB device number 2 using xhci_hcd
"""
NO_SWAP = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
SWAP = NO_SWAP + "/swap.img                               file\t\t8388604\t\t0\t\t-2\n"
PRESSURE = "some avg10=23.50 avg60=12.00 avg300=3.10 total=98765432\nfull avg10=4.00 avg60=1.00 avg300=0.20 total=1\n"
LIMITS = {"docker_free_gib": 40, "pressure_avg10": 10.0}


def healthy(**changes) -> tuple[dict, dict]:
    report = {"simulated": False, "gpu": {"devices": [{"name": "NVIDIA GB10", "compute_cap": "12.1"}]},
              "docker": {"server_version": "28.3.0", "runtimes": ["nvidia", "runc"]},
              "toolkit": [{"name": "nvidia-container-toolkit", "version": "1.18.0-1", "held": True}],
              "images": [{"name": "ngc", "ref": "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64, "present": True}],
              "venv_state": None, "memory": memory_signs("", SWAP, ["systemd", "sshd"], "some avg10=0.00\n")}
    platform = {"docker_data_root": "/var/lib/docker", "docker_data_root_free_bytes": 500 * GIB}
    for key, value in changes.items():
        (platform if key.startswith("docker_data_root") else report)[key] = value
    return report, platform


def test_a_healthy_spark_has_no_problem():
    assert diagnose(*healthy(), LIMITS) == []


def test_the_unified_memory_signs_spark_owners_report():
    signs = memory_signs(KERNEL_LOG, NO_SWAP, ["systemd", "sshd"], PRESSURE)
    assert signs["nv_no_memory"] == 2 and "GPU0" in signs["nv_no_memory_last"]
    assert signs["swap"] == [] and signs["oom_guard"] == [] and signs["pressure_some_avg10"] == 23.5
    problems = diagnose(*healthy(memory=signs), LIMITS)
    assert [p["problem"] for p in problems] == ["the GPU driver ran out of memory (unified memory)",
                                                "no swap and no OOM guard", "memory pressure"]
    assert problems[0]["evidence"].startswith("2 NV_ERR_NO_MEMORY line(s) in the kernel log, last: [  812.112300]")
    # An OOM guard is enough without swap; an unreadable kernel log is no finding.
    guarded = memory_signs(None, NO_SWAP, ["systemd-oomd"], None)
    assert guarded["nv_no_memory"] is None and diagnose(*healthy(memory=guarded), LIMITS) == []


def test_each_problem_names_its_evidence_and_what_to_do():
    report, platform = healthy(
        docker={"server_version": "28.3.0", "runtimes": ["runc"]},
        toolkit=[{"name": "nvidia-container-toolkit", "version": "1.18.0-1", "held": False},
                 {"name": "libnvidia-container1", "version": None, "held": False}],
        images=[{"name": "unsloth", "ref": "unsloth/unsloth@sha256:" + "b" * 64, "present": False}],
        venv_state={"matrix": "unsloth-2026.7.2", "stale": True, "age_days": 140},
        docker_data_root_free_bytes=12 * GIB)
    problems = {p["problem"]: p for p in diagnose(report, platform, LIMITS)}
    assert problems["the nvidia runtime is not registered with Docker"]["evidence"] == "Docker's runtimes: runc"
    assert problems["NVIDIA Container Toolkit packages not installed"]["evidence"] == "libnvidia-container1"
    assert "apt-mark hold nvidia-container-toolkit" in problems[
        "toolkit packages not held (an apt upgrade can move them under the runtime)"]["fix"]
    assert problems["the locked image unsloth is missing"]["evidence"].endswith("b" * 64)
    assert "140 days" in problems["the venv's matrix is stale"]["evidence"]
    # the command the run's own warnings give, not a file inside sparkfleet's checkout (issue 45, item 9)
    assert problems["the venv's matrix is stale"]["fix"].startswith("renew it: sparkfleet matrix propose -i ")
    assert problems["Docker's disk is low"]["evidence"].startswith("12.0 GiB free on /var/lib/docker")


def test_no_gpu_comes_first_and_a_simulated_host_is_not_told_it_has_none():
    report, platform = healthy(gpu={"devices": []})
    platform["nvidia_smi"] = {"error": "NVIDIA-SMI has failed because it couldn't communicate with the driver"}
    assert diagnose(report, platform, LIMITS)[0]["evidence"].startswith("NVIDIA-SMI has failed")
    report["simulated"] = True
    assert diagnose(report, platform, LIMITS) == []


# One fault per check of the list: the check that speaks, and only it (issue 39: a check is a function in CHECKS).
FAULTS = {
    "check_gpu": {"gpu": {"devices": []}},
    "check_docker": {"docker": {"server_version": None, "error": "Cannot connect to the Docker daemon"}},
    "check_toolkit": {"toolkit": [{"name": "nvidia-container-toolkit", "version": None, "held": False}]},
    "check_images": {"images": [{"name": "ngc", "ref": "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64,
                                 "present": False}]},
    "check_venv": {"venv_state": {"matrix": "m", "stale": True, "age_days": 99}},
    "check_disk": {"docker_data_root_free_bytes": 2 * GIB},
    "check_gpu_memory": {"memory": memory_signs(KERNEL_LOG, SWAP, ["systemd"], "some avg10=0.00\n")},
    "check_oom_guard": {"memory": memory_signs("", NO_SWAP, ["systemd"], "some avg10=0.00\n")},
    "check_memory_pressure": {"memory": memory_signs("", SWAP, ["systemd"], PRESSURE)},
}


def test_every_check_of_the_list_speaks_for_its_fault_alone_and_in_the_lists_order():
    from ansible_collections.sparkfleet.spark.plugins.module_utils.host._doctor import CHECKS

    missing = [check.__name__ for check in CHECKS if check.__name__ not in FAULTS]
    assert not missing, f"{missing} in CHECKS have no fault in FAULTS of {__file__}: add one, in CHECKS' order"
    assert [check.__name__ for check in CHECKS] == list(FAULTS), f"FAULTS of {__file__} in CHECKS' order"
    for check in CHECKS:
        report, platform = healthy(**FAULTS[check.__name__])
        spoke = {c.__name__ for c in CHECKS if c(report, platform, LIMITS)}
        assert spoke == {check.__name__}, (check.__name__, spoke)
        assert diagnose(report, platform, LIMITS) == check(report, platform, LIMITS)
    named = ("check_docker", "check_toolkit", "check_images", "check_venv", "check_disk")
    everything = healthy(**{k: v for name in named for k, v in FAULTS[name].items()})
    order = [p["problem"] for p in diagnose(*everything, LIMITS)]
    assert order[0] == "Docker does not answer" and order[-1] == "Docker's disk is low", order


# Issue 56, item 4: the forms ssh, Ansible, urllib3, Go and sudo really print, each with what must not be left.
@pytest.mark.parametrize(("said", "gone"), [
    ("dial tcp 10.20.30.40:5443: connect: connection refused", "10.20.30.40"),
    ("Get \"http://192.168.7.9:3141/simple/torch/\": dial tcp: i/o timeout", "192.168.7.9"),
    ("ssh: Could not resolve hostname gpu-a: Name or service not known", "gpu-a"),
    ("ssh: connect to host spark7 port 22: Connection refused", "spark7"),
    ('Data could not be sent to remote host "spark7.corp.example.com". Make sure this host can be reached over ssh: '
     "ssh: connect to host spark7.corp.example.com port 22: No route to host", "spark7"),
    ("HTTPSConnectionPool(host='mirror.corp.example', port=443): Max retries exceeded with url: /simple/torch/",
     "mirror.corp"),
    ("[Errno 2] No such file or directory: '/export/home/alice/inventory/hosts.yml'", "alice"),
    ("sudo: a password is required for user alice on spark7", "alice"),
    ("sudo: a password is required for user alice on spark7", "spark7"),
    ("Sorry, user alice may not run sudo on spark7.", "spark7"),
    ("sudo: unable to resolve host spark7: Name or service not known", "spark7"),
])
def test_each_form_a_tool_names_a_site_in_is_scrubbed(said, gone):
    assert gone not in scrub(said), scrub(said)


def test_what_names_no_site_stays_as_it_was():
    said = "torch 2.10.0 built for CUDA 13.0 at 05:19:36 on the GPU; runs on the host as root (127.0.0.1:5000)"
    assert scrub(said) == said

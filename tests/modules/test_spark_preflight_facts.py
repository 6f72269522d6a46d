"""spark_preflight_facts run by real Ansible on this (x86_64, GPU-less) machine.

The only doubles are nvidia-smi stand-ins (the hardware boundary): the
recorded one from testbed/doubles and small scripts that fail or hang.
"""

from __future__ import annotations

import platform

import pytest

from conftest import NVSMI, run_module


def _facts(result: dict) -> dict:
    assert result.get("failed") is not True, result
    assert result["changed"] is False
    return result["ansible_facts"]["spark_preflight"]


def test_h200_recording_on_this_machine_is_not_a_spark():
    result = run_module("spark_preflight_facts", {"nvidia_smi": str(NVSMI / "nvidia-smi")},
                        SPARKFLEET_NVSMI_DIR=str(NVSMI / "recordings"), SPARKFLEET_NVSMI_PROFILE="h200")
    facts = _facts(result)
    assert result["ansible_facts"]["spark_host_class"] == facts["host_class"] == "not-spark"
    assert result["ansible_facts"]["spark_platform"] == facts["platform"] == "not-spark", "the old names, until 1.0.0"
    assert facts["arch"] == platform.machine()
    assert facts["gpus"][0]["name"] == "NVIDIA H200"
    assert facts["cuda_driver_version"] == "13.0"
    assert any("NVIDIA H200 (compute capability 9.0)" in r for r in facts["reasons"])
    assert facts["os"]["id"] == "debian"
    assert facts["memory_total_bytes"] > 0
    assert facts["docker_data_root_free_bytes"] > 0
    assert facts["simulated"] is False


def test_gb10_recording_on_x86_64_is_still_refused_for_the_architecture():
    facts = _facts(run_module("spark_preflight_facts",
                              {"nvidia_smi": str(NVSMI / "nvidia-smi"), "simulated": True},
                              SPARKFLEET_NVSMI_DIR=str(NVSMI / "recordings")))
    assert facts["reasons"] == [f"architecture is {platform.machine()}, a DGX Spark is aarch64"]
    assert facts["simulated"] is True


def test_failing_driver_is_reported_with_its_message(fake_bin):
    nvsmi = fake_bin("nvidia-smi", "echo \"NVIDIA-SMI has failed because it couldn't communicate "
                                   "with the NVIDIA driver.\"\nexit 9\n")
    facts = _facts(run_module("spark_preflight_facts", {"nvidia_smi": str(nvsmi)}))
    assert facts["gpus"] == []
    assert facts["nvidia_smi"]["rc"] == 9
    assert "couldn't communicate with the NVIDIA driver" in facts["nvidia_smi"]["error"]
    assert "no NVIDIA GPU reported by nvidia-smi" in " ".join(facts["reasons"])


def test_a_hung_nvidia_smi_does_not_hang_the_play(fake_bin):
    nvsmi = fake_bin("nvidia-smi", "sleep 30\n")
    facts = _facts(run_module("spark_preflight_facts", {"nvidia_smi": str(nvsmi), "command_timeout": 1}))
    assert facts["nvidia_smi"]["rc"] is None
    assert facts["nvidia_smi"]["error"] == "no answer within 1 s"


def test_garbage_output_is_reported(fake_bin):
    nvsmi = fake_bin("nvidia-smi", "echo 'Segmentation fault'\n")
    facts = _facts(run_module("spark_preflight_facts", {"nvidia_smi": str(nvsmi)}))
    assert facts["gpus"] == []
    assert facts["nvidia_smi"]["problems"][0].startswith("line 1: expected 3 comma-separated fields")


def test_no_nvidia_smi_at_all(tmp_path):
    facts = _facts(run_module("spark_preflight_facts", {"nvidia_smi": str(tmp_path / "nvidia-smi")}))
    assert facts["nvidia_smi"]["path"] is None
    assert "not found" in facts["nvidia_smi"]["error"]


def test_docker_data_root_that_does_not_exist_yet_is_measured_on_its_parent(tmp_path):
    facts = _facts(run_module("spark_preflight_facts",
                              {"nvidia_smi": str(tmp_path / "none"),
                               "docker_data_root": str(tmp_path / "not" / "yet")}))
    assert facts["docker_data_root"] == str(tmp_path / "not" / "yet")
    assert facts["docker_data_root_free_bytes"] > 0


def test_check_mode_reads_the_same(fake_bin):
    result = run_module("spark_preflight_facts",
                        {"nvidia_smi": str(NVSMI / "nvidia-smi")}, "--check",
                        SPARKFLEET_NVSMI_DIR=str(NVSMI / "recordings"))
    assert _facts(result)["gpus"][0]["name"] == "NVIDIA GB10"


def test_stand_in_refuses_arguments_it_does_not_know(tmp_path):
    import subprocess

    proc = subprocess.run([str(NVSMI / "nvidia-smi"), "-q"], capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 2
    assert "Invalid combination of input arguments" in proc.stderr


def test_docker_and_its_service_state_are_read_once_for_the_run(fake_bin, tmp_path):
    # Stand-ins for the two CLIs, shaped as their documented output: `docker info --format '{{json .}}'` prints
    # one JSON object; `systemctl is-active|is-enabled --quiet UNIT` answers with its exit status only.
    calls = tmp_path / "calls"
    fake_bin("docker", f'echo "docker $*" >> {calls}\n'
                       'echo \'{"DockerRootDir": "/srv/docker", "Runtimes": {"nvidia": {"path": '
                       '"nvidia-container-runtime"}, "runc": {"path": "runc"}}}\'\n')
    fake_bin("systemctl", f'echo "systemctl $*" >> {calls}\n[ "$1" = is-active ]\n')
    # An engine the API helper does not reach (DOCKER_HOST on tcp://, as for a remote engine): the CLI answers.
    facts = _facts(run_module("spark_preflight_facts", {"command_timeout": 30}, PATH=f"{tmp_path}:/usr/bin:/bin",
                              DOCKER_HOST="tcp://127.0.0.1:9"))
    assert facts["docker_runtimes"] == {"nvidia": {"path": "nvidia-container-runtime"}, "runc": {"path": "runc"}}
    assert facts["docker_data_root"] == "/srv/docker"
    assert facts["docker_service"] == {"active": True, "enabled": False}, "running now, not started at boot"
    assert calls.read_text().splitlines() == [
        "docker info --format {{json .}}", "systemctl is-active --quiet docker.service",
        "systemctl is-enabled --quiet docker.service"], "one docker call for the data root and the runtimes"


def test_a_docker_that_does_not_answer_gives_no_runtimes_and_the_configured_data_root(fake_bin, tmp_path):
    fake_bin("docker", "echo 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock.' >&2\nexit 1\n")
    fake_bin("systemctl", "exit 3\n")
    facts = _facts(run_module("spark_preflight_facts", {"docker_data_root": "/var/lib/docker"},
                              PATH=f"{tmp_path}:/usr/bin:/bin", DOCKER_HOST="unix:///nonexistent/docker.sock"))
    assert facts["docker_runtimes"] is None
    assert facts["docker_service"] == {"active": False, "enabled": False}


@pytest.mark.testbed
def test_the_engine_is_asked_on_its_socket_and_says_what_docker_info_says(fake_bin, tmp_path):
    """This machine's real Docker engine: the facts come from its API (GET /info on /var/run/docker.sock), no
    docker process is started (a docker on PATH that records its calls is never called), and they say what the
    real `docker info` says."""
    import json
    import subprocess

    real = json.loads(subprocess.run(["docker", "info", "--format", "{{json .}}"], capture_output=True, text=True,
                                     check=True).stdout)
    calls = tmp_path / "calls"
    fake_bin("docker", f'echo "docker $*" >> {calls}\nexit 1\n')
    facts = _facts(run_module("spark_preflight_facts", {"command_timeout": 30}, PATH=f"{tmp_path}:/usr/bin:/bin"))
    assert not calls.exists(), calls.read_text() if calls.exists() else ""
    assert facts["docker_runtimes"] == real["Runtimes"]
    assert facts["docker_data_root"] == real["DockerRootDir"]
    assert facts["docker_image_store"] == real["Driver"] == "overlay2", "this engine's graph driver (issue 56, item 3)"


def _profile(tmp_path, name: str, health: str | None):
    """A profile of the stand-in: the gb10 recordings, with `health` as its health.csv (None: none)."""
    import shutil

    profile = tmp_path / "recordings" / name
    shutil.copytree(NVSMI / "recordings" / "gb10", profile)
    (profile / "health.csv").unlink()
    if health is not None:
        (profile / "health.csv").write_text(health)
    return {"SPARKFLEET_NVSMI_DIR": str(tmp_path / "recordings"), "SPARKFLEET_NVSMI_PROFILE": name}


def test_the_gpu_s_health_is_read_as_a_real_h100_answered(tmp_path):
    """Issue 59: the clock-event reasons and temperatures, from the arguments HEALTH_ARGS (the stand-in answers
    only those); the answer is the one an H100 gave (recordings/h100/health.csv, the GPU suite, 2026-12-06)."""
    recorded = (NVSMI / "recordings" / "h100" / "health.csv").read_text()
    facts = _facts(run_module("spark_preflight_facts", {"nvidia_smi": str(NVSMI / "nvidia-smi")},
                              **_profile(tmp_path, "h100-idle", recorded)))
    assert facts["gpu_health"] == {"gpus": [{"index": 0, "clock_event_mask": "0x0000000000000001",
                                             "clock_event_reasons": ["gpu_idle"], "temperature_c": 40,
                                             "memory_temperature_c": 52}], "problems": [], "error": None}
    assert isinstance(facts["oom_guard"], list)


def test_a_hot_gpu_says_which_slowdown_is_active(tmp_path):
    hot = "0x0000000000000048, Active, Not Active, Not Active, Not Active, 93, [N/A]\n"  # hw_slowdown | hw_thermal
    (gpu,) = _facts(run_module("spark_preflight_facts", {"nvidia_smi": str(NVSMI / "nvidia-smi")},
                               **_profile(tmp_path, "hot", hot)))["gpu_health"]["gpus"]
    assert gpu["clock_event_reasons"] == ["hw_slowdown", "hw_thermal_slowdown"]
    assert (gpu["temperature_c"], gpu["memory_temperature_c"]) == (93, None)


def test_a_driver_that_does_not_know_the_health_fields_says_so_and_the_rest_is_read(tmp_path):
    facts = _facts(run_module("spark_preflight_facts", {"nvidia_smi": str(NVSMI / "nvidia-smi")},
                              **_profile(tmp_path, "old-driver", None)))
    assert facts["gpus"][0]["name"] == "NVIDIA GB10"
    assert facts["gpu_health"]["gpus"] == []
    assert facts["gpu_health"]["error"] == 'Field "clocks_event_reasons.active" is not a valid field to query.'


def test_who_listens_is_read_for_the_credential_registries_on_the_loopback_alone():
    """Issue 56, item 5: the registries given credentials, judged loopback as the controller's registry client
    judges them (common._http.is_loopback: a name that merely starts with 127. is not); port 80 where none is named."""
    import os
    import socket

    with socket.socket() as ours:
        ours.bind(("127.0.0.1", 0))
        ours.listen(1)
        port = ours.getsockname()[1]
        facts = _facts(run_module("spark_preflight_facts", {
            "nvidia_smi": str(NVSMI / "nvidia-smi"),
            "credential_registries": [f"127.0.0.1:{port}", "127.corp.example:5000", "nvcr.io", "localhost"]}))
    listening = facts["loopback_listeners"]
    assert sorted(listening) == [f"127.0.0.1:{port}", "localhost"], listening
    assert listening[f"127.0.0.1:{port}"] == [os.geteuid()]

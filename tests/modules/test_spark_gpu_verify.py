"""spark_gpu_verify's verdicts and its ordered diagnosis, run by real Ansible.

No GPU here: the doubles stand at the hardware boundary only - the stand-in
torch (testbed/doubles/torch), nvidia-smi scripts that succeed or fail, and
/dev/nvidia* nodes laid out in a private mount namespace, probed as an
unprivileged user (root ignores file modes). The probe itself is the one the
module ships. Container mode runs against this machine's real dockerd.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import BIN, DOUBLES, REPO, ansible_env, run_module

SYSTEM_PYTHON = "/usr/bin/python3"
SPARK_TORCH = {"version": "2.10.0+cu130", "cuda": "13.0", "available": True, "name": "NVIDIA GB10",
               "capability": [12, 1], "arch_list": ["sm_120", "sm_121"]}
UNAVAILABLE = {**SPARK_TORCH, "available": False}


@pytest.fixture
def host(request):
    """A host to probe: a Python whose PATH, environment and /dev/nvidia* the test lays out."""
    root = Path(tempfile.mkdtemp(prefix="sparkfleet-gpu-"))
    root.chmod(0o755)
    (root / "bin").mkdir(mode=0o755)
    (root / "dev").mkdir(mode=0o755)
    request.addfinalizer(lambda: shutil.rmtree(root, ignore_errors=True))

    class Host:
        python = root / "python"
        devices_laid_out = False

        def nvidia_smi(self, script: str) -> None:
            path = root / "bin" / "nvidia-smi"
            path.write_text("#!/bin/sh\n" + script)
            path.chmod(0o755)

        def device(self, name: str, mode: int) -> None:
            path = root / "dev" / name
            path.touch()
            path.chmod(mode)
            self.devices_laid_out = True

        def probe(self, torch: dict, timeout: int = 60, spark: bool = True, **environment) -> dict:
            env_path = f"{root / 'bin'}:/usr/bin:/bin"
            if self.devices_laid_out:
                # /dev replaced by the laid-out nodes, probed as 'nobody' (root ignores modes).
                self.python.write_text(
                    "#!/bin/sh\nexec unshare --mount --propagation private sh -c "
                    f"'mount --bind {root / 'dev'} /dev && exec setpriv --reuid=65534 --regid=65534 "
                    f"--clear-groups env PATH={env_path} {SYSTEM_PYTHON} \"$@\"' sh \"$@\"\n")
            else:
                self.python.write_text(f"#!/bin/sh\nPATH={env_path} exec {SYSTEM_PYTHON} \"$@\"\n")
            self.python.chmod(0o755)
            env = {"PYTHONPATH": str(DOUBLES / "torch"), "SPARKFLEET_FAKE_TORCH": json.dumps(torch),
                   **environment}
            return run_module("spark_gpu_verify", {"python": str(self.python), "timeout": timeout,
                                                   "spark": spark, "environment": env})

    return Host()


def working_gpu(host) -> None:
    host.nvidia_smi("echo 'GPU 0: NVIDIA GB10 (UUID: GPU-00000000-0000-0000-0000-000000000000)'\n")
    host.device("nvidia0", 0o666)
    host.device("nvidiactl", 0o666)
    host.device("nvidia-uvm", 0o666)


def test_a_working_spark_prints_true_13_0(host):
    working_gpu(host)
    result = host.probe(SPARK_TORCH)
    assert result["verdict"] == "ok", result
    assert result["line"] == "True 13.0"
    assert result["device"]["capability"] == [12, 1]
    assert result["device"]["compute"] is True
    assert result["hypothesis"] is None


def test_an_ngc_build_without_a_cu130_tag_is_not_a_failure(host):
    working_gpu(host)
    result = host.probe({**SPARK_TORCH, "version": "2.9.0a0+50eac811a6.nv25.09"})
    assert result["verdict"] == "ok"
    assert result["torch_version"] == "2.9.0a0+50eac811a6.nv25.09"


def test_no_nvidia_smi_means_runtime_or_flags(host):
    result = host.probe(UNAVAILABLE)
    assert result["line"] == "False 13.0"
    assert result["hypothesis"] == "runtime/flags"
    assert result["evidence"] == "nvidia-smi is not present on the host"


def test_a_failing_nvidia_smi_comes_first_even_if_the_abi_is_wrong_too(host):
    host.nvidia_smi("echo \"NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\"\n"
                    "exit 9\n")
    result = host.probe({**UNAVAILABLE, "cuda": "12.4"})
    assert result["hypothesis"] == "runtime/flags"
    assert "failed (rc 9): NVIDIA-SMI has failed" in result["evidence"]


@pytest.mark.parametrize("value", ["", "-1", "1"])
def test_cuda_visible_devices_hiding_the_gpu(host, value):
    working_gpu(host)
    result = host.probe(UNAVAILABLE, CUDA_VISIBLE_DEVICES=value)
    assert result["hypothesis"] == "device visibility"
    assert "CUDA_VISIBLE_DEVICES" in result["evidence"]


def test_device_nodes_the_user_cannot_open(host):
    working_gpu(host)
    host.device("nvidia0", 0o000)
    result = host.probe(UNAVAILABLE)
    assert result["hypothesis"] == "permissions"
    assert result["evidence"] == "uid 65534 cannot open /dev/nvidia0 (0o0)"


def test_no_device_nodes_at_all(host):
    host.nvidia_smi("echo 'GPU 0: NVIDIA GB10'\n")
    result = host.probe(UNAVAILABLE)
    assert result["hypothesis"] == "permissions"
    assert result["evidence"] == "no /dev/nvidia* device nodes on the host"


@pytest.mark.parametrize(("where", "stage"), [("available", "asking torch for CUDA"), ("import", "importing torch")])
def test_a_hung_probe_is_a_stuck_process_not_a_stuck_play(host, where, stage):
    working_gpu(host)
    result = host.probe({**SPARK_TORCH, "hang": where}, timeout=5)
    assert result["timed_out"] is True
    assert "rc" not in result and result["exit_status"] is None, "ansible-core 2.19 fails a result whose rc is None"
    assert result["hypothesis"] == "stuck process"
    assert result["evidence"] == f"the probe hung while {stage} (killed after 5 s)"
    assert "reopen the shell" in result["fix"]


@pytest.mark.parametrize(("cuda", "built"), [("12.8", "CUDA 12.8"), (None, "no CUDA (a CPU-only build)")])
def test_torch_built_for_another_cuda_is_the_abi(host, cuda, built):
    working_gpu(host)
    result = host.probe({**UNAVAILABLE, "cuda": cuda, "version": "2.8.0"})
    assert result["hypothesis"] == "ABI mismatch"
    assert result["evidence"] == f"torch 2.8.0 is built for {built}, expected CUDA 13.x"
    assert "cu130" in result["fix"]


def test_a_cuda_12_wheel_that_will_not_import_is_the_abi(host):
    working_gpu(host)
    result = host.probe({"import_error": "libcudart.so.12: cannot open shared object file: No such file or directory"})
    assert result["line"] is None
    assert result["hypothesis"] == "ABI mismatch"
    assert "libcudart.so.12" in result["evidence"]


def test_an_available_gpu_with_a_cuda_12_torch_is_still_not_ok(host):
    working_gpu(host)
    result = host.probe({**SPARK_TORCH, "cuda": "12.8"})
    assert result["line"] == "True 12.8"
    assert result["verdict"] == "failed"
    assert result["hypothesis"] == "ABI mismatch"


def test_another_gpu_is_not_a_spark(host):
    working_gpu(host)
    h200 = {**SPARK_TORCH, "name": "NVIDIA H200", "capability": [9, 0]}
    refused = host.probe(h200)
    assert refused["hypothesis"] == "not a Spark GPU"
    accepted = host.probe(h200, spark=False)
    assert accepted["verdict"] == "ok"
    assert accepted["notes"] == ["compute capability (9, 0): not a Spark (NVIDIA H200)"]


def test_a_wrong_result_on_the_device_is_not_ok(host):
    working_gpu(host)
    result = host.probe({**SPARK_TORCH, "compute_result": 1.0})
    assert result["verdict"] == "failed"
    assert result["device"]["compute"] is False


def test_only_the_abi_hypothesis_ever_suggests_reinstalling(host):
    working_gpu(host)
    cases = [host.probe(UNAVAILABLE, CUDA_VISIBLE_DEVICES=""), host.probe({**SPARK_TORCH, "hang": "import"}, timeout=3)]
    host.nvidia_smi("exit 9\n")
    cases.append(host.probe(UNAVAILABLE))
    assert [c["hypothesis"] for c in cases] == ["device visibility", "stuck process", "runtime/flags"]
    assert all("reinstall" not in c["fix"] for c in cases)


def test_a_segfault_on_the_first_cuda_call_is_the_abi_never_unexplained(host):
    """The document's symptom: True 13.0 printed, then a segfault on the first .cuda(), no Python error."""
    working_gpu(host)
    result = host.probe({**SPARK_TORCH, "crash": "compute"})
    assert result["verdict"] == "failed"
    assert result["exit_status"] == -11 and result["killed_by"] == 11 and "rc" not in result
    assert result["line"] == "True 13.0"
    assert result["hypothesis"] == "ABI mismatch"
    assert result["evidence"] == ("the probe was killed by SIGSEGV (signal 11) while running the first computation "
                                  "on the GPU (the first .cuda()) on the host; torch 2.10.0+cu130 is built for "
                                  "CUDA 13.0")
    assert "spark_abi_scan" in result["fix"] and "cu130" in result["fix"]


def test_a_segfault_while_importing_torch_is_the_abi(host):
    working_gpu(host)
    result = host.probe({**SPARK_TORCH, "crash": "import"})
    assert result["killed_by"] == 11
    assert result["line"] is None
    assert result["hypothesis"] == "ABI mismatch"
    assert result["evidence"].startswith("the probe was killed by SIGSEGV (signal 11) while importing torch")


def test_a_segfault_behind_a_failing_nvidia_smi_is_still_runtime_flags_first(host):
    working_gpu(host)
    host.nvidia_smi("echo 'NVIDIA-SMI has failed because it could not communicate with the NVIDIA driver'; exit 9\n")
    result = host.probe({**SPARK_TORCH, "crash": "compute"})
    assert result["killed_by"] == 11
    assert result["hypothesis"] == "runtime/flags"


def test_an_interpreter_that_does_not_run_fails_clearly(tmp_path):
    result = run_module("spark_gpu_verify", {"python": str(tmp_path / "missing-python")})
    assert result["failed"] is True
    assert "the probe could not run under" in result["msg"]


def render_launcher(directory: Path, ref: str, **role_vars) -> Path:
    """Install the real launcher (role spark_images, launchers.yml) for `ref` into `directory`."""
    playbook = directory / "launcher.yml"
    pinned = [{"name": "test", "registry": "local", "repository": "test", "tag": "latest", "resolved_at": "now",
               "ref": ref, "launcher": "spark-test"}]
    playbook.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "tasks": [{"ansible.builtin.include_role": {"name": "sparkfleet.spark.spark_images",
                                                    "tasks_from": "launchers.yml"},
                   "vars": {"spark_images_pinned": pinned, "spark_images_launcher_dir": str(directory),
                            **role_vars}}],
    }]))
    subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook),
                    "-e", f"ansible_python_interpreter={sys.executable}"], cwd=REPO,
                   env=ansible_env(), check=True, capture_output=True)
    return directory / "spark-test"


@pytest.mark.testbed
def test_container_without_the_nvidia_runtime_is_runtime_flags(tmp_path):
    """The launcher's flags on this machine's real dockerd, which has no nvidia runtime: docker refuses them."""
    image = "sparkfleet/host-plain:latest"
    subprocess.run(["docker", "image", "inspect", image], check=True, capture_output=True)
    launcher = render_launcher(tmp_path, image)
    text = launcher.read_text()
    assert "--runtime=nvidia --gpus all --ipc=host --ulimit memlock=-1 --ulimit stack=67108864" in text
    assert "TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas" in text
    result = run_module("spark_gpu_verify", {"launcher": str(launcher), "timeout": 120})
    assert result["verdict"] == "failed"
    assert result["hypothesis"] == "runtime/flags"
    assert "the container did not start" in result["evidence"]
    assert "nvidia" in result["evidence"]
    assert "--runtime=nvidia --gpus all" in result["fix"]
    leftover = subprocess.run(["docker", "ps", "-aq", "--filter", "name=sparkfleet-verify-"], capture_output=True,
                              text=True, check=True).stdout
    assert leftover.strip() == ""


@pytest.mark.testbed
def test_a_container_killed_by_a_signal_is_the_abi(tmp_path):
    """docker run reports a container whose process a signal ended as 128+N (139 for SIGSEGV).

    The real launcher on this machine's real dockerd, an arm64 image under
    qemu; in place of the nvidia runtime (the hardware boundary) its flags
    mount a working nvidia-smi double, a device node and the torch double.
    --init: under emulation qemu-user would be the container's PID 1, and it
    re-raises the guest's fault with kill() on itself, which the kernel
    ignores for PID 1 (a real fault on real hardware is always delivered).
    """
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA GB10 (UUID: GPU-00000000-0000-0000-0000-000000000000)'\n")
    smi.chmod(0o755)
    flags = ["--init", "--volume", f"{smi}:/usr/local/bin/nvidia-smi:ro", "--device", "/dev/null:/dev/nvidia0",
             "--volume", f"{DOUBLES / 'torch'}:/doubles/torch:ro", "--env", "PYTHONPATH=/doubles/torch",
             "--env", "SPARKFLEET_FAKE_TORCH=" + json.dumps({**SPARK_TORCH, "crash": "compute"})]
    launcher = render_launcher(tmp_path, "sparkfleet/host-plain:latest", spark_images_run_flags=flags)
    result = run_module("spark_gpu_verify", {"launcher": str(launcher), "timeout": 180})
    assert result["exit_status"] == 139 and result["killed_by"] == 11
    assert result["line"] == "True 13.0"
    assert result["verdict"] == "failed"
    assert result["hypothesis"] == "ABI mismatch"
    assert "killed by SIGSEGV (signal 11) while running the first computation on the GPU" in result["evidence"]
    assert "inside the container" in result["evidence"]


def test_a_launcher_that_is_gone_is_judged_recorded_and_fails_the_host_saying_why(tmp_path):
    """spark_verify on this machine with a launcher that is not there: the probe cannot run, and the judge says so
    (module_utils/verification/_verification.py) - the host's state records the failure and the host fails with
    why and what to do, where the probe's task used to fail alone and leave no state behind."""
    launcher = tmp_path / "spark-gone"
    state = tmp_path / "state.json"
    playbook = tmp_path / "verify.yml"
    playbook.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False, "connection": "local",
        "tasks": [{"ansible.builtin.include_role": {"name": "sparkfleet.spark.spark_verify"},
                   "vars": {"spark_verify_launchers": [str(launcher)], "spark_verify_images": [],
                            "spark_verify_pythons": [], "spark_verify_state_file": str(state),
                            "spark_verify_fleet_record_dir": ""}}],
    }]))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", str(playbook),
                           "-e", f"ansible_python_interpreter={sys.executable}"], cwd=REPO,
                          env=ansible_env(), capture_output=True, text=True, check=False)
    assert proc.returncode == 2, proc.stdout[-3000:]
    flat = " ".join(proc.stdout.split())
    assert f"verification failed: image {launcher}: no answer - the probe did not run: the probe could not run " \
           f"under {launcher}" in flat, proc.stdout[-3000:]
    assert "Fix: make the launcher or interpreter named run on the host" in flat
    recorded = json.loads(state.read_text())["verification"]
    assert recorded["verdict"] == "failed" and recorded["gpu"][0]["verdict"] == "error"

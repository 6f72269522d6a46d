#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Verify that torch sees the GPU with CUDA 13 -- or say, in order, why not."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_gpu_verify
short_description: Verify that PyTorch sees the GPU with CUDA 13, with an ordered diagnosis when it does not
description:
  - Runs a probe under a Python interpreter on the host (O(python), e.g. a
    venv), or in a fresh container started by an image's launcher
    (O(launcher), e.g. C(/usr/local/bin/spark-ngc), which runs the pinned
    digest with the container-workflow flags C(--runtime=nvidia --gpus all
    --ipc=host --ulimit memlock=-1 --ulimit stack=67108864)) right after it
    starts, before any project package is installed. Going through the
    launcher verifies exactly what users run.
  - The probe exercises torch and, with O(frameworks), every other GPU framework installed (RV(frameworks)).
  - The probe reports the torch version, C(torch.version.cuda),
    C(torch.cuda.is_available()), the device name, capability and arch list,
    and runs a tiny real computation on the GPU. RV(line) is the user's own
    check, C(print(torch.cuda.is_available(), torch.version.cuda)), e.g. C(True 13.0).
  - RV(verdict) is C(ok) only when the GPU is available, torch is built for
    CUDA O(expected_cuda_major), the computation is right, and, with
    O(spark=true), the capability is (12, 1). An NGC build without a C(+cu130)
    local version tag is not a failure; only C(torch.version.cuda) counts.
  - When not ok, walks the hypotheses in this order and reports the first
    that holds, with its evidence and fix - 1. C(nvidia-smi) fails on the
    host or in the container (runtime/flags), 2. C(CUDA_VISIBLE_DEVICES) hides
    the device, 3. C(/dev/nvidia*) missing or not accessible, 4. the probe hung
    (a stuck process), 5. torch built for another CUDA major (ABI mismatch).
    A wheel reinstall is only suggested once the ABI is the confirmed cause.
  - A probe that a signal ended (a segfault on the first C(.cuda()), the
    ABI symptom of the user's rules) is diagnosed as an ABI mismatch, with
    where it died, once 1-3 are ruled out; it never counts as a pass, even
    after it printed C(True 13.0).
  - The probe runs under O(timeout); a hang is a diagnosis, not a stuck play.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes, sparkfleet.spark.sparkfleet_docker,
                                 sparkfleet.spark.sparkfleet_program]
options:
  timeout:
    description:
      - Seconds the probe may take before it counts as hung, killed with everything it started.
      - The frameworks (O(frameworks)) share it.
      # make docs: probe-deadline
      - >-
        Each framework's process has a hard deadline (90 s at most, all of them within C(spark_verify_timeout), 300 s
        by default): a call stuck in C is killed with everything it started, reported as "timed out after N s at STAGE
        (killed)" with the last lines the library wrote on stderr, never as another diagnosis; one left less than 10 s
        is not started and says so.
      # end make docs
    type: int
    default: 300
  expected_cuda_major:
    description: The CUDA major torch must be built for.
    type: int
    default: 13
  spark:
    description:
      - Require the DGX Spark's compute capability (12, 1). Set false on other
        hardware; the capability is then reported as "not a Spark".
    type: bool
    default: true
  frameworks:
    description:
      - Probe every other GPU framework installed too, each in a process of its own with a hard deadline (killed,
        not asked, so a call stuck in C is bounded too).
      # make docs: frameworks
      - >-
        Beside torch's line, each GPU framework the image or venv holds runs its own smallest real GPU operation on
        the run's input, in a process of its own: jax (a jitted operation placed on a GPU device, without
        preallocation, its peak memory reported), cupy (a kernel compiled by NVRTC), cuda-python (a device buffer
        allocated, written and read back), numba-cuda (numba's C(cuda.detect) and a kernel compiled for the input's
        type), onnxruntime (a model the probe writes itself, IR 7, so that no C(onnx) package is needed, run with the
        CUDA provider actually used and NVIDIA's wheels' libraries preloaded), triton (a kernel JIT-compiled and run;
        when ptxas fails, once more with C(TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas), saying which worked),
        bitsandbytes (an 8-bit optimizer step on the GPU that must move the parameter by about its learning rate,
        finite). The others it knows (tensorflow, tensorrt, paddlepaddle-gpu, mxnet, flash-attn, xformers, vllm) are
        imported and listed as not exercised, with why.
      # end make docs
      - What forces a framework onto the CPU fails it, named - C(TRITON_INTERPRET), C(NUMBA_ENABLE_CUDASIM),
        C(JAX_PLATFORMS=cpu), C(CUDA_VISIBLE_DEVICES) empty or C(-1), a CPU-only build (jax without a CUDA plugin,
        onnxruntime without C(-gpu)).
      - A framework that runs on the CPU, fails or hangs fails the verdict (hypothesis C(a GPU framework failed)),
        each with its stage, the library's own error, the last lines of its stderr and the fix that follows the
        cause (a missing shared object by its soname, a build for another CUDA major by its name).
      - Set false where the GPU is a test double (a simulated host).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    details: Only reads (the container it starts is removed); runs the same in check mode.
  diff_mode:
    support: none
  idempotent:
    support: full
    details: Never changes anything on the host.
"""

EXAMPLES = r"""
- name: Verify the pinned NGC image through its launcher
  sparkfleet.spark.spark_gpu_verify:
    launcher: /usr/local/bin/spark-ngc
  register: gpu

- name: Fail with the diagnosis
  ansible.builtin.assert:
    that: gpu.verdict == 'ok'
    fail_msg: "{{ gpu.line }}: {{ gpu.hypothesis }}: {{ gpu.evidence }}. Fix: {{ gpu.fix }}"

- name: Verify a venv on another GPU machine (not a Spark)
  sparkfleet.spark.spark_gpu_verify:
    python: /opt/venv/bin/python
    spark: false
"""

RETURN = r"""
verdict:
  description: C(ok) or C(failed).
  returned: success
  type: str
  sample: ok
line:
  description: What C(print(torch.cuda.is_available(), torch.version.cuda)) prints; null when torch did not answer.
  returned: success
  type: str
  sample: True 13.0
hypothesis:
  description: The first hypothesis that holds, when not ok.
  returned: success
  type: str
  sample: runtime/flags
  choices: [runtime/flags, device visibility, permissions, stuck process, ABI mismatch, torch not importable,
            not a Spark GPU, a GPU framework failed, unexplained]
evidence:
  description: What was found that makes the hypothesis hold.
  returned: success
  type: str
  sample: "nvidia-smi is not present inside the container"
fix:
  description: The one thing to do next.
  returned: success
  type: str
torch_version:
  description: C(torch.__version__).
  returned: success
  type: str
  sample: 2.9.0a0+50eac811a6.nv25.09
torch_cuda:
  description: C(torch.version.cuda).
  returned: success
  type: str
  sample: "13.0"
available:
  description: C(torch.cuda.is_available()).
  returned: success
  type: bool
device:
  description: Device name, capability, arch list, device count and whether the computation was right.
  returned: success
  type: dict
  sample: {name: NVIDIA GB10, capability: [12, 1], arch_list: [sm_121], device_count: 1, compute: true}
notes:
  description:
    - "Remarks that do not fail the verdict (e.g. C(not a Spark)), and the GPU frameworks found installed but not
      probed (C(probed torch only; installed, not probed: jax (jax-cuda13-plugin 0.12.0.1)))."
  returned: success
  type: list
  elements: str
frameworks:
  description:
    - The GPU frameworks the probe exercised (C(probed)), each one's result (C(results) - name, verdict C(ok),
      C(failed) or C(not exercised), stage, error, fix, version, device, seconds, and for triton the ptxas that
      worked), the framework it hung in (C(hung)), and those installed but not exercised (C(not_probed), by the
      distributions that bring them; null when the interpreter cannot list them).
  returned: success
  type: dict
  sample: {probed: [torch, jax], hung: null, not_probed: [],
           results: [{name: jax, verdict: ok, version: 0.8.1, device: NVIDIA H200, seconds: 1.2}]}
target:
  description: What was probed.
  returned: success
  type: dict
  sample: {kind: container, launcher: /usr/local/bin/spark-ngc, command: [/usr/local/bin/spark-ngc, python3, "-"]}
probe:
  description: The probe's raw evidence (environment, torch, device).
  returned: success
  type: dict
timed_out:
  description: The probe did not finish within O(timeout).
  returned: success
  type: bool
exit_status:
  description:
    - The probe's exit status (negative - the signal - when a signal ended the interpreter; null when it hung and
      was killed). Not called C(rc) - ansible-core marks a result whose C(rc) is not 0 as failed ("Unknown error")
      where the verdict is this module's to give.
  returned: success
  type: int
killed_by:
  description:
    - The signal that ended the probe (C(11) for a segfault), from the interpreter's status or, through a
      launcher, docker run's C(128+N); null otherwise. Diagnosed as an ABI mismatch once 1-3 are ruled out.
  returned: success
  type: int
"""

import atexit
import os
import secrets
import shutil
import tempfile
import uuid

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._bounded import run_bounded
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._isolated import isolate
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._shared_options import (
    DOCKER,
    ONE_INTERPRETER,
    PROGRAM,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._docker_client import DockerClient
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._gpu_probe import (
    CHALLENGE_MAX,
    MARGIN_SECONDS,
    PROBE,
    diagnose,
    killed_by,
    parse_probe_output,
)

_DOCKER_LAUNCH_FAILED = 125  # docker run's own exit status when the container could not start


def run_probe(argv: list[str], env: dict[str, str], timeout: int, on_timeout=None) -> tuple[int | None, str, str]:
    rc, out, err, _seconds = run_bounded(argv, PROBE.encode(), env, timeout)
    if rc is None and on_timeout:
        on_timeout()
    return rc, out, err


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **PROGRAM,
            **DOCKER,
            "timeout": {"type": "int", "default": 300},
            "expected_cuda_major": {"type": "int", "default": 13},
            "spark": {"type": "bool", "default": True},
            "frameworks": {"type": "bool", "default": True},
        },
        **ONE_INTERPRETER,
        supports_check_mode=True,
    )
    # Every Python it starts runs in "/", without the caller's PYTHONPATH or caches (module_utils/common/_isolated.py).
    isolate()
    params = module.params
    extra = {str(k): str(v) for k, v in params["environment"].items()}
    env = dict(os.environ, LC_ALL="C", **extra)
    launch_error = None
    # The frameworks' processes end within the module's timeout, less what starting and torch's part take.
    flags = (["--frameworks", "--seconds", str(max(params["timeout"] - MARGIN_SECONDS, 1))]
             if params["frameworks"] else [])
    # Each run's input, chosen here: every framework's answer is recomputed by the judge (_gpu_probe.answer_problem).
    challenge = secrets.randbelow(CHALLENGE_MAX) + 1
    flags += ["--challenge", str(challenge)]
    if params["launcher"]:
        docker = DockerClient(module, required=True)
        name = f"sparkfleet-verify-{uuid.uuid4().hex[:12]}"
        env["SPARK_CONTAINER_NAME"] = name
        # The container's working directory: a private, empty folder of the run's, removed after it.
        env["SPARK_WORKDIR"] = workdir = tempfile.mkdtemp(prefix="sparkfleet-verify-")
        atexit.register(shutil.rmtree, workdir, True)
        argv = [params["launcher"], "python3", "-", *flags]
        target = {"kind": "container", "launcher": params["launcher"], "command": argv}

        rc, out, err = run_probe(argv, env, params["timeout"], lambda: docker.remove_container(name))
        if rc == _DOCKER_LAUNCH_FAILED and not out.strip():
            launch_error = err.strip() or "docker run exited 125"
    else:
        argv = [params["python"], "-", *flags]
        target = {"kind": "python", "python": params["python"], "command": argv}
        rc, out, err = run_probe(argv, env, params["timeout"])
    probe = parse_probe_output(out)
    signal_number = None if launch_error else killed_by(rc, container=bool(params["launcher"]))
    if (rc not in (0, None) and launch_error is None and signal_number is None
            and "torch" not in probe and "env" not in probe):
        module.fail_json(msg=f"the probe could not run under {target.get('python') or target.get('launcher')} "
                             f"(rc {rc}): {(err or out).strip()[-1000:]}; expected a Python 3 interpreter there.",
                         rc=rc, stdout=out, stderr=err)
    result = diagnose(probe, launch_error=launch_error, timed_out=rc is None, timeout=params["timeout"],
                      expected_cuda_major=params["expected_cuda_major"], spark=params["spark"],
                      container=bool(params["launcher"]), signal_number=signal_number, challenge=challenge)
    module.exit_json(changed=False, target=target, probe=probe, timed_out=rc is None, exit_status=rc,
                     killed_by=signal_number, **result)


if __name__ == "__main__":
    main()

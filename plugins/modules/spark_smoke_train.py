#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Prove an environment by a training step that must learn: a tiny causal LM, LoRA through peft, a few dozen steps."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_smoke_train
short_description: Run a tiny training step in an image or a venv and require that it learns
description:
  - Runs the smoke step (C(module_utils/verification/_program_smoke.py)) under a Python interpreter on the
    host (O(python), a venv's) or in a fresh container started by an image's launcher (O(launcher)), as
    spark_gpu_verify runs its probe.
  - The step builds a tiny Llama from a config in code (random weights, a fixed seed, nothing downloaded),
    attaches LoRA with peft, quantizes the base to 4 bits through bitsandbytes where it is installed and a GPU is
    there, compiles one Triton kernel where Triton and a GPU are, and trains O(steps) steps on a fixed batch.
  - RV(verdict) is C(ok) only when the loss falls by O(min_drop), every gradient norm is finite and no value is
    NaN. A failure names its RV(stage) (headroom, import, build, quantize, lora, compile, step, learning) with the
    library's own error and the fix the user's rules give (an old torchao that peft refuses - upgrade torchao
    last).
  - It refuses to start below O(headroom_mb) of C(MemAvailable), saying so. On a host without a GPU it runs on
    the CPU; RV(gpu_verified) is then false whatever the verdict.
version_added: "0.2.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment:
  - sparkfleet.spark.sparkfleet_attributes
  - sparkfleet.spark.sparkfleet_read_only
  - sparkfleet.spark.sparkfleet_docker
  - sparkfleet.spark.sparkfleet_program
options:
  steps:
    description: Training steps.
    type: int
    default: 40
  learning_rate:
    description: The optimizer's learning rate (0 makes a run that cannot learn).
    type: float
    default: 0.01
  min_drop:
    description: The share by which the mean of the last steps' losses must be below the first steps'.
    type: float
    default: 0.05
  headroom_mb:
    description: The step refuses to start when C(MemAvailable) is below this many MiB.
    type: int
    default: 2048
  device:
    description: C(auto) (the GPU when torch sees one, else the CPU), C(cuda) (a GPU required) or C(cpu).
    type: str
    choices: [auto, cuda, cpu]
    default: auto
  shuffle_labels:
    description: New random targets every step - a run that cannot learn (for tests of the judgement).
    type: bool
    default: false
  timeout:
    description: Seconds the whole step may take.
    type: int
    default: 600
"""

EXAMPLES = r"""
- name: Prove the venv by a training step
  sparkfleet.spark.spark_smoke_train:
    python: /opt/sparkfleet/venv/bin/python
  register: smoke

- name: Prove the pinned NGC image
  sparkfleet.spark.spark_smoke_train:
    launcher: /usr/local/bin/spark-ngc
    device: cuda
"""

RETURN = r"""
verdict:
  description: C(ok) when the run learned, C(failed) otherwise.
  returned: success
  type: str
gpu_verified:
  description: The run learned on a GPU (a run on the CPU never counts as GPU verification).
  returned: success
  type: bool
stage:
  description: Where a failed run stopped - headroom, import, unsloth, build, quantize, lora, compile, step, learning
    (the first of its C(blockers)).
  returned: success
  type: str
blockers:
  description:
    - Every blocker the run met, in order, each with its stage, error and fix. Without the GPU asked for (O(device)
      C(cuda)), without a 4-bit base or a Triton kernel that computes the right value, the rest still runs (on the
      CPU where there is no GPU) and names what else blocks it (an old torchao at the LoRA attach); the verdict
      stays failed.
  returned: when the program printed a verdict
  type: list
  elements: dict
error:
  description: The library's own error, or what the losses did.
  returned: success
  type: str
fix:
  description: The one thing to do next.
  returned: success
  type: str
device:
  description: C(cuda) or C(cpu).
  returned: when the step got that far
  type: str
losses:
  description: The loss of each step.
  returned: when the steps ran
  type: list
  elements: float
first_loss:
  description: The mean loss of the first steps.
  returned: when the steps ran
  type: float
last_loss:
  description: The mean loss of the last steps.
  returned: when the steps ran
  type: float
drop:
  description: 1 - last_loss / first_loss.
  returned: when the steps ran
  type: float
seconds_per_step:
  description: Wall seconds per training step.
  returned: when the steps ran
  type: float
peak_gpu_memory_mb:
  description: torch's peak GPU memory allocated, in MiB (null on the CPU).
  returned: when the steps ran
  type: float
mem_available_mb:
  description: C(MemAvailable) before and after (on a Spark, the unified memory the run took).
  returned: when the steps ran
  type: dict
parts:
  description: Which optional parts ran - versions of torch, transformers, peft, torchao, trl, bitsandbytes,
    triton, unsloth (null when it is not installed or did not import); quantized_4bit, triton_kernel (the kernel
    computed the right value; false fails the run), the loop.
  returned: when the step got that far
  type: dict
unsloth:
  description: Where Unsloth is installed, its own path on the same tiny model (loaded by its loader, its LoRA
    attached, the same steps), judged as the peft path is - first_loss, last_loss, drop, losses. Its failure (its
    own refusal without a GPU, a dependency its no-deps step left out) is a blocker at the C(unsloth) stage.
  returned: when Unsloth's path ran
  type: dict
timed_out:
  description: The step did not finish within O(timeout).
  returned: success
  type: bool
exit_status:
  description: The step's exit status (negative when a signal ended it; null when it hung and was killed). Not
    called C(rc) - ansible-core marks a result whose C(rc) is not 0 as failed, where the verdict is this module's.
  returned: success
  type: int
"""

import atexit
import os
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
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._smoke import SMOKE, judge


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            **PROGRAM,
            **DOCKER,
            "steps": {"type": "int", "default": 40},
            "learning_rate": {"type": "float", "default": 0.01},
            "min_drop": {"type": "float", "default": 0.05},
            "headroom_mb": {"type": "int", "default": 2048},
            "device": {"type": "str", "choices": ["auto", "cuda", "cpu"], "default": "auto"},
            "shuffle_labels": {"type": "bool", "default": False},
            "timeout": {"type": "int", "default": 600},
        },
        **ONE_INTERPRETER,
        supports_check_mode=True,
    )
    # Every Python it starts runs in "/", without the caller's PYTHONPATH or caches (module_utils/common/_isolated.py).
    isolate()
    p = module.params
    args = ["--steps", str(p["steps"]), "--lr", repr(p["learning_rate"]), "--min-drop", repr(p["min_drop"]),
            "--headroom-mb", str(p["headroom_mb"]), "--device", p["device"]]
    args += ["--shuffle-labels"] if p["shuffle_labels"] else []
    env = dict(os.environ, LC_ALL="C", **{str(k): str(v) for k, v in p["environment"].items()})
    name = None
    if p["launcher"]:
        name = f"sparkfleet-smoke-{uuid.uuid4().hex[:12]}"
        env["SPARK_CONTAINER_NAME"] = name
        # The container's working directory: a private, empty folder of the run's, removed after it.
        env["SPARK_WORKDIR"] = workdir = tempfile.mkdtemp(prefix="sparkfleet-smoke-")
        atexit.register(shutil.rmtree, workdir, True)
        argv = [p["launcher"], "python3", "-", *args]
    else:
        argv = [p["python"], "-", *args]
    # The step and everything it started (a launcher's docker CLI, a trainer's workers) killed at its deadline.
    rc, out, err, _seconds = run_bounded(argv, SMOKE.encode(), env, p["timeout"])
    if rc is None and name:
        DockerClient(module).remove_container(name)
    elif rc == 127 and not out:
        module.fail_json(msg=f"the smoke step could not start {argv[0]}: {err}")
    module.exit_json(changed=False, **judge(out, err, rc, p["timeout"]))


if __name__ == "__main__":
    main()

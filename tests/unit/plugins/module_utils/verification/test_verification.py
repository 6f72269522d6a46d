"""The verification's one judge (module_utils/verification/_verification.py): what every path - provision, refresh,
venv and the doctor - says of a check, in the same words."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._verification import (
    judge,
    recorded_lines,
    refreshed,
)

FAILED_PROBE = {"item": "/usr/local/bin/spark-gone", "failed": False, "changed": False, "rc": 127,
                "msg": "the probe could not run under /usr/local/bin/spark-gone (rc 127): not found; expected a "
                       "Python 3 interpreter there."}


def test_a_probe_that_could_not_run_is_judged_a_failure_that_says_why_and_what_to_do():
    out = judge({"images": {"results": [FAILED_PROBE]}, "preflight": {"host_class": "spark"}})
    (failure,) = out["failures"]
    assert failure.startswith("image /usr/local/bin/spark-gone: no answer - the probe did not run: the probe could "
                              "not run under /usr/local/bin/spark-gone (rc 127)")
    assert "Fix: make the launcher or interpreter named run on the host" in failure and "None" not in failure
    assert out["state"]["verdict"] == "failed" and out["state"]["gpu"][0]["verdict"] == "error"


def test_the_doctor_reads_back_the_judges_own_lines_each_failure_with_its_fix():
    ok = {"item": "/usr/local/bin/spark-ngc", "verdict": "ok", "line": "True 13.0", "notes": []}
    bad = {"item": "/usr/local/bin/spark-old", "verdict": "fail", "line": "False", "hypothesis": "runtime/flags",
           "evidence": "nvidia-smi failed inside the container", "fix": "add --runtime=nvidia --gpus all"}
    abi = {"item": "/opt/venv/bin/python", "verdict": "ok", "findings": [], "shared_objects_scanned": 40}
    out = judge({"images": {"results": [ok, bad]}, "abi": {"results": [abi]}})
    recorded = recorded_lines(out["state"])
    assert recorded[0] == out["lines"][0] == "GPU image /usr/local/bin/spark-ngc: OK True 13.0"
    assert recorded[1] == out["lines"][1] + ". Fix: add --runtime=nvidia --gpus all"
    assert recorded[2] == out["lines"][2] == "ABI /opt/venv/bin/python: OK (40 shared objects)"


PINNED = [{"name": "ngc", "ref": "nvcr.io/nvidia/pytorch@sha256:" + "0123456789ab" + "c" * 52,
           "launcher_path": "/usr/local/bin/spark-ngc"}]
LEARNED = {"item": "/usr/local/bin/spark-ngc", "verdict": "ok", "gpu_verified": True, "device": "cuda",
           "first_loss": 5.47, "last_loss": 5.01, "drop": 0.084, "seconds_per_step": 0.006, "peak_gpu_memory_mb": 120.5,
           "parts": {"torchao": "0.17.0", "quantized_4bit": True}}


def test_each_result_names_its_image_by_name_and_digest():
    ok = {"item": "/usr/local/bin/spark-ngc", "verdict": "ok", "line": "True 13.0", "notes": []}
    out = judge({"images": {"results": [ok]}, "pinned": PINNED})
    assert out["lines"] == ["GPU image ngc sha256:0123456789ab (/usr/local/bin/spark-ngc): OK True 13.0"]
    assert out["state"]["gpu"][0]["name"] == "ngc" and out["state"]["gpu"][0]["digest"] == PINNED[0]["ref"]


def test_a_smoke_step_that_learned_on_the_gpu_passes_and_says_what_it_measured():
    out = judge({"smoke": {"images": {"results": [LEARNED]}}, "pinned": PINNED})
    assert out["failures"] == []
    assert out["lines"] == ["SMOKE image ngc sha256:0123456789ab (/usr/local/bin/spark-ngc): OK loss 5.47 -> 5.01 "
                            "(-8%) on cuda, 0.006 s/step, peak 120.5 MiB"]
    assert recorded_lines(out["state"]) == out["lines"]
    through = judge({"smoke": {"images": {"results": [
        {**LEARNED, "parts": {**LEARNED["parts"], "loop": "trl SFTTrainer 1.16.0"}}]}}, "pinned": PINNED})
    assert through["lines"][0].endswith("on cuda through trl SFTTrainer 1.16.0, 0.006 s/step, peak 120.5 MiB")


def test_a_smoke_step_that_did_not_learn_or_learned_on_the_cpu_fails_the_host():
    stuck = {"item": "/opt/venv/bin/python", "verdict": "failed", "stage": "lora", "gpu_verified": False,
             "error": "ImportError: Found an incompatible version of torchao. Found version 0.13.0, but only versions "
                      "above 0.16.0 are supported", "fix": 'pip install -U "torchao==0.17.0"'}
    on_cpu = {**LEARNED, "item": "/opt/other/bin/python", "device": "cpu", "gpu_verified": False,
              "peak_gpu_memory_mb": None}
    out = judge({"smoke": {"pythons": {"results": [stuck, on_cpu]}}})
    assert out["failures"] == [
        "SMOKE python /opt/venv/bin/python: FAILED at lora - ImportError: Found an incompatible version of torchao. "
        "Found version 0.13.0, but only versions above 0.16.0 are supported. Fix: pip install -U \"torchao==0.17.0\"",
        "SMOKE python /opt/other/bin/python: FAILED at device - it learned on the cpu, not on the GPU: that is no GPU "
        "verification. Fix: fix the GPU line first (the verification above)"]
    assert out["state"]["verdict"] == "failed"


def _host(image_ref: str, image_line: str, reason: str = "") -> dict:
    """spark_verify's data for a host with one image and a venv interpreter, as record.yml gathers it."""
    launcher, python = "/usr/local/bin/spark-ngc", "/opt/sparkfleet/venv/bin/python"
    pinned = [{"name": "ngc", "ref": image_ref, "tag": "25.11-py3", "launcher_path": launcher}]
    gpu = [] if reason else [{"item": launcher, "verdict": "ok", "line": image_line, "notes": []}]
    return {"preflight": {"host_class": "spark", "simulated": bool(reason)}, "gpu_not_verifiable": reason,
            "images": {"results": gpu},
            "pythons": {"results": [] if reason else [{"item": python, "verdict": "ok", "line": "True 13.0"}]},
            "abi": {"results": [{"item": python, "verdict": "ok", "findings": [], "shared_objects_scanned": 846},
                                {"item": image_ref, "verdict": "ok", "findings": [], "shared_objects_scanned": 900}]},
            "wanted_images": [launcher], "wanted_pythons": [python], "pinned": pinned,
            "venv": {"path": "/opt/sparkfleet/venvs/unsloth-1", "matrix": "unsloth-2026.7.2", "status": "verified",
                     "verification": {"line": "True 13.0"}}}


def _images_only(data: dict) -> dict:
    """images.yml's check of the same host after a refresh: the images alone (no interpreters, no venv)."""
    return {**data, "pythons": {}, "wanted_pythons": [], "venv": None,
            "abi": {"results": [r for r in data["abi"]["results"] if not r["item"].startswith("/")]},
            "wanted_images": data["wanted_images"] if data["gpu_not_verifiable"] else []}


@pytest.mark.parametrize("reason", ["", "simulated host: no GPU"])
def test_a_refresh_records_what_a_provision_right_after_it_records(reason):
    """Issue 35, item 3: a refresh left the state file and the controller's record on the old digest, so the next
    provision changed them on every host. The state a refresh records is the refresh's check of the new images
    with the interpreters and venv as the last provision recorded them: exactly what provision records next."""
    old, new = "nvcr.io/nvidia/pytorch@sha256:" + "a" * 64, "nvcr.io/nvidia/pytorch@sha256:" + "b" * 64
    before = judge(_host(old, "True 13.0", reason))["state"]
    check = judge(_images_only(_host(new, "True 13.0", reason)))["state"]
    provision_next = judge(_host(new, "True 13.0", reason))["state"]
    assert refreshed(before, check, ["/usr/local/bin/spark-ngc"]) == provision_next
    assert refreshed(None, check, ["/usr/local/bin/spark-ngc"]) == check, "no state file: the images' check alone"

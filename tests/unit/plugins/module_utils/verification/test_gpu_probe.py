"""The probe's exit status, read as the signal that ended it (pure)."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._gpu_probe import (
    diagnose,
    killed_by,
    signal_name,
)


@pytest.mark.parametrize(("rc", "container", "signal"), [
    (-11, False, 11),   # the interpreter itself, ended by SIGSEGV
    (-6, True, 6),      # a launcher that exec'd into something a signal ended
    (139, True, 11),    # docker run: the container's process ended by SIGSEGV
    (139, False, None),  # an interpreter's own exit status 139 is just a status
    (125, True, None),  # docker run could not start the container
    (1, True, None),
    (0, False, None),
    (None, True, None),  # hung
])
def test_which_signal_ended_the_probe(rc, container, signal):
    assert killed_by(rc, container) == signal


def test_signal_names_are_the_ones_users_see():
    assert signal_name(11) == "SIGSEGV (signal 11)"
    assert signal_name(99) == "signal 99"


def _ok_probe(installed):
    return {"env": {"nvidia_smi": {"found": True, "rc": 0}, "devices": [{"path": "/dev/nvidia0", "access": True}]},
            "frameworks": {"probed": ["torch"], "installed": installed},
            "torch": {"imported": True, "version": "2.14.1", "cuda": "13.0"},
            "cuda": {"available": True, "line": "True 13.0"},
            "device": {"name": "NVIDIA GB10", "capability": [12, 1], "compute": True}}


def test_a_verified_line_says_which_frameworks_it_did_not_probe():
    jax = {"framework": "jax", "distributions": ["jax-cuda13-plugin 0.12.0.1"]}
    result = diagnose(_ok_probe([jax]))
    assert result["verdict"] == "ok"
    assert result["frameworks"] == {"probed": ["torch"], "results": [], "hung": None, "not_probed": [jax]}
    assert result["notes"] == ["probed torch only; installed, not probed: jax (jax-cuda13-plugin 0.12.0.1)"]


def test_torch_alone_adds_no_note_and_an_old_probe_says_it_cannot_tell():
    assert diagnose(_ok_probe([]))["notes"] == []
    old = _ok_probe([])
    del old["frameworks"]
    assert diagnose(old)["frameworks"] == {"probed": ["torch"], "results": [], "hung": None, "not_probed": None}


def _exercised(*results, installed=None):
    probe = _ok_probe(installed or [{"framework": r["name"], "distributions": [f"{r['name']} 1.0"]} for r in results])
    probe["frameworks"]["exercised"] = True
    for result in results:
        probe[f"framework:{result['name']}"] = {k: v for k, v in result.items() if k != "name"}
    return probe


JAX_ON_CPU = {"name": "jax", "verdict": "failed", "stage": "device", "error": "jax runs on the CPU: jax.devices() is "
              "cpu:0", "fix": "install jax's CUDA 13 build", "seconds": 0.6}


def test_a_framework_on_the_cpu_fails_the_verdict_though_torch_is_fine():
    result = diagnose(_exercised(JAX_ON_CPU))
    assert (result["verdict"], result["hypothesis"]) == ("failed", "a GPU framework failed")
    assert result["evidence"] == "torch is fine; jax: failed at device - jax runs on the CPU: jax.devices() is cpu:0"
    assert result["fix"] == "jax: install jax's CUDA 13 build"
    assert result["line"] == "True 13.0", "torch's own line stays the user's line"


def test_every_framework_that_ran_is_named_with_how_it_did():
    triton = {"name": "triton", "verdict": "ok", "version": "3.6.0", "device": "NVIDIA GB10", "seconds": 2.1,
              "ptxas": "TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas (Triton's own failed: ptxas fatal)"}
    flash = {"name": "flash-attn", "verdict": "not exercised", "stage": "import", "error": "imported only"}
    result = diagnose(_exercised(triton, flash))
    assert result["verdict"] == "ok"
    assert result["frameworks"]["probed"] == ["torch", "triton"]
    assert [f["framework"] for f in result["frameworks"]["not_probed"]] == ["flash-attn"]
    assert result["notes"] == ["frameworks: triton 3.6.0 on NVIDIA GB10: ok (2.1 s, TRITON_PTXAS_PATH="
                               "/usr/local/cuda/bin/ptxas (Triton's own failed: ptxas fatal)); flash-attn: not "
                               "exercised (imported only)"]


def test_a_probe_that_hung_in_a_framework_names_it():
    probe = _exercised(installed=[{"framework": "cupy", "distributions": ["cupy-cuda13x 14.2.0"]}])
    probe["framework_start"] = {"name": "cupy"}
    result = diagnose(probe, timed_out=True)
    assert (result["verdict"], result["hypothesis"]) == ("failed", "stuck process")
    assert result["evidence"] == "torch is fine; the probe hung while probing cupy"
    assert result["frameworks"]["hung"] == "cupy"

"""Every GPU framework installed is probed, with real wheels, on this machine without a GPU (issue 36).

Ground truth: jax 0.10.2 with its CUDA 12 plugin falls back to the CPU (jax.devices() is [cpu:0]); numba-cuda
finds no CUDA driver; cuda-python's cudaGetDeviceCount answers cudaErrorInsufficientDriver. Each is judged failed
by its own probe, all in one start of the interpreter; without --frameworks they are listed, not probed.
"""

from __future__ import annotations

import pytest

from conftest import run_module

pytestmark = pytest.mark.network


@pytest.fixture(scope="module")
def venv():
    import wheels

    try:
        return wheels.frameworks_venv()
    except wheels.Unavailable as exc:
        pytest.skip(str(exc))


def verify(venv, **args) -> dict:
    result = run_module("spark_gpu_verify", {"python": str(venv / "bin" / "python"), "spark": False, "timeout": 120,
                                             **args})
    assert not result["failed"], result.get("msg")
    return result


def test_each_framework_is_judged_by_its_own_probe_in_one_interpreter_start(venv):
    result = verify(venv)
    assert result["verdict"] == "failed"
    assert result["hypothesis"] == "runtime/flags", "no nvidia-smi here: the first hypothesis holds"
    by_name = {r["name"]: r for r in result["frameworks"]["results"]}
    assert sorted(by_name) == ["cuda-python", "jax", "numba-cuda"]
    assert result["frameworks"]["probed"] == ["torch", "cuda-python", "jax", "numba-cuda"]
    jax = by_name["jax"]
    assert (jax["verdict"], jax["stage"], jax["error"]) == ("failed", "device",
                                                            "jax runs on the CPU: jax.devices() is cpu:0")
    assert jax["fix"].startswith("install jax's CUDA 13 build")
    numba = by_name["numba-cuda"]
    assert (numba["verdict"], numba["stage"]) == ("failed", "device")
    assert "CUDA driver library cannot be found" in numba["error"]
    cuda = by_name["cuda-python"]
    assert (cuda["verdict"], cuda["stage"]) == ("failed", "device") and "cudaErrorInsufficientDriver" in cuda["error"]
    assert any(n.startswith("frameworks: jax 0.10.2: failed at device - jax runs on the CPU") for n in
               result["notes"]), result["notes"]
    assert result["probe"]["frameworks"]["exercised"] is True
    assert all(r["seconds"] < 60 for r in by_name.values())


def test_without_frameworks_they_are_listed_not_probed(venv):
    result = verify(venv, frameworks=False)
    assert result["frameworks"]["results"] == []
    assert [f["framework"] for f in result["frameworks"]["not_probed"]] == ["jax", "cuda-python", "numba-cuda"]
    assert result["notes"][0].startswith("probed torch only; installed, not probed: jax (jax-cuda12-plugin 0.10.2)")

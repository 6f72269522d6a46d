"""spark_cluster_nccl on this machine's real Docker engine (no GPU here, no nvidia runtime): the module starts the
image with NCCL's environment and feeds it the probe; what it says when NCCL cannot run is what the image or
Docker said. The probe itself runs for real in tests/integration/test_nccl_probe.py; NCCL on the GPU machine."""

from __future__ import annotations

import subprocess

import pytest

from conftest import run_module

pytestmark = pytest.mark.testbed

IMAGE = "sparkfleet/host-cluster:latest"  # python3, no torch (testbed/images/cluster)
ARGS = {"image": IMAGE, "rank": 0, "ranks": 2, "master": "127.0.0.1", "bytes": 67108864, "timeout": 60,
        "environment": {"NCCL_IB_HCA": "rocep1s0f1,roceP2p1s0f1", "NCCL_SOCKET_IFNAME": "enp1s0f1np1"}}


@pytest.fixture(scope="module", autouse=True)
def image():
    built = subprocess.run(["testbed/images.sh", "cluster"], capture_output=True, text=True, check=False)
    assert built.returncode == 0, built.stdout + built.stderr


def test_an_image_without_torch_says_so_and_nccl_did_not_run():
    result = run_module("spark_cluster_nccl", {**ARGS, "run_flags": []})
    assert not result["failed"] and result["ran"] is False, result
    assert result["why"].startswith("the NCCL run exited 1: ") and "No module named 'torch'" in result["why"]
    assert result["parsed"]["rows"] == [] and result["changed"] is False


def test_the_workflow_flags_on_an_engine_without_the_nvidia_runtime_are_refused_in_dockers_words():
    result = run_module("spark_cluster_nccl", ARGS)
    assert result["ran"] is False
    assert result["why"].startswith("Docker could not start the locked image on this node: docker: Error response "
                                    "from daemon: "), result["why"]
    assert result["why"].endswith("The nvidia runtime is not registered with Docker here: provision the node "
                                  "(spark_container_runtime registers it)")


def test_a_value_that_would_reach_dockers_command_line_is_refused():
    bad = run_module("spark_cluster_nccl", {**ARGS, "environment": {"NCCL_IB_HCA": "x\n--privileged"}})
    assert bad["failed"] and "one-line values" in bad["msg"]
    assert run_module("spark_cluster_nccl", {**ARGS, "master": "127.0.0.1;id"})["failed"]

"""spark_cluster_facts on this machine: its interfaces as sysfs and `ip -j` show them, and the /etc/nccl.conf of an
image read from a container created, never started, on this machine's real Docker engine."""

from __future__ import annotations

import subprocess

import pytest

from conftest import run_module

pytestmark = pytest.mark.testbed

STALE = "# left by an old build\nNCCL_IB_HCA=mlx5_0\nNCCL_SOCKET_IFNAME=eth0\n"


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Two real images FROM scratch: one carrying a stale /etc/nccl.conf, one without any."""
    tags = {"stale": "sparkfleet-test/nccl-conf:stale", "clean": "sparkfleet-test/nccl-conf:clean"}
    for name, tag in tags.items():
        context = tmp_path_factory.mktemp(name)
        (context / "nccl.conf").write_text(STALE)
        (context / "hello").write_text("an image without nccl.conf\n")
        added = "ADD nccl.conf /etc/nccl.conf" if name == "stale" else "ADD hello /hello"
        (context / "Dockerfile").write_text(f"FROM scratch\n{added}\n")
        subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], check=True, capture_output=True,
                       env={"DOCKER_BUILDKIT": "0", "PATH": "/usr/local/bin:/usr/bin:/bin"})
    yield tags
    subprocess.run(["docker", "image", "rm", "-f", *tags.values()], capture_output=True, check=False)


def containers() -> set[str]:
    return set(subprocess.run(["docker", "ps", "-aq"], capture_output=True, text=True, check=True).stdout.split())


def test_a_stale_nccl_conf_in_the_image_is_read_and_no_container_is_left(images):
    before = containers()
    facts = run_module("spark_cluster_facts", {"interfaces": ["lo"], "image": images["stale"]})
    assert not facts["failed"], facts.get("msg")
    assert facts["nccl_conf"]["files"][f"{images['stale']}:/etc/nccl.conf"] == {
        "NCCL_IB_HCA": "mlx5_0", "NCCL_SOCKET_IFNAME": "eth0"}
    assert f"{images['stale']}:/etc/nccl.conf" in facts["nccl_conf"]["read"]
    assert containers() == before, "the container made to read it is gone"
    assert facts["changed"] is False


def test_an_image_without_nccl_conf_and_an_image_not_on_the_host(images):
    clean = run_module("spark_cluster_facts", {"interfaces": ["lo"], "image": images["clean"]})
    assert clean["nccl_conf"]["image_error"] is None
    assert not any(source.startswith(images["clean"]) for source in clean["nccl_conf"]["files"])
    missing = run_module("spark_cluster_facts", {"interfaces": ["lo"], "image": "sparkfleet-test/absent:none"})
    assert missing["nccl_conf"]["image_error"].startswith("the image sparkfleet-test/absent:none is not on this node")


def test_interfaces_as_this_machine_has_them_and_a_name_that_cannot_be_one():
    facts = run_module("spark_cluster_facts", {"interfaces": ["lo", "enp1s0f1np1"]})
    lo, rail = facts["interfaces"]["lo"], facts["interfaces"]["enp1s0f1np1"]
    assert (lo["exists"], lo["mtu"], lo["pcie"]) == (True, 65536, None) and "127.0.0.1/8" in lo["addresses"]
    assert rail == {"exists": False}
    assert facts["rdma"] == [] and facts["rdma_source"] is None and facts["gpu"] is False
    assert facts["meminfo"]["MemTotal"] > 0
    refused = run_module("spark_cluster_facts", {"interfaces": ["eth0; reboot"]})
    assert refused["failed"] and "expected interface names of 15 characters at most" in refused["msg"]

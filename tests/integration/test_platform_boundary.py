"""The platform boundary on a native x86_64 host: provisioned on purpose, nothing Spark-specific applied silently.

The host is a container of the test bed's x86_64 Debian (sparkfleet/host-amd64, native, no emulation) reached
over Ansible's docker connection, as the lab's hosts are. Its Docker client is this machine's, talking to this
machine's real engine through the mounted socket, so pulls are real pulls for the platform the host asks. No
GPU: it classifies as not-spark, and `spark_preflight_require_spark: false` lets it through.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml
from oci_push import push
from thishost import lock_of, sparkfleet

pytestmark = pytest.mark.testbed
NAME = "sparkfleet-test-amd64"


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def x86_host():
    docker("rm", "-f", NAME)
    started = docker("run", "-d", "--name", NAME, "--platform", "linux/amd64", "--init",
                     "-v", "/var/run/docker.sock:/var/run/docker.sock", "-v", "/usr/bin/docker:/usr/bin/docker:ro",
                     "sparkfleet/host-amd64:latest")
    assert started.returncode == 0, started.stderr
    yield NAME
    docker("rm", "-f", NAME)


def inventory(tmp_path, registry: str, catalog: list[dict], **extra):
    inv = tmp_path / "inventory"
    (inv / "group_vars" / "all").mkdir(parents=True, exist_ok=True)
    (inv / "hosts.yml").write_text(yaml.safe_dump({"sparks": {"hosts": {NAME: {
        "ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    (inv / "group_vars" / "all" / "main.yml").write_text(yaml.safe_dump({
        "spark_preflight_require_spark": False, "spark_preflight_min_docker_free_gib": 0,
        "spark_images_catalog": catalog,
        "spark_images_registry_replacements": {"nvcr.io": registry, "docker.io": registry},
        **extra}))
    return inv


NGC = {"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3"],
       "launcher": "spark-ngc"}
UNSLOTH = {"name": "unsloth", "registry": "docker.io", "repository": "unsloth/unsloth", "tags": ["dgxspark-latest"],
           "launcher": "spark-unsloth"}


def test_an_x86_64_host_gets_its_own_platform_or_a_refusal_and_is_reported_as_an_override(tmp_path, anon, x86_host):
    both = push(anon.url, "nvidia/pytorch:25.11-py3", ["arm64", "amd64"], seed="x86-boundary")
    arm_only = push(anon.url, "unsloth/unsloth:dgxspark-latest", ["arm64"], list_type="docker", seed="x86-boundary")
    inv = inventory(tmp_path, anon.host, [NGC, UNSLOTH])
    try:
        proc, _ = sparkfleet(inv, tmp_path / "pin", "pin")
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert lock_of(inv)["unsloth"]["platforms"] == ["linux/arm64"]

        # An image locked without linux/amd64 is refused before any pull.
        proc, report = sparkfleet(inv, tmp_path / "p1", "provision", "-t", "spark_preflight,spark_images")
        assert proc.returncode == 2, proc.stdout[-4000:]
        (failure,) = report["hosts"][NAME]["failures"]
        assert (f"{anon.host}/unsloth/unsloth@{arm_only['digest']} is locked for linux/arm64; this host is "
                "linux/amd64. Nothing was pulled") in failure["msg"]
        assert docker("image", "inspect", f"{anon.host}/unsloth/unsloth@{arm_only['digest']}").returncode != 0

        # The NGC index has both: the host pulls its own platform's image and runs it natively.
        inventory(tmp_path, anon.host, [NGC])
        proc, report = sparkfleet(inv, tmp_path / "p2", "provision", "-t", "spark_preflight,spark_images")
        assert proc.returncode == 0, proc.stdout[-4000:]
        entry = report["hosts"][NAME]
        assert (entry["host_class"], entry["override"], entry["simulated"]) == (
            "not-spark", "not a Spark (override)", False)
        assert "not a Spark (override)" in proc.stdout
        ref = f"{anon.host}/nvidia/pytorch@{both['digest']}"
        assert entry["images"] == [{"name": "ngc", "ref": ref, "tag": "25.11-py3", "source": "lock"}]
        arch = docker("image", "inspect", "--format", "{{.Architecture}}", ref).stdout.strip()
        assert arch == "amd64"
        launcher = docker("exec", NAME, "cat", "/usr/local/bin/spark-ngc").stdout
        assert ref in launcher

        # The stack matrix is for aarch64: the venv is refused on x86_64 and nothing on the host changes.
        proc, report = sparkfleet(inv, tmp_path / "p3", "provision", "-t", "spark_preflight,spark_venv",
                                  "-e", '{"spark_venv_enabled": true}')
        assert proc.returncode == 2, proc.stdout[-4000:]
        (failure,) = report["hosts"][NAME]["failures"]
        assert "is x86_64; the stack matrix spark-stack.yml is verified for aarch64" in failure["msg"]
        assert "the venv was not built and nothing on the host changed" in failure["msg"]
        assert docker("exec", NAME, "test", "-e", "/opt/sparkfleet").returncode != 0
    finally:
        for image_id in set(docker("image", "ls", "-q", f"{anon.host}/nvidia/pytorch").stdout.split()
                            + docker("image", "ls", "-q", f"{anon.host}/unsloth/unsloth").stdout.split()):
            docker("image", "rm", "-f", image_id)

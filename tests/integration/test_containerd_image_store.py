"""Issue 56, item 3, against a real Docker engine on the containerd image store: Debian trixie's docker.io 26 with
`"features": {"containerd-snapshotter": true}` (testbed/images/engine, a native x86_64 host with systemd as PID 1,
started as the lab starts its hosts). Such an engine keeps its images in containerd, not in
image/overlay2/repositories.json; a host moved to it keeps the old file, which no pull or removal rewrites. The
pull used to be recorded as converged against that stale file and skipped for up to a day after a `docker rmi`.

Here the host holds such a stale file (a months-old repositories.json, as the overlay2 engine left it), and
`sparkfleet provision -t spark_preflight,spark_images` runs twice with a `docker rmi` between: the preflight reads
the store from the engine's own answer, nothing is recorded, and the second run pulls again.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml
from host_container import started
from thishost import sparkfleet

pytestmark = pytest.mark.testbed

IMAGE = "sparkfleet/host-engine:latest"
STALE = {"Repositories": {"127.0.0.1:5000/nvidia/pytorch": {
    "127.0.0.1:5000/nvidia/pytorch@sha256:" + "0" * 64: "sha256:" + "1" * 64}}}


def docker(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check)


@pytest.fixture
def engine():
    """The engine host, started as the lab starts its hosts (testbed/host_container.py), its Docker and
    containerd data on volumes of their own; ready once its engine answers."""
    with started(IMAGE, "sparkfleet-engine", volumes=("/var/lib/docker", "/var/lib/containerd"),
                 ready=("docker", "info")) as name:
        yield name


def test_on_the_containerd_image_store_nothing_is_recorded_and_a_removed_image_is_pulled_again(engine, tmp_path):
    info = json.loads(docker("exec", engine, "docker", "info", "--format", "{{json .}}").stdout)
    assert info["DriverStatus"] == [["driver-type", "io.containerd.snapshotter.v1"]], info["DriverStatus"]
    # The file the overlay2 engine left behind, months old: what the old watch took for Docker's state.
    stale = "/var/lib/docker/image/overlay2/repositories.json"
    subprocess.run(["docker", "exec", "-i", engine, "sh", "-c", f"mkdir -p {os.path.dirname(stale)} && cat > {stale}"
                    f" && touch -d 2026-06-01 {stale}"], input=json.dumps(STALE), text=True, check=True)
    inventory = tmp_path / "inventory"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"sparks": {"hosts": {engine: {
        "ansible_connection": "docker", "ansible_python_interpreter": "/usr/bin/python3"}}}}))
    (inventory / "group_vars" / "all" / "main.yml").write_text(yaml.safe_dump({
        "spark_preflight_require_spark": False, "spark_preflight_simulated": True,
        "spark_preflight_min_docker_free_gib": 1, "spark_images_platform": "linux/amd64",
        "spark_images_catalog": [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch",
                                  "tags": ["25.11-py3"], "launcher": "spark-ngc"}],
        "spark_images_registry_replacements": {"nvcr.io": "127.0.0.1:5000"}}))
    pinned, _ = sparkfleet(inventory, tmp_path / "pin", "pin")
    assert pinned.returncode == 0, pinned.stdout[-3000:]

    def provision(name: str) -> dict:
        proc, report = sparkfleet(inventory, tmp_path / name, "provision", "-t", "spark_preflight,spark_images")
        assert proc.returncode == 0, proc.stdout[-4000:]
        return report

    first = provision("first")
    (image,) = first["hosts"][engine]["images"]
    ref = image["ref"]
    assert docker("exec", engine, "docker", "image", "inspect", ref, check=False).returncode == 0
    records = docker("exec", engine, "sh", "-c", "ls /var/lib/sparkfleet/converged/ 2>/dev/null || true").stdout
    assert "spark_image_pull" not in records, f"a pull recorded against a store Docker does not rewrite: {records}"
    docker("exec", engine, "docker", "image", "rm", ref)
    second = provision("second")
    pulls = [c for c in second["hosts"][engine]["changes"] if c["task"].startswith("Pull by digest")]
    assert pulls, "the second run did not pull the removed image again: " + json.dumps(second["hosts"][engine])[-2000:]
    assert docker("exec", engine, "docker", "image", "inspect", ref, check=False).returncode == 0

"""A refresh re-verifies the new image from scratch: a new image whose wheels link
another CUDA is rolled back like a failed GPU line.

The lab's emulated hosts cannot start containers, so the image scan cannot
run there. Here the host is this machine itself (local connection, a
non-Spark by override, its GPU simulated), whose real dockerd runs the arm64
images under qemu binfmt: the real `sparkfleet pin` and `sparkfleet refresh`
(playbooks/pin.yml, playbooks/refresh.yml) against a real registry in which
the tag moves to an image that carries a wheel linked against libcudart.so.12.
The wheels' shared objects are gcc-built against stub runtimes with NVIDIA's
sonames (the vendor boundary).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import thishost
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import inert_load
from pyindex import build_wheel
from thishost import HOST, sparkfleet

pytestmark = pytest.mark.testbed


def gcc(*args: str) -> None:
    subprocess.run(["gcc", *args], check=True, capture_output=True)


def image_with_wheel(work: Path, registry: str, major: int) -> str:
    """Push host-plain + a wheel whose extension links libcudart.so.<major> as nvidia/pytorch:25.11-py3."""
    stub = work / f"stub{major}"
    stub.mkdir(parents=True)
    (work / "rt.c").write_text("int cudaRuntimeGetVersion(int *v) { *v = 0; return 0; }\n")
    (work / "k.c").write_text("extern int cudaRuntimeGetVersion(int *v);\n"
                              "int kernel(void) { int v; return cudaRuntimeGetVersion(&v); }\n")
    gcc("-shared", "-fPIC", f"-Wl,-soname,libcudart.so.{major}", "-o", str(stub / f"libcudart.so.{major}"),
        str(work / "rt.c"))
    gcc("-shared", "-fPIC", "-o", str(work / f"k{major}.so"), str(work / "k.c"), f"-L{stub}", "-Wl,--no-as-needed",
        f"-l:libcudart.so.{major}")
    wheel = build_wheel(work / f"wheels{major}", "cudakernels", f"1.0.{major}",
                        {"cudakernels/_C.so": (work / f"k{major}.so").read_bytes(), "cudakernels/__init__.py": b""})
    context = work / f"context{major}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--isolated", "--no-deps", "--target",
                    str(context / "site"), str(wheel)], check=True, capture_output=True)
    (context / "Dockerfile").write_text("FROM sparkfleet/host-plain:latest\n"
                                        "COPY site/ /usr/local/lib/python3.11/dist-packages/\n")
    tag = f"{registry}/nvidia/pytorch:25.11-py3"
    subprocess.run(["docker", "build", "-q", "--platform", "linux/arm64", "-t", tag, str(context)], check=True,
                   capture_output=True, env={**os.environ, "DOCKER_BUILDKIT": "0"})
    subprocess.run(["docker", "push", tag], check=True, capture_output=True)
    digest = subprocess.run(["docker", "image", "inspect", "--format", "{{index .RepoDigests 0}}", tag],
                            check=True, capture_output=True, text=True).stdout.strip().split("@")[1]
    subprocess.run(["docker", "image", "rm", tag], capture_output=True, check=False)
    return digest


@pytest.fixture
def inventory(tmp_path, anon) -> Path:
    return thishost.inventory(tmp_path, anon.host)


def test_a_new_image_with_a_cuda12_wheel_is_rolled_back(tmp_path, inventory, anon):
    good = image_with_wheel(tmp_path / "good", anon.host, 13)
    proc, _ = sparkfleet(inventory, tmp_path / "pin", "pin")
    assert proc.returncode == 0, proc.stdout[-4000:]
    lock_file = inventory / "group_vars" / "all" / "spark_images_lock.yml"
    assert inert_load(lock_file.read_text())["spark_images_lock"]["ngc"]["index_digest"] == good
    locked = lock_file.read_text()

    bad = image_with_wheel(tmp_path / "bad", anon.host, 12)
    assert bad != good
    proc, report = sparkfleet(inventory, tmp_path / "refresh", "refresh")
    try:
        assert proc.returncode == 2, proc.stdout[-4000:]
        entry = report["hosts"][HOST]
        assert "cudakernels 1.0.12: links libcudart.so.12 (expected 13)" in entry["refresh_failure"]
        assert any("rolled back to" in f["msg"] and good in f["msg"] for f in entry["failures"])
        # The summary says what the check of the new image found, and where the host was in the rollout.
        assert entry["refresh"]["canary"] and entry["refresh"]["outcome"] == "rolled back"
        assert entry["refresh"]["images"] == [{"name": "ngc", "old": good, "new": bad, "now": good}]
        assert entry["verification"]["verdict"] == "failed"
        assert entry["abi_findings"] == ["cudakernels 1.0.12: links libcudart.so.12 (expected 13)"]
        assert f"{HOST}: FAILED" in proc.stdout and "canary rolled back" in proc.stdout
        launcher = (tmp_path / "bin" / "spark-ngc").read_text()
        assert f"nvidia/pytorch@{good}" in launcher and bad not in launcher, "the launcher was rolled back"
        assert lock_file.read_text() == locked, "the canary failed: the lock still names the verified digest"
        record = json.loads((tmp_path / "pulled-images.json").read_text())
        assert f"{anon.host}/nvidia/pytorch@{good}" in record, "the record is the one the inventory names"
    finally:
        for digest in (good, bad):
            subprocess.run(["docker", "image", "rm", f"{anon.host}/nvidia/pytorch@{digest}"], capture_output=True,
                           check=False)

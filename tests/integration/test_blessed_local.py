"""A blessed tag already on the host is used when the registry is down, and reported as such.

The rule (spark-environment-setup.md): "If a newer blessed tag is available locally, use it rather than
blocking hard". This machine is the host (tests/integration/thishost.py), its real dockerd pulls from a real
registry (Debian's docker-registry) that is then stopped, as a registry outage is.
"""

from __future__ import annotations

import subprocess

import pytest
import thishost
import yaml
from oci_push import push
from registries import Registry, free_port
from thishost import HOST, lock_of, sparkfleet

from conftest import run_module

pytestmark = pytest.mark.testbed


def docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False)


def test_the_registry_down_a_blessed_tag_on_the_host_is_used_and_without_one_the_host_fails_clearly(tmp_path):
    registry = Registry(tmp_path, free_port())
    try:
        older = push(registry.url, "nvidia/pytorch:25.09-py3", ["arm64", "amd64"], seed="older")
        newer = push(registry.url, "nvidia/pytorch:25.11-py3", ["arm64", "amd64"], seed="newer")
        inv = thishost.inventory(tmp_path, registry.host)
        main = inv / "group_vars" / "all" / "main.yml"
        config = yaml.safe_load(main.read_text())
        config["spark_images_catalog"][0]["tags"] = ["25.11-py3", "25.09-py3"]
        main.write_text(yaml.safe_dump(config))
        proc, _ = sparkfleet(inv, tmp_path / "pin", "pin")
        assert proc.returncode == 0, proc.stdout[-3000:]
        assert lock_of(inv)["ngc"]["index_digest"] == newer["digest"]
        # The host pulled the older blessed tag some time ago; the locked digest is not here.
        assert docker("pull", "--platform", "linux/arm64", f"{registry.host}/nvidia/pytorch:25.09-py3").returncode == 0
    finally:
        registry.stop()
    try:
        proc, report = sparkfleet(inv, tmp_path / "down", "provision", "-t", "spark_preflight,spark_images")
        assert proc.returncode == 0, proc.stdout[-4000:]
        (image,) = report["hosts"][HOST]["images"]
        assert image["ref"] == f"{registry.host}/nvidia/pytorch@{older['digest']}", "runs the local tag by digest"
        assert image["source"].startswith(f"local blessed tag {registry.host}/nvidia/pytorch:25.09-py3 (wanted "
                                          f"{registry.host}/nvidia/pytorch@{newer['digest']}: ")
        assert any("using the blessed tag" in w and "25.09-py3" in w for w in report["warnings"])
        assert f"nvidia/pytorch@{older['digest']}" in (tmp_path / "bin" / "spark-ngc").read_text()
        assert not (tmp_path / "pulled-images.json").exists(), "not pulled, so never pruned by sparkfleet"
        assert lock_of(inv)["ngc"]["index_digest"] == newer["digest"], "the lock is unchanged"
        # An owner's playbook that still names the option local_fallback (now local_blessed) gets the same, told so;
        # the result says local_blessed, and local_fallback as well until 1.0.0.
        result = run_module("spark_image_pull", {"repository": f"{registry.host}/nvidia/pytorch",
                                                 "digest": newer["digest"],
                                                 "local_fallback": [f"{registry.host}/nvidia/pytorch:25.09-py3"]})
        assert not result["failed"], result.get("msg")
        assert result["local_blessed"]["used"] == f"{registry.host}/nvidia/pytorch:25.09-py3"
        assert result["local_fallback"] == result["local_blessed"]
        assert "Alias 'local_fallback' is deprecated" in " ".join(result["_stderr"].split()), result["_stderr"]

        # Without a blessed tag on the host, the host fails and says what it looked for.
        docker("image", "rm", f"{registry.host}/nvidia/pytorch:25.09-py3",
               f"{registry.host}/nvidia/pytorch@{older['digest']}")
        proc, report = sparkfleet(inv, tmp_path / "none", "provision", "-t", "spark_preflight,spark_images")
        assert proc.returncode == 2, proc.stdout[-4000:]
        (failure,) = report["hosts"][HOST]["failures"]
        assert f"docker pull {registry.host}/nvidia/pytorch@{newer['digest']} failed" in failure["msg"]
        assert (f"No blessed tag is on the host to run instead (looked for {registry.host}/nvidia/pytorch:25.11-py3, "
                f"{registry.host}/nvidia/pytorch:25.09-py3)") in failure["msg"]
    finally:
        for image_id in set(docker("image", "ls", "-q", f"{registry.host}/nvidia/pytorch").stdout.split()):
            docker("image", "rm", "-f", image_id)

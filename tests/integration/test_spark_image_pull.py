"""The lock (spark_image_plan reads it, spark_image_lock writes it) and pulling by digest through this machine's real
dockerd."""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.request

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import inert_load
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._pinned import pull_requests
from oci_push import push

from conftest import pull_one, run_module

D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
CATALOG = [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3", "25.09-py3"]},
           {"name": "unsloth", "registry": "docker.io", "repository": "unsloth/unsloth", "tags": ["dgxspark-latest"]}]


def resolved(name: str, digest: str, tag: str) -> dict:
    image = next(i for i in CATALOG if i["name"] == name)
    return {"name": name, "requested": f"{image['registry']}/{image['repository']}:{image['tags'][0]}",
            "registry": image["registry"], "repository": image["repository"], "tag": tag, "index_digest": digest,
            "digests": {"linux/arm64": D2}, "media_type": "application/vnd.oci.image.index.v1+json",
            "platforms": ["linux/amd64", "linux/arm64"], "fallback": None}


def write(path, *images, check=False):
    return run_module("spark_image_lock", {"path": str(path), "resolved": list(images)},
                      *(["--check", "--diff"] if check else []))


def test_the_lock_is_written_in_a_stable_order_and_rewritten_only_on_change(tmp_path):
    path = tmp_path / "group_vars" / "all" / "spark_images_lock.yml"
    first = write(path, resolved("ngc", D1, "25.11-py3"), resolved("unsloth", D1, "dgxspark-latest"))
    assert first["changed"] is True
    text = path.read_text()
    assert text.startswith("---\n# Written by `sparkfleet pin` (playbooks/pin.yml)")
    lock = inert_load(text)["spark_images_lock"]
    assert list(lock) == ["ngc", "unsloth"]
    assert list(lock["ngc"])[:6] == ["requested", "registry", "repository", "tag", "index_digest", "digests"]
    again = write(path, resolved("ngc", D1, "25.11-py3"), resolved("unsloth", D1, "dgxspark-latest"))
    assert (again["changed"], again["changes"]) == (False, [])
    assert path.read_text() == text
    moved = write(path, resolved("ngc", D1, "25.11-py3"), resolved("unsloth", D2, "dgxspark-latest"), check=True)
    assert moved["changes"] == [f"unsloth docker.io/unsloth/unsloth:dgxspark-latest: {D1} -> {D2}"]
    assert f"-    index_digest: {D1}" in moved["_stdout"] and f"+    index_digest: {D2}" in moved["_stdout"]
    assert path.read_text() == text  # check mode wrote nothing


def plan(lock, tmp_path):
    """The plan of the lock file pin writes (written here as the inventory has it, and loaded as its variable)."""
    path = tmp_path / "inv" / "group_vars" / "all" / "spark_images_lock.yml"
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = {name: {k: v for k, v in entry.items() if k != "name"} for name, entry in lock.items()}  # a lock's fields
    path.write_text(json.dumps({"spark_images_lock": lock}))
    return run_module("spark_image_plan", {"path": str(path), "images": CATALOG, "inventory_lock": lock,
                                           "moving_tags": ["latest", "dgxspark-latest"]})


def test_plan_refuses_a_moving_tag_without_an_entry(tmp_path):
    result = plan({"ngc": {k: v for k, v in resolved("ngc", D1, "25.11-py3").items()}}, tmp_path)
    assert result["failed"] is True
    assert result["msg"].startswith("docker.io/unsloth/unsloth:dgxspark-latest is a moving tag and "
                                    f"{tmp_path}/inv/group_vars/all/spark_images_lock.yml has no entry 'unsloth'")
    assert "playbooks/pin.yml" in result["msg"]


def test_plan_names_the_file_and_the_entry_of_a_bad_digest(tmp_path):
    lock = {"ngc": {**resolved("ngc", D1, "25.11-py3"), "index_digest": "sha256:short"},
            "unsloth": resolved("unsloth", D1, "dgxspark-latest")}
    result = plan(lock, tmp_path)
    assert result["failed"] is True
    assert (f"{tmp_path}/inv/group_vars/all/spark_images_lock.yml: entry 'ngc' index_digest is 'sha256:short'; "
            "expected sha256: and 64 lowercase hex digits") in result["msg"]


def test_plan_lists_unlocked_dated_tags_and_plans_locked_ones(tmp_path):
    result = plan({"unsloth": resolved("unsloth", D1, "dgxspark-latest")}, tmp_path)
    assert [i["name"] for i in result["unlocked"]] == ["ngc"]
    assert [(p["name"], p["index_digest"]) for p in result["plan"]] == [("unsloth", D1)]


@pytest.mark.testbed
def test_pull_by_digest_once_and_verify(anon, tmp_path):
    pushed = push(anon.url, "pulltest/img:v1", ["amd64", "arm64"], seed="pull")
    record = tmp_path / "pulled.json"
    args = {"repository": f"{anon.host}/pulltest/img", "digest": pushed["digest"], "record": str(record)}
    ref = f"{anon.host}/pulltest/img@{pushed['digest']}"
    subprocess.run(["docker", "image", "rm", "-f", ref], capture_output=True, check=False)
    try:
        check = pull_one(args, "--check")
        assert (check["changed"], check["pulled"]) == (True, False)
        first = pull_one(args)
        assert (first["changed"], first["pulled"]) == (True, True)
        assert ref in first["repo_digests"]
        arch = subprocess.run(["docker", "image", "inspect", "--format", "{{.Architecture}}", ref],
                              capture_output=True, text=True, check=True).stdout.strip()
        assert arch == "arm64"
        second = pull_one(args)
        assert (second["changed"], second["pulled"]) == (False, False)
        assert json.loads(record.read_text()) == [ref]
    finally:
        subprocess.run(["docker", "image", "rm", "-f", ref], capture_output=True, check=False)


@pytest.mark.testbed
def test_all_of_a_hosts_images_in_one_call_each_reported_and_a_failure_named(anon, tmp_path):
    one = push(anon.url, "pulltest/one:v1", ["amd64", "arm64"], seed="one-call-a")
    two = push(anon.url, "pulltest/two:v1", ["amd64", "arm64"], seed="one-call-b")
    refs = [f"{anon.host}/pulltest/one@{one['digest']}", f"{anon.host}/pulltest/two@{two['digest']}"]
    record = tmp_path / "pulled.json"
    # A complete request, as the role hands it (module_utils/images/_pinned.py), and a bare one.
    lock_one = {"name": "one", "registry": anon.host, "repository": "pulltest/one", "tag": "v1",
                "index_digest": one["digest"], "platforms": ["linux/amd64", "linux/arm64"]}
    (complete,) = pull_requests([lock_one], [{"name": "one", "launcher": "spark-one", "tags": ["v1"]}], mirrors={},
                                platform="linux/arm64", moving=[], launcher_dir="/usr/local/bin")
    images = [complete, {"name": "two", "repository": f"{anon.host}/pulltest/two", "digest": two["digest"]}]
    args = {"images": images, "record": str(record)}
    for ref in refs:
        subprocess.run(["docker", "image", "rm", "-f", ref], capture_output=True, check=False)
    try:
        subprocess.run(["docker", "pull", "--platform", "linux/arm64", refs[0]], capture_output=True, check=True)
        first = run_module("spark_image_pull", args)
        assert not first["failed"], first.get("msg")
        assert [(i["name"], i["ref"], i["pulled"]) for i in first["images"]] == [
            ("one", refs[0], False), ("two", refs[1], True)], "only the missing one is pulled"
        assert json.loads(record.read_text()) == [refs[1]], "only what this call pulled is recorded"
        assert [(p["name"], p["ref"], p["pulled"]) for p in first["pinned"]] == [
            ("one", refs[0], False), ("two", refs[1], True)], "the module says what the host runs now"
        assert (first["pinned"][0]["tag"], first["pinned"][0]["index_digest"], first["pinned"][0]["launcher_path"]) == (
            "v1", one["digest"], "/usr/local/bin/spark-one"), "the record is the lock entry and its launcher"
        again = run_module("spark_image_pull", args)
        assert again["changed"] is False and not any(i["pulled"] for i in again["images"])

        missing = "sha256:" + "4" * 64
        broken = run_module("spark_image_pull", {**args, "images": [
            *images, {"name": "gone", "repository": f"{anon.host}/pulltest/one", "digest": missing}]})
        assert broken["failed"] is True
        assert broken["msg"].startswith(f"gone: docker pull {anon.host}/pulltest/one@{missing} failed"), broken["msg"]
        assert [(i["name"], bool(i.get("failed"))) for i in broken["images"]] == [
            ("one", False), ("two", False), ("gone", True)], "the others still say what they did"
        assert [p["name"] for p in broken["pinned"]] == ["one", "two"], "an image that failed pins nothing"
    finally:
        for ref in refs:
            subprocess.run(["docker", "image", "rm", "-f", ref], capture_output=True, check=False)


@pytest.mark.testbed
def test_a_digest_the_registry_does_not_serve_fails_closed(anon, tmp_path):
    missing = "sha256:" + "3" * 64
    result = pull_one({"repository": f"{anon.host}/pulltest/img", "digest": missing,
                       "record": str(tmp_path / "pulled.json")})
    assert result["failed"] is True
    assert f"docker pull {anon.host}/pulltest/img@{missing} failed" in result["msg"]
    assert not (tmp_path / "pulled.json").exists()


def test_a_derived_image_is_locked_beside_its_base_and_moves_with_the_base_digest(tmp_path):
    path = tmp_path / "spark_images_lock.yml"
    (tmp_path / "motd").write_text("hello\n")
    recipe = {"name": "ngc-tree", "base": "ngc", "apt_packages": ["tree"], "dockerfile": "COPY motd /etc/motd",
              "files": {"motd": str(tmp_path / "motd")}}

    def lock(digest: str, *recipes: dict) -> dict:
        result = run_module("spark_image_lock", {"path": str(path), "resolved": [resolved("ngc", digest, "25.11-py3")],
                                                 "derived": list(recipes)})
        return result, inert_load(path.read_text())["spark_images_lock"]["ngc"]

    result, entry = lock(D1, recipe)
    first = entry["derived"]["ngc-tree"]
    assert first["tag"] == f"sparkfleet/ngc-tree:{first['recipe'][7:19]}"
    assert result["changes"][-1] == f"ngc-tree (derived from ngc) (none) -> {first['recipe']}"
    assert lock(D1, recipe)[0]["changed"] is False
    (tmp_path / "motd").write_text("hello again\n")
    assert lock(D1, recipe)[1]["derived"]["ngc-tree"]["recipe"] != first["recipe"], "a file changed"
    (tmp_path / "motd").write_text("hello\n")
    result, entry = lock(D2, recipe)
    assert entry["derived"]["ngc-tree"]["recipe"] not in (first["recipe"], None), "the base moved"
    assert any(c.startswith("ngc-tree (derived from ngc) ") for c in result["changes"])
    refused = run_module("spark_image_lock", {"path": str(path), "resolved": [resolved("ngc", D1, "25.11-py3")],
                                              "derived": [{**recipe, "base": "unsloth"}]})
    assert refused["failed"] and "base 'unsloth' is not among the images resolved (ngc)" in refused["msg"]
    assert inert_load(path.read_text())["spark_images_lock"]["ngc"]["index_digest"] == D2, "left untouched"


def test_an_image_locked_without_the_hosts_platform_is_refused_before_pulling():
    result = pull_one({"repository": "nvcr.io/nvidia/pytorch", "digest": D1,
                       "platform": "linux/amd64", "platforms": ["linux/arm64"],
                       "docker": "/nonexistent/docker"})
    assert result["failed"]
    assert result["msg"].startswith(f"nvcr.io/nvidia/pytorch@{D1} is locked for linux/arm64; this host is "
                                    "linux/amd64. Nothing was pulled")


def test_the_deprecated_single_image_options_run_as_one_entry_of_images_and_say_they_go_in_1_0_0():
    """Issue 61: one input shape. repository/digest/platforms/size/local_blessed given alone (0.1.0's form) still
    work until 1.0.0, as an entry of images (the same checks, the same words) with its result at the top level too,
    and Ansible says each is deprecated."""
    args = {"repository": "nvcr.io/nvidia/pytorch", "digest": D1, "platform": "linux/amd64",
            "platforms": ["linux/arm64"], "docker": "/nonexistent/docker"}
    old = run_module("spark_image_pull", args)
    new = pull_one(args)
    assert old["failed"] and new["failed"] and old["msg"] == new["msg"], (old["msg"], new["msg"])
    assert [i["msg"] for i in old["images"]] == [old["msg"]]
    for option in ("repository", "digest", "platforms"):  # Ansible's own words, on stderr
        assert f"Param '{option}' is deprecated" in old["_stderr"] and "version 1.0.0" in old["_stderr"], option
        assert f"Param '{option}'" not in new["_stderr"], option


def test_an_image_that_would_not_fit_is_refused_before_any_byte_is_pulled(anon, tmp_path):
    pushed = push(anon.url, "disktest/img:1", ["arm64", "amd64"], seed="disk")
    (image,) = run_module("spark_image_resolve", {"images": [
        {"name": "img", "registry": anon.host, "repository": "disktest/img", "tags": ["1"]}]})["images"]
    manifest = json.loads(urllib.request.urlopen(urllib.request.Request(
        f"{anon.url}/v2/disktest/img/manifests/{pushed['platforms']['arm64']}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})).read())
    size = manifest["config"]["size"] + sum(layer["size"] for layer in manifest["layers"])
    assert image["sizes"]["linux/arm64"] == size, "the manifest's config and layers"
    free = shutil.disk_usage("/var/lib/docker").free
    args = {"repository": f"{anon.host}/disktest/img", "digest": pushed["digest"], "size": size,
            "record": str(tmp_path / "pulled.json")}
    refused = pull_one({**args, "headroom_bytes": free + 10 * 1024 ** 3})
    assert refused["failed"]
    assert refused["msg"].startswith(f"not enough disk for {anon.host}/disktest/img@{pushed['digest']}: ")
    assert "Docker's data root /var/lib/docker has" in refused["msg"] and "Nothing was pulled" in refused["msg"]
    ref = f"{anon.host}/disktest/img@{pushed['digest']}"
    assert subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode != 0
    assert anon.requests("GET", f"/v2/disktest/img/blobs/{manifest['layers'][0]['digest']}") == 0, "no byte fetched"
    assert not (tmp_path / "pulled.json").exists()
    try:
        assert pull_one({**args, "headroom_bytes": 0})["pulled"] is True
    finally:
        subprocess.run(["docker", "image", "rm", ref], capture_output=True, check=False)


@pytest.mark.testbed
def test_a_host_logged_in_at_a_path_of_its_own_pulls_with_that_login(tmp_path):
    """Issue 35 (a fleet whose hosts differ per host): spark_images_docker_config set for one host. login.yml wrote
    the credential there but the pull ran with Docker's default file, so a private registry answered the pull
    "no basic auth credentials" on that host alone. The module pulls with the file it is given."""
    import base64

    from registries import Registry, free_port

    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text(subprocess.run(["htpasswd", "-Bbn", "fleet", "s3cret-pull"], capture_output=True, text=True,
                                       check=True).stdout)
    registry = Registry(tmp_path, free_port(), {"htpasswd": {"realm": "sparkfleet", "path": str(htpasswd)}})
    try:
        pushed = push(registry.url, "private/img:v1", ["amd64", "arm64"], seed="own-login", user="fleet",
                      password="s3cret-pull")
        config = tmp_path / "own-docker" / "config.json"
        config.parent.mkdir()
        config.write_text(json.dumps({"auths": {registry.host: {
            "auth": base64.b64encode(b"fleet:s3cret-pull").decode()}}}))
        args = {"repository": f"{registry.host}/private/img", "digest": pushed["digest"],
                "record": str(tmp_path / "pulled.json")}
        ref = f"{args['repository']}@{pushed['digest']}"
        try:
            refused = pull_one(args)
            assert refused.get("failed") and "auth" in refused["msg"].lower(), refused
            pulled = pull_one({**args, "docker_config": str(config)})
            assert (pulled["changed"], pulled["pulled"]) == (True, True), pulled
            assert ref in pulled["repo_digests"]
        finally:
            subprocess.run(["docker", "image", "rm", "-f", ref], capture_output=True, check=False)
    finally:
        registry.stop()

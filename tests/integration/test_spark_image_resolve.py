"""spark_image_resolve against real registries on 127.0.0.1 (anonymous, htpasswd, token auth)."""

from __future__ import annotations

import json
import subprocess
import urllib.request

import pytest
from oci_push import push
from registries import Registry, TokenServer, free_port

from conftest import run_module

pytestmark = pytest.mark.testbed


def resolve(registry_host: str, repository: str, tags: list[str], **params) -> dict:
    return run_module("spark_image_resolve", {
        "images": [{"name": "img", "registry": registry_host, "repository": repository, "tags": tags}], **params})


def test_oci_index_pins_the_index_and_records_each_platforms_manifest(anon):
    pushed = push(anon.url, "nvidia/pytorch:25.11-py3", ["amd64", "arm64"])
    result = resolve(anon.host, "nvidia/pytorch", ["25.11-py3"])
    image = result["images"][0]
    assert image["index_digest"] == pushed["digest"]
    assert image["digests"] == {"linux/amd64": pushed["platforms"]["amd64"],
                                "linux/arm64": pushed["platforms"]["arm64"]}
    assert image["media_type"] == "application/vnd.oci.image.index.v1+json"
    assert image["platforms"] == ["linux/amd64", "linux/arm64"]
    assert image["fallback"] is None


def test_an_index_without_arm64_is_refused(anon):
    push(anon.url, "nvidia/pytorch:amd64-only", ["amd64"])
    result = resolve(anon.host, "nvidia/pytorch", ["amd64-only"])
    assert result["failed"] is True
    assert f"{anon.host}/nvidia/pytorch:amd64-only: no linux/arm64 variant (the index lists linux/amd64)" \
        in result["msg"]
    assert "The lock was not changed" in result["msg"]


def test_a_docker_manifest_list_is_pinned_by_the_lists_digest(anon):
    pushed = push(anon.url, "unsloth/unsloth:dgxspark-latest", ["amd64", "arm64"], list_type="docker")
    # The trap: a client that does not accept the list type gets the amd64 manifest and ITS digest.
    request = urllib.request.Request(f"{anon.url}/v2/unsloth/unsloth/manifests/dgxspark-latest", method="HEAD",
                                     headers={"Accept": "application/vnd.docker.distribution.manifest.v2+json"})
    naive = urllib.request.urlopen(request).headers["Docker-Content-Digest"]
    assert naive == pushed["platforms"]["amd64"]
    image = resolve(anon.host, "unsloth/unsloth", ["dgxspark-latest"])["images"][0]
    assert image["index_digest"] == pushed["digest"] != naive
    assert image["digests"]["linux/arm64"] == pushed["platforms"]["arm64"]


def test_a_single_arm64_manifest_is_its_own_platform_digest_and_amd64_is_refused(anon):
    arm = push(anon.url, "team/tool:arm", ["arm64"], list_type="single")
    image = resolve(anon.host, "team/tool", ["arm"])["images"][0]
    assert image["index_digest"] == image["digests"]["linux/arm64"] == arm["digest"]
    assert list(image["digests"]) == ["linux/arm64"]
    push(anon.url, "team/tool:amd", ["amd64"], list_type="single")
    refused = resolve(anon.host, "team/tool", ["amd"])
    assert "a single-platform image for linux/amd64, no linux/arm64 variant" in refused["msg"]


def test_the_newest_blessed_tag_that_resolves_is_used_and_the_fallback_recorded(anon):
    pushed = push(anon.url, "nvidia/pytorch:25.09-py3", ["amd64", "arm64"])
    image = resolve(anon.host, "nvidia/pytorch", ["26.01-py3", "25.09-py3"])["images"][0]
    assert image["tag"] == "25.09-py3"
    assert image["index_digest"] == pushed["digest"]
    assert image["requested"] == f"{anon.host}/nvidia/pytorch:26.01-py3"
    assert image["fallback"]["wanted"] == "26.01-py3"
    assert image["fallback"]["reasons"] == [f"{anon.host}/nvidia/pytorch:26.01-py3: 404 manifest unknown"]


def test_a_registry_that_is_down_is_a_clear_error():
    result = resolve("127.0.0.1:5119", "nvidia/pytorch", ["25.11-py3", "25.09-py3"], retries=2)
    assert result["failed"] is True
    assert "cannot reach http://127.0.0.1:5119" in result["msg"]
    assert len(result["reasons"]) == 1  # a registry that is down is not a reason to try an older tag


def test_htpasswd_registry(tmp_path):
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text(subprocess.run(["htpasswd", "-Bbn", "fleet", "s3cret"], capture_output=True, text=True,
                                       check=True).stdout)
    registry = Registry(tmp_path, free_port(), {"htpasswd": {"realm": "sparkfleet", "path": str(htpasswd)}})
    try:
        pushed = push(registry.url, "private/img:v1", ["arm64", "amd64"], user="fleet", password="s3cret")
        denied = resolve(registry.host, "private/img", ["v1"])
        assert "asks for a username and password (Basic auth)" in denied["msg"]
        ok = resolve(registry.host, "private/img", ["v1"],
                     credentials={registry.host: {"username": "fleet", "password": "s3cret"}})
        assert ok["images"][0]["index_digest"] == pushed["digest"]
        assert "s3cret" not in json.dumps(ok)
    finally:
        registry.stop()


def test_bearer_token_flow_like_nvcr_and_docker_hub(tmp_path):
    tokens = TokenServer(tmp_path, free_port(), "sparkfleet-test", users={"$oauthtoken": "ngc-api-key"})
    registry = Registry(tmp_path, free_port(), tokens.registry_auth())
    try:
        pushed = push(registry.url, "nvidia/pytorch:25.11-py3", ["amd64", "arm64"],
                      token=tokens.token("repository:nvidia/pytorch:pull,push"))
        anonymous = resolve(registry.host, "nvidia/pytorch", ["25.11-py3"])
        assert "refused a pull token for nvidia/pytorch anonymously (HTTP 401)" in anonymous["msg"]
        ok = resolve(registry.host, "nvidia/pytorch", ["25.11-py3"],
                     credentials={registry.host: {"username": "$oauthtoken", "password": "ngc-api-key"}})
        assert ok["images"][0]["index_digest"] == pushed["digest"]
        assert any("scope=repository%3Anvidia%2Fpytorch%3Apull" in r and "service=sparkfleet-test" in r
                   for r in tokens.requests)
    finally:
        registry.stop()
        tokens.stop()

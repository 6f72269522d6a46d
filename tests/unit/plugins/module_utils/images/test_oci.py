"""References, WWW-Authenticate challenges, index platforms and the architecture map."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._oci import (
    BadReference,
    parse_challenge,
    parse_reference,
    select_platform,
)

D = "sha256:" + "ab" * 32


@pytest.mark.parametrize(("text", "registry", "repository", "tag", "digest", "api"), [
    ("ubuntu", "docker.io", "library/ubuntu", "latest", None, "registry-1.docker.io"),
    ("unsloth/unsloth:dgxspark-latest", "docker.io", "unsloth/unsloth", "dgxspark-latest", None,
     "registry-1.docker.io"),
    ("docker.io/unsloth/unsloth:dgxspark-latest", "docker.io", "unsloth/unsloth", "dgxspark-latest", None,
     "registry-1.docker.io"),
    ("index.docker.io/library/python:3.12", "docker.io", "library/python", "3.12", None, "registry-1.docker.io"),
    ("nvcr.io/nvidia/pytorch:25.09-py3", "nvcr.io", "nvidia/pytorch", "25.09-py3", None, "nvcr.io"),
    ("127.0.0.1:5000/nvidia/pytorch:25.11-py3", "127.0.0.1:5000", "nvidia/pytorch", "25.11-py3", None,
     "127.0.0.1:5000"),
    ("localhost/team/img", "localhost", "team/img", "latest", None, "localhost"),
    (f"nvcr.io/nvidia/pytorch@{D}", "nvcr.io", "nvidia/pytorch", None, D, "nvcr.io"),
    (f"nvcr.io/nvidia/pytorch:25.09-py3@{D}", "nvcr.io", "nvidia/pytorch", "25.09-py3", D, "nvcr.io"),
    ("registry.example:8443/a/b/c:v1", "registry.example:8443", "a/b/c", "v1", None, "registry.example:8443"),
])
def test_references(text, registry, repository, tag, digest, api):
    ref = parse_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest, ref.api_host) == (registry, repository, tag, digest, api)


@pytest.mark.parametrize(("text", "why"), [
    ("", "empty"),
    ("nvcr.io/nvidia/pytorch@sha256:abc", "64 lowercase hex"),
    ("nvcr.io/NVIDIA/pytorch:1", "lowercase components"),
    ("nvcr.io/nvidia/pytorch:bad tag", "contains spaces"),
    ("nvcr.io/nvidia/pytorch:-x", "not a valid tag"),
])
def test_bad_references_say_why(text, why):
    with pytest.raises(BadReference, match=why):
        parse_reference(text)


@pytest.mark.parametrize(("header", "scheme", "params"), [
    ('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
     'scope="repository:unsloth/unsloth:pull"',
     "bearer", {"realm": "https://auth.docker.io/token", "service": "registry.docker.io",
                "scope": "repository:unsloth/unsloth:pull"}),
    ('Bearer realm="https://nvcr.io/proxy_auth?scope=repository:nvidia/pytorch:pull"',
     "bearer", {"realm": "https://nvcr.io/proxy_auth?scope=repository:nvidia/pytorch:pull"}),
    ('Bearer realm="http://127.0.0.1:5001/token", scope="repository:a/b:pull,push", service=local',
     "bearer", {"realm": "http://127.0.0.1:5001/token", "scope": "repository:a/b:pull,push", "service": "local"}),
    ('Basic realm="Registry Realm"', "basic", {"realm": "Registry Realm"}),
])
def test_challenges(header, scheme, params):
    assert parse_challenge(header) == (scheme, params)


def test_platform_selection():
    index = {"manifests": [
        {"digest": "sha256:amd", "platform": {"os": "linux", "architecture": "amd64"}},
        {"digest": "sha256:arm", "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
        {"digest": "sha256:att", "platform": {"os": "unknown", "architecture": "unknown"}},
    ]}
    assert select_platform(index) == ("sha256:arm", ["linux/amd64", "linux/arm64/v8", "unknown/unknown"])
    assert select_platform({"manifests": index["manifests"][:1]}) == (None, ["linux/amd64"])


def test_a_hosts_platform_follows_its_architecture_and_defaults_to_a_sparks():
    from ansible_collections.sparkfleet.spark.plugins.module_utils.images._oci import host_platform

    assert [host_platform(a) for a in ("aarch64", "arm64", "x86_64", "amd64", None, "")] == [
        "linux/arm64", "linux/arm64", "linux/amd64", "linux/amd64", "linux/arm64", "linux/arm64"]


def test_the_toolkit_repositorys_directory_comes_from_the_same_architecture_map():
    from ansible_collections.sparkfleet.spark.plugins.filter.sparkfleet_runtime import spark_debian_architecture

    assert [spark_debian_architecture(a) for a in ("aarch64", "x86_64", "riscv64", None)] == [
        "arm64", "amd64", None, None]

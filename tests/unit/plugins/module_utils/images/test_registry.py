"""The registry client (module_utils/images/_registry.py) against a real HTTP server on 127.0.0.1 that answers as the
distribution API does: 401 challenges (Bearer with realm, service and scope; Basic), a token service, 5xx and 429
with Retry-After, redirects, and manifests and indexes whose digests are the sha256 of their bytes."""

from __future__ import annotations

import base64
import hashlib
import json
import time

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._registry import (
    Registry,
    RegistryError,
    resolve_tag,
)
from fake_http import FakeHTTP

INDEX = "application/vnd.oci.image.index.v1+json"
MANIFEST = "application/vnd.oci.image.manifest.v1+json"


def digest(body: bytes) -> str:
    return "sha256:" + hashlib.sha256(body).hexdigest()


class Served:
    """A distribution API of one repository: `routes` maps (method, path) to a list of answers, used in turn (the
    last one again once they run out); each answer is (status, headers, body) or a function of the request."""

    def __init__(self):
        self.routes: dict[tuple[str, str], list] = {}
        self.http = FakeHTTP(self.answer)
        self.seen, self.host = self.http.seen, self.http.host

    def answer(self, request):
        method = request.command if request.command != "HEAD" else "GET"
        answers = self.routes.get((method, self.seen[-1]["path"])) or [
            (404, {}, b'{"errors": [{"code": "MANIFEST_UNKNOWN"}]}')]
        chosen = answers.pop(0) if len(answers) > 1 else answers[0]
        return chosen(request) if callable(chosen) else chosen

    def registry(self, **options) -> Registry:
        return Registry(self.host, self.host, **options)

    def index_of(self, repository: str, tag: str, platforms=("amd64", "arm64")) -> dict:
        """An OCI index for `platforms`, each manifest with a config and a layer of known sizes."""
        manifests = []
        for arch in platforms:
            manifest = json.dumps({"schemaVersion": 2, "mediaType": MANIFEST, "config": {"size": 100},
                                   "layers": [{"size": 1000}, {"size": 24}]}).encode()
            self.routes[("GET", f"/v2/{repository}/manifests/{digest(manifest)}")] = [
                (200, {"Content-Type": MANIFEST}, manifest)]
            manifests.append({"mediaType": MANIFEST, "digest": digest(manifest), "size": len(manifest),
                              "platform": {"os": "linux", "architecture": arch}})
        body = json.dumps({"schemaVersion": 2, "mediaType": INDEX, "manifests": manifests}).encode()
        self.routes[("GET", f"/v2/{repository}/manifests/{tag}")] = [
            (200, {"Content-Type": INDEX, "Docker-Content-Digest": digest(body)}, body)]
        return {"digest": digest(body), "arm64": manifests[-1]["digest"]}

    def close(self):
        self.http.close()  # the listening socket too: a connection is then refused, not left waiting


@pytest.fixture
def served():
    server = Served()
    yield server
    server.close()


def test_a_tag_resolves_to_the_index_digest_each_platforms_manifest_and_size(served):
    expected = served.index_of("nvidia/pytorch", "25.11-py3")
    registry = served.registry()
    found = resolve_tag(registry, "nvidia/pytorch", "25.11-py3")
    assert (found["index_digest"], found["digests"]["linux/arm64"], found["media_type"]) == (
        expected["digest"], expected["arm64"], INDEX)
    assert set(found["digests"]) == {"linux/amd64", "linux/arm64"}, "each platform's manifest, keyed by platform"
    assert found["platforms"] == ["linux/amd64", "linux/arm64"]
    assert found["sizes"] == {"linux/amd64": 1124, "linux/arm64": 1124}
    head = served.seen[0]
    assert head["method"] == "HEAD" and all(t in head["headers"]["Accept"] for t in (
        INDEX, MANIFEST, "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.docker.distribution.manifest.v2+json")), "all four manifest types asked for"
    assert registry.requests == len(served.seen)


# The lock's fields that come from elsewhere than the registry's answer: the catalog's (what was asked), the
# resolution's own when it falls back, and those the writer adds (resolved_at) or the derived images' build.
NOT_FROM_THE_REGISTRY = {"requested", "registry", "repository", "tag", "fallback", "resolved_at", "derived"}


def test_every_field_of_the_lock_that_the_registry_answers_is_set_by_resolve_tag(served):
    """Issue 61, item 2: a field added to FIELDS but never set where a tag is resolved passed every test, and every
    lock would have held it null."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.images._lock import FIELDS

    served.index_of("nvidia/pytorch", "25.11-py3")
    found = resolve_tag(served.registry(), "nvidia/pytorch", "25.11-py3")
    unset = [f for f in FIELDS if f not in NOT_FROM_THE_REGISTRY and found.get(f) in (None, {}, [])]
    assert unset == [], (f"FIELDS of _lock.py has {unset}, which resolve_tag in _registry.py never sets: set it "
                         "there from the registry's answer, or name where it comes from in NOT_FROM_THE_REGISTRY")


def test_an_index_without_arm64_and_a_missing_tag_are_refused_saying_what_came_back(served):
    served.index_of("nvidia/pytorch", "amd64-only", platforms=("amd64",))
    with pytest.raises(RegistryError, match=r"no linux/arm64 variant \(the index lists linux/amd64\)"):
        resolve_tag(served.registry(), "nvidia/pytorch", "amd64-only")
    with pytest.raises(RegistryError, match=r"nvidia/pytorch:gone: 404 manifest unknown") as missing:
        resolve_tag(served.registry(), "nvidia/pytorch", "gone")
    assert missing.value.transient is False


def test_a_bearer_challenge_is_answered_with_one_token_per_repository(served):
    realm = f"http://{served.host}/token"
    challenge = f'Bearer realm="{realm}",service="registry.test",scope="repository:nvidia/pytorch:pull"'
    expected = served.index_of("nvidia/pytorch", "25.11-py3")
    guarded = {key: list(value) for key, value in served.routes.items()}

    def guard(answers):
        def answer(request):
            if request.headers.get("Authorization") != "Bearer t-123":
                return 401, {"WWW-Authenticate": challenge}, b""
            return answers[0]
        return answer

    for key, answers in guarded.items():
        served.routes[key] = [guard(answers)]
    served.routes[("GET", "/token")] = [(200, {}, json.dumps({"token": "t-123"}).encode())]
    registry = served.registry(credentials={served.host: {"username": "$oauthtoken", "password": "nvapi-k"}})
    assert resolve_tag(registry, "nvidia/pytorch", "25.11-py3")["index_digest"] == expected["digest"]
    tokens = [r for r in served.seen if r["path"] == "/token"]
    assert len(tokens) == 1, "one token for every request of the repository"
    assert tokens[0]["query"] == {"scope": ["repository:nvidia/pytorch:pull"], "service": ["registry.test"]}
    assert tokens[0]["headers"]["Authorization"] == "Basic " + base64.b64encode(b"$oauthtoken:nvapi-k").decode()


def test_a_basic_challenge_needs_credentials_and_gets_them(served):
    body = json.dumps({"schemaVersion": 2}).encode()
    served.routes[("GET", "/v2/private/manifests/v1")] = [
        lambda r: (200, {"Content-Type": MANIFEST}, body) if r.headers.get("Authorization") else
        (401, {"WWW-Authenticate": 'Basic realm="private"'}, b"")]
    with pytest.raises(RegistryError, match=r"asks for a username and password \(Basic auth\); set them in "
                                            r"spark_images_registry_credentials"):
        served.registry().request("GET", "private", "manifests/v1")
    status, _headers, got = served.registry(credentials={served.host: {"username": "u", "password": "p"}}).request(
        "GET", "private", "manifests/v1")
    assert (status, got) == (200, body)
    assert served.seen[-1]["headers"]["Authorization"] == "Basic " + base64.b64encode(b"u:p").decode()


def test_5xx_is_retried_with_backoff_and_the_last_answer_stands(served):
    body = b"{}"
    served.routes[("GET", "/v2/r/manifests/t")] = [(503, {}, b""), (502, {}, b""), (200, {}, body)]
    status, _headers, _body = served.registry(retries=3).request("GET", "r", "manifests/t")
    assert status == 200 and len(served.seen) == 3
    served.routes[("GET", "/v2/r/manifests/u")] = [(503, {}, b"")]
    assert served.registry(retries=1).request("GET", "r", "manifests/u")[0] == 503


def test_retry_after_is_waited_out_up_to_its_limit_and_refused_past_it(served):
    served.routes[("GET", "/v2/r/manifests/t")] = [(429, {"Retry-After": "1"}, b""), (200, {}, b"{}")]
    started = time.monotonic()
    assert served.registry().request("GET", "r", "manifests/t")[0] == 200
    assert time.monotonic() - started >= 0.9, "the registry's Retry-After, not the backoff's 0.5 s"
    served.routes[("GET", "/v2/r/manifests/u")] = [(429, {"Retry-After": "3600"}, b"")]
    with pytest.raises(RegistryError, match=r"asks to wait 3600 s, longer than retry_after_max \(60 s\)"):
        served.registry(retry_after_max=60).request("GET", "r", "manifests/u")


def test_a_refused_connection_is_transient_and_says_where(served):
    host = served.host
    served.close()
    with pytest.raises(RegistryError, match=f"cannot reach http://{host}") as down:
        Registry(host, host, retries=2).request("GET", "r", "manifests/t")
    assert down.value.transient is True


def test_a_redirect_to_another_origin_gets_no_authorization(served):
    other = Served()
    try:
        body = b'{"schemaVersion": 2}'
        other.routes[("GET", "/blob")] = [(200, {"Content-Type": MANIFEST}, body)]
        served.routes[("GET", "/v2/r/manifests/t")] = [(307, {"Location": f"http://{other.host}/blob"}, b"")]
        registry = served.registry()
        registry.auth["r"] = "Bearer secret-token"
        status, _headers, got = registry.request("GET", "r", "manifests/t")
        assert (status, got) == (200, body)
        assert served.seen[-1]["headers"].get("Authorization") == "Bearer secret-token"
        assert "Authorization" not in other.seen[-1]["headers"], "the token stays with its origin"
    finally:
        other.close()


# Issue 56, item 5: each suspicion of the review, attacked.
def test_an_answer_larger_than_any_manifest_or_token_is_refused_without_reading_it_whole(served):
    """Suspected: manifests and token bodies read with no size bound. Proved (a 6 MiB answer was read whole), fixed:
    a body is read up to 4 MiB, the distribution spec's limit for a manifest."""
    huge = b"{" + b" " * (6 * 2**20) + b"}"
    served.routes[("GET", "/v2/nvidia/pytorch/manifests/25.11-py3")] = [(200, {"Content-Type": INDEX}, huge)]
    with pytest.raises(RegistryError, match=r"/v2/nvidia/pytorch/manifests/25.11-py3 answered more than 4 MiB"):
        served.registry().request("GET", "nvidia/pytorch", "manifests/25.11-py3")


def test_a_registry_elsewhere_that_names_a_loopback_token_service_never_gets_the_credentials_sent_there(served):
    """Suspected: a Bearer realm on any loopback host received the Basic credentials, whatever the registry. Proved
    for a registry off this machine (a local user listening there would have them); fixed: refused, nothing sent.
    A registry on the loopback itself (the test bed's) still gets its token there."""
    realm = f"http://{served.host}/token"
    served.routes[("GET", "/v2/nvidia/pytorch/manifests/25.11-py3")] = [
        (401, {"WWW-Authenticate": f'Bearer realm="{realm}",service="x"'}, b"")]
    served.routes[("GET", "/token")] = [(200, {}, json.dumps({"token": "t"}).encode())]
    elsewhere = Registry("registry.example.com", served.host, credentials={
        "registry.example.com": {"username": "u", "password": "secret"}}, plain_http=["registry.example.com"])
    with pytest.raises(RegistryError, match=r"is on this machine's loopback, which no registry elsewhere serves"):
        elsewhere.request("GET", "nvidia/pytorch", "manifests/25.11-py3")
    assert [r for r in served.seen if r["path"] == "/token"] == [], "the credentials went nowhere"

"""Credentials go only to the host (and scheme) they belong to: a registry and a GitHub-like API of the test's own
on 127.0.0.1 redirect, or page, to a second loopback address (127.0.0.2) that records what it is sent and must
see no credential. Real HTTP through the modules' own clients (spark_image_resolve, the advisories' client)."""

from __future__ import annotations

import base64
import json

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._advisories import AdvisoryError, github_issues
from fake_http import FakeHTTP

from conftest import run_module

PASSWORD = "planted-registry-password-77e1"
TOKEN = "ghp_planted_token_0c3f9a"


@pytest.fixture
def elsewhere():
    server = FakeHTTP(lambda _request: (404, {}, {"errors": []}), address="127.0.0.2")
    yield server
    server.close()


def test_a_registry_redirect_to_another_host_gets_no_credential(elsewhere):
    expected = "Basic " + base64.b64encode(f"fleet:{PASSWORD}".encode()).decode()

    def registry(handler):
        if handler.headers.get("Authorization") != expected:
            return 401, {"WWW-Authenticate": 'Basic realm="sparkfleet"'}, b""
        return 307, {"Location": f"{elsewhere.url}{handler.path}"}, b""

    origin = FakeHTTP(registry)
    try:
        result = run_module("spark_image_resolve", {
            "images": [{"name": "img", "registry": origin.netloc, "repository": "nvidia/pytorch",
                        "tags": ["25.11-py3"]}],
            "credentials": {origin.netloc: {"username": "fleet", "password": PASSWORD}}, "retries": 1})
    finally:
        origin.close()
    assert any(r["headers"].get("authorization") == expected for r in origin.seen), "the registry got its credential"
    assert elsewhere.seen, "the redirect was followed"
    assert [r for r in elsewhere.seen if "authorization" in r["headers"]] == []
    assert PASSWORD not in json.dumps(result)


def test_a_next_page_on_another_host_gets_no_token_and_http_never_gets_one(elsewhere):
    def api(handler):
        link = f'<{elsewhere.url}/repos/NVIDIA/dgx-spark-playbooks/issues?page=2>; rel="next"'
        return 200, {"Content-Type": "application/json", "Link": link}, b"[]"

    origin = FakeHTTP(api)
    try:
        with pytest.raises(AdvisoryError):  # page 2 answers 404 there: what matters is what it was sent
            github_issues(origin.url, "NVIDIA/dgx-spark-playbooks", "2026-12-01", token=TOKEN, timeout=5)
    finally:
        origin.close()
    assert origin.seen[0]["headers"]["authorization"] == f"Bearer {TOKEN}"
    assert elsewhere.seen and [r for r in elsewhere.seen if "authorization" in r["headers"]] == []
    with pytest.raises(AdvisoryError, match="GITHUB_TOKEN is never sent over plain http"):
        github_issues("http://api.github.invalid", "NVIDIA/dgx-spark-playbooks", "2026-12-01", token=TOKEN)

"""Registry faults: 429 Too Many Requests (as Docker Hub answers past its pull limit), and a pull cut off.

The registry is the real one (Debian's docker-registry) behind a small proxy on 127.0.0.1 that answers
429 with a Retry-After to the first manifest requests, or holds blob downloads, then passes everything
through: what a rate limit looks like to the controller's resolution (`sparkfleet pin`) and to a host's
`docker pull`, and a pull interrupted half-way (Ctrl-C, a dropped link).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from fake_http import FakeHTTP
from oci_push import push

from conftest import BIN, REPO, ansible_env, pull_one, run_module

pytestmark = pytest.mark.testbed


class Limiter:
    """127.0.0.1:<port> in front of `upstream`: the first `limited` manifest requests get 429 + Retry-After;
    blob downloads wait `blob_delay` seconds first."""

    def __init__(self, upstream: str, limited: int = 0, retry_after: str = "1", blob_delay: float = 0) -> None:
        self.limited, self.blob_delay, self.upstream, self.retry_after = limited, blob_delay, upstream, retry_after
        self.http = FakeHTTP(self.relay)
        self.seen, self.host = self.http.seen, self.http.host

    def relay(self, request):
        if "/manifests/" in request.path and self.limited > 0:
            self.limited -= 1
            return 429, {"Retry-After": self.retry_after}, {"errors": [
                {"code": "TOOMANYREQUESTS", "message": "You have reached your pull rate limit."}]}
        if "/blobs/" in request.path and request.command == "GET" and self.blob_delay:
            time.sleep(self.blob_delay)
        headers = {k: ", ".join(request.headers.get_all(k)) for k in set(request.headers.keys()) if k != "Host"}
        forwarded = urllib.request.Request(self.upstream + request.path, data=self.seen[-1]["body"] or None,
                                           method=request.command, headers=headers)
        try:
            response = urllib.request.urlopen(forwarded, timeout=30)
        except urllib.error.HTTPError as exc:
            response = exc
        body = response.read()
        return (response.status if hasattr(response, "status") else response.code,
                {k: v for k, v in response.headers.items()
                 if k.lower() not in ("transfer-encoding", "connection", "content-length")}, body)

    def close(self) -> None:
        self.http.close()


def resolve(host: str) -> dict:
    return run_module("spark_image_resolve", {"images": [
        {"name": "ngc", "registry": host, "repository": "nvidia/pytorch", "tags": ["25.11-py3"]}]})


def test_pin_waits_out_a_short_retry_after_and_refuses_a_long_one_at_once(anon):
    pushed = push(anon.url, "nvidia/pytorch:25.11-py3", ["arm64", "amd64"], seed="rate-limit")
    limiter = Limiter(anon.url, limited=1, retry_after="2")
    try:
        result = resolve(limiter.host)
        assert result["images"][0]["index_digest"] == pushed["digest"], result
        limited_at, retried_at = [s["at"] for s in limiter.seen if "/manifests/" in s["path"]][:2]
        assert retried_at - limited_at >= 2, "the registry's Retry-After was honoured"
    finally:
        limiter.close()
    limiter = Limiter(anon.url, limited=5, retry_after="3600")
    try:
        started = time.monotonic()
        result = resolve(limiter.host)
        assert time.monotonic() - started < 30, "an hour's Retry-After is not slept through"
        assert result["failed"]
        assert (f"{limiter.host} rate-limits this client (HTTP 429) and asks to wait 3600 s, longer than "
                "retry_after_max (60 s)") in result["msg"]
        assert "The lock was not changed" in result["msg"]
        assert len([s for s in limiter.seen if "/manifests/" in s["path"]]) == 1, "no hammering"
    finally:
        limiter.close()


def test_a_rate_limited_pull_says_why_and_what_to_do(anon, tmp_path):
    pushed = push(anon.url, "unsloth/unsloth:dgxspark-latest", ["arm64", "amd64"], list_type="docker",
                  seed="rate-limit")
    limiter = Limiter(anon.url, limited=100, retry_after="60")
    try:
        result = pull_one({"repository": f"{limiter.host}/unsloth/unsloth",
                           "digest": pushed["digest"], "record": str(tmp_path / "r.json")})
        assert result["failed"]
        assert "the registry rate-limits pulls (HTTP 429" in result["msg"]
        assert "spark_images_registry_credentials" in result["msg"] and "spark_images_mirrors" in result["msg"]
        assert subprocess.run(["docker", "image", "inspect", f"{limiter.host}/unsloth/unsloth@{pushed['digest']}"],
                              capture_output=True).returncode != 0
    finally:
        limiter.close()


def test_a_pull_cut_off_half_way_leaves_nothing_half_pulled_and_the_next_run_completes_it(anon, tmp_path):
    pushed = push(anon.url, "cutoff/img:1", ["arm64", "amd64"], seed="cut-off")
    slow = Limiter(anon.url, blob_delay=15)
    record = tmp_path / "pulled.json"
    args = {"repository": f"{slow.host}/cutoff/img", "digest": pushed["digest"], "record": str(record)}
    ref = f"{slow.host}/cutoff/img@{pushed['digest']}"
    try:
        run = subprocess.Popen([str(BIN / "ansible"), "localhost", "-c", "local", "-i", "localhost,", "-m",
                                "sparkfleet.spark.spark_image_pull", "-a",
                                json.dumps({"images": [{"name": "img", "repository": args["repository"],
                                                        "digest": args["digest"]}], "record": args["record"]}),
                                "-e", f"ansible_python_interpreter={sys.executable}"],
                               cwd=REPO, env=ansible_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
        for _ in range(300):
            if any("/blobs/" in s["path"] for s in slow.seen):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the pull never reached a blob: {slow.seen}")
        os.killpg(run.pid, signal.SIGINT)  # Ctrl-C in the middle of the download
        run.wait(timeout=30)
        assert run.returncode != 0
        time.sleep(1)
        assert subprocess.run(["docker", "image", "inspect", ref], capture_output=True).returncode != 0, \
            "no half-pulled image under the locked digest"
        assert not record.exists(), "not recorded as pulled"
        slow.blob_delay = 0  # the link is back
        again = pull_one(args)
        assert again["pulled"] is True and again["ref"] == ref
        assert json.loads(record.read_text()) == [ref]
        assert pull_one(args)["changed"] is False, "complete: the next run pulls nothing"
    finally:
        slow.close()
        subprocess.run(["docker", "image", "rm", ref], capture_output=True, check=False)

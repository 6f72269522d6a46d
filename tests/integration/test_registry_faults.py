"""Registry faults: 429 Too Many Requests (as Docker Hub answers past its pull limit), and a pull cut off.

The registry is the real one (Debian's docker-registry) behind a small proxy on 127.0.0.1 that answers
429 with a Retry-After to the first manifest requests, or holds blob downloads, then passes everything
through: what a rate limit looks like to the controller's resolution (`sparkfleet pin`) and to a host's
`docker pull`, and a pull interrupted half-way (Ctrl-C, a dropped link).
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pytest
from oci_push import push

from conftest import BIN, REPO, ansible_env, run_module

pytestmark = pytest.mark.testbed


class Limiter:
    """127.0.0.1:<port> in front of `upstream`: the first `limited` manifest requests get 429 + Retry-After;
    blob downloads wait `blob_delay` seconds first."""

    def __init__(self, upstream: str, limited: int = 0, retry_after: str = "1", blob_delay: float = 0) -> None:
        self.limited, self.seen, self.blob_delay = limited, [], blob_delay
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _relay(self):
                outer.seen.append((self.command, self.path, time.monotonic()))
                if "/manifests/" in self.path and outer.limited > 0:
                    outer.limited -= 1
                    body = (b'{"errors":[{"code":"TOOMANYREQUESTS","message":"You have reached your pull rate '
                            b'limit."}]}')
                    self.send_response(429)
                    self.send_header("Retry-After", retry_after)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                if "/blobs/" in self.path and self.command == "GET" and outer.blob_delay:
                    time.sleep(outer.blob_delay)
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length) if length else None
                headers = {k: ", ".join(self.headers.get_all(k)) for k in set(self.headers.keys()) if k != "Host"}
                request = urllib.request.Request(upstream + self.path, data=data, method=self.command,
                                                 headers=headers)
                try:
                    response = urllib.request.urlopen(request, timeout=30)
                except urllib.error.HTTPError as exc:
                    response = exc
                body = response.read()
                self.send_response(response.status if hasattr(response, "status") else response.code)
                for key, value in response.headers.items():
                    if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = _relay

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def resolve(host: str) -> dict:
    return run_module("spark_image_resolve", {"images": [
        {"name": "ngc", "registry": host, "repository": "nvidia/pytorch", "tags": ["25.11-py3"]}]})


def test_pin_waits_out_a_short_retry_after_and_refuses_a_long_one_at_once(anon):
    pushed = push(anon.url, "nvidia/pytorch:25.11-py3", ["arm64", "amd64"], seed="rate-limit")
    limiter = Limiter(anon.url, limited=1, retry_after="2")
    try:
        result = resolve(limiter.host)
        assert result["images"][0]["index_digest"] == pushed["digest"], result
        (_, _, limited_at), (_, _, retried_at) = [s for s in limiter.seen if "/manifests/" in s[1]][:2]
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
        assert len([s for s in limiter.seen if "/manifests/" in s[1]]) == 1, "no hammering"
    finally:
        limiter.close()


def test_a_rate_limited_pull_says_why_and_what_to_do(anon, tmp_path):
    pushed = push(anon.url, "unsloth/unsloth:dgxspark-latest", ["arm64", "amd64"], list_type="docker",
                  seed="rate-limit")
    limiter = Limiter(anon.url, limited=100, retry_after="60")
    try:
        result = run_module("spark_image_pull", {"repository": f"{limiter.host}/unsloth/unsloth",
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
                                "sparkfleet.spark.spark_image_pull", "-a", json.dumps(args),
                                "-e", f"ansible_python_interpreter={sys.executable}"],
                               cwd=REPO, env=ansible_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
        for _ in range(300):
            if any("/blobs/" in path for _, path, _ in slow.seen):
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
        again = run_module("spark_image_pull", args)
        assert again["pulled"] is True and again["ref"] == ref
        assert json.loads(record.read_text()) == [ref]
        assert run_module("spark_image_pull", args)["changed"] is False, "complete: the next run pulls nothing"
    finally:
        slow.close()
        subprocess.run(["docker", "image", "rm", ref], capture_output=True, check=False)

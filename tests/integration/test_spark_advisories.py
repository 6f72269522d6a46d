"""Upstream advisories end to end: the module's warnings, strict mode, and the upstream check against a
local HTTP server that answers like GitHub's issues API (pages with Link headers, pull requests mixed in,
a rate limit with Retry-After, an unreachable API). No test leaves 127.0.0.1."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._advisories import AdvisoryError, github_issues
from fake_http import FakeHTTP
from pty_screen import Screen

from conftest import BIN, REPO, SHOW_INVOCATION, run_module

ADVISORIES = str(REPO / "matrix" / "advisories.yml")
TOKEN = "planted-github-token-7e1f"


def issue(number: int, pull: bool = False) -> dict:
    item = {"number": number, "title": f"issue {number}", "state": "open",
            "html_url": f"https://github.com/NVIDIA/dgx-spark-playbooks/issues/{number}",
            "created_at": "2026-12-02T10:00:00Z", "updated_at": "2026-12-02T10:00:00Z"}
    if pull:
        item["pull_request"] = {"url": "..."}
    return item


class GitHubLike:
    """Two pages of issues (one pull request among them); the first request may be rate-limited (rate_limit: a
    Retry-After value). `requests`: each one's path, query and Authorization header."""

    def __init__(self):
        self.rate_limit: str | None = None
        self.http = FakeHTTP(self.answer)
        self.url = self.http.url

    @property
    def requests(self) -> list[dict]:
        return [{"path": r["path"], "query": r["query"], "auth": r["headers"].get("Authorization")}
                for r in self.http.seen]

    def answer(self, request):
        if self.rate_limit and len(self.http.seen) == 1:
            return 429, {"Retry-After": self.rate_limit}, b""
        page = int(self.http.seen[-1]["query"].get("page", ["1"])[0])
        body = [issue(112), issue(111, pull=True), issue(110)] if page == 1 else [issue(108)]
        headers = {}
        if page == 1:
            base = f"{self.url}{self.http.seen[-1]['path']}"
            headers["Link"] = f'<{base}?since=x&page=2>; rel="next", <{base}?since=x&page=2>; rel="last"'
        return 200, headers, body


@pytest.fixture
def api():
    server = GitHubLike()
    yield server, server.url
    server.http.close()


def test_every_page_is_read_and_pull_requests_are_left_out(api):
    handler, url = api
    answer = github_issues(url, "NVIDIA/dgx-spark-playbooks", "2026-12-01", token=TOKEN)
    assert [i["number"] for i in answer["issues"]] == [112, 110, 108]
    assert answer["pages"] == 2 and answer["truncated"] is False
    first = handler.requests[0]
    assert first["path"] == "/repos/NVIDIA/dgx-spark-playbooks/issues"
    assert first["query"]["since"] == ["2026-12-01T00:00:00Z"] and first["query"]["state"] == ["all"]
    assert first["auth"] == f"Bearer {TOKEN}", "the token goes in a header"
    assert all(TOKEN not in json.dumps(r["query"]) for r in handler.requests), "never in the URL"


def test_a_short_rate_limit_is_waited_out(api):
    handler, url = api
    handler.rate_limit = "1"
    started = time.monotonic()
    answer = github_issues(url, "NVIDIA/dgx-spark-playbooks", "2026-12-01")
    assert time.monotonic() - started >= 1
    assert answer["waited_s"] == 1 and [i["number"] for i in answer["issues"]] == [112, 110, 108]


def test_a_long_rate_limit_says_when_and_what_to_do(api):
    handler, url = api
    handler.rate_limit = "3600"
    with pytest.raises(AdvisoryError, match=r"rate-limited .*HTTP 429.*wait 3600 s.*set GITHUB_TOKEN"):
        github_issues(url, "NVIDIA/dgx-spark-playbooks", "2026-12-01")


def test_an_unreachable_api_changes_nothing_and_says_so():
    with pytest.raises(AdvisoryError, match=r"could not reach http://127.0.0.1:9 .*Nothing was changed"):
        github_issues("http://127.0.0.1:9", "NVIDIA/dgx-spark-playbooks", "2026-12-01", timeout=3)


def test_the_module_warns_about_what_is_about_to_be_used_and_strict_fails():
    images = [{"repository": "unsloth/unsloth", "tag": "dgxspark-latest", "index_digest": "sha256:" + "0" * 64}]
    warned = run_module("spark_advisories", {"path": ADVISORIES, "images": images, "today": "2026-12-02"})
    assert not warned["failed"]
    assert [a["id"] for a in warned["affected"]] == ["unsloth-10491"]
    assert warned["lines"][0].startswith("advisory unsloth-10491 affects image unsloth/unsloth:dgxspark-latest")
    strict = run_module("spark_advisories", {"path": ADVISORIES, "images": images, "strict": True})
    assert strict["failed"] and strict["msg"].startswith("affected by upstream advisories (spark_advisories_strict)")
    stale = run_module("spark_advisories", {"path": ADVISORIES, "today": "2027-12-01"})
    assert stale["age"]["stale"] is True and "365 days ago" in stale["age"]["message"]


def test_sparkfleet_advisories_check_lists_the_issues_and_keeps_the_token_out_of_the_report(api, tmp_path):
    handler, url = api
    report = tmp_path / "report"
    # -vvv: the most a run shows (module arguments, environment names); the token must be in none of it.
    proc = subprocess.run([str(BIN / "sparkfleet"), "advisories", "check", "-e", f"advisories_api_url={url}",
                           "--plain", "-vvv", "--report-dir", str(report)], cwd=REPO, capture_output=True, text=True,
                          check=False, env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}",
                                            "GITHUB_TOKEN": TOKEN, **SHOW_INVOCATION})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "3 issue(s) of NVIDIA/dgx-spark-playbooks created or updated since 2026-12-01" in proc.stdout
    assert "#112 2026-12-02 open: issue 112 https://github.com/NVIDIA/dgx-spark-playbooks/issues/112" in proc.stdout
    assert handler.requests[0]["auth"] == f"Bearer {TOKEN}"
    leaked = [str(p) for p in report.rglob("*") if p.is_file() and TOKEN.encode() in p.read_bytes()]
    assert any(report.glob("artifacts/run/job_events/*.json")), "the runner's artifacts were searched too"
    assert leaked == [] and TOKEN not in proc.stdout + proc.stderr


def test_the_readmes_advisories_check_at_an_80_column_terminal_from_a_directory_of_the_users(api, tmp_path):
    """`sparkfleet advisories check` as the README shows it, typed at a pty of 80 columns in a directory of the
    user's own (no -i: the controller check needs no inventory), the API pointed at the test's stand-in: the
    issues on the screen, whole, and the reports line."""
    _handler, url = api
    home = tmp_path / "home"
    home.mkdir()
    screen = Screen(["advisories", "check", "-e", f"advisories_api_url={url}"], home, columns=80,
                    GITHUB_TOKEN=TOKEN).wait()
    assert screen.rc == 0 and "Traceback" not in screen.text, screen.text[-3000:]
    flat = " ".join(screen.text.split())
    assert "3 issue(s) of NVIDIA/dgx-spark-playbooks created or updated since 2026-12-01" in flat
    assert "#112 2026-12-02 open: issue 112" in flat
    reports = next(line for line in screen.lines() if line.startswith("reports: "))
    written = re.search(r"(\S*report\.md)", reports).group(1)
    assert (home / written).is_file(), reports
    assert TOKEN not in screen.raw

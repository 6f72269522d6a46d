"""The real monitoring parts on the loopback, for the tests: Debian's node_exporter serving a textfile folder and
Debian's Prometheus scraping it every second with monitoring/'s alert rules (testbed/tools.sh installs both).
Each on a free port of 127.0.0.1, its data in a temporary folder, stopped at the end."""

from __future__ import annotations

import contextlib
import json
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "monitoring" / "sparkfleet-alerts.yml"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as answer:
        return json.loads(answer.read())


def _wait(what: str, check, deadline: float = 60) -> object:
    end = time.monotonic() + deadline
    last = None
    while time.monotonic() < end:
        try:
            last = check()
            if last:
                return last
        except OSError as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"{what}: not within {deadline} s (last: {last!r})")


class Stack:
    def __init__(self, textfiles: Path, work: Path):
        self.textfiles, self.work = textfiles, work
        self.exporter_port, self.prometheus_port = _free_port(), _free_port()
        self.url = f"http://127.0.0.1:{self.prometheus_port}"

    def alerts(self) -> list[dict]:
        """Prometheus' own answer: each alert pending or firing, {alertname, host, state, ...}."""
        return [{**a["labels"], "state": a["state"]} for a in _get(f"{self.url}/api/v1/alerts")["data"]["alerts"]]

    def query(self, expr: str) -> list[dict]:
        return _get(f"{self.url}/api/v1/query?query={urllib.parse.quote(expr)}")["data"]["result"]

    def wait_for(self, what: str, check, deadline: float = 60):
        return _wait(what, check, deadline)


@contextlib.contextmanager
def running(textfiles: Path, work: Path):
    stack = Stack(textfiles, work)
    config = work / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(RULES)],
        "scrape_configs": [{"job_name": "sparkfleet",
                            "static_configs": [{"targets": [f"127.0.0.1:{stack.exporter_port}"]}]}]}))
    logs = {name: open(work / f"{name}.log", "w") for name in ("node-exporter", "prometheus")}  # noqa: SIM115
    exporter = subprocess.Popen(
        ["/usr/bin/prometheus-node-exporter", "--collector.disable-defaults", "--collector.textfile",
         f"--collector.textfile.directory={textfiles}", f"--web.listen-address=127.0.0.1:{stack.exporter_port}"],
        stdout=logs["node-exporter"], stderr=subprocess.STDOUT)
    prometheus = subprocess.Popen(
        ["/usr/bin/prometheus", f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
         f"--web.listen-address=127.0.0.1:{stack.prometheus_port}", "--web.enable-lifecycle"],
        stdout=logs["prometheus"], stderr=subprocess.STDOUT, cwd=work)
    try:
        stack.wait_for("Prometheus scraping node_exporter", lambda: any(
            t["health"] == "up" for t in _get(f"{stack.url}/api/v1/targets")["data"]["activeTargets"]))
        yield stack
    finally:
        for process in (prometheus, exporter):
            process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=20)
            if process.poll() is None:
                process.kill()
        for log in logs.values():
            log.close()

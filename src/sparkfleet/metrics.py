"""The fleet as Prometheus metrics: what a report.json says of each host (reached, verdict, drift by kind, each
image's locked and running digest where they differ, its matrix's staleness) and of the run itself (when, how
long, its exit code), in Prometheus' text format, for node_exporter's textfile collector
(`sparkfleet report --metrics FILE`). The alert rules that read them ship in monitoring/.

Names follow Prometheus' naming guide (`sparkfleet_` prefix, base units, `_seconds`, `_timestamp_seconds`); every
label value is bounded: a host of the inventory, one of a fixed set (verdict, kind), an image of the catalog, a
digest. No free text is a label. The file is written whole or not at all, as every file sparkfleet writes.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from sparkfleet.collection_home import collection_module

VERDICTS = ("ok", "failed", "not verified", "unknown")
DRIFT_KINDS = ("image", "launcher", "venv", "runtime")


class MetricsError(Exception):
    """The metrics cannot be written where asked; str() says why and what to do."""


def _epoch(text: str | None) -> float | None:
    try:
        return datetime.datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


def registry(data: dict) -> CollectorRegistry:
    """The metrics of one report (report.json's data)."""
    found = CollectorRegistry()
    host_labels = ("host", "simulated")

    def gauge(name: str, text: str, labels: tuple[str, ...] = ()) -> Gauge:
        return Gauge(name, text, labels, registry=found)

    finished = _epoch(data.get("finished_at"))
    run_time = gauge("sparkfleet_run_timestamp_seconds", "When the sparkfleet run this file is made of ended.",
                     ("command",))
    run_duration = gauge("sparkfleet_run_duration_seconds", "How long the sparkfleet run took.", ("command",))
    run_exit = gauge("sparkfleet_run_exit_code", "The sparkfleet run's exit code (0 ok, 2 a host failed, 3 "
                     "unreachable, 4 bad input, 5 another run held the lock, 130 cancelled).", ("command",))
    run_ok = gauge("sparkfleet_run_success", "1 where the sparkfleet run ended with exit code 0, else 0.",
                   ("command",))
    command = str(data.get("command") or "unknown")
    if finished is not None:
        run_time.labels(command).set(finished)
    run_duration.labels(command).set(float(data.get("duration_s") or 0))
    run_exit.labels(command).set(int(data.get("exit_code") or 0))
    run_ok.labels(command).set(1 if int(data.get("exit_code") or 0) == 0 else 0)
    up = gauge("sparkfleet_host_up", "1 where the run reached the host, else 0.", host_labels)
    verdict_g = gauge("sparkfleet_host_verdict", "1 for the host's verification verdict in the run, 0 for the "
                      "others (ok, failed, not verified, unknown).", (*host_labels, "verdict"))
    drift_g = gauge("sparkfleet_host_drift", "How many ways the host differs from the lock, the matrix or a "
                    "registered runtime, by kind (image, launcher, venv, runtime).", (*host_labels, "kind"))
    image_g = gauge("sparkfleet_image_drift", "1 for each image of the host that is not as the lock pins it, "
                    "with the locked and the running digest (empty where none).",
                    (*host_labels, "image", "kind", "locked", "running"))
    failures_g = gauge("sparkfleet_host_failures", "How many failures the run reported for the host.", host_labels)
    verified_g = gauge("sparkfleet_host_last_verified_timestamp_seconds", "When the host last verified ok (the end "
                       "of this run, where it did).", host_labels)
    stale_g = gauge("sparkfleet_venv_matrix_stale", "1 where the host's active venv is of a matrix older than its "
                    "maximum age, else 0.", (*host_labels, "matrix"))
    for name, host in sorted((data.get("hosts") or {}).items()):
        if name == "localhost" and not host.get("host_class") and not host.get("verification"):
            continue  # the controller's own entry (a lock written, a check run there): no host of the fleet
        simulated = "true" if host.get("simulated") else "false"
        labels = (name, simulated)
        up.labels(*labels).set(1 if host.get("reachable", True) and not host.get("unreachable") else 0)
        verification = host.get("verification") or {}
        verdict = verification.get("verdict") if verification.get("verdict") in VERDICTS else "unknown"
        for each in VERDICTS:
            verdict_g.labels(*labels, each).set(1 if each == verdict else 0)
        items = [i for i in verification.get("drift_items") or [] if isinstance(i, dict)]
        for kind in DRIFT_KINDS:
            drift_g.labels(*labels, kind).set(sum(1 for i in items if i.get("kind") == kind))
        for item in items:
            if item.get("image"):
                image_g.labels(*labels, str(item["image"]), str(item.get("kind")), str(item.get("locked") or ""),
                               str(item.get("running") or "")).set(1)
        failures_g.labels(*labels).set(len(host.get("failures") or []))
        if verdict == "ok" and finished is not None:
            verified_g.labels(*labels).set(finished)
        venv = host.get("venv") or {}
        if venv.get("matrix"):
            stale_g.labels(*labels, str(venv["matrix"])).set(1 if venv.get("stale") else 0)
    return found


def text(data: dict) -> str:
    return generate_latest(registry(data)).decode()


def write(data: dict, path: Path) -> int:
    """The metrics of `data` written to `path` as sparkfleet writes every file (module_utils/common/_files.py:
    through a temporary file renamed over it, into a folder root or this user owns and no one else may write,
    made where missing), readable by node_exporter (0644); the number of series. MetricsError where the folder is
    not trusted: nothing is written, the previous file stays whole."""
    body = text(data)
    files, trusted = collection_module("common._files"), collection_module("common._trusted")
    try:
        files.atomic_write(str(path.absolute()), body, 0o644)
    except trusted.Untrusted as exc:
        raise MetricsError(f"cannot write {path}: {exc}. Give node_exporter's textfile folder "
                           "(/var/lib/prometheus/node-exporter on Debian) or another folder of your own") from None
    return sum(1 for line in body.splitlines() if line and not line.startswith("#"))


def summary(text: str) -> list[str]:
    """What a metrics file says, a line each: the run that wrote it, then each host (reached, verdict, drift)."""
    from prometheus_client.parser import text_string_to_metric_families

    samples = [sample for family in text_string_to_metric_families(text) for sample in family.samples]

    def values(name: str) -> list:
        return [s for s in samples if s.name == name]

    lines = []
    for ended in values("sparkfleet_run_timestamp_seconds"):
        command = ended.labels.get("command")
        code = next((int(s.value) for s in values("sparkfleet_run_exit_code") if s.labels.get("command") == command),
                    None)
        took = next((s.value for s in values("sparkfleet_run_duration_seconds")
                     if s.labels.get("command") == command), None)
        when = datetime.datetime.fromtimestamp(ended.value, datetime.UTC).isoformat(timespec="seconds")
        lines.append(f"last {command}: ended {when}, exit {code}, {took:g} s")
    hosts = sorted({s.labels["host"] for s in values("sparkfleet_host_up")})
    for host in hosts:
        up = next(s.value for s in values("sparkfleet_host_up") if s.labels["host"] == host)
        verdict = next((s.labels["verdict"] for s in values("sparkfleet_host_verdict")
                        if s.labels["host"] == host and s.value == 1), "unknown")
        drift = {s.labels["kind"]: int(s.value) for s in values("sparkfleet_host_drift")
                 if s.labels["host"] == host and s.value}
        said = ", ".join(f"{kind} {count}" for kind, count in drift.items()) or "none"
        lines.append(f"{host}: {'reached' if up else 'NOT reached'}, verdict {verdict}, drift {said}")
    return lines

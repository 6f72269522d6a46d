"""The fleet as Prometheus metrics: what a report.json says of each host (reached, verdict, drift by kind, each
image's locked and running digest where they differ, its matrix's staleness, the upstream advisories that affect
it, its GPU's temperature and active clock-event reasons, its unified memory and OOM guard) and of the run itself
(when, how long, its exit code), in Prometheus' text format, for node_exporter's textfile collector
(`sparkfleet report --metrics FILE`). The alert rules that read them ship in monitoring/.

Names follow Prometheus' naming guide (`sparkfleet_` prefix, base units, `_seconds`, `_timestamp_seconds`); every
label value is bounded: a host of the inventory, one of a fixed set (verdict, kind, clock-event reason), an image
of the catalog, a digest, a GPU's index, an advisory's id of matrix/advisories.yml. No free text is a label. The
file is written whole or not at all, as every file sparkfleet writes.
"""

from __future__ import annotations

import datetime
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from sparkfleet.collection_home import collection_module

VERDICTS = ("ok", "failed", "not verified", "unknown")
DRIFT_KINDS = ("image", "launcher", "venv", "runtime")
# nvidia-smi's names of the clock-event reasons (nvml.h's bits), one series each per GPU.
CLOCK_EVENT_REASONS = tuple(name for _bit, name in collection_module("host._host_class").CLOCK_EVENT_REASONS)
SLOWDOWN_REASONS = collection_module("host._host_class").SLOWDOWN_REASONS


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
    advisories_g = gauge("sparkfleet_host_advisories", "How many upstream advisories (matrix/advisories.yml) affect "
                         "what the host runs, as the run's verify found them.", host_labels)
    advisory_g = gauge("sparkfleet_host_advisory", "1 for each upstream advisory that affects what the host runs.",
                       (*host_labels, "advisory"))
    temperature_g = gauge("sparkfleet_gpu_temperature_celsius", "The GPU's temperature as nvidia-smi read it in the "
                          "run (temperature.gpu).", (*host_labels, "gpu"))
    reason_g = gauge("sparkfleet_gpu_clock_event_reason_active", "1 where the clock-event reason was active when "
                     "the run read nvidia-smi (clocks_event_reasons.*; thermal and power-brake slowdowns slow the GPU "
                     "down), else 0.", (*host_labels, "gpu", "reason"))
    health_read_g = gauge("sparkfleet_gpu_health_read", "1 where nvidia-smi answered the health query in the run, "
                          "0 where it did not (an older driver, no GPU answering).", host_labels)
    memory_total_g = gauge("sparkfleet_memory_total_bytes", "The host's memory (the Spark's unified memory: "
                           "/proc/meminfo MemTotal) when the run read it.", host_labels)
    memory_available_g = gauge("sparkfleet_memory_available_bytes", "The memory available to new work "
                               "(/proc/meminfo MemAvailable) when the run read it.", host_labels)
    oom_guard_g = gauge("sparkfleet_oom_guard_running", "1 where an OOM guard (systemd-oomd, earlyoom, nohang) ran "
                        "on the host when the run read it, else 0.", host_labels)
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
        if verification:  # a verify checked the advisories (a run that did not says nothing of them)
            advisories = [a for a in host.get("advisories") or [] if isinstance(a, dict) and a.get("id")]
            advisories_g.labels(*labels).set(len(advisories))
            for advisory in advisories:
                advisory_g.labels(*labels, str(advisory["id"])).set(1)
        _health(host.get("health"), labels, health_read_g, temperature_g, reason_g, memory_total_g,
                memory_available_g, oom_guard_g)
    return found


def _health(health, labels, read, temperature, reason, total, available, oom_guard) -> None:
    """A host's health series (report.json's hosts.*.health): none where its preflight did not run."""
    if not isinstance(health, dict):
        return
    gpus = [g for g in health.get("gpus") or [] if isinstance(g, dict)]
    read.labels(*labels).set(1 if gpus and not health.get("error") else 0)
    for gpu in gpus:
        index = str(gpu.get("index", 0))
        if isinstance(gpu.get("temperature_c"), int):
            temperature.labels(*labels, index).set(gpu["temperature_c"])
        active = set(gpu.get("clock_event_reasons") or [])
        for name in CLOCK_EVENT_REASONS:
            reason.labels(*labels, index, name).set(1 if name in active else 0)
    if isinstance(health.get("memory_total_bytes"), int):
        total.labels(*labels).set(health["memory_total_bytes"])
    if isinstance(health.get("memory_available_bytes"), int):
        available.labels(*labels).set(health["memory_available_bytes"])
    oom_guard.labels(*labels).set(1 if health.get("oom_guard") else 0)


def text(data: dict) -> str:
    """The metrics of one report; MetricsError where the report is not one sparkfleet wrote (a value of the wrong
    type or past what a float holds, a field of the wrong shape): data, checked on its way back in."""
    try:
        return generate_latest(registry(data)).decode()
    except (TypeError, ValueError, OverflowError, AttributeError, KeyError) as exc:
        raise MetricsError(f"the report is not one sparkfleet wrote ({type(exc).__name__}: {exc}); nothing was "
                           "written: give the report.json of a sparkfleet run") from None


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
    """What a metrics file says, a line each: the run that wrote it, then each host (reached, verdict, drift);
    MetricsError where the file is not one sparkfleet wrote (it is data: never trusted beyond what it parses to)."""
    try:
        return _summary(text)
    except (TypeError, ValueError, OverflowError, AttributeError, KeyError, StopIteration) as exc:
        raise MetricsError(f"the metrics file is not one sparkfleet wrote ({type(exc).__name__}: {exc}): run "
                           "`sparkfleet watch run` (or `report --metrics`) to write it anew") from None


def _summary(text: str) -> list[str]:
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
        line = f"{host}: {'reached' if up else 'NOT reached'}, verdict {verdict}, drift {said}"
        temperatures = [f"{s.value:g} C" for s in values("sparkfleet_gpu_temperature_celsius")
                        if s.labels["host"] == host]
        if temperatures:
            line += f", GPU {', '.join(temperatures)}"
        slowing = sorted({s.labels["reason"] for s in values("sparkfleet_gpu_clock_event_reason_active")
                          if s.labels["host"] == host and s.value and s.labels["reason"] in SLOWDOWN_REASONS})
        if slowing:
            line += f", SLOWING DOWN ({', '.join(slowing)})"
        available = next((s.value for s in values("sparkfleet_memory_available_bytes") if s.labels["host"] == host),
                         None)
        if available is not None:
            line += f", memory available {available / 2 ** 30:.1f} GiB"
        advisories = sorted(s.labels["advisory"] for s in values("sparkfleet_host_advisory")
                            if s.labels["host"] == host)
        if advisories:
            line += f", advisories {', '.join(advisories)}"
        lines.append(line)
    return lines

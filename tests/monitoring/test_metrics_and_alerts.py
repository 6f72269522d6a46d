"""Issue 59 (in part): the fleet as Prometheus metrics (`sparkfleet report --metrics`) and the alert rules shipped
in monitoring/, checked with the real promtool (Debian's prometheus package, testbed/tools.sh): the rules load,
each alert has its unit test, the metrics sparkfleet writes pass promtool's lint, and the rules fire on the
metrics sparkfleet writes for the host that drifted and for no other."""

from __future__ import annotations

import copy
import datetime
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import BIN, REPO

sys.path.insert(0, str(REPO / "tests" / "cli"))
from test_events_and_reports import FLEET, META, replay

from sparkfleet import metrics, report

RULES = REPO / "monitoring" / "sparkfleet-alerts.yml"
RULE_TESTS = sorted((REPO / "monitoring" / "tests").glob("*.yml"))


def promtool(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    found = shutil.which("promtool")
    assert found, "promtool is missing: testbed/tools.sh installs Debian's prometheus package"
    return subprocess.run([found, *args], input=stdin, capture_output=True, text=True, check=False, timeout=120)


def _verify_report(drifted: str | None = None) -> dict:
    """A verify of the recorded three-host fleet; `drifted`: the host whose ngc launcher runs another digest than
    the lock's and whose venv lost peft (as spark_verify records it: drift lines and their items)."""
    data = report.build(replay("provision-fleet"), {**META, "command": "verify", "exit_code": 0})
    data["finished_at"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")  # a cycle just run
    for host in data["hosts"].values():
        host["verification"] = {**host["verification"], "verdict": "ok"}
    if drifted:
        host = data["hosts"][drifted]
        locked, running = "sha256:" + "a" * 64, "sha256:" + "b" * 64
        host["verification"].update(verdict="failed", drift=["image ngc: runs ...", "venv ...: peft: missing"],
                                    drift_items=[{"kind": "image", "image": "ngc", "locked": locked,
                                                  "running": running},
                                                 {"kind": "venv", "image": None, "locked": None, "running": None}])
        data["exit_code"] = 2
    return data


def test_the_rules_load_and_pass_their_unit_tests():
    checked = promtool("check", "rules", str(RULES))
    assert checked.returncode == 0 and "SUCCESS: 9 rules found" in checked.stdout, checked.stdout + checked.stderr
    tested = promtool("test", "rules", *map(str, RULE_TESTS))
    assert tested.returncode == 0, tested.stdout[-4000:] + tested.stderr[-2000:]


def test_every_alert_has_a_case_that_fires_and_one_that_does_not():
    alerts = [r["alert"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"] if "alert" in r]
    cases = [case for path in RULE_TESTS for test in yaml.safe_load(path.read_text())["tests"]
             for case in test.get("alert_rule_test") or []]
    fires = {c["alertname"] for c in cases if c.get("exp_alerts")}
    quiet = {c["alertname"] for c in cases if not c.get("exp_alerts")}
    assert sorted(set(alerts) - fires) == [] and sorted(set(alerts) - quiet) == [], (alerts, fires, quiet)
    for rule in (r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]):
        assert rule.get("for") and rule["labels"].get("severity") in ("critical", "warning", "info"), rule
        assert "`sparkfleet " in rule["annotations"]["description"], f"{rule['alert']} does not say what to run"


@pytest.mark.parametrize("fixture", ["provision-fleet", "refresh-rollback-fleet", "provision-lab"])
def test_the_metrics_of_a_real_runs_report_pass_promtools_lint(fixture):
    data = report.build(replay(fixture), {**META, "command": "verify", "exit_code": 2})
    text = metrics.text(data)
    linted = promtool("check", "metrics", stdin=text)
    assert linted.returncode == 0, linted.stdout + linted.stderr
    hosts = {h for h in re.findall(r'host="([^"]+)"', text)}
    assert hosts == set(data["hosts"]) - {"localhost"}, hosts
    assert len(text) < 16_000, "the textfile stays small"


def test_a_drifted_host_is_told_by_kind_and_by_image_with_its_locked_and_running_digests():
    text = metrics.text(_verify_report(drifted=FLEET[1]))
    assert f'sparkfleet_host_drift{{host="{FLEET[1]}",kind="image",simulated="true"}} 1.0' in text
    assert f'sparkfleet_host_drift{{host="{FLEET[1]}",kind="venv",simulated="true"}} 1.0' in text
    assert f'sparkfleet_host_drift{{host="{FLEET[0]}",kind="image",simulated="true"}} 0.0' in text
    [image] = [line for line in text.splitlines() if line.startswith("sparkfleet_image_drift{")]
    assert f'host="{FLEET[1]}"' in image and 'image="ngc"' in image and 'kind="image"' in image
    assert f'locked="sha256:{"a" * 64}"' in image and f'running="sha256:{"b" * 64}"' in image
    assert f'sparkfleet_host_verdict{{host="{FLEET[1]}",simulated="true",verdict="failed"}} 1.0' in text
    assert "sparkfleet_run_success{command=\"verify\"} 0.0" in text
    assert text.count("sparkfleet_host_last_verified_timestamp_seconds{") == 2, "the two hosts that verified ok"
    # No free text as a label: every label value is a host, one of the fixed sets, an image name or a digest.
    values = set(re.findall(r'="([^"]*)"', text))
    allowed = set(FLEET) | set(metrics.VERDICTS) | set(metrics.DRIFT_KINDS) | {"true", "false", "verify", "ngc", ""}
    assert {v for v in values if not v.startswith("sha256:")} <= allowed, values - allowed


def _hot_report() -> dict:
    """A verify of the recorded fleet where FLEET[1]'s GPU is held down by heat (as nvidia-smi's answer reads:
    hw_slowdown and hw_thermal_slowdown, 93 C) and down to 4% of its memory with no OOM guard, and an advisory
    affects what FLEET[0] runs; the other hosts idle at 41 C with 60% of their memory."""
    data = _verify_report()
    for name, host in data["hosts"].items():
        hot = name == FLEET[1]
        host["health"] = {"gpus": [{"index": 0, "temperature_c": 93 if hot else 41, "memory_temperature_c": None,
                                    "clock_event_reasons": ["hw_slowdown", "hw_thermal_slowdown"] if hot
                                    else ["gpu_idle"]}],
                          "error": None, "memory_total_bytes": 128 * 10 ** 9,
                          "memory_available_bytes": (5 if hot else 77) * 10 ** 9,
                          "oom_guard": [] if hot else ["earlyoom"]}
        host["advisories"] = [{"id": "unsloth-10491", "url": "https://github.com/unslothai/unsloth/issues/10491",
                               "matched": ["image unsloth/unsloth:dgxspark-latest"]}] if name == FLEET[0] else []
    return data


def test_the_gpu_s_health_and_the_advisories_are_told_per_host_with_bounded_labels():
    data = _hot_report()
    text = metrics.text(data)
    assert promtool("check", "metrics", stdin=text).returncode == 0
    hot = f'host="{FLEET[1]}",reason="hw_thermal_slowdown",simulated="true"'
    assert f'sparkfleet_gpu_clock_event_reason_active{{gpu="0",{hot}}} 1.0' in text
    assert f'sparkfleet_gpu_clock_event_reason_active{{gpu="0",host="{FLEET[0]}",reason="hw_thermal_slowdown",' \
        'simulated="true"} 0.0' in text
    assert f'sparkfleet_gpu_temperature_celsius{{gpu="0",host="{FLEET[1]}",simulated="true"}} 93.0' in text
    assert f'sparkfleet_memory_available_bytes{{host="{FLEET[1]}",simulated="true"}} 5e+09' in text
    assert f'sparkfleet_oom_guard_running{{host="{FLEET[1]}",simulated="true"}} 0.0' in text
    assert f'sparkfleet_host_advisory{{advisory="unsloth-10491",host="{FLEET[0]}",simulated="true"}} 1.0' in text
    assert f'sparkfleet_host_advisories{{host="{FLEET[1]}",simulated="true"}} 0.0' in text
    values = {v for v in re.findall(r'="([^"]*)"', text) if not v.startswith("sha256:")}
    allowed = set(FLEET) | set(metrics.VERDICTS) | set(metrics.DRIFT_KINDS) | set(metrics.CLOCK_EVENT_REASONS) | {
        "true", "false", "verify", "0", "unsloth-10491"}
    assert values <= allowed, values - allowed
    said = metrics.summary(text)
    assert any(line.startswith(f"{FLEET[1]}: reached") and "GPU 93 C, SLOWING DOWN (hw_slowdown, "
               "hw_thermal_slowdown), memory available 4.7 GiB" in line for line in said), said
    assert any(line.startswith(f"{FLEET[0]}: ") and line.endswith("advisories unsloth-10491") for line in said)
    # A run whose hosts had no preflight (a controller-side play) says nothing of their health.
    for host in data["hosts"].values():
        host["health"] = None
    assert "sparkfleet_gpu_" not in metrics.text(data).replace("# HELP sparkfleet_gpu_", "").replace(
        "# TYPE sparkfleet_gpu_", "")


def test_the_slowdown_alert_names_the_reasons_the_preflight_calls_slowdowns():
    """One list: SparkThermalSlowdown's reasons are module_utils/host/_host_class.py's SLOWDOWN_REASONS."""
    rule = next(r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]
                if r.get("alert") == "SparkThermalSlowdown")
    (pattern,) = re.findall(r'reason=~"([^"]+)"', rule["expr"])
    assert pattern.split("|") == list(metrics.SLOWDOWN_REASONS)


def rules_fire(text: str, cases: list[dict], tmp_path, value: str = "2") -> subprocess.CompletedProcess:
    """promtool's unit test of the shipped rules over the series of a metrics file sparkfleet wrote, served unchanged
    for 20 minutes: `cases` ({eval_time, alertname, exp_alerts: [{exp_labels}]}) with the annotations each alert
    carries, the rules' own rendered for its labels (and `value` for {{ $value }}: promtool compares them too)."""
    series = [line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")]
    rules = {r["alert"]: r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]}
    for case in cases:
        for alert in case["exp_alerts"]:
            rendered = {}
            for key, annotation in rules[case["alertname"]]["annotations"].items():
                for name, label in alert["exp_labels"].items():
                    annotation = annotation.replace(f"{{{{ $labels.{name} }}}}", str(label))
                rendered[key] = re.sub(r"\{\{ \$value[^}]*\}\}", value, annotation)
            alert["exp_annotations"] = rendered
    test = {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "alert_rule_test": cases,
        "input_series": [{"series": name, "values": f"{float(number):g}x20"} for name, number in series
                         if "timestamp" not in name]}]}
    path = tmp_path / "fleet.test.yml"
    path.write_text(yaml.safe_dump(test))
    return promtool("test", "rules", str(path))


def test_the_health_alerts_fire_on_the_metrics_sparkfleet_writes_for_the_hot_host_alone(tmp_path):
    tested = rules_fire(metrics.text(_hot_report()), [
        {"eval_time": "15m", "alertname": "SparkThermalSlowdown", "exp_alerts": [
            {"exp_labels": {"severity": "warning", "host": FLEET[1], "gpu": "0", "reason": reason}}
            for reason in ("hw_slowdown", "hw_thermal_slowdown")]},
        {"eval_time": "15m", "alertname": "SparkMemoryLow", "exp_alerts": [
            {"exp_labels": {"severity": "warning", "host": FLEET[1], "simulated": "true"}}]},
        {"eval_time": "15m", "alertname": "SparkAdvisory", "exp_alerts": [
            {"exp_labels": {"severity": "info", "host": FLEET[0], "simulated": "true",
                            "advisory": "unsloth-10491"}}]}], tmp_path, value="3.906%")
    assert tested.returncode == 0, tested.stdout[-4000:]


def test_the_shipped_rules_fire_on_the_metrics_sparkfleet_writes_for_the_drifted_host_alone(tmp_path):
    """The writer and the rules agree on names and labels: the series of a drifted fleet's metrics file, served
    unchanged for 20 minutes, make SparkDrift and SparkVerifyFailing fire for that host and no other."""
    tested = rules_fire(metrics.text(_verify_report(drifted=FLEET[1])), [
        {"eval_time": "10m", "alertname": "SparkDrift",
         "exp_alerts": [{"exp_labels": {"severity": "warning", "host": FLEET[1]}}]},
        {"eval_time": "10m", "alertname": "SparkVerifyFailing",
         "exp_alerts": [{"exp_labels": {"severity": "critical", "host": FLEET[1], "simulated": "true",
                                        "verdict": "failed"}}]},
        {"eval_time": "10m", "alertname": "SparkHostUnreachable", "exp_alerts": []}], tmp_path)
    assert tested.returncode == 0, tested.stdout[-4000:]


def test_report_metrics_writes_the_file_whole_and_refuses_a_folder_others_may_write(tmp_path):
    source = tmp_path / "run"
    source.mkdir()
    data = _verify_report(drifted=FLEET[0])
    (source / "report.json").write_text(json.dumps(data))
    folder = tmp_path / "textfile"
    folder.mkdir(mode=0o755)
    target = folder / "sparkfleet.prom"
    target.write_text("the previous file\n")
    env = {**os.environ, "NO_COLOR": "1"}
    done = subprocess.run([str(BIN / "sparkfleet"), "report", str(source), "--metrics", str(target)],
                          capture_output=True, text=True, env=env, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith(f"wrote: {target} (") and "series of" in done.stdout
    assert promtool("check", "metrics", stdin=target.read_text()).returncode == 0
    assert oct(target.stat().st_mode & 0o777) == "0o644" and sorted(p.name for p in folder.iterdir()) == [
        "sparkfleet.prom"], "no temporary file left"
    # A host removed from the inventory (not in the next report) is gone from the metrics.
    fewer = copy.deepcopy(data)
    del fewer["hosts"][FLEET[2]]
    (source / "report.json").write_text(json.dumps(fewer))
    subprocess.run([str(BIN / "sparkfleet"), "report", str(source), "--metrics", str(target)], check=True,
                   capture_output=True, env=env)
    assert FLEET[2] not in target.read_text() and FLEET[1] in target.read_text()
    folder.chmod(0o777)
    refused = subprocess.run([str(BIN / "sparkfleet"), "report", str(source), "--metrics", str(target)],
                             capture_output=True, text=True, env=env, check=False)
    assert refused.returncode == 4 and f"{folder} (" in refused.stderr and "can be written by other users" in \
        refused.stderr, refused.stderr
    assert FLEET[1] in target.read_text(), "the previous file stays whole"


def test_the_docs_scrape_config_loads_in_prometheus_with_the_shipped_rules(tmp_path):
    """docs/watching.md's prometheus.yml, as a user copies it (the rules at the path it names), passes promtool."""
    page = (REPO / "docs" / "watching.md").read_text()
    config = next(block for block in re.findall(r"```yaml\n(.*?)```", page, re.S) if "scrape_configs" in block)
    shutil.copy(RULES, tmp_path / "sparkfleet-alerts.yml")
    (tmp_path / "prometheus.yml").write_text(config.replace("/etc/prometheus/sparkfleet-alerts.yml",
                                                            str(tmp_path / "sparkfleet-alerts.yml")))
    checked = promtool("check", "config", str(tmp_path / "prometheus.yml"))
    assert checked.returncode == 0 and "SUCCESS: 9 rules found" in checked.stdout, checked.stdout + checked.stderr


def test_node_exporter_serves_the_metrics_and_prometheus_raises_and_clears_the_alert_for_that_host_alone(tmp_path):
    """The real parts, natively on the loopback: node_exporter's textfile collector serves the file
    `sparkfleet report --metrics` wrote, Prometheus scrapes it with the shipped rules. A drifted host's SparkDrift
    and SparkVerifyFailing are pending (their `for:` not yet run out) for it and for no other host; the next
    cycle's file, the host repaired, clears them."""
    from prometheus_stack import running

    textfiles = tmp_path / "textfile"
    textfiles.mkdir(mode=0o755)
    target = textfiles / "sparkfleet.prom"
    metrics.write(_verify_report(drifted=FLEET[1]), target)
    with running(textfiles, tmp_path) as stack:
        def raised():
            found = {(a["alertname"], a.get("host"), a["state"]) for a in stack.alerts()}
            return found if {("SparkDrift", FLEET[1], "pending"), ("SparkVerifyFailing", FLEET[1], "pending")} \
                <= found else None

        found = stack.wait_for("the drifted host's alerts", raised)
        assert {host for _name, host, _state in found} == {FLEET[1]}, f"only the drifted host's: {found}"
        [series] = stack.query(f'sparkfleet_image_drift{{host="{FLEET[1]}"}}')
        assert series["metric"]["locked"] == "sha256:" + "a" * 64, series
        metrics.write(_verify_report(), target)  # the next cycle: the host provisioned again
        stack.wait_for("the alerts cleared", lambda: not [a for a in stack.alerts() if a["alertname"] in (
            "SparkDrift", "SparkVerifyFailing")])
        assert stack.query("sum(sparkfleet_host_drift)")[0]["value"][1] == "0"

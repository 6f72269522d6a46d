"""What a run did, read from ansible-runner's event stream (pure logic, no I/O).

`Fleet.handle(event)` takes the events as runner delivers them (or as recorded
in a fixture); `Fleet.hosts` then holds, per host, what the summary, the
reports and the live progress show. The facts come from the roles' own
results: spark_preflight's facts, `spark_images_pinned`, `spark_venv_active`,
`spark_verify_result`, `spark_container_runtime_registered`.
"""

from __future__ import annotations

import difflib
import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from sparkfleet.collection_home import collection_module

# Facts about the fleet, not the host that set them (a run_once task's): the controller's.
FLEET_FACTS = ("spark_images_refresh", "spark_cluster_verdicts", "spark_matrix_proposal")
# The modules that write the fleet's own files on the controller, delegated from a host (a refresh's lock): what
# they change is the controller's.
FLEET_WRITERS = ("sparkfleet.spark.spark_image_lock",)
# What the events are read for: the facts each host's summary is built from (the fleet table's, its one home),
# the fleet's, and the doctor's report.
WATCHED_FACTS = (*collection_module("verification._fleet_table").FACTS, *FLEET_FACTS, "spark_doctor")


@dataclass
class Host:
    name: str
    facts: dict[str, Any] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=lambda: {"ok": 0, "changed": 0, "failed": 0, "unreachable": 0,
                                                             "skipped": 0, "rescued": 0, "ignored": 0})
    failures: list[dict] = field(default_factory=list)
    unreachable: str | None = None
    last_task: str | None = None
    finished_tasks: int = 0
    # play -> the batch (1, 2, ...) of a serial play in which this host first had a result
    batches: dict[str, int] = field(default_factory=dict)
    # Each task that changed (or, in check mode, would change) the host: {"task", "diff", "path"}, the diff as text
    # when Ansible gave one (--diff), "" when not; the file it wrote where its result names one.
    changes: list[dict] = field(default_factory=list)


@dataclass
class Fleet:
    hosts: dict[str, Host] = field(default_factory=dict)
    play: str | None = None
    task: str | None = None
    task_started: float | None = None
    task_items: int = 0
    # Items per host of the running loop, when it says (loop_control.extended: ansible_loop.length).
    task_loop_length: int = 0
    # The hosts the current task started on, and those it finished on: "n of m hosts done" while it runs.
    task_hosts: set[str] = field(default_factory=set)
    task_done: set[str] = field(default_factory=set)
    play_hosts: list[str] = field(default_factory=list)
    pattern: str = ""
    # Ansible starts a serial play once per batch: play -> how many times it started so far
    play_starts: dict[str, int] = field(default_factory=dict)
    stats: dict[str, dict[str, int]] | None = None
    # The controller (localhost): the plays that run there (pin, the matrix check) and a Spark driven locally.
    # It is a host of the report once it failed, was unreachable, changed something (pin's lock) or reported a
    # Spark's facts.
    controller: Host = field(default_factory=lambda: Host("localhost"))
    unmatched: list[str] = field(default_factory=list)  # the patterns of plays that matched no host
    events: int = 0
    warnings: list[str] = field(default_factory=list)  # Ansible's warnings, once each (advisories, staleness)
    # The results a controller-side check shows as its table, in the order they came: the matrix check's (rows
    # and table, a step at a time) and the advisories check's (upstream and lines).
    check_results: list[dict] = field(default_factory=list)
    # host -> "item: why" of each item of the running loop that failed, from its runner_item_on_failed event:
    # ansible-core 2.21 leaves `failed` out of the items of a loop's result as callbacks get it.
    item_failures: dict[str, list[str]] = field(default_factory=dict)
    # host -> {"failed": n, "changed": n}: what Ansible counts on a host and was the controller's (_result)
    moved_counts: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def controller_facts(self) -> dict[str, Any]:
        return self.controller.facts

    def task_progress(self) -> str:
        """', 2 of 3 hosts done, 4 items done' for the task running now (empty parts left out); '2 of 4 items
        done' when the loop says how long it is."""
        hosts = (f", {len(self.task_done & self.task_hosts)} of {len(self.task_hosts)} hosts done"
                 if len(self.task_hosts) > 1 else "")
        total = self.task_loop_length * max(1, len(self.task_hosts))
        of = f" of {total}" if total >= self.task_items else ""
        items = (f", {self.task_items}{of} item{'s' if (total or self.task_items) != 1 else ''} done"
                 if self.task_items else "")
        return hosts + items

    def host(self, name: str) -> Host:
        if name == "localhost":
            return self.controller
        if name not in self.hosts:
            self.hosts[name] = Host(name)
        return self.hosts[name]

    def handle(self, event: dict) -> None:
        self.events += 1
        kind = event.get("event", "")
        data = event.get("event_data") or {}
        if kind == "playbook_on_play_start":
            self.play = data.get("play") or data.get("name")
            self.play_starts[self.play or ""] = self.play_starts.get(self.play or "", 0) + 1
            self.task = None
            pattern = data.get("play_pattern") or ""
            self.play_hosts = [h for h in pattern.split(",") if h] if "," in pattern else []
            self.pattern = pattern
        elif kind == "playbook_on_no_hosts_matched":
            self.unmatched.append(self.pattern)
        elif kind == "playbook_on_task_start":
            self.task = data.get("task") or data.get("name")
            self.task_started = time.monotonic()
            self.task_items = self.task_loop_length = 0
            self.task_hosts, self.task_done = set(), set()
            self.item_failures = {}
        elif kind in ("runner_item_on_ok", "runner_item_on_failed", "runner_item_on_skipped"):
            self.task_items += 1
            if kind == "runner_item_on_ok":
                self._check_result(data.get("res"))
            elif kind == "runner_item_on_failed" and isinstance(data.get("res"), dict):
                self.item_failures.setdefault(data.get("host") or "", []).append(item_failure(data["res"]))
            loop = (data.get("res") or {}).get("ansible_loop") if isinstance(data.get("res"), dict) else None
            if isinstance(loop, dict) and isinstance(loop.get("length"), int):
                self.task_loop_length = max(self.task_loop_length, loop["length"])
        elif kind.startswith("runner_on_"):
            if kind == "runner_on_start":
                self.task_hosts.add(data.get("host") or "")
            self._result(kind[len("runner_on_"):], data)
        elif kind == "playbook_on_stats":
            self._stats(data)

    def _result(self, outcome: str, data: dict) -> None:
        name = data.get("host")
        if not name:
            return
        res = visible(data.get("res") or {})  # what a host said is shown, never obeyed by the terminal
        for warning in (res.get("warnings") or []) if isinstance(res, dict) else []:
            text = warning.get("msg") if isinstance(warning, dict) else str(warning)
            if text and text not in self.warnings:
                self.warnings.append(text)
        if ran_on_the_controller(res) and (outcome == "failed" or (
                outcome == "ok" and res.get("changed") and data.get("resolved_action") in FLEET_WRITERS)):
            # A task delegated to the controller (resolve once for the fleet, write the lock) is reported under the
            # play's first host by Ansible; its failure, or the fleet's file it wrote, is the controller's, where
            # the owner should look, and counts there (_stats moves Ansible's count), not on that host.
            counted = "failed" if outcome == "failed" else "changed"
            moved = self.moved_counts.setdefault(name, {})
            moved[counted] = moved.get(counted, 0) + 1
            name = self.controller.name
        host = self.host(name)
        host.last_task = data.get("task")
        host.batches.setdefault(self.play or "", self.play_starts.get(self.play or "", 1))
        if outcome in ("ok", "failed", "unreachable", "skipped"):
            host.finished_tasks += 1
            self.task_done.add(name)
        if outcome == "ok":
            self._facts(host.facts, res)
            self._check_result(res)
            if isinstance(res, dict) and res.get("changed"):
                path = res.get("dest") or res.get("path")
                said = res.get("changes")  # what the task says moved (pin's lock: each image's old -> new digest)
                host.changes.append({"task": data.get("task"), "diff": render_diff(res),
                                     "path": path if isinstance(path, str) else None,
                                     "lines": [line for line in said if isinstance(line, str)]
                                     if isinstance(said, list) else []})
            for name in FLEET_FACTS:
                if name in host.facts and host is not self.controller:
                    # the fleet's (a run_once task's), not this host's own
                    self.controller_facts[name] = host.facts.pop(name)
        elif outcome == "failed" and not data.get("ignore_errors") and connection_gone(res):
            # Ansible calls it a module failure, but the host was never reached (a container that is not there):
            # the connection's own words, as for an unreachable host.
            host.unreachable = str(res.get("module_stderr")).strip()[:500]
        elif outcome == "failed" and not data.get("ignore_errors"):
            msg = res.get("msg") if isinstance(res, dict) else str(res)
            if isinstance(res, dict) and isinstance(res.get("results"), list):  # a loop: say which items and why
                failed = self.item_failures.get(name) or [
                    item_failure(r) for r in res["results"] if isinstance(r, dict) and r.get("failed")]
                if failed:
                    msg = " | ".join(failed)
            msg = with_command_stderr(str(msg or "failed"), res)
            host.failures.append({"task": data.get("task"), "msg": str(msg or "failed")[:2000]})
        elif outcome == "unreachable":
            host.unreachable = str(res.get("msg") if isinstance(res, dict) else res)[:500]
        if host is self.controller and (host.failures or host.unreachable or host.changes
                                        or "spark_preflight" in host.facts):
            self.hosts["localhost"] = host

    @staticmethod
    def _facts(target: dict, res: Any) -> None:
        if isinstance(res, dict):
            facts = res.get("ansible_facts") or {}
            for key in WATCHED_FACTS:
                if key in facts:
                    target[key] = facts[key]

    def _check_result(self, res: Any) -> None:
        if isinstance(res, dict) and (("rows" in res and ("table" in res or "moved" in res))
                                      or (res.get("upstream") and "lines" in res)):
            self.check_results.append(res)

    def check_lines(self, kind: str) -> list[str]:
        """What a controller-side check showed: the matrix check's table (kind "table": its heading and each
        step's lines, in the order the steps ran) or the advisories check's lines (kind "issues")."""
        if kind == "issues":
            return next((list(r["lines"]) for r in self.check_results if r.get("upstream") and "lines" in r), [])
        if kind == "proposal":  # matrix propose: the candidate against the matrix in use, pin by pin
            found = next((r for r in self.check_results if "moved" in r and "lines" in r), None)
            closure = list(((found or {}).get("closure") or {}).get("lines") or [])
            added = (found or {}).get("added") or 0
            return [f"candidate: {found['moved']} of {len(found['rows']) - added} pins move"
                    + (f", {added} added" if added else ""),
                    *(f"  {line}" for line in found["lines"]),
                    *(["  its declared closure:", *(f"    {line}" for line in closure)] if closure else [])
                    ] if found else []
        # The declared closure, judged after the steps (a result of its own): its lines close the table.
        closure = [line for r in self.check_results if "closure_lines" in r for line in r["table"]]
        parts = [r for r in self.check_results if "rows" in r and "table" in r and "closure_lines" not in r]
        if not parts:
            return closure
        whole = [r for r in parts if r["table"][:1] == [r.get("heading")]]  # the module run on all steps
        if whole or not all("pin_lines" in r for r in parts):
            return list((whole or parts)[-1]["table"]) + closure
        # Checked step by step (playbooks/matrix_check.yml): put together as the module's whole table is.
        return [parts[0]["heading"], *(line for r in parts for line in r["pin_lines"]), parts[0]["sequence_heading"],
                *(line for r in parts for line in r["sequence_lines"]), *closure]

    def _stats(self, data: dict) -> None:
        self.stats = {k: data.get(k) or {} for k in ("ok", "changed", "failures", "dark", "skipped", "rescued",
                                                     "ignored")}
        names = {"ok": "ok", "changed": "changed", "failures": "failed", "dark": "unreachable",
                 "skipped": "skipped", "rescued": "rescued", "ignored": "ignored"}
        for key, label in names.items():
            for name, count in (data.get(key) or {}).items():
                self.host(name).counts[label] = int(count)
        for name, moved in self.moved_counts.items():
            for label, count in moved.items():
                host = self.host(name)
                host.counts[label] = max(0, host.counts[label] - count)
                self.controller.counts[label] += count

    def finished(self) -> list[str]:
        return sorted(n for n, h in self.hosts.items() if h.failures or h.unreachable)

    def targeted_nothing(self) -> bool:
        """A play matched no host and no host but the controller did anything: the run did nothing."""
        return bool(self.unmatched) and not self.hosts and not self.controller.finished_tasks


MAX_DIFF = 20000  # characters of one task's diff kept; the rest is named, not shown


# The C0 controls but tab and newline, DEL and the C1 controls: ESC starts a terminal's escape sequences (a
# title set, the screen cleared, a hyperlink), and C1's CSI (0x9b) is one by itself on some terminals.
_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def visible(value: Any) -> Any:
    """value with every control character a host could send (in a message, a fact, a diff) written as \\xNN, so
    that text from a host never reaches the screen or a report as an escape sequence."""
    if isinstance(value, str):
        return _CONTROLS.sub(lambda m: f"\\x{ord(m.group(0)):02x}", value)
    if isinstance(value, list):
        return [visible(item) for item in value]
    if isinstance(value, dict):
        return {visible(key) if isinstance(key, str) else key: visible(item) for key, item in value.items()}
    return value


# What a connection plugin's command says when the host is not there to run a module on: Ansible reports the
# module's empty output ("Module result deserialization failed: No start of json char found", "MODULE FAILURE")
# and leaves the reason in module_stderr.
_CONNECTION_GONE = re.compile(r"No such container|Cannot connect to the Docker daemon|container \S+ is not running|"
                              r"ssh: connect to host|Could not resolve hostname|Connection refused")


def ran_on_the_controller(res: Any) -> bool:
    """The result of a task delegated to the controller (delegate_to: localhost)."""
    delegated = res.get("_ansible_delegated_vars") if isinstance(res, dict) else None
    return isinstance(delegated, dict) and delegated.get("ansible_delegated_host") in ("localhost", "127.0.0.1")


def with_command_stderr(msg: str, res: Any) -> str:
    """A command that failed says only "non-zero return code": its own last words (stderr's last lines, where it
    wrote any) are what tell the owner why, e.g. apt-get's `E: Version '9.9.9-1' for 'nvidia-container-toolkit'
    was not found`."""
    if not isinstance(res, dict) or res.get("rc") in (None, 0) or not isinstance(res.get("stderr"), str):
        return msg
    said = [line.strip() for line in res["stderr"].splitlines() if line.strip()][-3:]
    if not said or all(line in msg for line in said):
        return msg
    return f"{msg} (exit {res['rc']}): {' / '.join(said)}"


def connection_gone(res: Any) -> bool:
    """A failed result that is the connection's, not the module's: the host was not reached."""
    if not isinstance(res, dict) or not isinstance(res.get("module_stderr"), str):
        return False
    return (str(res.get("msg", "")).startswith(("Module result deserialization failed", "MODULE FAILURE"))
            and bool(_CONNECTION_GONE.search(res["module_stderr"])))


def item_failure(res: dict) -> str:
    """One failed item of a loop, as a failure line names it: its label, then why."""
    return f"{res.get('_ansible_item_label', res.get('item'))}: {res.get('msg') or 'failed'}"


def render_diff(res: dict) -> str:
    """A task result's diff (--diff) as unified-diff text, the way ansible-playbook shows it: Ansible's diff is a
    dict or a list of dicts, each with before/after (text, or data shown as JSON) and their headers, or a
    `prepared` text; a loop's items carry their own. A result Ansible hid (no_log) has none."""
    diffs = res.get("diff")
    if diffs is None and isinstance(res.get("results"), list):
        diffs = [d for r in res["results"] if isinstance(r, dict) and r.get("changed")
                 for d in (r.get("diff") if isinstance(r.get("diff"), list) else [r.get("diff")]) if d]
    out: list[str] = []
    for diff in diffs if isinstance(diffs, list) else [diffs]:
        if not isinstance(diff, dict):
            continue
        if diff.get("prepared"):
            out.append(str(diff["prepared"]).rstrip("\n"))
            continue
        if "before" not in diff and "after" not in diff:
            continue
        before, after = (_text(diff.get(side)) for side in ("before", "after"))
        lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(), lineterm="",
                                          fromfile=_header("before", diff.get("before_header")),
                                          tofile=_header("after", diff.get("after_header"))))
        out.extend(lines)
    text = "\n".join(out)
    return text if len(text) <= MAX_DIFF else text[:MAX_DIFF] + f"\n... ({len(text) - MAX_DIFF} more characters)"


def _header(side: str, header: Any) -> str:
    return f"{side}: {header}" if header else side


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=4, sort_keys=True)

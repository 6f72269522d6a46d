"""The driver's reading of runner events and its reports, fed with event streams recorded from real lab runs.

tests/fixtures/events/*.jsonl are recorded by the fleet's suite (SPARKFLEET_RECORD_EVENTS=1 pytest tests/fleet):
`make lab`'s provision of one host with the venv, the provision of a fresh fleet of three, and a refresh in which
the second host failed its check and was rolled back; and by the cluster's (tests/cluster): the lab cluster's
verify, and the same with one rail at MTU 1500. Each trimmed by tests/fixtures/events/trim.py to the fields the
driver reads. A fixture naming a play or task the playbooks no longer have fails here.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import jsonschema
import pytest
import yaml
from ansible_collections.sparkfleet.spark.plugins.filter import sparkfleet_verify as verify
from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _fleet_table as table

from conftest import REPO
from sparkfleet import report
from sparkfleet.ansible_options import extra_vars_files
from sparkfleet.events import WATCHED_FACTS, Fleet
from sparkfleet.outcome import EXIT_FAILED_HOSTS, outcome_from_stats
from sparkfleet.progress import status_lines

FIXTURES = REPO / "tests" / "fixtures" / "events"
SCHEMA = json.loads((REPO / "src" / "sparkfleet" / "report-schema.json").read_text())
META = {"command": "provision", "playbook": "site.yml", "inventory": "inventory/lab", "limit": None, "check": False,
        "started_at": "2026-11-30T18:56:49+00:00", "finished_at": "2026-11-30T18:59:19+00:00", "duration_s": 150.4,
        "status": "successful", "exit_code": 0}


def replay(name: str, upto: int | None = None) -> Fleet:
    fleet = Fleet()
    lines = (FIXTURES / f"{name}.jsonl").read_text().splitlines()
    for line in lines[:upto]:
        fleet.handle(json.loads(line))
    return fleet


LAB, FLEET = "sparkfleet-makelab-1", ["sparkfleet-fleet-1", "sparkfleet-fleet-2", "sparkfleet-fleet-3"]


def test_provision_stream_gives_each_hosts_facts():
    fleet = replay("provision-lab")  # make lab: one host, with the venv
    assert sorted(fleet.hosts) == [LAB]
    data = report.build(fleet, META)
    jsonschema.validate(data, SCHEMA)
    one = data["hosts"][LAB]
    assert (one["host_class"], one["simulated"], one["reachable"], one["history"]) == ("spark", True, True, "fresh")
    # Recorded by an older sparkfleet (its facts say platform for the host class): still read; and report.json
    # keeps the key platform beside host_class until 1.0.0, for the scripts that read it.
    assert "host_class" not in json.dumps(fleet.hosts[LAB].facts) and one["platform"] == "spark"
    assert one["runtime"]["registered"] is True and "nvidia" in one["runtime"]["runtimes"]
    assert [i["name"] for i in one["images"]] == ["ngc", "unsloth"]
    assert all("@sha256:" in i["ref"] for i in one["images"])
    # Issue 35, item 7: a venv checked with the stand-in torch of a simulated host is never called verified.
    assert one["venv"]["matrix"] == "unsloth-2026.7.2" and one["venv"]["status"] == "simulated"
    assert one["venv"]["stale"] is True and "stand-in torch" in one["venv"]["verified_by"]
    assert one["verification"]["verdict"] == "not verified"  # simulated hosts never pass
    assert one["counts"]["failed"] == 0 and one["counts"]["ok"] > 10 and one["counts"]["changed"] > 0
    fleet = replay("provision-fleet")  # three fresh hosts, no venv
    data = report.build(fleet, META)
    jsonschema.validate(data, SCHEMA)
    assert sorted(data["hosts"]) == FLEET
    assert all(data["hosts"][h]["venv"] is None and data["hosts"][h]["history"] == "fresh" for h in FLEET)


def test_summary_markdown_and_junit_from_the_provision_stream():
    data = report.build(replay("provision-lab"), META)
    rows = {row[0]: row for row in report.summary_rows(data)}
    assert rows[LAB][1:4] == ["spark (simulated)", "fresh", "registered"]
    assert rows[LAB][5] == "unsloth-2026.7.2 simulated STALE"
    # No GPU line to show (the host is simulated): '-', not a 'simulated' that repeats the verdict and takes the
    # room of the images' digests (issue 45, item 8).
    assert rows[LAB][7] == "-"
    markdown = report.markdown(data)
    assert markdown.startswith("# sparkfleet provision — successful")
    assert f"| {LAB} | spark (simulated) |" in markdown
    assert "- changed: " in markdown, "what the run changed on the host"
    suite = ET.fromstring(report.junit(data))
    cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
    assert (f"sparkfleet.{LAB}", "venv") in cases
    assert cases[(f"sparkfleet.{LAB}", "verification")].find("skipped") is not None
    assert suite.get("failures") == "0" and int(suite.get("tests")) == len(cases)
    fleet = report.build(replay("provision-fleet"), META)
    suite = ET.fromstring(report.junit(fleet))
    assert not [c for c in suite.iter("testcase") if c.get("name") == "venv"], "no venv on the fleet: no venv case"


def test_the_play_and_the_cli_show_the_same_fleet_table():
    """One table: the play's (filter spark_fleet_table, from hostvars) has the CLI's rows without the counts."""
    for stream in ("provision-lab", "provision-fleet"):
        fleet = replay(stream)
        hostvars = {name: {**{k: v for k, v in host.facts.items() if k != "spark_preflight"},
                           "ansible_facts": {"spark_preflight": host.facts.get("spark_preflight")}}
                    for name, host in fleet.hosts.items()}
        names = sorted(fleet.hosts)
        lines = verify.spark_fleet_table(names, hostvars, names)
        rows = report.summary_rows(report.build(fleet, META))
        assert len(lines) == len(rows) + 1 and lines[0].split()[:2] == report.HEADERS[:2]
        for line, row in zip(lines[1:], rows, strict=True):
            cells = [cell.replace("\n", ", ") for cell in row[:-2]]  # the play's text table: a line per host
            assert line.split() == " ".join(cells).split(), "same cells, in the same order"
    assert set(table.FACTS) <= set(WATCHED_FACTS), "the CLI watches every fact the table is built from"


def test_refresh_stream_tells_the_rolled_back_host_and_the_lock_diff():
    fleet = replay("refresh-rollback-fleet")
    data = report.build(fleet, {**META, "command": "refresh", "playbook": "playbooks/refresh.yml",
                                "status": "failed", "exit_code": 2})
    jsonschema.validate(data, SCHEMA)
    diff = {d["name"]: d for d in data["refresh"]["diff"]}
    assert diff["ngc"]["changed"] is False and diff["unsloth"]["changed"] is True
    new, old = diff["unsloth"]["new"], diff["unsloth"]["old"]
    canary, failed, after = (data["hosts"][h] for h in FLEET)
    assert any(i["ref"].endswith(new) for i in canary["images"]) and canary["failures"] == []
    assert any(i["ref"].endswith(old) for i in failed["images"]), "rolled back to the previous digest"
    assert "does not list the nvidia runtime" in failed["refresh_failure"]
    assert failed["counts"]["failed"] == 1 and failed["counts"]["rescued"] == 1
    assert outcome_from_stats("failed", 2, fleet.stats).exit_code() == EXIT_FAILED_HOSTS
    suite = ET.fromstring(report.junit(data))
    failures = [(c.get("classname"), c.get("name")) for c in suite.iter("testcase") if c.find("failure") is not None]
    assert failures == [(f"sparkfleet.{FLEET[1]}", "run"), (f"sparkfleet.{FLEET[1]}", "refresh")]
    assert "## Lock diff" in report.markdown(data)
    # Which host was the canary, in which batch each moved, and what each runs now.
    assert (canary["refresh"]["batch"], canary["refresh"]["canary"], canary["refresh"]["outcome"]) == (1, True, "moved")
    assert (failed["refresh"]["batch"], failed["refresh"]["outcome"]) == (2, "rolled back")
    assert failed["refresh"]["images"] == [{"name": "unsloth", "old": old, "new": new, "now": old}]
    assert (after["refresh"]["batch"], after["refresh"]["outcome"]) == (None, "not reached"), "the rollout stopped"
    rows = {row[0]: row for row in report.summary_rows(data)}
    assert [rows[h][2] for h in FLEET] == ["canary moved", "batch 2 rolled back", "not reached"]
    assert f"image unsloth: `{old}` -> `{new}`, runs `{old}`" in report.markdown(data)


def _running_on_several_hosts(stream: str) -> int:
    """How many events of the stream to replay to stop inside a task that started on every host and finished on
    some, not all (the point a person watching the live display would be at)."""
    fleet = Fleet()
    for n, line in enumerate((FIXTURES / f"{stream}.jsonl").read_text().splitlines(), 1):
        fleet.handle(json.loads(line))
        if len(fleet.task_hosts) == 3 and 0 < len(fleet.task_done & fleet.task_hosts) < 3:
            return n
    raise AssertionError(f"{stream} has no task seen running on 3 hosts with some done")


def test_progress_follows_the_stream():
    fleet = replay("provision-fleet", upto=_running_on_several_hosts("provision-fleet"))
    done = len(fleet.task_done & fleet.task_hosts)
    lines = status_lines(fleet, now=fleet.task_started + 12)
    assert lines[0] == "play: Provision DGX Spark hosts"
    assert lines[1].startswith(f"task: {fleet.task} (12 s, {done} of 3 hosts done")
    assert lines[2].startswith("hosts: 3 ok, 0 failed")


def test_a_long_task_says_it_is_still_running_without_the_live_display():
    from rich.console import Console

    from sparkfleet.progress import Progress

    fleet = replay("provision-fleet", upto=_running_on_several_hosts("provision-fleet"))
    done = len(fleet.task_done & fleet.task_hosts)
    console = Console(record=True, width=200, file=open("/dev/null", "w"))  # noqa: SIM115
    progress = Progress(fleet, live=False, console=console)
    for seconds in (3, 14, 16, 20, 31, 44, 46):
        progress.tick(now=fleet.task_started + seconds)
    said = [line for line in console.export_text().splitlines() if "still:" in line]
    assert [line.split("(")[-1] for line in said] == [f"{n} s, {done} of 3 hosts done)" for n in (16, 31, 46)], said
    assert all(f"still: {fleet.task}" in line for line in said)


def test_inline_extra_vars_go_to_a_private_file_never_argv(tmp_path):
    (tmp_path / "vars.yml").write_text("a: 1\n")
    given = f"@{tmp_path / 'vars.yml'}"
    args = extra_vars_files(["password=s3cret user=me", '{"refresh_batches": [1, 2]}', given], tmp_path)
    assert "s3cret" not in " ".join(args)
    # An @file is judged and copied once (issue 70): Ansible reads the copy, never the user's file again by name.
    assert args[-2:] == ["--extra-vars", f"@{tmp_path / 'extra-vars-2-vars.yml'}"]
    assert (tmp_path / "extra-vars-2-vars.yml").read_text() == "a: 1\n"
    first = json.loads((tmp_path / "extra-vars-0.json").read_text())
    assert first == {"password": "s3cret", "user": "me"}
    assert (tmp_path / "extra-vars-0.json").stat().st_mode & 0o777 == 0o600
    assert json.loads((tmp_path / "extra-vars-1.json").read_text()) == {"refresh_batches": [1, 2]}
    with pytest.raises(ValueError, match="is not key=value"):
        extra_vars_files(["novalue"], tmp_path)
    (tmp_path / "vars.yml").chmod(0o666)  # another user could change what root's run is given
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(ValueError, match=r"the extra-variables file .*vars.yml \(root \(uid 0\), mode 0666\) can be "
                                         "written by other users"):
        extra_vars_files([given], tmp_path / "elsewhere")
    assert list((tmp_path / "elsewhere").iterdir()) == [], "nothing copied"


@pytest.mark.parametrize(("value", "message"), [
    ("{bad", r"extra variables '\{bad' are not valid YAML/JSON \(line 1, column 5: expected ',' or '\}'"),
    ("[1, 2", r"extra variables '\[1, 2' are not valid YAML/JSON \(line 1, column 6"),
    ("@/nonexistent/vars.yml", r"extra-variables file /nonexistent/vars.yml not found"),
])
def test_malformed_extra_vars_are_bad_input_with_the_position(value, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        extra_vars_files([value], tmp_path)


@pytest.mark.parametrize(("rc", "failed", "code"), [(1, set(), 4), (4, set(), 4), (5, set(), 4), (2, {"a"}, 2),
                                                    (1, {"a"}, 2), (0, set(), 0)])
def test_ansible_stopping_on_its_own_error_is_bad_input(rc, failed, code):
    """ansible-playbook's 1 (error), 4 (parser error), 5 (bad options) with no failed host: exit 4."""
    from sparkfleet.outcome import RunOutcome

    assert RunOutcome("failed" if rc else "successful", rc, failed=failed).exit_code() == code


def event(kind: str, host: str, res: dict, task: str = "t") -> dict:
    return {"event": f"runner_on_{kind}", "event_data": {"host": host, "task": task, "res": res}}


def test_a_host_provisioned_on_purpose_is_marked_and_each_image_says_where_it_comes_from():
    fleet = Fleet()
    d1 = "sha256:" + "1" * 64
    fleet.handle(event("ok", "box", {"ansible_facts": {
        "spark_preflight": {"host_class": "not-spark", "simulated": False}, "spark_preflight_override": True}}))
    fleet.handle(event("ok", "box", {"ansible_facts": {"spark_images_pinned": [
        {"name": "ngc", "ref": f"r/nvidia/pytorch@{d1}", "tag": "25.11-py3"},
        {"name": "ngc-audio", "ref": d1, "tag": "0123456789ab", "derived": True, "base": "ngc",
         "image_tag": "sparkfleet/ngc-audio:0123456789ab"},
        {"name": "unsloth", "ref": f"u/unsloth@{d1}", "tag": "dgxspark-latest", "local_fallback": {
            "used": "u/unsloth:25.09-py3", "wanted": "u/unsloth@sha256:2", "reason": "connection refused"}}]}}))
    data = report.build(fleet, META)
    jsonschema.validate(data, SCHEMA)
    box = data["hosts"]["box"]
    assert box["override"] == "not a Spark (override)"
    assert [i["source"] for i in box["images"]] == [
        "lock", "derived from ngc (sparkfleet/ngc-audio:0123456789ab)",
        "local blessed tag u/unsloth:25.09-py3 (wanted u/unsloth@sha256:2: connection refused)"]
    (row,) = report.summary_rows(data)
    assert row[1] == "not a Spark (override)"
    assert row[4] == "ngc@111111111111\nngc-audio@111111111111\nunsloth@111111111111 LOCAL", "a line per image"
    cases = {c.get("name"): c for c in ET.fromstring(report.junit(data)).iter("testcase")}
    assert cases["class"].find("failure") is None, "an override is the user's decision, not a failure"


def test_a_failed_loop_says_which_items_failed_and_why():
    fleet = Fleet()
    fleet.handle(event("failed", "box", {"msg": "One or more items failed", "results": [
        {"failed": False, "_ansible_item_label": "ngc"},
        {"failed": True, "_ansible_item_label": "unsloth", "msg": "locked for linux/arm64; this host is linux/amd64"}]},
        task="Pull each pinned image by digest"))
    assert fleet.hosts["box"].failures == [{"task": "Pull each pinned image by digest",
                                            "msg": "unsloth: locked for linux/arm64; this host is linux/amd64"}]


def test_a_failed_command_says_its_own_last_words_not_only_that_it_exited_non_zero():
    """The toolkit's install is apt-get itself: a pin the repository lacks must read as apt-get says it (its
    stderr's last lines), not as Ansible's "non-zero return code" alone; a command with nothing on stderr, and a
    module's own message that already holds its words, are left as they are."""
    fleet = Fleet()
    apt = ("E: Version '9.9.9-1' for 'nvidia-container-toolkit' was not found\n\n"
           "E: Version '9.9.9-1' for 'libnvidia-container1' was not found\n")
    said = "The command exited with a non-zero return code."  # ansible-core 2.19's words
    fleet.handle(event("failed", "box", {"msg": said, "rc": 100, "stderr": apt},
                       task="Install the toolkit packages at the pinned version"))
    fleet.handle(event("failed", "quiet", {"msg": "non-zero return code", "rc": 1, "stderr": ""}))
    fleet.handle(event("failed", "said", {"msg": "docker: no such image x", "rc": 1, "stderr": "no such image x\n"}))
    assert fleet.hosts["box"].failures == [{"task": "Install the toolkit packages at the pinned version", "msg": (
        f"{said} (exit 100): E: Version '9.9.9-1' for 'nvidia-container-toolkit' was not found / "
        "E: Version '9.9.9-1' for 'libnvidia-container1' was not found")}]
    assert fleet.hosts["quiet"].failures[0]["msg"] == "non-zero return code"
    assert fleet.hosts["said"].failures[0]["msg"] == "docker: no such image x"


def test_a_failed_loop_on_ansible_core_2_21_names_its_items_from_their_own_events():
    """ansible-core 2.21 gives callbacks a loop's items without `failed` (as recorded from the derived-image
    build of tests/integration/test_spark_image_build.py): each failed item is known by its runner_item_on_failed
    event, and the task's one line is 'One or more items failed'."""
    fleet = Fleet()
    fleet.handle({"event": "playbook_on_task_start", "event_data": {"task": "Build"}})
    ok = {"changed": False, "msg": "up to date", "_ansible_item_label": "ngc-tree"}
    refused = {"changed": False, "exception": "(traceback unavailable)", "_ansible_item_label": "ngc-audio",
               "msg": "derived image ngc-audio: pip package einops is already in the base image (einops==0.8.1)"}
    fleet.handle({"event": "runner_item_on_ok", "event_data": {"host": "box", "task": "Build", "res": ok}})
    fleet.handle({"event": "runner_item_on_failed", "event_data": {"host": "box", "task": "Build", "res": refused}})
    fleet.handle({"event": "runner_item_on_failed", "event_data": {"host": "other", "task": "Build",
                                                                    "res": {**refused, "msg": "elsewhere"}}})
    fleet.handle(event("failed", "box", {"msg": "One or more items failed", "results": [ok, refused]}, task="Build"))
    assert fleet.hosts["box"].failures == [{"task": "Build", "msg": (
        "ngc-audio: derived image ngc-audio: pip package einops is already in the base image (einops==0.8.1)")}]
    fleet.handle({"event": "playbook_on_task_start", "event_data": {"task": "Next"}})
    fleet.handle(event("failed", "box", {"msg": "One or more items failed", "results": [ok]}, task="Next"))
    assert fleet.hosts["box"].failures[-1] == {"task": "Next", "msg": "One or more items failed"}, \
        "an earlier task's items are not this one's"


def test_a_running_task_says_how_many_of_its_hosts_and_items_are_done():
    fleet = Fleet()
    fleet.handle({"event": "playbook_on_task_start", "event_data": {"task": "Pull"}})
    for host in ("a", "b", "c"):
        fleet.handle(event("start", host, {}, task="Pull"))
    assert fleet.task_progress() == ", 0 of 3 hosts done"
    fleet.handle({"event": "runner_item_on_ok", "event_data": {"host": "a", "task": "Pull"}})
    fleet.handle(event("ok", "a", {}, task="Pull"))
    assert fleet.task_progress() == ", 1 of 3 hosts done, 1 item done"
    fleet.handle({"event": "playbook_on_task_start", "event_data": {"task": "Alone"}})
    fleet.handle(event("start", "localhost", {}, task="Alone"))
    assert fleet.task_progress() == "", "one host: nothing to count"


def test_a_loop_that_says_its_length_shows_n_of_m_items():
    """loop_control.extended puts ansible_loop (index, length) in each item's result, as the matrix check's loop
    over its steps does: the display says how many of them are done."""
    fleet = Fleet()
    fleet.handle({"event": "playbook_on_task_start", "event_data": {"task": "Ask the indexes, a step at a time"}})
    fleet.handle(event("start", "localhost", {}, task="Ask the indexes, a step at a time"))
    for index in (1, 2):
        fleet.handle({"event": "runner_item_on_ok", "event_data": {
            "host": "localhost", "res": {"item": {"id": f"s{index}"}, "ansible_loop": {"index": index, "length": 4}}}})
    assert fleet.task_progress() == ", 2 of 4 items done"
    fleet.handle({"event": "runner_item_on_skipped", "event_data": {
        "host": "localhost", "res": {"ansible_loop": {"index": 3, "length": 4}}}})
    assert fleet.task_progress() == ", 3 of 4 items done", "a skipped item is done too"
    fleet.handle({"event": "playbook_on_task_start", "event_data": {"task": "Next"}})
    fleet.handle({"event": "runner_item_on_ok", "event_data": {"host": "localhost", "res": {"item": 1}}})
    assert fleet.task_progress() == ", 1 item done", "a loop that does not say its length: the count alone"


def test_a_diff_is_rendered_as_ansible_gives_it_prepared_text_and_long_diffs_cut_with_a_count():
    from sparkfleet.events import MAX_DIFF, render_diff

    # apt and git give their diff as text already made ("prepared"); Ansible shows it as it is.
    assert render_diff({"changed": True, "diff": {"prepared": "The following NEW packages will be installed:\n"
                                                              "  nvidia-container-toolkit\n"}}) == (
        "The following NEW packages will be installed:\n  nvidia-container-toolkit")
    assert render_diff({"changed": True}) == ""
    assert render_diff({"changed": True, "diff": {"before": "a\n", "after": "a\n"}}) == ""
    long = render_diff({"changed": True, "diff": {"before": "", "after": "x" * (MAX_DIFF + 500)}})
    assert len(long) < MAX_DIFF + 100 and long.endswith("more characters)")


def _names_in_the_tree() -> list[re.Pattern]:
    """Each play's and task's name in site.yml, playbooks/ and roles/ (a templated part matches anything), and the
    argument-spec checks Ansible names after each role's short_description."""
    names: set[str] = set()

    def walk(node) -> None:
        if isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            if isinstance(node.get("name"), str):
                names.add(node["name"])
            for value in node.values():
                walk(value)

    for path in [REPO / "site.yml", *(REPO / "playbooks").rglob("*.yml"), *(REPO / "roles").rglob("tasks/*.yml"),
                 *(REPO / "roles").rglob("handlers/*.yml")]:
        walk(yaml.safe_load(path.read_text()))
    for path in (REPO / "roles").glob("*/meta/argument_specs.yml"):
        for entry, spec in (yaml.safe_load(path.read_text())["argument_specs"]).items():
            names.add(f"Validating arguments against arg spec '{entry}' - {spec['short_description']}")
    return [re.compile(re.sub(r"\\\{\\\{.*?\\\}\\\}", ".*", re.escape(name)) + "$") for name in names
            if re.sub(r"\{\{.*?\}\}", "", name).strip()]


@pytest.mark.parametrize("fixture", sorted(p.name for p in FIXTURES.glob("*.jsonl")))
def test_an_event_fixture_names_only_plays_and_tasks_that_exist(fixture):
    """A recorded stream must be one the playbooks still emit: a play or task renamed or gone since it was
    recorded makes the CLI's tests read a run that can no longer happen (record it again: trim.py)."""
    patterns = _names_in_the_tree()
    gone = set()
    for line in (FIXTURES / fixture).read_text().splitlines():
        event = json.loads(line)
        if event["event"] in ("playbook_on_play_start", "playbook_on_task_start"):
            data = event["event_data"]
            name = data.get("task") if event["event"] == "playbook_on_task_start" else data.get("play")
            if name and not any(p.match(name) for p in patterns):
                gone.add(name)
    assert sorted(gone) == [], f"{fixture} names plays or tasks that no longer exist"


def test_a_cluster_verify_of_the_lab_reports_each_check_and_why_the_hardware_ones_could_not_run():
    fleet = replay("cluster-verify-lab")
    data = report.build(fleet, {**META, "command": "cluster verify", "playbook": "playbooks/cluster_verify.yml"})
    jsonschema.validate(data, SCHEMA)
    (verdict,) = data["clusters"]
    assert (verdict["cluster"], verdict["verdict"], verdict["counts"]["failed"]) == ("lab", "not verified", 0)
    statuses = {c["status"] for c in verdict["checks"]}
    assert statuses == {"ok", "not run", "not judged"}
    text = report.markdown(data)
    assert "## Cluster lab: not verified" in text
    assert ("| speed | sparkfleet-cxtest-1 enp1s0f1np1 | not run |  |  | a virtual link (veth), not a CX-7 port |"
            in text)
    suite = ET.fromstring(report.junit(data))
    cases = [c for c in suite.iter("testcase") if c.get("classname") == "sparkfleet.cluster.lab"]
    assert len(cases) == len(verdict["checks"]) and suite.get("failures") == "0"
    assert int(suite.get("skipped")) == sum(1 for c in verdict["checks"] if c["status"] != "ok")


def test_a_cluster_verify_with_a_rail_at_mtu_1500_fails_naming_the_cause_and_the_fix():
    fleet = replay("cluster-verify-mtu-1500-lab")
    data = report.build(fleet, {**META, "command": "cluster verify", "status": "failed", "exit_code": 2})
    jsonschema.validate(data, SCHEMA)
    (verdict,) = data["clusters"]
    failed = [c for c in verdict["checks"] if c["status"] == "failed"]
    assert [(c["check"], c["where"]) for c in failed] == [
        ("mtu", "sparkfleet-cxtest-2 enP2p1s0f1np1"),
        ("jumbo", "sparkfleet-cxtest-1 -> sparkfleet-cxtest-2 enP2p1s0f1np1")]
    suite = ET.fromstring(report.junit(data))
    messages = [f.get("message") for f in suite.iter("failure")]
    assert any(m.startswith("found 1500, expected 9000; likely: the MTU is below the cluster's") for m in messages)
    assert "fix: provision with the cluster role" in report.markdown(data)
    lines = table_lines(data)
    assert lines[0].startswith("cluster lab (sparkfleet-cxtest-1, sparkfleet-cxtest-2): FAILED - ")
    assert lines[1].startswith("  FAILED mtu sparkfleet-cxtest-2 enP2p1s0f1np1: found 1500, expected 9000; likely: ")


def table_lines(data: dict) -> list[str]:
    """What the CLI prints after a cluster verify: the collection's own lines of the report's verdicts."""
    from sparkfleet.collection_home import collection_module

    return collection_module("cluster._verdict").verdict_lines(data["clusters"])


@pytest.mark.parametrize(("history", "changed", "check", "shown"), [
    ("converged", 1, False, "updated"),       # a launcher edited by hand and repaired: something changed
    ("converged", 1, True, "would change"),   # --check --diff showed the diff: a real run would change it
    ("converged", 0, False, "converged"),
    ("fresh", 3, False, "fresh"),
])
def test_history_is_converged_only_when_nothing_changed(history, changed, check, shown):
    """Issue 35, item 4: `history: converged` with `changed: 1` after a hand-edited launcher was repaired, where
    the README defines converged as nothing changed."""
    entry = {"history": history, "counts": {"ok": 30, "changed": changed, "failed": 0}}
    assert report.with_history(entry, check)["history"] == shown


def test_a_failure_of_a_task_run_on_the_controller_is_the_controllers_not_the_first_hosts():
    """Issue 35, item 5: with the registry down, refresh showed `sparkfleet-lab-1 ... FAILED Resolve every
    configured image, once for the fleet`; Ansible reports a run_once task delegated to localhost under the play's
    first host, and the owner went looking at the wrong machine."""
    fleet = Fleet()
    fleet.handle(event("ok", "sparkfleet-lab-1", {"changed": False}, task="Gather the preflight facts"))
    fleet.handle(event("failed", "sparkfleet-lab-1", {
        "msg": "cannot reach http://127.0.0.1:5000/v2/: connection refused",
        "_ansible_delegated_vars": {"ansible_delegated_host": "localhost", "ansible_connection": "local"}},
        task="Resolve the images on the controller, once for the fleet"))
    assert fleet.hosts["sparkfleet-lab-1"].failures == []
    (failure,) = fleet.hosts["localhost"].failures
    assert failure["task"] == "Resolve the images on the controller, once for the fleet"
    assert failure["msg"].startswith("cannot reach http://127.0.0.1:5000/v2/")


def _screen(data: dict, width: int) -> list[str]:
    """The summary as a person reads it at a terminal `width` columns wide."""
    import io

    from rich.console import Console

    from sparkfleet.terminal import print_summary

    out = io.StringIO()
    print_summary(data, None, Console(file=out, width=width, force_terminal=True, color_system=None))
    return out.getvalue().splitlines()


@pytest.mark.parametrize("width", [80, 100, 160])
def test_the_refresh_summary_keeps_the_counts_and_shows_each_hosts_batch_and_old_to_new_digest(width):
    """Issue 35, item 6: at 100 columns the summary left out changed (what an Ansible user reads first), the images
    column folded a digest over four lines, and the refresh summary showed no host's old -> new digest."""
    fleet = replay("refresh-rollback-fleet")
    data = report.build(fleet, {**META, "command": "refresh", "playbook": "playbooks/refresh.yml",
                                "status": "failed", "exit_code": 2})
    diff = {d["name"]: d for d in data["refresh"]["diff"]}["unsloth"]
    old, new = diff["old"].removeprefix("sha256:")[:12], diff["new"].removeprefix("sha256:")[:12]
    lines = _screen(data, width)
    header = next(i for i, line in enumerate(lines) if line.lstrip().startswith("host "))
    assert all(word in lines[header] + lines[header + 1] for word in ("verdict", "changed", "failed")), lines
    rows = {host: next(line for line in lines[header:] if line.startswith(host)) for host in FLEET}
    for host in FLEET:
        counts = data["hosts"][host]["counts"]
        assert rows[host].split()[-2:] == [str(counts["changed"]), str(counts["failed"])], rows[host]
    assert f"{FLEET[0]}: canary moved: unsloth {old} -> {new}" in lines
    assert f"{FLEET[1]}: batch 2 rolled back: unsloth {old} -> {new} (runs {old})" in lines
    assert all(len(line) <= width for line in lines[header - 1:header + 8]), lines
    shown = "\n".join(lines)
    for digest in (old, new):  # short and whole: never folded across lines
        assert digest in shown


def test_the_check_mode_summary_says_it_changed_nothing_and_what_each_host_would_move():
    """Issue 35, item 6: `refresh --check` printed a table of ? and - under a title that did not say it changed
    nothing."""
    fleet = replay("refresh-rollback-fleet")
    data = report.build(fleet, {**META, "command": "refresh", "playbook": "playbooks/refresh.yml", "check": True})
    jsonschema.validate(data, SCHEMA)
    lines = _screen(data, 80)
    assert any(line.startswith("sparkfleet refresh: successful (exit 0, 150.4 s), check mode: nothing changed")
               for line in lines), lines
    diff = {d["name"]: d for d in data["refresh"]["diff"]}["unsloth"]
    old, new = diff["old"].removeprefix("sha256:")[:12], diff["new"].removeprefix("sha256:")[:12]
    for host in FLEET:
        assert f"{host}: would move: unsloth {old} -> {new}" in lines
        assert data["hosts"][host]["refresh"]["outcome"] == "would move"
    assert not any(line.startswith(FLEET[0]) and " ? " in line for line in lines)


def test_each_image_and_venv_is_a_row_of_its_own_naming_what_each_check_found_for_it():
    """Issue 36: results were keyed by launcher path or reference and the summary joined the lines ("True 13.0;
    True 13.0"), which nobody could map back to an image. Each image and venv is a row of its own now - on the
    screen, in report.md and report.json - with its GPU line, frameworks, ABI and smoke step."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification._verification import judge

    ngc, venv_python = "nvcr.io/nvidia/pytorch@sha256:" + "0123456789ab" + "c" * 52, "/opt/sparkfleet/venv/bin/python"
    pinned = [{"name": "ngc", "ref": ngc, "tag": "25.11-py3", "launcher_path": "/usr/local/bin/spark-ngc"}]
    verdict = judge({
        "preflight": {"host_class": "spark"}, "pinned": pinned,
        "images": {"results": [{"item": "/usr/local/bin/spark-ngc", "verdict": "ok", "line": "True 13.0",
                                "frameworks": {"results": [{"name": "jax", "verdict": "ok"},
                                                           {"name": "triton", "verdict": "failed",
                                                            "stage": "compile", "cause": "ptxas",
                                                            "error": "PTXASError: ptxas fatal: sm_121a",
                                                            "fix": "set TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas",
                                                            "stderr": "ptxas fatal : Value 'sm_121a' is not "
                                                                      "defined"}]}}]},
        "pythons": {"results": [{"item": venv_python, "verdict": "ok", "line": "True 13.0"}]},
        "abi": {"results": [{"item": venv_python, "verdict": "failed", "findings": ["bitsandbytes: CUDA 12"]},
                            {"item": ngc, "verdict": "ok", "findings": []}]},
        "smoke": {"images": {"results": [{"item": "/usr/local/bin/spark-ngc", "verdict": "ok", "device": "cuda",
                                          "gpu_verified": True, "drop": 0.084}]},
                  "pythons": {"results": [{"item": venv_python, "verdict": "failed", "stage": "lora",
                                           "error": "ImportError: torchao"}]}}})
    facts = {"spark_preflight": {"host_class": "spark"}, "spark_images_pinned": pinned,
             "spark_venv_active": {"path": "/opt/sparkfleet/venvs/unsloth-2026.7.2-0123456789ab",
                                   "matrix": "unsloth-2026.7.2", "status": "verified"},
             "spark_verify_result": {**verdict, "history": "converged"}}
    entry = table.host_entry(facts, counts={"changed": 0, "failed": 1}, failures=[], changes=[])
    data = {**META, "hosts": {"spark-01": entry}, "refresh": None, "warnings": [], "clusters": None}
    jsonschema.validate({**data, "schema": report.SCHEMA}, SCHEMA)
    assert [t["what"] for t in entry["targets"]] == [
        "image ngc@0123456789ab", "venv unsloth-2026.7.2 (/opt/sparkfleet/venvs/unsloth-2026.7.2-0123456789ab)"]
    image, venv = entry["targets"]
    assert (image["gpu"], image["frameworks"], image["abi"], image["smoke"]) == (
        "ok True 13.0", ["jax ok", "triton failed"], "ok", "ok -8%")
    assert (venv["gpu"], venv["abi"], venv["smoke"]) == ("ok True 13.0", "1 finding", "failed at lora")
    # Issue 57, item 9: what the module knows of a framework reaches report.json, not only its verdict.
    triton = entry["verification"]["gpu"][0]["frameworks"][1]
    assert (triton["error"], triton["fix"], triton["stderr"]) == (
        "PTXASError: ptxas fatal: sm_121a", "set TRITON_PTXAS_PATH=/usr/local/cuda/bin/ptxas",
        "ptxas fatal : Value 'sm_121a' is not defined"), triton
    assert "| spark-01 | image ngc@0123456789ab | ok True 13.0 | jax ok, triton failed | ok | ok -8% |" \
        in report.markdown(data)
    for width in (80, 120):
        screen = _screen(data, width)
        assert any(line.startswith("spark-01") and "image ngc@0123456789ab" in line for line in screen), screen
        assert any(line.startswith("spark-01") and "venv unsloth-2026.7.2" in line for line in screen), screen
        assert all(len(line) <= width for line in screen if line.startswith("spark-01")), screen


def test_a_run_that_changed_a_host_says_each_change_on_the_screen_and_in_its_junit_case():
    """Issue 58, item 2: a provision that repaired five drifts printed `updated ... 5 0`, what it repaired only in
    report.md or under --diff. A recorded fresh provision (every role changed the host): each change a line under
    the table, plain too, and in the host's JUnit case."""
    data = report.build(replay("provision-lab"), META)
    changes = data["hosts"][LAB]["changes"]
    assert len(changes) >= 5, changes
    screen = _screen(data, 100)
    said = [line for line in screen if line.startswith(f"{LAB}: changed: ")]
    assert len(said) == len(changes) and all(line.startswith(f"{LAB}: changed: {c['task']}")
                                              for line, c in zip(said, changes, strict=True)), screen
    assert any(c.get("path") and f"({c['path']})" in " ".join(screen) for c in changes), "the file each wrote"
    run_case = next(c for c in ET.fromstring(report.junit(data)).iter("testcase")
                    if c.get("classname") == f"sparkfleet.{LAB}" and c.get("name") == "run")
    out = run_case.find("system-out").text
    assert all(f"changed: {c['task']}" in out for c in changes), out


def test_refresh_check_warns_of_a_host_whose_rollout_would_fail_for_want_of_the_nvidia_runtime():
    """Issue 58, item 6: `refresh --check` did not say that a target host's runtime was missing; the refresh then
    pulled there before rolling back. The check play reads it (playbooks/refresh.yml) and the summary says it."""
    fleet = replay("refresh-rollback-fleet")
    missing = {"registered": False, "runtimes": ["io.containerd.runc.v2", "runc"], "toolkit_version": "1.19.0"}
    fleet.hosts[FLEET[1]].facts["spark_container_runtime_registered"] = missing
    fleet.hosts[FLEET[0]].facts["spark_container_runtime_registered"] = {**missing, "registered": True,
                                                                         "runtimes": ["nvidia", "runc"]}
    data = report.build(fleet, {**META, "command": "refresh", "playbook": "playbooks/refresh.yml", "check": True})
    jsonschema.validate(data, SCHEMA)
    said = [w for w in data["warnings"] if "nvidia runtime" in w]
    assert said == [f"{FLEET[1]}: Docker does not list the nvidia runtime (it lists io.containerd.runc.v2, runc): "
                    "the refresh would pull the new digests there, fail the host's check and roll it back. Run "
                    f"sparkfleet provision -l {FLEET[1]} first."]
    assert f"warning: {said[0]}" in " ".join(" ".join(_screen(data, 100)).split())
    applied = report.build(fleet, {**META, "command": "refresh", "playbook": "playbooks/refresh.yml"})
    assert not [w for w in applied["warnings"] if "nvidia runtime" in w], "a real rollout says it as a failure"


def test_refresh_check_says_docker_did_not_answer_in_the_plays_own_sentence():
    """A host whose Docker did not answer at all is not one 'listing none': refresh --check says so, with Docker's
    words, in the sentence the play says too (the collection's _verification.refresh_blocker, used by the filter
    spark_refresh_blocker in playbooks/refresh.yml and by the report)."""
    fleet = replay("refresh-rollback-fleet")
    fleet.hosts[FLEET[1]].facts["spark_container_runtime_registered"] = {
        "registered": False, "runtimes": [], "unanswered": "Cannot connect to the Docker daemon at\nunix:///x.sock."}
    data = report.build(fleet, {**META, "command": "refresh", "playbook": "playbooks/refresh.yml", "check": True})
    said = [w for w in data["warnings"] if FLEET[1] in w and "Docker" in w]
    assert said == [f"{FLEET[1]}: Docker did not answer (Cannot connect to the Docker daemon at unix:///x.sock.): "
                    "the refresh would pull the new digests there, fail the host's check and roll it back. Run "
                    f"sparkfleet provision -l {FLEET[1]} first."]
    play = (REPO / "playbooks" / "refresh.yml").read_text()
    assert "spark_refresh_blocker(spark_container_runtime_registered)" in play

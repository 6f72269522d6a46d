"""The filters that let a converged run skip a module call judge as the module does: spark_state_unchanged
against what spark_state wrote, spark_docker_registration_gaps against spark_docker_runtime's own gaps."""

from __future__ import annotations

import json
import sys

from ansible_collections.sparkfleet.spark.plugins.filter.sparkfleet_runtime import spark_docker_registration_gaps
from ansible_collections.sparkfleet.spark.plugins.filter.sparkfleet_verify import spark_state_unchanged

from conftest import run_module

CONTENT = {"verification": {"verdict": "not verified", "images": [{"name": "ngc", "ref": "r@sha256:" + "a" * 64}],
                            "count": 3}}


def test_a_state_file_the_module_wrote_is_unchanged_for_the_same_content_and_changed_for_other(tmp_path):
    path = tmp_path / "state.json"
    written = run_module("spark_state", {"path": str(path), "content": CONTENT})
    assert written["changed"] is True
    again = run_module("spark_state", {"path": str(path), "content": CONTENT})
    kept = spark_state_unchanged(path.read_text(), CONTENT, str(path))
    assert kept is not None and again["changed"] is False
    assert {k: kept[k] for k in ("changed", "status", "previous", "recorded")} == {
        k: again[k] for k in ("changed", "status", "previous", "recorded")}, "the same result the module gives"
    assert kept["recorded"] == again["previous"], "the state kept is the file's"
    other = {"verification": {**CONTENT["verification"], "verdict": "failed"}}
    assert spark_state_unchanged(path.read_text(), other, str(path)) is None
    assert run_module("spark_state", {"path": str(path), "content": other})["changed"] is True


def test_no_damaged_or_edited_state_file_is_taken_for_unchanged(tmp_path):
    path = tmp_path / "state.json"
    run_module("spark_state", {"path": str(path), "content": CONTENT})
    text = path.read_text()
    assert spark_state_unchanged(None, CONTENT, str(path)) is None
    assert spark_state_unchanged(text[:-20], CONTENT, str(path)) is None
    assert spark_state_unchanged(json.dumps(json.loads(text)), CONTENT, str(path)) is None, "re-rendered: rewrite"


def test_the_registration_gaps_are_the_modules_and_unknown_when_the_facts_cannot_tell(tmp_path):
    daemon = tmp_path / "daemon.json"
    daemon.write_text(json.dumps({"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "args": []}},
                                  "log-driver": "journald"}))
    facts = {"path": str(daemon), "registration": {"runtimes": {"nvidia": {"path": "nvidia-container-runtime"}}},
             "error": None}
    assert spark_docker_registration_gaps(facts, str(daemon)) == []
    module = run_module("spark_docker_runtime", {"path": str(daemon), "enable_cdi": True}, "--check")
    assert spark_docker_registration_gaps(facts, str(daemon), False, True) == module["gaps"] != []
    assert spark_docker_registration_gaps(facts, "/etc/docker/other.json") is None
    assert spark_docker_registration_gaps({"path": str(daemon), "registration": None, "error": "not JSON"},
                                          str(daemon)) is None
    assert spark_docker_registration_gaps(None, str(daemon)) is None


def _recorded_pull(tmp_path, requests: list[dict], result: object) -> dict:
    """What roles/spark_images/tasks/pull.yml makes of a converged record, its expressions as written there (the
    preflight's `converged` fact given as a variable), evaluated by ansible-playbook on localhost."""
    import subprocess

    import yaml

    from conftest import BIN, REPO, ansible_env

    [block] = yaml.safe_load((REPO / "roles" / "spark_images" / "tasks" / "pull.yml").read_text())
    names = ("__spark_images_pull_record", "__spark_images_pull_recorded_pinned", "__spark_images_pull_recorded")
    expressions = {name: block["vars"][name].replace("ansible_facts['spark_preflight']['converged']", "converged")
                   for name in names}
    key = "k" * 64
    play = [{"hosts": "localhost", "gather_facts": False,
             "vars": {**expressions, "__spark_images_pull_key": key, "__spark_images_pull_args": {"images": requests},
                      "__spark_images_pull_converged": {key: {"module": "spark_image_pull", "result": result}}},
             "tasks": [{"name": "What the record gives", "ansible.builtin.copy": {
                 "content": "{{ __spark_images_pull_recorded | to_json }}", "dest": str(tmp_path / "out.json")}}]}]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e",
                           f"ansible_python_interpreter={sys.executable}",
                           str(tmp_path / "play.yml")], capture_output=True, text=True, env=ansible_env(), check=False)
    assert proc.returncode == 0, proc.stdout[-2000:]
    return json.loads((tmp_path / "out.json").read_text())


def test_a_converged_pull_record_is_used_only_where_it_names_the_locked_images_digests_and_launchers(tmp_path):
    """Issue 56, item 2: a record whose result names an image, digest or path the current lock does not (written
    by someone who could reach the records' folder, or left by another lock) is ignored: the pull runs."""
    digest = "sha256:" + "a" * 64
    requests = [{"name": "ngc", "repository": "127.0.0.1:5000/nvidia/pytorch", "digest": digest,
                 "launcher_path": "/usr/local/bin/spark-ngc"}]
    good = {"changed": False, "pinned": [{"name": "ngc", "ref": f"127.0.0.1:5000/nvidia/pytorch@{digest}",
                                          "launcher_path": "/usr/local/bin/spark-ngc"}]}
    assert _recorded_pull(tmp_path, requests, good) == {"k" * 64: {"result": good}}
    theirs = {**good, "pinned": [{**good["pinned"][0], "ref": "evil.example/x@sha256:" + "b" * 64}]}
    moved = {**good, "pinned": [{**good["pinned"][0], "launcher_path": "/tmp/spark-ngc"}]}
    extra = {**good, "pinned": [*good["pinned"], {**good["pinned"][0], "name": "more"}]}
    for bad in (theirs, moved, extra, {"pinned": "x"}, "not a result", {"changed": False}):
        assert _recorded_pull(tmp_path, requests, bad) == {}, bad

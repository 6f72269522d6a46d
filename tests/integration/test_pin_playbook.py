"""playbooks/pin.yml and the spark_images plan against a real registry, with inventories of the tests' own."""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import inert_load
from oci_push import push

from conftest import BIN, REPO, SHOW_INVOCATION, ansible_env

pytestmark = pytest.mark.testbed


def inventory(tmp_path: Path, registry: str, hosts: int = 0) -> Path:
    inv = tmp_path / "inventory"
    (inv / "group_vars" / "all").mkdir(parents=True)
    (inv / "group_vars" / "all" / "main.yml").write_text(yaml.safe_dump({
        "spark_images_registry_replacements": {"nvcr.io": registry, "docker.io": registry},
        "spark_images_catalog": [
            {"name": "ngc", "registry": "nvcr.io", "repository": "pintest/pytorch", "tags": ["25.11-py3", "25.09-py3"],
             "launcher": "spark-ngc"},
            {"name": "unsloth", "registry": "docker.io", "repository": "pintest/unsloth", "tags": ["dgxspark-latest"],
             "launcher": "spark-unsloth"}],
    }))
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"sparks": {"hosts": {
        f"spark-{i}": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        for i in range(1, hosts + 1)}}}}}))
    return inv


def playbook(path: Path, inv: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inv), str(path), *args,
                           "-e", f"ansible_python_interpreter={sys.executable}"],
                          cwd=REPO, env=ansible_env(**env), capture_output=True, text=True, check=False)


def flat(text: str) -> str:
    """Output with the callback's line wrapping undone."""
    return " ".join(text.split())


def test_pin_writes_the_lock_and_a_moved_tag_shows_old_and_new(anon, tmp_path):
    push(anon.url, "pintest/pytorch:25.09-py3", ["amd64", "arm64"])
    first = push(anon.url, "pintest/unsloth:dgxspark-latest", ["amd64", "arm64"], list_type="docker", seed="one")
    inv = inventory(tmp_path, anon.host)
    lock_file = inv / "group_vars" / "all" / "spark_images_lock.yml"
    run = playbook(REPO / "playbooks" / "pin.yml", inv)
    assert run.returncode == 0, run.stdout + run.stderr
    lock = inert_load(lock_file.read_text())["spark_images_lock"]
    assert lock["unsloth"]["index_digest"] == first["digest"]
    assert lock["ngc"]["tag"] == "25.09-py3"
    assert lock["ngc"]["fallback"]["wanted"] == "25.11-py3"
    assert "FALLBACK from 25.11-py3" in flat(run.stdout)
    assert anon.requests("HEAD", "/v2/pintest/unsloth/manifests/dgxspark-latest") == 1

    moved = push(anon.url, "pintest/unsloth:dgxspark-latest", ["amd64", "arm64"], list_type="docker", seed="two")
    check = playbook(REPO / "playbooks" / "pin.yml", inv, "--check", "--diff")
    assert f"changed: unsloth {anon.host}/pintest/unsloth:dgxspark-latest: {first['digest']} -> {moved['digest']}" \
        in flat(check.stdout)
    assert inert_load(lock_file.read_text())["spark_images_lock"]["unsloth"]["index_digest"] == first["digest"]
    again = playbook(REPO / "playbooks" / "pin.yml", inv)
    assert inert_load(lock_file.read_text())["spark_images_lock"]["unsloth"]["index_digest"] == moved["digest"]
    assert f"{first['digest']} -> {moved['digest']}" in flat(again.stdout)


def test_a_registry_that_is_down_leaves_the_lock_as_it_was(tmp_path):
    inv = inventory(tmp_path, "127.0.0.1:5119")
    lock_file = inv / "group_vars" / "all" / "spark_images_lock.yml"
    lock_file.write_text("---\nspark_images_lock: {}\n")
    run = playbook(REPO / "playbooks" / "pin.yml", inv)
    assert run.returncode != 0
    assert "cannot reach http://127.0.0.1:5119" in run.stdout
    assert lock_file.read_text() == "---\nspark_images_lock: {}\n"


def test_an_unlocked_dated_tag_is_resolved_once_for_the_whole_fleet(anon, tmp_path):
    push(anon.url, "pintest/pytorch:25.11-py3", ["amd64", "arm64"], seed="fleet")
    push(anon.url, "pintest/unsloth:dgxspark-latest", ["amd64", "arm64"], list_type="docker", seed="fleet")
    inv = inventory(tmp_path, anon.host, hosts=3)
    # Lock only the moving tag; the dated one is resolved for this run.
    assert playbook(REPO / "playbooks" / "pin.yml", inv).returncode == 0
    lock_file = inv / "group_vars" / "all" / "spark_images_lock.yml"
    lock = inert_load(lock_file.read_text())
    del lock["spark_images_lock"]["ngc"]
    lock_file.write_text(yaml.safe_dump(lock))
    before = anon.requests("HEAD", "/v2/pintest/pytorch/manifests/25.11-py3")
    plan = tmp_path / "plan.yml"
    plan.write_text(json.dumps([{"hosts": "sparks", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "sparkfleet.spark.spark_images", "tasks_from": "plan.yml"}},
        {"ansible.builtin.debug": {"msg": "{{ __spark_images_resolved.images | map(attribute='index_digest') }}"}}]}]))
    run = playbook(plan, inv)
    assert run.returncode == 0, run.stdout
    assert "not locked, resolved for this run only: ngc" in flat(run.stdout)
    assert anon.requests("HEAD", "/v2/pintest/pytorch/manifests/25.11-py3") - before == 1


def test_registry_login_keeps_the_password_off_argv_and_out_of_the_output(tmp_path):
    """docker login --password-stdin against a real htpasswd registry: logged in once, secret nowhere in -vvv output."""
    from registries import Registry, free_port

    secret = "planted-s3cret-9f2c"
    htpasswd = tmp_path / "htpasswd"
    htpasswd.write_text(subprocess.run(["htpasswd", "-Bbn", "fleet", secret], capture_output=True, text=True,
                                       check=True).stdout)
    registry = Registry(tmp_path, free_port(), {"htpasswd": {"realm": "sparkfleet", "path": str(htpasswd)}})
    config = tmp_path / "docker" / "config.json"
    try:
        inv = inventory(tmp_path, registry.host, hosts=1)
        (inv / "group_vars" / "all" / "secrets.yml").write_text(yaml.safe_dump({
            "spark_images_registry_credentials": {registry.host: {"username": "fleet", "password": secret}},
            "spark_images_docker_config": str(config)}))
        play = tmp_path / "login.yml"
        play.write_text(json.dumps([{"hosts": "sparks", "gather_facts": False, "tasks": [
            {"ansible.builtin.include_role": {"name": "sparkfleet.spark.spark_images", "tasks_from": "login.yml"}}]}]))
        first = playbook(play, inv, "-vvv", **SHOW_INVOCATION)
        assert first.returncode == 0, first.stdout
        assert secret not in first.stdout + first.stderr
        assert registry.host in json.loads(config.read_text())["auths"]
        assert (config.stat().st_mode & 0o777) == 0o600
        # Once logged in, the client configuration holds the credential (base64 of user:password): reading it
        # back on the next run must not show it, in -vvv output nor in the CLI's reports and runner artifacts.
        # Looked for as it is, as Docker stores it, and as the file's bytes in base64 (how slurp returns them).
        planted = [secret, base64.b64encode(f"fleet:{secret}".encode()).decode(),
                   base64.b64encode(config.read_bytes()).decode()]
        second = playbook(play, inv, "-vvv", **SHOW_INVOCATION)
        assert "changed=0" in second.stdout
        assert [s for s in planted if s in second.stdout + second.stderr] == []
        report = tmp_path / "report"
        proc = subprocess.run([str(BIN / "sparkfleet"), "provision", "-i", str(inv), "--tags", "spark_images_login",
                               "-vvv", "--plain", "--report-dir", str(report)], cwd=tmp_path, capture_output=True,
                              text=True, check=False, env=ansible_env(**SHOW_INVOCATION))
        assert proc.returncode == 0, proc.stdout[-3000:]
        leaked = [str(p) for p in report.rglob("*") if p.is_file() and any(s.encode() in p.read_bytes()
                                                                              for s in planted)]
        assert leaked == [] and [s for s in planted if s in proc.stdout + proc.stderr] == []
    finally:
        registry.stop()


def test_prune_removes_only_images_this_project_pulled_and_no_longer_pins(anon, tmp_path):
    old = push(anon.url, "pintest/pytorch:25.11-py3", ["amd64", "arm64"], seed="prune-old")
    push(anon.url, "pintest/unsloth:dgxspark-latest", ["amd64", "arm64"], list_type="docker", seed="prune")
    inv = inventory(tmp_path, anon.host, hosts=1)
    record = tmp_path / "pulled.json"
    play = tmp_path / "pull.yml"
    # The role as site.yml runs it, up to the pull and the prune (its tags select them; no launcher is written).
    play.write_text(json.dumps([{"hosts": "sparks", "gather_facts": False, "tasks": [
        {"ansible.builtin.import_role": {"name": "sparkfleet.spark.spark_images"}}]}]))

    def pull(*extra: str) -> subprocess.CompletedProcess:
        return playbook(play, inv, "--tags", "spark_images_plan,spark_images_pull", "-e",
                        f"spark_images_record_file={record}", *extra)

    old_ref = f"{anon.host}/pintest/pytorch@{old['digest']}"
    try:
        assert playbook(REPO / "playbooks" / "pin.yml", inv).returncode == 0
        first = pull()
        assert first.returncode == 0, first.stdout
        new = push(anon.url, "pintest/pytorch:25.11-py3", ["amd64", "arm64"], seed="prune-new")
        assert playbook(REPO / "playbooks" / "pin.yml", inv).returncode == 0
        kept = pull()
        assert kept.returncode == 0, kept.stdout
        inspect = ["docker", "image", "inspect", old_ref]
        assert subprocess.run(inspect, capture_output=True, check=False).returncode == 0  # kept without the flag
        pruned = pull("-e", "spark_images_prune=true")
        assert pruned.returncode == 0, pruned.stdout
        assert subprocess.run(inspect, capture_output=True, check=False).returncode != 0
        new_ref = f"{anon.host}/pintest/pytorch@{new['digest']}"
        assert subprocess.run(["docker", "image", "inspect", new_ref], capture_output=True, check=False).returncode == 0
        assert subprocess.run(["docker", "image", "inspect", "sparkfleet/host-plain:latest"], capture_output=True,
                              check=False).returncode == 0
        # The record keeps what is still here, so the next prune has nothing to do; before, the pruned image stayed
        # in it and every later prune failed on it ("No such image"; found by a refresh that prunes, issue 35).
        assert old_ref not in json.loads(record.read_text()) and new_ref in json.loads(record.read_text())
        again = pull("-e", "spark_images_prune=true")
        assert again.returncode == 0 and "changed=0" in again.stdout, again.stdout[-3000:]
    finally:
        for ref in json.loads(record.read_text()) if record.exists() else []:
            subprocess.run(["docker", "image", "rm", "-f", ref], capture_output=True, check=False)


def test_the_readmes_pin_check_diff_at_a_terminal_shows_the_lock_file_diff_and_writes_nothing(anon, tmp_path):
    """The README's `sparkfleet pin -i inventory/mylab --check --diff` ("what the lock would say"), typed at an
    80-column terminal in a directory of the user's own after the tag moved: the lock file's diff on the screen
    (the old digest removed in red, the new one added in green) and in report.md, and the lock left as it was."""
    from pty_screen import Screen
    from test_at_a_terminal import readme_commands

    (argv,) = [a for a in readme_commands() if a[1:2] == ["pin"] and "--diff" in a][:1]
    push(anon.url, "pintest/pytorch:25.09-py3", ["amd64", "arm64"])
    old = push(anon.url, "pintest/unsloth:dgxspark-latest", ["amd64", "arm64"], list_type="docker", seed="before")
    home = tmp_path / "work"
    (home / "inventory").mkdir(parents=True)
    inventory(tmp_path, anon.host).rename(home / "inventory" / "mylab")
    lock_file = home / "inventory" / "mylab" / "group_vars" / "all" / "spark_images_lock.yml"
    first = Screen(argv[1:argv.index("--check")], home, columns=80).wait()
    assert first.rc == 0, first.text[-3000:]
    written = lock_file.read_text()
    new = push(anon.url, "pintest/unsloth:dgxspark-latest", ["amd64", "arm64"], list_type="docker", seed="after")
    screen = Screen(argv[1:], home, columns=80).wait()
    assert screen.rc == 0 and "Traceback" not in screen.text, screen.text[-3000:]
    assert lock_file.read_text() == written, "--check wrote the lock"
    lines = screen.lines()
    header = next(i for i, line in enumerate(lines) if line.startswith("localhost: would change "))
    diff = lines[header:]
    removed = next(line for line in diff if line.startswith("-") and old["digest"] in line)
    added = next(line for line in diff if line.startswith("+") and new["digest"] in line)
    assert any(line.startswith("--- before: ") and line.endswith("spark_images_lock.yml") for line in diff)
    assert re.search(r"\x1b\[31m" + re.escape(removed[:20]), screen.raw), "removed lines are red"
    assert re.search(r"\x1b\[32m" + re.escape(added[:20]), screen.raw), "added lines are green"
    report_md = (home / "reports" / "latest" / "report.md").read_text()
    assert "```diff" in report_md and removed in report_md and added in report_md
    data = json.loads((home / "reports" / "latest" / "report.json").read_text())
    assert any(new["digest"] in c["diff"] for c in data["hosts"]["localhost"]["changes"])

    # Then the pin itself, without --diff: the screen says where the lock went and what moved (it said only
    # `changed 1`; what moved was in the lock file's diff alone).
    pinned = Screen(argv[1:argv.index("--check")], home, columns=80).wait()
    assert pinned.rc == 0, pinned.text[-3000:]
    flat_screen = "".join(pinned.lines())  # rows joined: a digest's line wraps at 80 columns
    assert f"wrote: {lock_file}" in flat_screen, pinned.text[-3000:]
    assert f"unsloth {anon.host}/pintest/unsloth:dgxspark-latest: {old['digest']} -> {new['digest']}" in flat_screen
    data = json.loads((home / "reports" / "latest" / "report.json").read_text())
    (change,) = data["hosts"]["localhost"]["changes"]
    assert change["lines"] == [f"unsloth {anon.host}/pintest/unsloth:dgxspark-latest: {old['digest']} -> "
                               f"{new['digest']}"]
    assert f"  - {change['lines'][0]}" in (home / "reports" / "latest" / "report.md").read_text()


def test_pin_locks_the_images_a_host_has_of_its_own_and_refuses_a_name_defined_twice(anon, tmp_path):
    """Issue 35 (per host): pin resolved the catalog group_vars/all gives; an image a host has of its own
    (host_vars) stayed unlocked, resolved again on every provision, its message saying "run sparkfleet pin" which
    did not lock it. Every host's images are locked now, each resolved once; a name two hosts define otherwise is
    refused with both named, and the lock stays as it was."""
    push(anon.url, "pintest/pytorch:25.09-py3", ["amd64", "arm64"])
    push(anon.url, "pintest/unsloth:dgxspark-latest", ["amd64", "arm64"], list_type="docker", seed="one")
    audio = push(anon.url, "pintest/audio:24.10", ["arm64"], seed="own")
    inv = inventory(tmp_path, anon.host, hosts=2)
    (inv / "host_vars").mkdir()
    own = {"name": "audio", "registry": "nvcr.io", "repository": "pintest/audio", "tags": ["24.10"],
           "launcher": "spark-audio"}
    catalog = yaml.safe_load((inv / "group_vars" / "all" / "main.yml").read_text())["spark_images_catalog"]
    (inv / "host_vars" / "spark-2.yml").write_text(yaml.safe_dump({"spark_images_catalog": [*catalog, own]}))
    lock_file = inv / "group_vars" / "all" / "spark_images_lock.yml"
    run = playbook(REPO / "playbooks" / "pin.yml", inv)
    assert run.returncode == 0, run.stdout + run.stderr
    lock = inert_load(lock_file.read_text())["spark_images_lock"]
    assert sorted(lock) == ["audio", "ngc", "unsloth"] and lock["audio"]["index_digest"] == audio["digest"]
    assert anon.requests("HEAD", "/v2/pintest/audio/manifests/24.10") == 1, "resolved once"

    (inv / "host_vars" / "spark-1.yml").write_text(yaml.safe_dump({"spark_images_catalog": [
        *catalog, {**own, "tags": ["24.09"]}]}))
    before = lock_file.read_text()
    refused = playbook(REPO / "playbooks" / "pin.yml", inv)
    assert refused.returncode == 2
    assert "image 'audio' is defined differently by host spark-1 and host spark-2" in flat(refused.stdout), \
        refused.stdout[-3000:]
    assert lock_file.read_text() == before


def test_the_plan_reads_the_lock_file_pin_wrote_and_refuses_a_variable_that_says_another(anon, tmp_path):
    """Issue 39: pin wrote spark_images_lock_file while the plan read the variable spark_images_lock, so with the
    file moved the plan pulled from the old lock while pin wrote the new one. The plan reads the file pin writes,
    and refuses, naming both, when the inventory's variable holds another lock; a refresh reads it the same way."""
    pushed = push(anon.url, "pintest/unsloth:dgxspark-latest", ["amd64", "arm64"], list_type="docker", seed="one")
    push(anon.url, "pintest/pytorch:25.11-py3", ["amd64", "arm64"], seed="one")
    inv = inventory(tmp_path, anon.host, hosts=2)
    own = tmp_path / "locks" / "fleet.yml"  # the owner keeps the lock outside the inventory
    (inv / "group_vars" / "all" / "where.yml").write_text(f"spark_images_lock_file: {own}\n")
    assert playbook(REPO / "playbooks" / "pin.yml", inv).returncode == 0
    written = inert_load(own.read_text())["spark_images_lock"]
    assert written["unsloth"]["index_digest"] == pushed["digest"]
    assert written["unsloth"]["digests"]["linux/arm64"] == pushed["platforms"]["arm64"]
    assert not (inv / "group_vars" / "all" / "spark_images_lock.yml").exists()
    plan = tmp_path / "plan.yml"
    plan.write_text(json.dumps([{"hosts": "sparks", "gather_facts": False, "tasks": [
        {"ansible.builtin.include_role": {"name": "sparkfleet.spark.spark_images", "tasks_from": "plan.yml"}},
        {"ansible.builtin.debug": {"msg": "planned {{ __spark_images_plan.plan | map(attribute='index_digest') "
                                          "| join(',') }}"}}]}]))
    run = playbook(plan, inv)
    assert run.returncode == 0, run.stdout
    assert f"planned {written['ngc']['index_digest']},{pushed['digest']}" in flat(run.stdout), "the file pin wrote"

    # An old lock left in group_vars/all (Ansible loads it as the variable): two locks, refused naming both.
    stale = {**written, "unsloth": {**written["unsloth"], "index_digest": "sha256:" + "0" * 64}}
    (inv / "group_vars" / "all" / "spark_images_lock.yml").write_text(yaml.safe_dump({"spark_images_lock": stale}))
    asked = anon.requests("HEAD", "/v2/pintest/unsloth/manifests/dgxspark-latest")  # the registry serves every test
    for refused in (playbook(plan, inv), playbook(REPO / "playbooks" / "refresh.yml", inv, "--check")):
        text = flat(refused.stdout)
        assert refused.returncode != 0, text
        assert f"two image locks: the inventory sets spark_images_lock, and the lock file spark_images_lock_file is " \
               f"{own}" in text, text
        assert "they differ in unsloth" in text
    assert anon.requests("HEAD", "/v2/pintest/unsloth/manifests/dgxspark-latest") == asked, "refused before resolving"

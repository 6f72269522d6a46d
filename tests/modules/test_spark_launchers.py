"""The launchers, written by the real spark_launchers module (through real `ansible`) and run by a real shell
with a docker stand-in that records its argv: a working directory whose name holds shell syntax, and a value
with a quote, reach docker as plain arguments and run nothing; a converged host writes nothing; check mode and
--diff say what would change; a bad value writes no launcher at all."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys

import pytest

from conftest import run_module

D = "sha256:" + "cd" * 32
E = "sha256:" + "ef" * 32
NGC = {"registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3",
       "resolved_at": "2026-12-01T04:00:00+00:00", "launcher": "spark-ngc", "ref": f"nvcr.io/nvidia/pytorch@{D}"}
DERIVED = {"derived": True, "image_tag": "sparkfleet/ngc-tools:0123abcd", "recipe": "sha256:" + "01" * 32,
           "base_ref": NGC["ref"], "launcher": "spark-ngc-tools", "ref": E}
FLAGS = ["--runtime=nvidia", "--gpus", "all"]


def install(tmp_path, images, *flags, workdir="work/runs", environment=None) -> dict:
    return run_module("spark_launchers", {"dir": str(tmp_path / "bin"), "images": images, "workdir": workdir,
                                          "run_flags": FLAGS, "environment": environment or {}}, *flags)


def test_a_hostile_directory_name_and_a_quoted_value_reach_docker_as_plain_arguments(tmp_path, fake_bin):
    record = tmp_path / "argv.json"
    fake_bin("docker", f'exec python3 -c \'import json, sys; json.dump(sys.argv[1:], open("{record}", "w"))\' "$@"\n')
    result = install(tmp_path, [NGC], environment={"NOTE": "it's $(touch PWNED) `touch PWNED`"})
    assert not result["failed"], result.get("msg")
    launcher = tmp_path / "bin" / "spark-ngc"
    assert oct(launcher.stat().st_mode & 0o7777) == "0o755"
    here = tmp_path / "my $(touch PWNED) dir"
    here.mkdir()
    subprocess.run(["sh", str(launcher), "python3", "-c", "print(1)"], cwd=here, check=True,
                   env={**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"})
    argv = json.loads(record.read_text())
    assert argv[:4] == ["run", "--rm", "-i", "--runtime=nvidia"], argv
    assert f"{here}/work/runs:/workspace/runs" in argv, argv
    assert "NOTE=it's $(touch PWNED) `touch PWNED`" in argv
    assert argv[-4:] == [f"nvcr.io/nvidia/pytorch@{D}", "python3", "-c", "print(1)"]
    assert not list(tmp_path.rglob("PWNED")), "nothing the values carry ran"
    assert (here / "work" / "runs").is_dir()


def test_all_launchers_in_one_call_and_a_converged_host_writes_nothing(tmp_path):
    first = install(tmp_path, [NGC, DERIVED])
    assert not first["failed"], first.get("msg")
    assert first["changed"] is True
    assert [(e["name"], e["changed"]) for e in first["launchers"]] == [("spark-ngc", True), ("spark-ngc-tools", True)]
    derived = (tmp_path / "bin" / "spark-ngc-tools").read_text()
    assert f"built FROM\n# {NGC['ref']}" in derived and derived.rstrip().endswith(f'{E} "$@"')
    written = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "bin").iterdir()}

    again = install(tmp_path, [NGC, DERIVED])
    assert again["changed"] is False, again["launchers"]
    assert {p.name: p.stat().st_mtime_ns for p in (tmp_path / "bin").iterdir()} == written, "nothing rewritten"


def test_check_mode_and_diff_tell_which_launcher_would_move_and_write_nothing(tmp_path):
    install(tmp_path, [NGC, DERIVED])
    before = (tmp_path / "bin" / "spark-ngc").read_text()
    moved = {**NGC, "ref": f"nvcr.io/nvidia/pytorch@{E}"}
    result = install(tmp_path, [moved, DERIVED], "--check", "--diff")
    assert not result["failed"], result.get("msg")
    assert [(e["name"], e["changed"]) for e in result["launchers"]] == [("spark-ngc", True), ("spark-ngc-tools", False)]
    assert (tmp_path / "bin" / "spark-ngc").read_text() == before, "check mode wrote nothing"
    shown = result["_stdout"]
    assert f"-    nvcr.io/nvidia/pytorch@{D}" in shown and f"+    nvcr.io/nvidia/pytorch@{E}" in shown
    assert result["_stdout"].count("+++ after") == 1, "an unchanged launcher shows no diff"

    # A derived image check mode would build has no ID yet: its launcher is shown, nothing is refused or written.
    unbuilt = install(tmp_path, [NGC, {**DERIVED, "ref": None}], "--check", "--diff")
    assert not unbuilt["failed"], unbuilt.get("msg")
    assert "<the image ID this run builds>" in unbuilt["_stdout"]
    assert install(tmp_path, [NGC, {**DERIVED, "ref": None}])["failed"], "outside check mode an empty ref is refused"

    fresh = install(tmp_path / "empty", [NGC], "--check")
    assert fresh["changed"] is True and not (tmp_path / "empty" / "bin" / "spark-ngc").exists()


def test_a_changed_mode_is_put_back_and_reported(tmp_path):
    install(tmp_path, [NGC])
    (tmp_path / "bin" / "spark-ngc").chmod(0o777)
    result = install(tmp_path, [NGC])
    assert result["changed"] is True and oct((tmp_path / "bin" / "spark-ngc").stat().st_mode & 0o7777) == "0o755"


def test_a_bad_value_writes_no_launcher_and_names_what_was_wrong(tmp_path):
    good = {**NGC, "launcher": "spark-good"}
    for images, workdir, expected in (
            ([good, {**NGC, "launcher": "../../etc/cron.d/x"}], "work", "launcher is '../../etc/cron.d/x'"),
            ([good], "../outside", "workdir is '../outside'"),
            ([good, {**NGC, "launcher": "spark-good"}], "work", "'spark-good' is named by more than one image"),
            ([good, {**NGC, "launcher": "spark-x", "ref": "a\nrm -rf /"}], "work", "spark-x: ref"),
    ):
        result = install(tmp_path, images, workdir=workdir)
        assert result["failed"], images
        assert "no launcher was written" in result["msg"] and expected in result["msg"], result["msg"]
        assert not (tmp_path / "bin").exists(), "not even the good launcher"


@pytest.fixture
def own_records(tmp_path):
    """An interpreter under which a module sees a /var/lib/sparkfleet of this test's own (a folder under tmp_path,
    bound over it in a mount namespace of the module's process alone): the converged records live one a module, so
    a site.yml another test runs on this machine at the same time would replace this test's record (CI saw it), and
    this test's records touch no other run's. Returns (interpreter, the records' folder as this test sees it)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        pytest.skip("a mount namespace of the module's own needs root and util-linux's unshare")
    host = tmp_path / "var-lib-sparkfleet"
    host.mkdir(mode=0o755)
    os.makedirs("/var/lib/sparkfleet", mode=0o755, exist_ok=True)  # the mount point; what a run makes anyway
    wrapper = tmp_path / "python-own-records"
    wrapper.write_text("#!/bin/sh\n"
                       "exec unshare --mount --propagation private -- sh -c "
                       "'mount --bind \"$1\" /var/lib/sparkfleet && shift && exec \"$@\"' "
                       f"sh {shlex.quote(str(host))} {shlex.quote(sys.executable)} \"$@\"\n")
    wrapper.chmod(0o755)
    return str(wrapper), host / "converged"


def test_a_converged_run_is_recorded_and_the_preflight_returns_it_until_a_launcher_is_edited_by_hand(tmp_path,
                                                                                                  own_records):
    """Issue 49: a converged host is asked once. With its arguments' key, a run records what a converged re-run
    returns; the preflight facts (the one call a run makes anyway) return the record while each launcher is as the
    run left it, and the role then skips the module. An edit by hand ends that: the next run asks the host again
    and writes the launcher back."""
    import secrets

    python, records = own_records
    key = secrets.token_hex(32)
    args = {"dir": str(tmp_path / "bin"), "images": [NGC], "workdir": "finetuning", "converged_key": key}
    first = run_module("spark_launchers", args, python=python)
    assert not first["failed"] and first["changed"] is True, first.get("msg")
    record = records / f"spark_launchers.{key}.json"
    assert oct(record.stat().st_mode & 0o777) == "0o600"
    assert oct(records.stat().st_mode & 0o777) == "0o700", "the records are closed to others"

    def recorded() -> dict | None:
        facts = run_module("spark_preflight_facts", {"simulated": True}, python=python)
        return facts["ansible_facts"]["spark_preflight"]["converged"].get(key)

    said = recorded()
    assert said["module"] == "spark_launchers"
    assert said["result"]["changed"] is False
    assert [(e["name"], e["present"], e["running"]) for e in said["result"]["launchers"]] == [
        ("spark-ngc", True, NGC["ref"])], "what a converged re-run returns"
    with open(tmp_path / "bin" / "spark-ngc", "a") as handle:
        handle.write("# edited by hand\n")
    assert recorded() is None, "an edited launcher: the host is asked again"
    again = run_module("spark_launchers", args, python=python)
    assert again["changed"] is True and "# edited by hand" not in (tmp_path / "bin" / "spark-ngc").read_text()
    assert recorded() is not None
    assert [p.name for p in records.iterdir()] == [record.name], "one record a module, and no other run's"

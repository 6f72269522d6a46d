"""The sparkfleet driver end to end on the controller: a real ansible-runner run, Ctrl-C, matrix check."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from conftest import BIN, REPO

DRIVER = """
import sys
from pathlib import Path
from sparkfleet.events import Fleet
from sparkfleet.runner import Run
run = Run(playbook=sys.argv[1], inventory="localhost,", report_dir=Path(sys.argv[2]), live=False)
outcome, meta = run.execute(Fleet())
print("OUTCOME", outcome.status, outcome.exit_code(), flush=True)
sys.exit(outcome.exit_code())
"""


def test_ctrl_c_cancels_the_run_through_the_runner(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", DRIVER, str(REPO / "tests/fixtures/playbooks/slow.yml"),
                             str(tmp_path / "report")], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list((tmp_path / "report").rglob("job_events/*.json")):
        time.sleep(0.2)
    time.sleep(1)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=45)
    assert proc.returncode == 130, out
    assert "OUTCOME canceled 130" in out
    assert time.monotonic() - started < 40, "the 60 s task was not waited for"
    assert (tmp_path / "report" / "artifacts" / "run" / "status").read_text() == "canceled"
    # The module already started (in a session of its own) ended with the run.
    assert subprocess.run(["pgrep", "-f", "^sleep 60.123$"], capture_output=True, check=False).returncode == 1




def matrix_check(pyindex, tmp_path, *flags: str) -> subprocess.CompletedProcess:
    """`sparkfleet matrix check` against the test bed's index, its report in tmp_path/report."""
    overrides = tmp_path / "overrides.json"
    overrides.write_text(json.dumps({"matrix_check_index_mirrors": pyindex.overrides}))
    return subprocess.run([str(BIN / "sparkfleet"), "matrix", "check", "-e", f"@{overrides}", *flags,
                           "--report-dir", str(tmp_path / "report")], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}, check=False)


def test_matrix_check_through_the_cli_prints_the_table_and_writes_the_report(pyindex, tmp_path):
    proc = matrix_check(pyindex, tmp_path, "--plain")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    said = " ".join(proc.stdout.split())  # the columns' widths are the matrix's longest step id and package name
    assert "torchao torchao 0.17.0 available torchao-0.17.0-py3-none-any.whl" in said
    assert "unsloth resolves 3 packages" in said
    assert "advisory pypi-trl-1.8.0-datasets affects package trl==1.8.0, package datasets==4.3.0" in proc.stdout
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    assert (data["command"], data["status"], data["exit_code"]) == ("matrix check", "successful", 0)


VAULT_PASSWORD = "typed-vault-password-8d2b41"
VAULTED_SECRET = "vaulted-registry-password-51ac07"


def vaulted_inventory(tmp_path, overrides: dict):
    """An inventory whose group_vars are a real ansible-vault file: the index overrides the check needs
    (so the run can only pass if it decrypted them) and a secret."""
    inventory = tmp_path / "inventory"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(json.dumps({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    vault = inventory / "group_vars" / "all" / "vault.yml"
    vault.write_text(json.dumps({"spark_venv_index_mirrors": overrides,
                                 "spark_images_registry_credentials": {"nvcr.io": {
                                     "username": "$oauthtoken", "password": VAULTED_SECRET}}}))
    password_file = tmp_path / "vault-pass"
    password_file.write_text(VAULT_PASSWORD)
    subprocess.run([str(BIN / "ansible-vault"), "encrypt", "--vault-password-file", str(password_file), str(vault)],
                   check=True, capture_output=True)
    password_file.unlink()
    assert VAULTED_SECRET not in vault.read_text()
    return inventory


def test_a_vault_password_typed_at_the_terminal_reaches_ansible_and_no_file(pyindex, tmp_path):
    import pexpect

    inventory = vaulted_inventory(tmp_path, pyindex.overrides)
    report_dir = tmp_path / "report"
    child = pexpect.spawn(str(BIN / "sparkfleet"), ["matrix", "check", "-i", str(inventory), "--ask-vault-pass",
                                                    "--plain", "--report-dir", str(report_dir)],
                          cwd=str(REPO), env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
                          encoding="utf-8", timeout=180)
    child.expect("Vault password: ")
    child.sendline(VAULT_PASSWORD)
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before[-3000:]
    assert "unsloth resolves 3 packages" in " ".join(child.before.split()), "the vaulted index overrides were used"
    leaked = [str(p) for p in tmp_path.rglob("*") if p.is_file()
              and any(s.encode() in p.read_bytes() for s in (VAULT_PASSWORD, VAULTED_SECRET))]
    assert leaked == [], "the vault password or the vaulted secret reached a file"
    assert VAULT_PASSWORD not in child.before


def test_json_prints_the_report_on_stdout_and_the_rest_on_stderr(pyindex, tmp_path):
    proc = matrix_check(pyindex, tmp_path, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    assert data == json.loads((tmp_path / "report" / "report.json").read_text())
    assert (data["command"], data["exit_code"]) == ("matrix check", 0)
    assert "unsloth resolves 3 packages" in " ".join(proc.stderr.split())


def test_a_malformed_inventory_or_a_wrong_vault_password_is_bad_input(pyindex, tmp_path):
    """Exit 4 with Ansible's own reason; an inventory with a typo never 'succeeds' with no hosts."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "hosts.yml").write_text("sparks:\n  hosts:\n    spark-01: [\n")
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    proc = subprocess.run([str(BIN / "sparkfleet"), "verify", "-i", str(broken), "--plain", "--report-dir",
                           str(tmp_path / "r1")], cwd=REPO, capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 4, proc.stdout[-2000:]
    assert (f"sparkfleet: Ansible stopped on bad input: [ERROR]: Completely failed to parse inventory source "
            f"{broken / 'hosts.yml'}") in proc.stderr
    assert json.loads((tmp_path / "r1" / "report.json").read_text())["exit_code"] == 4

    inventory = vaulted_inventory(tmp_path / "vaulted", pyindex.overrides)
    wrong = tmp_path / "wrong-pass"
    wrong.write_text("not-the-password")
    proc = subprocess.run([str(BIN / "sparkfleet"), "matrix", "check", "-i", str(inventory), "--vault-password-file",
                           str(wrong), "--plain", "--report-dir", str(tmp_path / "r2")], cwd=REPO,
                          capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 4, proc.stdout[-2000:]
    assert "sparkfleet: Ansible stopped on bad input: [ERROR]: Decryption failed" in proc.stderr


def test_a_second_run_on_the_same_inventory_is_refused_and_changes_nothing(pyindex, tmp_path):
    """While one run holds the inventory's run lock, another sparkfleet command there exits 5, naming it."""
    import fcntl

    inventory = tmp_path / "inventory"
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(json.dumps({"all": {"hosts": {"localhost": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable}}}}))
    (inventory / "group_vars" / "all" / "main.yml").write_text(json.dumps({
        "spark_venv_index_mirrors": pyindex.overrides}))
    lock = inventory / ".sparkfleet" / "run.lock"
    lock.parent.mkdir()
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    with open(lock, "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        held.write("sparkfleet refresh (pid 4242, since 2026-12-01T04:00:00+00:00)")
        held.flush()
        proc = subprocess.run([str(BIN / "sparkfleet"), "verify", "-i", str(inventory), "--plain", "--report-dir",
                               str(tmp_path / "r")], cwd=REPO, capture_output=True, text=True, env=env, check=False)
        # The inventory named by its hosts file is the same inventory: its directory holds the lock and records.
        by_file = subprocess.run([str(BIN / "sparkfleet"), "verify", "-i", str(inventory / "hosts.yml"), "--plain",
                                  "--report-dir", str(tmp_path / "r")], cwd=REPO, capture_output=True, text=True,
                                 env=env, check=False)
    assert proc.returncode == 5, proc.stdout[-2000:]
    assert by_file.returncode == 5 and "holds inventory" in by_file.stderr, by_file.stdout[-2000:]
    assert proc.stderr.startswith(f"sparkfleet: sparkfleet refresh (pid 4242, since 2026-12-01T04:00:00+00:00) "
                                  f"holds inventory {inventory}")
    assert "Nothing was changed." in proc.stderr
    assert not (tmp_path / "r").exists(), "no run, no report"
    # Once released, the next run takes the lock and leaves it free again.
    proc = subprocess.run([str(BIN / "sparkfleet"), "matrix", "check", "-i", str(inventory), "--plain",
                           "--report-dir", str(tmp_path / "r2")], cwd=REPO, capture_output=True, text=True, env=env,
                          check=False)
    assert proc.returncode == 0, proc.stderr + proc.stdout[-2000:]
    with open(lock, "a+") as again:
        fcntl.flock(again, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if the run had kept it


DIFF_DRIVER = """
import json, sys
from pathlib import Path
from rich.console import Console
from sparkfleet import report
from sparkfleet.events import Fleet
from sparkfleet.ansible_options import AnsibleOptions
from sparkfleet.runner import Run
from sparkfleet.terminal import print_summary
options = AnsibleOptions(check=sys.argv[3] == "check", diff=True)
run = Run(playbook=sys.argv[1], inventory="localhost,", report_dir=Path(sys.argv[2]), live=False, options=options,
          extra_vars=[f"target={sys.argv[4]}", "secret=" + sys.argv[5]])
fleet = Fleet()
outcome, meta = run.execute(fleet)
data = report.build(fleet, {"command": "provision", **meta})
paths = report.write(data, Path(sys.argv[2]))
print_summary(data, None, Console(force_terminal=False, width=100), diffs=True)
sys.exit(outcome.exit_code())
"""


def test_diff_shows_each_change_as_ansible_gives_it_and_never_a_hidden_result(tmp_path):
    """--check --diff and --diff through the driver, on real modules (copy, lineinfile in a loop, file, and a
    no_log copy): each change is named per host with its unified diff, on the screen and in report.md and
    report.json; check mode writes nothing; the no_log task's content (a secret) is nowhere."""
    target = tmp_path / "target"
    target.mkdir()
    (target / "content.txt").write_text("line one\nline two\n")
    secret = "diffed-secret-0b7e44"
    playbook = REPO / "tests" / "fixtures" / "playbooks" / "changes.yml"

    def drive(mode: str) -> tuple[str, dict, str]:
        out = tmp_path / f"report-{mode}"
        proc = subprocess.run([sys.executable, "-c", DIFF_DRIVER, str(playbook), str(out), mode, str(target),
                               secret], cwd=tmp_path, capture_output=True, text=True, check=False,
                              env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"})
        assert proc.returncode == 0, proc.stdout + proc.stderr
        files = "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
        assert secret not in proc.stdout + files
        return proc.stdout, json.loads((out / "report.json").read_text()), (out / "report.md").read_text()

    screen, data, markdown = drive("check")
    assert (target / "content.txt").read_text() == "line one\nline two\n" and not (target / "made").exists()
    changes = {c["task"]: c["diff"] for c in data["hosts"]["localhost"]["changes"]}
    # The no_log task's result reaches the driver censored, without even its `changed`: it is counted (Ansible's
    # stats) and nothing more.
    assert list(changes) == ["Write a file's content", "Set lines in a loop", "Make a directory"]
    assert data["hosts"]["localhost"]["counts"]["changed"] == 4
    assert f"--- before: {target}/content.txt" in changes["Write a file's content"]
    assert "-line two\n+line two changed" in changes["Write a file's content"]
    assert "+first" in changes["Set lines in a loop"] and "+second" in changes["Set lines in a loop"]
    assert '-    "state": "absent"' in changes["Make a directory"]
    lines = screen.splitlines()
    assert "localhost: would change Write a file's content" in lines
    assert "+line two changed" in lines and "localhost: would change Write a secret" not in lines
    assert f"- would change: Make a directory (`{target}/made`)" in markdown
    assert "```diff" in markdown and "+line two changed" in markdown

    screen, data, markdown = drive("apply")
    assert (target / "content.txt").read_text() == "line one\nline two changed\n"
    assert "localhost: changed Write a file's content" in screen.splitlines()
    assert f"- changed: Make a directory (`{target}/made`)" in markdown

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
    # (A module already started runs to its end in its own session, as with ansible-playbook's own Ctrl-C.)
    subprocess.run(["pkill", "-f", "^sleep 60$"], check=False)




def test_matrix_check_through_the_cli_prints_the_table_and_writes_the_report(pyindex, tmp_path):
    overrides = tmp_path / "overrides.json"
    overrides.write_text(json.dumps({"matrix_check_index_overrides": pyindex.overrides}))
    proc = subprocess.run([str(BIN / "sparkfleet"), "matrix", "check", "-e", f"@{overrides}", "--plain",
                           "--report-dir", str(tmp_path / "report")], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "torchao  torchao      0.17.0       available   torchao-0.17.0-py3-none-any.whl" in proc.stdout
    assert "unsloth  resolves    3 packages" in proc.stdout
    data = json.loads((tmp_path / "report" / "report.json").read_text())
    assert (data["command"], data["status"], data["exit_code"]) == ("matrix check", "successful", 0)

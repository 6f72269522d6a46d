"""Settings that differ per host (host_vars) are each host's own (issue 35, item 1): a check made once for the
fleet (run_once) and skipped on the first host was inherited by the others, so a per-host
spark_venv_require_hashes failed the other hosts with "object of type 'dict' has no attribute 'stat'".

The role's preflight runs for real on three hosts driven locally (connection local, check mode: nothing on
this machine changes), each with its own settings, as an owner's host_vars give them.
"""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import BIN, REPO, ansible_env


def test_a_per_host_require_hashes_is_judged_on_that_host_alone(tmp_path):
    lock = tmp_path / "spark-stack.lock.yml"
    lock.write_text("{}\n")
    inventory = tmp_path / "inventory"
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        "all:\n  hosts:\n    spark-a:\n    spark-b:\n    spark-c:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n")
    # spark-a, first in the play, builds without the lock: before, the fleet-wide check was skipped on it.
    (inventory / "host_vars" / "spark-b.yml").write_text(json.dumps(
        {"spark_venv_require_hashes": True, "spark_venv_lock_file": str(tmp_path / "missing.lock.yml")}))
    (inventory / "host_vars" / "spark-c.yml").write_text(json.dumps(
        {"spark_venv_require_hashes": True, "spark_venv_lock_file": str(lock)}))
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role:\n        name: sparkfleet.spark.spark_venv\n"
        "        tasks_from: preflight\n      vars:\n"
        "        __spark_venv_matrix: \"{{ lookup('ansible.builtin.file', spark_venv_matrix_file) | from_yaml }}\"\n")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), "--check"],
                          cwd=REPO, capture_output=True, text=True, check=False,
                          env=ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json"))
    result = json.loads(proc.stdout)
    stats = result["stats"]
    assert stats["spark-a"]["failures"] == 0 and stats["spark-c"]["failures"] == 0, proc.stdout[-3000:]
    assert stats["spark-b"]["failures"] == 1
    failures = [host["msg"] for play in result["plays"] for task in play["tasks"]
                for name, host in task["hosts"].items() if name == "spark-b" and host.get("failed")]
    assert failures == [
        f"spark_venv_require_hashes is true but the hash lock {tmp_path / 'missing.lock.yml'} does not exist on the "
        "controller; write it with `sparkfleet matrix lock` (it checks the matrix first), review it, then run "
        "again. Nothing on the host changed."], failures

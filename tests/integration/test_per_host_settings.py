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


def preflight(tmp_path, inventory) -> tuple[subprocess.CompletedProcess, dict]:
    """The venv role's preflight on the inventory's hosts, driven locally in check mode (nothing on this machine
    changes), as ansible-playbook's JSON callback reports it."""
    playbook = tmp_path / "preflight.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role:\n        name: sparkfleet.spark.spark_venv\n"
        "        tasks_from: preflight\n      vars:\n"
        "        __spark_venv_matrix: \"{{ lookup('ansible.builtin.file', spark_venv_matrix_file) | from_yaml }}\"\n")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook), "--check"],
                          cwd=REPO, capture_output=True, text=True, check=False,
                          env=ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json"))
    return proc, json.loads(proc.stdout)


def test_a_per_host_require_hashes_is_judged_on_that_host_alone(tmp_path):
    lock = tmp_path / "spark-stack.lock.yml"
    lock.write_text("{}\n")
    inventory = tmp_path / "inventory"
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        "all:\n  hosts:\n    spark-a:\n    spark-b:\n    spark-c:\n    spark-d:\n    spark-e:\n"
        "  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n")
    # spark-a, first in the play, builds without the lock: before, the fleet-wide check was skipped on it.
    (inventory / "host_vars" / "spark-b.yml").write_text(json.dumps(
        {"spark_venv_require_hashes": True, "spark_venv_lock_file": str(tmp_path / "missing.lock.yml")}))
    (inventory / "host_vars" / "spark-c.yml").write_text(json.dumps(
        {"spark_venv_require_hashes": True, "spark_venv_lock_file": str(lock)}))
    # spark-d builds from a mirror off its loopback with no lock at the inventory's path: refused (issue 34, a
    # mirror's wheels are trusted only against the lock); spark-e's mirror is on its own loopback: no lock asked.
    (inventory / "host_vars" / "spark-d.yml").write_text(json.dumps(
        {"spark_venv_index_mirrors": {"https://pypi.org/simple": "https://ci:TOKEN@mirror.lan/pypi"}}))
    (inventory / "host_vars" / "spark-e.yml").write_text(json.dumps(
        {"spark_venv_index_mirrors": {"https://pypi.org/simple": "http://127.0.0.1:5090/pypi"}}))
    proc, result = preflight(tmp_path, inventory)
    stats = result["stats"]
    for fine in ("spark-a", "spark-c", "spark-e"):
        assert stats[fine]["failures"] == 0, (fine, proc.stdout[-3000:])
    assert stats["spark-b"]["failures"] == stats["spark-d"]["failures"] == 1

    def failures(host: str) -> list[str]:
        return [result["msg"] for play in result["plays"] for task in play["tasks"]
                for name, result in task["hosts"].items() if name == host and result.get("failed")]

    assert failures("spark-b") == [
        f"spark_venv_require_hashes is true but the hash lock {tmp_path / 'missing.lock.yml'} does not exist on the "
        "controller; write it with `sparkfleet matrix lock -i INVENTORY` (it checks the matrix first, through the "
        "inventory's mirrors), review and commit it, then run again. Nothing on the host changed."]
    assert failures("spark-d") == [
        "the venv would be built from a mirror (https://pypi.org/simple -> https://ci:***@mirror.lan/pypi), whose "
        "wheels are installed only against the hash lock, but the hash lock "
        f"{inventory / 'group_vars' / 'all' / 'spark_venv_lock.yml'} does not exist on the controller; write it "
        "with `sparkfleet matrix lock -i INVENTORY` (it checks the matrix first, through the inventory's mirrors), "
        "review and commit it, then run again. Nothing on the host changed."]
    assert "TOKEN" not in proc.stdout


def test_each_host_plans_the_pulls_of_its_own_catalog(tmp_path):
    """Issue 35: no run_once over a value that can differ per host. The images' plan was made once, from the first
    host's catalog, and every host pulled the first host's images; each host's plan is its own catalog's now."""
    digest = "sha256:" + "a" * 64
    lock = {name: {"registry": registry, "repository": repository, "tag": tag, "index_digest": digest,
                   "arm64_digest": digest, "resolved_at": "2026-12-01T00:00:00+00:00"}
            for name, registry, repository, tag in (("ngc", "nvcr.io", "nvidia/pytorch", "25.11-py3"),
                                                    ("unsloth", "docker.io", "unsloth/unsloth", "dgxspark-latest"))}
    inventory = tmp_path / "inventory"
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "group_vars" / "all").mkdir(parents=True)
    (inventory / "group_vars" / "all" / "spark_images_lock.yml").write_text(json.dumps({"spark_images_lock": lock}))
    (inventory / "hosts.yml").write_text(
        "all:\n  hosts:\n    spark-a:\n    spark-b:\n    spark-c:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n")
    catalog = {"ngc": {"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch",
                       "tags": ["25.11-py3"], "launcher": "spark-ngc"},
               "unsloth": {"name": "unsloth", "registry": "docker.io", "repository": "unsloth/unsloth",
                           "tags": ["dgxspark-latest"], "launcher": "spark-unsloth"}}
    # spark-a keeps the default catalog (both images), first in the play
    (inventory / "host_vars" / "spark-b.yml").write_text(json.dumps({"spark_images_catalog": [catalog["ngc"]]}))
    (inventory / "host_vars" / "spark-c.yml").write_text(json.dumps({"spark_images_catalog": [catalog["unsloth"]]}))
    playbook = tmp_path / "plan.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role:\n        name: sparkfleet.spark.spark_images\n        tasks_from: plan\n"
        "    - ansible.builtin.debug:\n"
        "        msg: \"{{ __spark_images_plan.plan | map(attribute='name') | list }}\"\n")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook)],
                          cwd=REPO, capture_output=True, text=True, check=False,
                          env=ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json"))
    result = json.loads(proc.stdout)
    planned = {name: host["msg"] for play in result["plays"] for task in play["tasks"]
               for name, host in task["hosts"].items() if task["task"]["name"] == "ansible.builtin.debug"
               or ("msg" in host and isinstance(host["msg"], list))}
    assert planned == {"spark-a": ["ngc", "unsloth"], "spark-b": ["ngc"], "spark-c": ["unsloth"]}, proc.stdout[-3000:]


def test_each_hosts_matrix_is_checked_against_the_advisories(tmp_path):
    """Issue 35: no run_once over a value that can differ per host. The advisories check ran once, over the first
    host's matrix: a host with a matrix of its own (here the real one, whose trl 1.8.0 and datasets 4.3.0 have an
    advisory) was never warned when it came second."""
    real = (REPO / "matrix" / "spark-stack.yml").read_text()
    clean = tmp_path / "clean.yml"
    clean.write_text(real.replace('"trl==1.8.0"', '"trl==1.9.0"').replace('"datasets==4.3.0"', '"datasets==4.7.0"'))
    inventory = tmp_path / "inventory"
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        "all:\n  hosts:\n    spark-x:\n    spark-y:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n")
    (inventory / "host_vars" / "spark-x.yml").write_text(json.dumps({"spark_venv_matrix_file": str(clean)}))
    proc, result = preflight(tmp_path, inventory)
    warned = {name: " ".join(host.get("warnings") or []) for play in result["plays"] for task in play["tasks"]
              if task["task"]["name"].endswith("Check what is about to be used against the upstream advisories")
              for name, host in task["hosts"].items()}
    assert "pypi-trl-1.8.0-datasets" in warned.get("spark-y", ""), (warned, proc.stdout[-3000:])
    assert "pypi-trl-1.8.0-datasets" not in warned.get("spark-x", "")


def test_a_host_made_strict_about_advisories_refuses_alone(tmp_path):
    """Issue 35: the images' advisories were checked once, with the first host's settings: spark_advisories_strict
    in one host's host_vars was never applied when that host came second (and the first host's strictness failed
    every host). Each host is checked with its own strictness now."""
    inventory = tmp_path / "inventory"
    (inventory / "host_vars").mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        "all:\n  hosts:\n    spark-lenient:\n    spark-strict:\n  vars:\n    ansible_connection: local\n"
        f"    ansible_python_interpreter: {sys.executable}\n")
    (inventory / "host_vars" / "spark-strict.yml").write_text(json.dumps({"spark_advisories_strict": True}))
    playbook = tmp_path / "advisories.yml"
    playbook.write_text(
        "- hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.include_role:\n        name: sparkfleet.spark.spark_advisories\n      vars:\n"
        "        spark_advisories_images: [{repository: unsloth/unsloth, tag: dgxspark-latest,\n"
        "                                   index_digest: 'sha256:" + "b" * 64 + "'}]\n")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(playbook)],
                          cwd=REPO, capture_output=True, text=True, check=False,
                          env=ansible_env(ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json"))
    result = json.loads(proc.stdout)
    hosts = {name: host for play in result["plays"] for task in play["tasks"] for name, host in task["hosts"].items()
             if task["task"]["name"].endswith("Check what is about to be used against the upstream advisories")}
    assert not hosts["spark-lenient"].get("failed"), proc.stdout[-3000:]
    assert any("unsloth-10491" in w for w in hosts["spark-lenient"].get("warnings") or [])
    assert hosts["spark-strict"].get("failed") and "unsloth-10491" in hosts["spark-strict"]["msg"], proc.stdout[-3000:]

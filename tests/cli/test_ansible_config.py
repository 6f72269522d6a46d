"""Which inventory the user's Ansible configuration names (the default of the controller's checks)."""

from __future__ import annotations

import re
from pathlib import Path

from sparkfleet.ansible_config import resolve

OWN = Path("/nonexistent/sparkfleet/ansible.cfg")


def _config(cwd: Path, environ: dict[str, str] | None = None):
    return resolve(cwd, {"HOME": str(cwd / "home"), **(environ or {})}, OWN, Path("/nonexistent/collections"))


def test_the_working_directorys_ansible_cfg_names_the_inventory_relative_to_itself(tmp_path):
    (tmp_path / "inv").mkdir()
    (tmp_path / "ansible.cfg").write_text("[defaults]\ninventory = inv\n")
    assert _config(tmp_path).inventory == str(tmp_path / "inv")


def test_ansible_inventory_wins_over_the_file_and_is_relative_to_the_working_directory(tmp_path):
    (tmp_path / "ansible.cfg").write_text("[defaults]\ninventory = inv\n")
    (tmp_path / "other").mkdir()
    assert _config(tmp_path, {"ANSIBLE_INVENTORY": "other"}).inventory == str(tmp_path / "other")


def test_a_host_list_stays_a_host_list_and_the_first_existing_path_of_a_list_is_taken(tmp_path):
    (tmp_path / "ansible.cfg").write_text("[defaults]\ninventory = spark-01,spark-02,\n")
    assert _config(tmp_path).inventory == "spark-01,spark-02,"
    (tmp_path / "b").mkdir()
    (tmp_path / "ansible.cfg").write_text("[defaults]\ninventory = a, b\n")
    assert _config(tmp_path).inventory == str(tmp_path / "b")


def test_nothing_named_is_none(tmp_path):
    (tmp_path / "ansible.cfg").write_text("[defaults]\nforks = 10\n")
    assert _config(tmp_path).inventory is None


def test_the_callback_that_loads_sparkfleets_filters_once_is_enabled_beside_the_users_own(tmp_path):
    """Issue 49: without it each task's worker loads every filter of the collection again (most of a converged run)."""
    assert _config(tmp_path).env["ANSIBLE_CALLBACKS_ENABLED"] == "sparkfleet.spark.filters_preload"
    (tmp_path / "ansible.cfg").write_text("[defaults]\ncallbacks_enabled = ansible.posix.profile_tasks, timer\n")
    assert _config(tmp_path).env["ANSIBLE_CALLBACKS_ENABLED"] == (
        "ansible.posix.profile_tasks,timer,sparkfleet.spark.filters_preload")
    environ = {"ANSIBLE_CALLBACKS_ENABLED": "ansible.builtin.tree,sparkfleet.spark.filters_preload"}
    assert _config(tmp_path, environ).env["ANSIBLE_CALLBACKS_ENABLED"] == environ["ANSIBLE_CALLBACKS_ENABLED"], \
        "the environment wins over the file, as in Ansible; named once"


def test_the_repositorys_ansible_cfg_loads_every_filter_of_the_collection_once_before_the_first_task(tmp_path):
    import subprocess

    from conftest import BIN, REPO, ansible_env

    names = set()
    for source in (REPO / "plugins" / "filter").glob("*.py"):
        names |= set(re.findall(r'"(spark_[a-z0-9_]+)": ', source.read_text()))
    playbook = tmp_path / "play.yml"
    playbook.write_text("---\n- name: One task\n  hosts: localhost\n  gather_facts: false\n  tasks:\n"
                        "    - name: A filter of the collection\n      ansible.builtin.debug:\n"
                        "        msg: \"{{ 'aarch64' | sparkfleet.spark.spark_debian_architecture }}\"\n")
    out = subprocess.run([str(BIN / "ansible-playbook"), str(playbook), "-vvv"], env=ansible_env(), cwd=REPO,
                         capture_output=True, text=True, check=True).stdout
    assert f"sparkfleet.spark.filters_preload: {len(names)} of {len(names)} filters loaded once" in out
    assert "msg: arm64" in out, "the filter works as loaded"

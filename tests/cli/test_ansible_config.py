"""Which inventory the user's Ansible configuration names (the default of the controller's checks)."""

from __future__ import annotations

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

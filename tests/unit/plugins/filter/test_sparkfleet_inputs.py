"""spark_inventory_dir, the roles' edge to module_utils/common/_inventory.py: a path in the inventory's directory, a
host list's stand-in where a role has one (the hosts' records), and Ansible's error otherwise."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkfleet.spark.plugins.filter.sparkfleet_inputs import spark_inventory_dir


def test_the_lock_and_the_records_are_paths_in_the_one_directory(tmp_path):
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    sources = [str(tmp_path / "hosts.yml")]
    assert spark_inventory_dir(sources) == str(tmp_path)
    assert spark_inventory_dir(sources, "group_vars/all/spark_images_lock.yml") == str(
        tmp_path / "group_vars/all/spark_images_lock.yml")
    assert spark_inventory_dir(sources, ".sparkfleet/hosts", "") == str(tmp_path / ".sparkfleet/hosts")


def test_a_host_list_keeps_no_record_and_has_no_lock():
    assert spark_inventory_dir(["localhost,"], ".sparkfleet/hosts", "") == "", "no record (not ./None/...)"
    with pytest.raises(AnsibleFilterError, match=r"'localhost,' is a host list.*run with -i DIR"):
        spark_inventory_dir(["localhost,"], "group_vars/all/spark_images_lock.yml")


def test_two_directories_are_refused_even_where_a_host_list_would_be_let_through(tmp_path):
    for name in ("lab", "prod"):
        (tmp_path / name).mkdir()
    with pytest.raises(AnsibleFilterError, match="in 2 directories"):
        spark_inventory_dir([str(tmp_path / "lab"), str(tmp_path / "prod")], ".sparkfleet/hosts", "")

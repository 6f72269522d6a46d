"""The inventory's one directory (module_utils/common/_inventory.py): where the image lock, the hosts' records and the
CLI's run lock are kept, refused when it is not one."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._inventory import NoInventoryDirectory, directory


def test_a_directory_is_its_own_and_a_file_is_in_its_directory(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "hosts.yml").write_text("all: {}\n")
    (tmp_path / "lab" / "more.yml").write_text("all: {}\n")
    assert directory([str(tmp_path / "lab")]) == str(tmp_path / "lab")
    assert directory([str(tmp_path / "lab" / "hosts.yml")]) == str(tmp_path / "lab")
    assert directory([str(tmp_path / "lab" / "hosts.yml"), str(tmp_path / "lab" / "more.yml"),
                      str(tmp_path / "lab")]) == str(tmp_path / "lab"), "one directory, however many files"
    assert directory([str(tmp_path / "lab"), "spark-09,"]) == str(tmp_path / "lab"), "hosts added by a host list"


def test_sources_in_two_directories_are_refused_naming_each(tmp_path):
    for name in ("lab", "prod"):
        (tmp_path / name).mkdir()
    with pytest.raises(NoInventoryDirectory, match=r"in 2 directories \(.*lab in .*lab; .*prod in .*prod\).*"
                                                   r"run with one inventory directory") as caught:
        directory([str(tmp_path / "lab"), str(tmp_path / "prod")])
    assert not caught.value.host_list, "two directories are never let through as a host list"


def test_a_host_list_or_no_source_has_no_directory():
    with pytest.raises(NoInventoryDirectory, match=r"'spark-01,spark-02,' is a host list.*run with -i DIR") as listed:
        directory(["spark-01,spark-02,"])
    assert listed.value.host_list, "a host list: the CLI runs it without a run lock, the verify keeps no record"
    with pytest.raises(NoInventoryDirectory, match=r"no inventory source.*-i INVENTORY") as none:
        directory([])
    assert not none.value.host_list


def test_the_same_directory_spelled_two_ways_is_one(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "lab")
    assert directory([str(tmp_path / "lab"), str(tmp_path / "link")]) == str(tmp_path / "lab")

"""Upstream advisories: the file's rules, its age, and what it says about what is about to be used (pure)."""

from __future__ import annotations

import copy
import datetime

import pytest
import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._advisories import (
    AdvisoryError,
    affected,
    age,
    check,
    next_link,
    validate,
)

from conftest import REPO

ADVISORIES = yaml.safe_load((REPO / "matrix" / "advisories.yml").read_text())
MATRIX = yaml.safe_load((REPO / "matrix" / "spark-stack.yml").read_text())
DIGEST = "sha256:" + "ab" * 32


def test_the_projects_file_is_valid():
    assert validate(ADVISORIES) == []


@pytest.mark.parametrize(("change", "message"), [
    ({"schema": 2}, "schema is 2; this sparkfleet reads schema 1"),
    ({"checked_on": "01.12.2026"}, "checked_on is '01.12.2026'; expected a date as YYYY-MM-DD"),
    ({"advisories": [{"id": "x", "url": "u", "date": "2026-12-01", "summary": "s", "action": "a",
                      "affects": [{"tag": "25.09-py3"}]}]},
     "advisory 1 (x): affects entry {'tag': '25.09-py3'}; expected one of image, digest, package, playbook "
     "with a string value"),
    ({"advisories": [{"id": "x", "url": "u", "date": "2026-12-01", "summary": "s", "action": "a",
                      "affects": [{"image": "nvidia/pytorch"}]}]},
     "advisory 1 (x): image 'nvidia/pytorch'; expected repository:tag"),
    ({"advisories": [{"id": "x", "url": "u", "date": "2026-12-01", "summary": "s", "action": "",
                      "affects": [{"digest": "sha256:12"}]}]},
     "advisory 1 (x): action is ''; expected text"),
])
def test_a_bad_file_says_what_and_where(change, message):
    data = {**copy.deepcopy(ADVISORIES), **change}
    assert message in validate(data)
    with pytest.raises(AdvisoryError, match="the advisories file is not valid"):
        check(data)


def test_age_warns_like_the_matrix_and_says_what_to_do():
    fresh = age(ADVISORIES, datetime.date(2026, 12, 15), 90)
    assert fresh["stale"] is False and fresh["message"] == ""
    old = age(ADVISORIES, datetime.date(2027, 6, 1), 90)
    assert old["stale"] is True and old["age_days"] == 182
    assert "run `sparkfleet advisories check`" in old["message"] and "set checked_on" in old["message"]


def resolved(repository: str, tag: str, digest: str = DIGEST) -> dict:
    """What spark_image_resolve returns for one image (the registry may be a mirror or the lab's)."""
    return {"name": "x", "registry": "127.0.0.1:5000", "repository": repository, "tag": tag, "index_digest": digest}


def test_only_what_is_about_to_be_used_is_affected():
    assert affected(ADVISORIES, [resolved("nvidia/pytorch", "25.11-py3")]) == []
    [old_tag] = affected(ADVISORIES, [resolved("nvidia/pytorch", "25.09-py3")])
    assert old_tag["id"] == "unsloth-3553" and old_tag["matched"] == ["image nvidia/pytorch:25.09-py3"]
    assert old_tag["message"].startswith("advisory unsloth-3553 affects image nvidia/pytorch:25.09-py3: ")
    assert "What to do: Pin nvidia/pytorch:25.11-py3" in old_tag["message"]
    assert old_tag["message"].endswith("(https://github.com/unslothai/unsloth/issues/3553)")


def test_the_matrix_pins_meet_the_trl_datasets_advisory():
    pins = [p for step in MATRIX["steps"] for p in step["packages"]]
    [found] = affected(ADVISORIES, packages=pins)
    assert found["id"] == "pypi-trl-1.8.0-datasets"
    assert found["matched"] == ["package trl==1.8.0", "package datasets==4.3.0"]
    assert affected(ADVISORIES, packages=["TRL==1.9.0", "datasets==4.7.0"]) == []


def test_a_digest_and_a_name_without_version_match():
    data = {**ADVISORIES, "advisories": [{"id": "d", "url": "u", "date": "2026-12-01", "summary": "s.",
                                          "action": "a.", "affects": [{"digest": DIGEST}, {"package": "Unsloth_Zoo"}]}]}
    [found] = affected(data, [resolved("unsloth/unsloth", "dgxspark-latest")], ["unsloth-zoo==2026.7.2"])
    assert found["matched"] == [f"digest {DIGEST}", "package Unsloth_Zoo"]


@pytest.mark.parametrize(("header", "url"), [
    ('<https://api.github.com/repositories/1/issues?page=2>; rel="next", '
     '<https://api.github.com/repositories/1/issues?page=5>; rel="last"', "https://api.github.com/repositories/1/issues?page=2"),
    ('<https://api.github.com/repositories/1/issues?page=4>; rel="prev"', None),
    (None, None),
    ("garbled", None),
])
def test_the_next_page_comes_from_the_link_header(header, url):
    assert next_link(header) == url

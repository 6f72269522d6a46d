"""spark_image_plan, natively through real Ansible (its action plugin runs it in the controller's process): the
lock read as every run reads it, each catalog image planned from its entry or listed as not locked yet, and a lock
whose values would run as code in a launcher refused."""

from __future__ import annotations

import pytest
import yaml

from conftest import run_module

D = "sha256:" + "ab" * 32
IMAGES = [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3"],
           "launcher": "spark-ngc"}]
UNSLOTH = {"name": "unsloth", "registry": "docker.io", "repository": "unsloth/unsloth", "tags": ["dgxspark-latest"],
           "launcher": "spark-unsloth"}
ENTRY = {"registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3", "index_digest": D,
         "digests": {"linux/arm64": D}, "resolved_at": "2026-12-01T04:00:00+00:00"}


def test_each_image_is_planned_from_its_lock_entry_and_an_image_not_locked_yet_is_listed(tmp_path):
    path = tmp_path / "lock.yml"
    path.write_text(yaml.safe_dump({"spark_images_lock": {"ngc": ENTRY}}))
    result = run_module("spark_image_plan", {"path": str(path), "images": [*IMAGES, UNSLOTH]})
    assert not result["failed"] and not result["changed"], result.get("msg")
    [planned] = result["plan"]
    assert (planned["name"], planned["digests"], planned["tag"]) == ("ngc", {"linux/arm64": D}, "25.11-py3")
    assert [image["name"] for image in result["unlocked"]] == ["unsloth"], "pin has not locked it: said, not pulled"
    missing = run_module("spark_image_plan", {"path": str(tmp_path / "none.yml"), "images": IMAGES})
    assert (missing["plan"], [i["name"] for i in missing["unlocked"]], missing["lock"]) == ([], ["ngc"], {})


@pytest.mark.parametrize(("field", "value"), [
    ("tag", "25.11-py3\ntouch /tmp/PWNED #"), ("resolved_at", "2026-12-01\n$(touch /tmp/PWNED)"),
    ("repository", "nvidia/pytorch'; touch /tmp/PWNED; '"), ("registry", "nvcr.io/../../x")])
def test_the_plan_refuses_a_lock_value_that_would_run_in_a_launcher(tmp_path, field, value):
    path = tmp_path / "lock.yml"
    path.write_text(yaml.safe_dump({"spark_images_lock": {"ngc": {**ENTRY, field: value}}}))
    result = run_module("spark_image_plan", {"path": str(path), "images": IMAGES})
    assert result["failed"]
    assert f"{tmp_path / 'lock.yml'}: entry 'ngc' {field} is " in result["msg"]
    assert "Fix the entry or run `sparkfleet pin` (playbooks/pin.yml) again." in result["msg"]

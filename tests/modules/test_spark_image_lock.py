"""spark_image_plan and spark_image_lock, natively through real Ansible: a lock whose values would run as code in a
launcher is refused by the plan and by the writer, which leaves the file as it was."""

from __future__ import annotations

import pytest
import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import inert_load

from conftest import run_module

D = "sha256:" + "ab" * 32
IMAGES = [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3"],
           "launcher": "spark-ngc"}]
ENTRY = {"registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3", "index_digest": D,
         "digests": {"linux/arm64": D}, "resolved_at": "2026-12-01T04:00:00+00:00"}


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


def test_pin_never_overwrites_a_lock_the_plan_refuses(tmp_path):
    path = tmp_path / "lock.yml"
    text = yaml.safe_dump({"spark_images_lock": {"ngc": {**ENTRY, "tag": "x\ny"}}})
    path.write_text(text)
    resolved = [{"name": "ngc", **{k: v for k, v in ENTRY.items() if k != "resolved_at"}}]
    result = run_module("spark_image_lock", {"path": str(path), "resolved": resolved})
    assert result["failed"] and "The lock was left untouched" in result["msg"]
    assert "entry 'ngc' tag is " in result["msg"]
    assert path.read_text() == text
    path.unlink()
    assert not run_module("spark_image_lock", {"path": str(path), "resolved": resolved})["failed"]
    assert inert_load(path.read_text())["spark_images_lock"]["ngc"]["index_digest"] == D

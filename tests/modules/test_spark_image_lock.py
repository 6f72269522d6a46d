"""spark_image_lock, natively through real Ansible: a lock whose values would run as code in a launcher is refused
by the writer, which leaves the file as it was (the plan's refusal: test_spark_image_plan.py)."""

from __future__ import annotations

import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import inert_load

from conftest import run_module

D = "sha256:" + "ab" * 32
ENTRY = {"registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3", "index_digest": D,
         "digests": {"linux/arm64": D}, "resolved_at": "2026-12-01T04:00:00+00:00"}


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

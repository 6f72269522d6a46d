"""The lock diff, the one computation behind pin's changes, refresh's diff and the reports' lines."""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.module_utils._lock import diff, removed

OLD, NEW = "sha256:" + "1" * 64, "sha256:" + "2" * 64
NGC = {"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3"}


def test_a_moved_digest_is_a_change_with_both_digests():
    [row] = diff({"ngc": {"index_digest": OLD}}, [{**NGC, "index_digest": NEW}])
    assert row == {"name": "ngc", "tag": "25.11-py3", "old": OLD, "new": NEW, "changed": True,
                   "line": f"ngc nvcr.io/nvidia/pytorch:25.11-py3: {OLD} -> {NEW}"}


def test_the_same_digest_is_unchanged():
    [row] = diff({"ngc": {"index_digest": OLD}}, [{**NGC, "index_digest": OLD}])
    assert (row["changed"], row["line"]) == (False, f"ngc nvcr.io/nvidia/pytorch:25.11-py3: unchanged {OLD}")


def test_an_image_the_lock_does_not_have_yet_is_new():
    [row] = diff(None, [{**NGC, "index_digest": NEW}])
    assert (row["old"], row["changed"]) == (None, True)
    assert row["line"].endswith(f": (none) -> {NEW}")


def test_images_no_longer_configured_are_named():
    assert removed({"ngc": {}, "old": {}}, ["ngc"]) == ["old removed (no longer configured)"]
    assert removed(None, ["ngc"]) == []

"""The lock diff, the one computation behind pin's changes, refresh's diff and the reports' lines."""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.module_utils._lock import dated, diff, removed

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


def test_a_refresh_dates_each_image_as_the_lock_will_so_its_launchers_match_a_later_provisions():
    """Issue 35, item 3: a refresh wrote launchers saying `when pinned, None`; the lock then got the time it was
    written, so the next provision rewrote every launcher. An unchanged digest keeps the lock's date (the lock
    keeps it); a moved one has its resolution's (the lock takes it)."""
    lock = {"ngc": {"index_digest": "sha256:" + "a" * 64, "resolved_at": "2026-11-01T10:00:00+00:00"},
            "unsloth": {"index_digest": "sha256:" + "b" * 64, "resolved_at": "2026-11-01T10:00:00+00:00"}}
    resolved = [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3",
                 "index_digest": "sha256:" + "a" * 64, "resolved_at": "2026-12-04T08:00:00+00:00"},
                {"name": "unsloth", "registry": "docker.io", "repository": "unsloth/unsloth", "tag": "dgxspark-latest",
                 "index_digest": "sha256:" + "c" * 64, "resolved_at": "2026-12-04T08:00:00+00:00"}]
    assert [image["resolved_at"] for image in dated(lock, resolved)] == [
        "2026-11-01T10:00:00+00:00", "2026-12-04T08:00:00+00:00"]
    assert [image["resolved_at"] for image in dated(None, resolved)] == ["2026-12-04T08:00:00+00:00"] * 2

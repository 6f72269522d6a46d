"""The image lock's one home (plugins/module_utils/images/_lock.py): its fields and their validation, reading it
as every run reads it (the file pin writes, the inventory's variable agreeing), the diff behind pin's changes,
refresh's diff and the reports' lines, and the file written."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import inert_load
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._lock import (
    FIELDS,
    LockRefused,
    dated,
    diff,
    entry,
    fallback_reason,
    line,
    load,
    plan,
    problems,
    removed,
    write,
)

D = "sha256:" + "ab" * 32
D2 = "sha256:" + "cd" * 32
D3 = "sha256:" + "ef" * 32

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


def test_lock_validation_names_file_and_entry():
    good = {"registry": "nvcr.io", "repository": "nvidia/pytorch", "index_digest": D, "digests": {"linux/arm64": D}}
    assert problems({"ngc": good}, "lock.yml") == []
    assert problems(None, "lock.yml") == []
    assert problems(["x"], "lock.yml") == [
        "lock.yml: spark_images_lock must be a mapping of image name to entry, found list"]
    assert problems({"ngc": {**good, "index_digest": "sha256:123"}}, "lock.yml") == [
        "lock.yml: entry 'ngc' index_digest is 'sha256:123'; expected sha256: and 64 lowercase hex digits"]
    assert problems({"unsloth": {"registry": "docker.io"}}, "lock.yml") == [
        "lock.yml: entry 'unsloth' lacks repository, index_digest, digests"]


# Values an attacker or a careless edit can put into a lock: each would end a shell comment or argument, run a
# command, or leave a directory in a launcher (run as root by spark_verify, and by every user).
INJECTIONS = ["25.11-py3\ntouch /tmp/PWNED #", "x'; touch /tmp/PWNED; '", "$(touch /tmp/PWNED)", "`id`",
              "../../etc/cron.d/x", "a\0b", "a" * 300, "", " spaced", "25.11-py3\n"]


# Every field of an entry (FIELDS, walked: a field added there without its check fails here).
@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("value", INJECTIONS)
def test_a_lock_value_that_would_run_or_escape_in_a_launcher_is_refused_naming_the_field(field, value):
    good = {"registry": "nvcr.io", "repository": "nvidia/pytorch", "index_digest": D, "digests": {"linux/arm64": D},
            "tag": "25.11-py3", "resolved_at": "2026-12-01T04:00:00+00:00",
            "media_type": "application/vnd.oci.image.index.v1+json", "platforms": ["linux/arm64"],
            "requested": "nvcr.io/nvidia/pytorch:25.11-py3",
            "sizes": {"linux/arm64": 123}}
    assert problems({"ngc": good}, "lock.yml") == []
    found = problems({"ngc": {**good, field: value}}, "lock.yml")
    assert found, (f"the lock's field {field!r} took {value!r}: give it its check in _CHECKS of "
                   "plugins/module_utils/images/_lock.py (FIELDS names it)")
    assert all(p.startswith("lock.yml: entry 'ngc' ") for p in found)
    assert any(f" {field} is " in p or f" {field}: " in p or "lacks" in p for p in found), found


def test_a_fallback_is_shown_as_the_resolution_wrote_it_and_nothing_else():
    good = {"registry": "nvcr.io", "repository": "nvidia/pytorch", "index_digest": D, "digests": {"linux/arm64": D}}
    fallback = {"wanted": "26.01-py3", "used": "25.11-py3", "reasons": ["26.01-py3: no linux/arm64 in its index"]}
    assert problems({"ngc": {**good, "fallback": fallback}}, "lock.yml") == []
    # A reason is shown in the pin line and the summary: a terminal escape or a newline there is refused.
    assert problems({"ngc": {**good, "fallback": {**fallback, "reasons": ["\x1b[2Jcleared"]}}}, "lock.yml") == [
        "lock.yml: entry 'ngc' fallback.reasons has '\\x1b[2Jcleared'; expected a line of printable text "
        "without braces (500 characters at most)"]
    # What a registry said, however it said it, becomes a reason the lock takes (pin would refuse to write it).
    said = fallback_reason('404 {"errors": [{"code": "MANIFEST_UNKNOWN",\n  "detail": "\x1b[31m' + "x" * 900)
    assert "\n" not in said and "\x1b" not in said and len(said) == 500 and said.startswith('404 ("errors": [("code"')
    assert problems({"ngc": {**good, "fallback": {**fallback, "reasons": [said]}}}, "lock.yml") == []
    assert problems({"ngc": {**good, "fallback": {**fallback, "used": "$(id)"}}}, "lock.yml")[0].startswith(
        "lock.yml: entry 'ngc' fallback.used is '$(id)'; expected an image tag")


@pytest.mark.parametrize("value", INJECTIONS)
def test_an_entry_name_a_platform_or_a_derived_record_that_would_escape_is_refused(value):
    good = {"registry": "nvcr.io", "repository": "nvidia/pytorch", "index_digest": D, "digests": {"linux/arm64": D}}
    assert problems({value: good}, "lock.yml")
    assert problems({"ngc": {**good, "platforms": [value]}}, "lock.yml")
    assert problems({"ngc": {**good, "digests": {value: D}}}, "lock.yml")
    assert problems({"ngc": {**good, "digests": {"linux/arm64": value}}}, "lock.yml")
    assert problems({"ngc": {**good, "derived": {value: {"recipe": D, "tag": "sparkfleet/x:0123456789ab"}}}},
                    "lock.yml")
    assert problems({"ngc": {**good, "derived": {"audio": {"recipe": D, "tag": value}}}}, "lock.yml")


LOCKED = {"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3",
          "index_digest": D, "digests": {"linux/arm64": D2, "linux/amd64": D3},
          "resolved_at": "2026-12-01T04:00:00+00:00"}


def test_a_lock_entry_is_written_in_the_lock_s_field_order():
    made = entry({**LOCKED, "requested": "nvcr.io/nvidia/pytorch:25.11-py3", "media_type": "m", "extra": 1})
    assert list(made) == [f for f in FIELDS if f not in ("resolved_at", "derived")]
    assert line({**LOCKED, "fallback": {"wanted": "26.01-py3", "reasons": ["no arm64"]}}) == (
        f"ngc: nvcr.io/nvidia/pytorch:25.11-py3 @ {D} (linux/arm64 {D2}, linux/amd64 {D3}), FALLBACK from "
        "26.01-py3: no arm64")


# --- the digests keyed by platform, and locks written before -----------------------------------------------------

OLD_ENTRY = {"requested": "nvcr.io/nvidia/pytorch:25.11-py3", "registry": "nvcr.io", "repository": "nvidia/pytorch",
             "tag": "25.11-py3", "index_digest": D, "arm64_digest": D2,
             "media_type": "application/vnd.oci.image.index.v1+json", "platforms": ["linux/arm64", "linux/amd64"],
             "sizes": {"linux/arm64": 1, "linux/amd64": 2}, "fallback": None,
             "resolved_at": "2026-11-01T10:00:00+00:00"}


def _lock_file(tmp_path, lock, name="spark_images_lock.yml"):
    path = tmp_path / name
    path.write_text("---\n" + yaml.safe_dump({"spark_images_lock": lock}, sort_keys=False))
    return path


def test_a_lock_written_before_is_read_with_its_digest_keyed_by_its_platform(tmp_path):
    path = _lock_file(tmp_path, {"ngc": OLD_ENTRY})
    read = load(str(path))
    assert read["ngc"]["digests"] == {"linux/arm64": D2}
    assert "arm64_digest" not in read["ngc"]
    assert list(read["ngc"])[:6] == ["requested", "registry", "repository", "tag", "index_digest", "digests"]
    assert problems({"ngc": {**OLD_ENTRY, "arm64_digest": "sha256:short"}}, "lock.yml") == [
        "lock.yml: entry 'ngc' digests 'linux/arm64' is 'sha256:short'; expected a platform and a digest (sha256: "
        "and 64 hex digits)"]


def test_the_next_pin_rewrites_a_lock_written_before_and_says_so_then_changes_nothing(tmp_path):
    path = _lock_file(tmp_path, {"ngc": OLD_ENTRY})
    resolved = [{**OLD_ENTRY, "name": "ngc", "digests": {"linux/arm64": D2, "linux/amd64": D3},
                 "resolved_at": "2026-12-04T08:00:00+00:00"}]
    del resolved[0]["arm64_digest"]
    first = write(str(path), resolved, [])
    assert first["changed"]
    assert first["changes"] == ["ngc: arm64_digest rewritten as digests (keyed by platform)"], "the digest did not move"
    written = inert_load(path.read_text())["spark_images_lock"]["ngc"]
    assert written["digests"] == {"linux/arm64": D2, "linux/amd64": D3} and "arm64_digest" not in written
    assert written["resolved_at"] == "2026-11-01T10:00:00+00:00", "an unmoved digest keeps its date"
    assert "arm64_digest" in first["diff"]["before"] and "arm64_digest" not in first["diff"]["after"]
    again = write(str(path), resolved, [])
    assert (again["changed"], again["changes"]) == (False, [])


# --- one lock: the file pin writes, the inventory's variable agreeing -------------------------------------------

def test_the_plan_reads_the_file_pin_writes_and_the_same_lock_in_the_variable_agrees(tmp_path):
    path = _lock_file(tmp_path, {"ngc": OLD_ENTRY})
    assert load(str(path), {"ngc": OLD_ENTRY})["ngc"]["index_digest"] == D, "group_vars/all loaded the same file"
    assert load(str(path), None)["ngc"]["index_digest"] == D, "a lock file of its own, no variable"
    assert load(str(tmp_path / "none.yml"), None) == {}, "no lock yet"
    assert load(str(tmp_path / "none.yml"), {}) == {}


def test_a_variable_that_says_another_lock_than_the_file_is_refused_naming_both(tmp_path):
    """Issue 39: pin writes spark_images_lock_file while the plan read the variable spark_images_lock: with the file
    moved, the plan pulled from the old lock while pin wrote the new."""
    path = _lock_file(tmp_path, {"ngc": OLD_ENTRY}, "moved.yml")
    with pytest.raises(LockRefused) as refused:
        load(str(path), {"ngc": {**OLD_ENTRY, "index_digest": D3}})
    assert "the inventory sets spark_images_lock" in refused.value.msg
    assert f"spark_images_lock_file is {path}" in refused.value.msg
    assert "they differ in ngc" in refused.value.msg and "Nothing was pulled" in refused.value.msg
    with pytest.raises(LockRefused, match=r"none\.yml is not there"):
        load(str(tmp_path / "none.yml"), {"ngc": OLD_ENTRY})


def test_a_lock_file_that_is_not_one_is_refused_naming_it(tmp_path):
    path = tmp_path / "lock.yml"
    path.write_text("spark_images_lock: {ngc: [\n")
    with pytest.raises(LockRefused, match="cannot be read as the image lock"):
        load(str(path))
    path.write_text("spark_images_lock: {}\nspark_images_catalog: []\n")
    with pytest.raises(LockRefused, match="holds only spark_images_lock; found spark_images_lock, "
                                          "spark_images_catalog"):
        load(str(path))
    path.write_text(json.dumps({"spark_images_lock": {"ngc": {**OLD_ENTRY, "index_digest": "sha256:1"}}}))
    with pytest.raises(LockRefused, match=re.escape(f"{path}: entry 'ngc' index_digest is 'sha256:1'")):
        load(str(path))


def test_a_host_list_has_no_lock_file_and_the_variable_is_the_lock():
    assert load("", {"ngc": OLD_ENTRY})["ngc"]["digests"] == {"linux/arm64": D2}
    with pytest.raises(LockRefused, match="given with -e"):
        load("", {"ngc": {**OLD_ENTRY, "tag": "$(id)"}})


def test_the_plan_pins_what_the_lock_pins_and_refuses_a_moving_tag_without_an_entry():
    catalog = [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3"]},
               {"name": "unsloth", "registry": "docker.io", "repository": "unsloth/unsloth", "tags": ["v1"]}]
    planned = plan(load("", {"ngc": OLD_ENTRY}), catalog, ["latest"], "lock.yml")
    assert [p["name"] for p in planned["plan"]] == ["ngc"] and planned["plan"][0]["digests"] == {"linux/arm64": D2}
    assert [u["name"] for u in planned["unlocked"]] == ["unsloth"]
    with pytest.raises(LockRefused, match=r"docker\.io/unsloth/unsloth:latest is a moving tag and lock\.yml has no "):
        plan({}, [{**catalog[1], "tags": ["latest"]}], ["latest"], "lock.yml")
    with pytest.raises(LockRefused, match=r"pins nvcr\.io/nvidia/pytorch but the image is configured as"):
        plan({"ngc": OLD_ENTRY}, [{**catalog[0], "repository": "nvidia/other"}], ["latest"], "lock.yml")

"""The pinned image's one model: the lock entry's validation, the pull request a host gets, the record of what it
runs (plugins/module_utils/_pinned.py)."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils._pinned import (
    LOCK_FIELDS,
    derived,
    lock_entry,
    pin_line,
    pinned,
    pull_requests,
    validate_lock,
)

D = "sha256:" + "ab" * 32
D2 = "sha256:" + "cd" * 32
CATALOG = [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3", "25.09-py3",
                                                                                           "latest"],
            "launcher": "spark-ngc"}]
LOCKED = {"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3",
          "index_digest": D, "arm64_digest": D2, "platforms": ["linux/arm64", "linux/amd64"],
          "sizes": {"linux/arm64": 123, "linux/amd64": 456}, "resolved_at": "2026-12-01T04:00:00+00:00",
          "fallback": None, "derived": {"ngc-ffmpeg": {"recipe": D, "tag": "sparkfleet/ngc-ffmpeg:abababababab"}}}
OPTIONS = {"mirrors": {}, "platform": "linux/arm64", "moving": ["latest"], "launcher_dir": "/usr/local/bin/"}


def test_lock_validation_names_file_and_entry():
    good = {"registry": "nvcr.io", "repository": "nvidia/pytorch", "index_digest": D, "arm64_digest": D}
    assert validate_lock({"ngc": good}, "lock.yml") == []
    assert validate_lock(None, "lock.yml") == []
    assert validate_lock(["x"], "lock.yml") == [
        "lock.yml: spark_images_lock must be a mapping of image name to entry, found list"]
    assert validate_lock({"ngc": {**good, "index_digest": "sha256:123"}}, "lock.yml") == [
        "lock.yml: entry 'ngc' index_digest is 'sha256:123'; expected sha256: and 64 lowercase hex digits"]
    assert validate_lock({"unsloth": {"registry": "docker.io"}}, "lock.yml") == [
        "lock.yml: entry 'unsloth' lacks repository, index_digest, arm64_digest"]


# Values an attacker or a careless edit can put into a lock: each would end a shell comment or argument, run a
# command, or leave a directory in a launcher (run as root by spark_verify, and by every user).
INJECTIONS = ["25.11-py3\ntouch /tmp/PWNED #", "x'; touch /tmp/PWNED; '", "$(touch /tmp/PWNED)", "`id`",
              "../../etc/cron.d/x", "a\0b", "a" * 300, "", " spaced", "25.11-py3\n"]


@pytest.mark.parametrize("field", ["tag", "resolved_at", "registry", "repository", "index_digest", "media_type",
                                   "requested"])
@pytest.mark.parametrize("value", INJECTIONS)
def test_a_lock_value_that_would_run_or_escape_in_a_launcher_is_refused_naming_the_field(field, value):
    good = {"registry": "nvcr.io", "repository": "nvidia/pytorch", "index_digest": D, "arm64_digest": D,
            "tag": "25.11-py3", "resolved_at": "2026-12-01T04:00:00+00:00",
            "media_type": "application/vnd.oci.image.index.v1+json", "platforms": ["linux/arm64"],
            "requested": "nvcr.io/nvidia/pytorch:25.11-py3",
            "sizes": {"linux/arm64": 123}}
    assert validate_lock({"ngc": good}, "lock.yml") == []
    problems = validate_lock({"ngc": {**good, field: value}}, "lock.yml")
    assert problems and all(p.startswith("lock.yml: entry 'ngc' ") for p in problems)
    assert any(f" {field} is " in p or f" {field}: " in p or "lacks" in p for p in problems), problems


@pytest.mark.parametrize("value", INJECTIONS)
def test_an_entry_name_a_platform_or_a_derived_record_that_would_escape_is_refused(value):
    good = {"registry": "nvcr.io", "repository": "nvidia/pytorch", "index_digest": D, "arm64_digest": D}
    assert validate_lock({value: good}, "lock.yml")
    assert validate_lock({"ngc": {**good, "platforms": [value]}}, "lock.yml")
    assert validate_lock({"ngc": {**good, "derived": {value: {"recipe": D, "tag": "sparkfleet/x:0123456789ab"}}}},
                         "lock.yml")
    assert validate_lock({"ngc": {**good, "derived": {"audio": {"recipe": D, "tag": value}}}}, "lock.yml")


def test_a_pull_request_is_complete_for_the_host_and_carries_its_lock_entry():
    (request,) = pull_requests([LOCKED], CATALOG, **{**OPTIONS, "mirrors": {"nvcr.io": "mirror.lan:5000"}})
    assert request["repository"] == "mirror.lan:5000/nvidia/pytorch", "pulled through the registry's mirror"
    assert (request["digest"], request["size"], request["platforms"]) == (D, 123, ["linux/arm64", "linux/amd64"])
    assert request["local_fallback"] == ["nvcr.io/nvidia/pytorch:25.11-py3", "mirror.lan:5000/nvidia/pytorch:25.11-py3",
                                         "nvcr.io/nvidia/pytorch:25.09-py3",
                                         "mirror.lan:5000/nvidia/pytorch:25.09-py3"], "never the moving tag"
    assert (request["launcher"], request["launcher_path"]) == ("spark-ngc", "/usr/local/bin/spark-ngc")
    assert request["lock"]["registry"] == "nvcr.io", "the record names the registry locked, not the mirror"
    (amd,) = pull_requests([LOCKED], CATALOG, **{**OPTIONS, "platform": "linux/amd64", "blessed_fallback": False})
    assert (amd["size"], amd["local_fallback"], amd["repository"]) == (456, [], "nvcr.io/nvidia/pytorch")
    (kept,) = pull_requests([LOCKED], CATALOG, **{**OPTIONS, "sized": False})
    assert "size" not in kept, "images kept to roll back to are not held to the free-space check"


def test_the_pinned_record_is_the_lock_entry_and_what_the_pull_did():
    (request,) = pull_requests([{**LOCKED, "unlocked": True}], CATALOG, **OPTIONS)
    record = pinned(request, {"ref": f"nvcr.io/nvidia/pytorch@{D}", "pulled": True})
    assert record == {"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3",
                      "index_digest": D, "arm64_digest": D2, "resolved_at": "2026-12-01T04:00:00+00:00",
                      "fallback": None, "derived": False, "derived_locked": LOCKED["derived"], "unlocked": True,
                      "ref": f"nvcr.io/nvidia/pytorch@{D}", "pulled": True, "local_fallback": None,
                      "launcher": "spark-ngc", "launcher_path": "/usr/local/bin/spark-ngc"}
    local = {"wanted": f"nvcr.io/nvidia/pytorch@{D}", "used": "nvcr.io/nvidia/pytorch:25.09-py3",
             "image_id": D2, "reason": "no route"}
    assert pinned(request, {"ref": D2, "pulled": False, "local_fallback": local})["local_fallback"] == local


def test_a_derived_record_runs_the_image_id_under_its_own_launcher():
    record = derived(name="ngc-ffmpeg", base="ngc", base_ref=f"nvcr.io/nvidia/pytorch@{D}", base_digest=D,
                     launcher="spark-ffmpeg", launcher_dir="/opt/bin",
                     result={"tag": "sparkfleet/ngc-ffmpeg:abababababab", "recipe": D, "image_id": D2,
                             "built": True})
    assert (record["ref"], record["tag"], record["launcher_path"]) == (D2, "abababababab", "/opt/bin/spark-ffmpeg")
    assert (record["derived"], record["base"], record["index_digest"], record["built"]) == (True, "ngc", D, True)
    checked = derived(name="x", base="ngc", base_ref="r", base_digest=D, launcher="spark-x", launcher_dir="/b",
                      result={"tag": "sparkfleet/x:0123456789ab", "image_id": None, "built": False})
    assert checked["ref"] == "sparkfleet/x:0123456789ab", "in check mode, before a build, the tag stands for it"


def test_a_lock_entry_is_written_in_the_lock_s_field_order():
    entry = lock_entry({**LOCKED, "requested": "nvcr.io/nvidia/pytorch:25.11-py3", "media_type": "m", "extra": 1})
    assert list(entry) == [f for f in LOCK_FIELDS if f not in ("resolved_at", "derived")]
    assert pin_line({**LOCKED, "fallback": {"wanted": "26.01-py3", "reasons": ["no arm64"]}}) == (
        f"ngc: nvcr.io/nvidia/pytorch:25.11-py3 @ {D} (arm64 {D2}), FALLBACK from 26.01-py3: no arm64")

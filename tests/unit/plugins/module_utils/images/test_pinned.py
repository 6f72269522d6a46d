"""The pinned image's one model: the pull request a host gets from a lock entry, the record of what it runs
(plugins/module_utils/images/_pinned.py). The lock entry itself: test_image_lock.py."""

from __future__ import annotations

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._pinned import derived, pinned, pull_requests

D = "sha256:" + "ab" * 32
D2 = "sha256:" + "cd" * 32
CATALOG = [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3", "25.09-py3",
                                                                                           "latest"],
            "launcher": "spark-ngc"}]
LOCKED = {"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3",
          "index_digest": D, "digests": {"linux/arm64": D2}, "platforms": ["linux/arm64", "linux/amd64"],
          "sizes": {"linux/arm64": 123, "linux/amd64": 456}, "resolved_at": "2026-12-01T04:00:00+00:00",
          "fallback": None, "derived": {"ngc-ffmpeg": {"recipe": D, "tag": "sparkfleet/ngc-ffmpeg:abababababab"}}}
OPTIONS = {"mirrors": {}, "platform": "linux/arm64", "moving": ["latest"], "launcher_dir": "/usr/local/bin/"}


def test_a_pull_request_is_complete_for_the_host_and_carries_its_lock_entry():
    (request,) = pull_requests([LOCKED], CATALOG, **{**OPTIONS, "mirrors": {"nvcr.io": "mirror.lan:5000"}})
    assert request["repository"] == "mirror.lan:5000/nvidia/pytorch", "pulled through the registry's mirror"
    assert (request["digest"], request["size"], request["platforms"]) == (D, 123, ["linux/arm64", "linux/amd64"])
    assert request["local_blessed"] == ["nvcr.io/nvidia/pytorch:25.11-py3", "mirror.lan:5000/nvidia/pytorch:25.11-py3",
                                        "nvcr.io/nvidia/pytorch:25.09-py3",
                                        "mirror.lan:5000/nvidia/pytorch:25.09-py3"], "never the moving tag"
    assert (request["launcher"], request["launcher_path"]) == ("spark-ngc", "/usr/local/bin/spark-ngc")
    assert request["lock"]["registry"] == "nvcr.io", "the record names the registry locked, not the mirror"
    (amd,) = pull_requests([LOCKED], CATALOG, **{**OPTIONS, "platform": "linux/amd64", "local_blessed": False})
    assert (amd["size"], amd["local_blessed"], amd["repository"]) == (456, [], "nvcr.io/nvidia/pytorch")
    (kept,) = pull_requests([LOCKED], CATALOG, **{**OPTIONS, "sized": False})
    assert "size" not in kept, "images kept to roll back to are not held to the free-space check"


def test_the_pinned_record_is_the_lock_entry_and_what_the_pull_did():
    (request,) = pull_requests([{**LOCKED, "unlocked": True}], CATALOG, **OPTIONS)
    record = pinned(request, {"ref": f"nvcr.io/nvidia/pytorch@{D}", "pulled": True})
    assert record == {"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3",
                      "index_digest": D, "digests": {"linux/arm64": D2}, "resolved_at": "2026-12-01T04:00:00+00:00",
                      "fallback": None, "derived": False, "derived_locked": LOCKED["derived"], "unlocked": True,
                      "ref": f"nvcr.io/nvidia/pytorch@{D}", "pulled": True, "local_blessed": None,
                      "launcher": "spark-ngc", "launcher_path": "/usr/local/bin/spark-ngc"}
    local = {"wanted": f"nvcr.io/nvidia/pytorch@{D}", "used": "nvcr.io/nvidia/pytorch:25.09-py3",
             "image_id": D2, "reason": "no route"}
    assert pinned(request, {"ref": D2, "pulled": False, "local_blessed": local})["local_blessed"] == local


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


@pytest.mark.parametrize("value", ["--volume=/:/host", "a b", "$(id)"])
def test_a_pull_request_is_refused_for_an_entry_the_lock_would_refuse(value):
    with pytest.raises(ValueError, match=r"spark_images_lock entry 'ngc': .*repository"):
        pull_requests([{**LOCKED, "repository": value}], CATALOG, **OPTIONS)
    with pytest.raises(ValueError, match="digests"):
        pull_requests([{**LOCKED, "digests": {"linux/arm64": value}}], CATALOG, **OPTIONS)

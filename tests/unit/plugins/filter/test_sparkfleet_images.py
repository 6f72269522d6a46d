"""spark_images' filters: what a host runs, what may be pruned, the lab's registry overrides."""

from __future__ import annotations

import re

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkfleet.spark.plugins.filter import sparkfleet_images as images

D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
CATALOG = [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3"],
            "launcher": "spark-ngc"}]


LOCKED = {"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3",
          "index_digest": D1, "digests": {"linux/arm64": D2}, "platforms": ["linux/arm64", "linux/amd64"],
          "sizes": {"linux/arm64": 123}}


def test_the_pull_requests_filter_hands_its_positional_options_to_the_model():
    """The filter is the edge (module_utils/images/_pinned.py's test holds the model): each option reaches the
    request."""
    (request,) = images.spark_images_pull_requests([LOCKED], {"nvcr.io": "mirror.lan:5000"}, "linux/arm64", CATALOG,
                                                   ["latest"], "/opt/bin")
    assert (request["repository"], request["size"], request["launcher_path"]) == (
        "mirror.lan:5000/nvidia/pytorch", 123, "/opt/bin/spark-ngc")
    assert request["local_blessed"] == ["nvcr.io/nvidia/pytorch:25.11-py3", "mirror.lan:5000/nvidia/pytorch:25.11-py3"]
    (plain,) = images.spark_images_pull_requests([LOCKED], {}, "linux/amd64", CATALOG, [], "/b", False, False)
    assert plain["repository"] == "nvcr.io/nvidia/pytorch" and "size" not in plain and plain["local_blessed"] == []
    # local_blessed's old keyword, blessed_fallback, is still taken (with a deprecation)
    (old,) = images.spark_images_pull_requests([LOCKED], {}, "linux/arm64", CATALOG, [], "/b", blessed_fallback=False)
    assert old["local_blessed"] == []


def test_only_images_this_project_pulled_and_no_longer_pins_are_stale():
    recorded = [f"nvcr.io/nvidia/pytorch@{D1}", f"nvcr.io/nvidia/pytorch@{D2}"]
    assert images.spark_images_unused(recorded, [{"index_digest": D2}]) == [f"nvcr.io/nvidia/pytorch@{D1}"]
    assert images.spark_images_unused(None, [{"index_digest": D2}]) == []


def test_registry_overrides_keep_the_catalog_otherwise():
    assert images.spark_images_effective(CATALOG, {"nvcr.io": "127.0.0.1:5000"})[0]["registry"] == "127.0.0.1:5000"
    assert images.spark_images_effective(CATALOG, {}) == CATALOG


def test_pulls_go_through_the_registrys_mirror_and_only_then():
    image = {"registry": "nvcr.io", "repository": "nvidia/pytorch"}
    assert images.spark_images_pull_repository(image, {}) == "nvcr.io/nvidia/pytorch"
    mirrored = images.spark_images_pull_repository(image, {"nvcr.io": "mirror.lan:5001"})
    assert mirrored == "mirror.lan:5001/nvidia/pytorch"
    assert images.spark_images_pull_repository(image, {"docker.io": "mirror.lan:5002"}) == "nvcr.io/nvidia/pytorch"


@pytest.mark.parametrize(("entry", "mirrors", "said"), [
    ({"registry": "--volume=/:/host", "repository": "nvidia/pytorch", "index_digest": D1}, {},
     "registry is '--volume=/:/host'; expected a registry host name"),
    ({"registry": "nvcr.io", "repository": "nvidia/pytorch", "index_digest": "--privileged"}, {},
     "index_digest is '--privileged'; expected sha256:"),
    ({"registry": "nvcr.io", "repository": "nvidia/pytorch", "index_digest": D1}, {"nvcr.io": "-v /:/h"},
     "mirror of nvcr.io in spark_images_mirrors is '-v /:/h'"),
])
def test_a_lock_entry_or_mirror_that_would_reach_dockers_argv_as_an_option_is_refused(entry, mirrors, said):
    """Issue 34, finding 7: cluster verify used the lock and the mirrors unvalidated; a lock registry
    '--volume=/:/host' reached docker's argv as an option. Every path that pulls or runs a locked image takes its
    repository from this one filter, which now checks the entry and the mirror."""
    with pytest.raises(AnsibleFilterError, match=re.escape(said)):
        images.spark_images_pull_repository(entry, mirrors)


def test_lock_diff_old_to_new_per_image():
    resolved = [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tag": "25.11-py3",
                 "index_digest": D1},
                {"name": "unsloth", "registry": "docker.io", "repository": "unsloth/unsloth",
                 "tag": "dgxspark-latest", "index_digest": D2}]
    diff = images.spark_images_lock_diff({"ngc": {"index_digest": D1}, "unsloth": {"index_digest": D1}}, resolved)
    assert [(d["name"], d["changed"]) for d in diff] == [("ngc", False), ("unsloth", True)]
    assert diff[1]["line"] == f"unsloth docker.io/unsloth/unsloth:dgxspark-latest: {D1} -> {D2}"
    assert diff[0]["line"].endswith(f"unchanged {D1}")
    assert images.spark_images_lock_diff(None, resolved)[0]["old"] is None


@pytest.mark.parametrize(("field", "value"), [
    ("launcher", "../../etc/cron.daily/x"), ("launcher", "spark ngc"), ("name", "ngc\nx"),
    ("registry", "nvcr.io;id"), ("repository", "nvidia/pytorch$(id)"), ("tags", ["25.11-py3\nid"])])
def test_a_catalog_value_that_would_escape_a_path_or_run_in_a_launcher_is_refused(field, value):
    with pytest.raises(AnsibleFilterError, match=rf"spark_images_catalog\[0\] \('?ngc.*{field} is "):
        images.spark_images_effective([{**CATALOG[0], field: value}], {})
    with pytest.raises(AnsibleFilterError, match="spark_images_registry_replacements"):
        images.spark_images_effective(CATALOG, {"nvcr.io": "127.0.0.1:5000/../x"})


def test_a_derived_images_launcher_must_be_a_plain_file_name():
    recipe = {"name": "ngc-audio", "base": "ngc", "launcher": "../../usr/bin/sudo", "apt_packages": ["ffmpeg"]}
    said = re.escape("derived image ngc-audio: launcher is '../../usr/bin/sudo'")
    with pytest.raises(AnsibleFilterError, match=said):
        images.spark_images_derived_recipes([recipe], CATALOG, ["/inv"])

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
          "index_digest": D1, "arm64_digest": D2, "platforms": ["linux/arm64", "linux/amd64"],
          "sizes": {"linux/arm64": 123}}


def test_pinned_entries_carry_the_ref_and_the_launcher_path():
    pulled = {"images": [{"name": "ngc", "ref": f"nvcr.io/nvidia/pytorch@{D1}", "pulled": True}]}
    (entry,) = images.spark_images_pinned(pulled, CATALOG, "/usr/local/bin/", [LOCKED])
    assert entry["ref"] == f"nvcr.io/nvidia/pytorch@{D1}" and entry["index_digest"] == D1
    assert entry["launcher_path"] == "/usr/local/bin/spark-ngc"
    assert entry["unlocked"] is False
    failed = {"images": [{"name": "ngc", "failed": True, "msg": "docker pull failed"}]}
    assert images.spark_images_pinned(failed, CATALOG, "/usr/local/bin", [LOCKED]) == [], "a failed pull pins nothing"


def test_each_pull_request_is_complete_mirror_platforms_size_and_blessed_tags():
    (request,) = images.spark_images_pull_requests([LOCKED], {"nvcr.io": "mirror.lan:5000"}, "linux/arm64", CATALOG,
                                                   ["latest"])
    assert request == {"name": "ngc", "repository": "mirror.lan:5000/nvidia/pytorch", "digest": D1,
                       "platforms": ["linux/arm64", "linux/amd64"], "size": 123,
                       "local_fallback": ["nvcr.io/nvidia/pytorch:25.11-py3",
                                          "mirror.lan:5000/nvidia/pytorch:25.11-py3"]}
    (plain,) = images.spark_images_pull_requests([LOCKED], {}, "linux/amd64", CATALOG, [], False)
    assert plain["repository"] == "nvcr.io/nvidia/pytorch" and "size" not in plain and plain["local_fallback"] == []


def test_only_images_this_project_pulled_and_no_longer_pins_are_stale():
    recorded = [f"nvcr.io/nvidia/pytorch@{D1}", f"nvcr.io/nvidia/pytorch@{D2}"]
    assert images.spark_images_stale(recorded, [{"index_digest": D2}]) == [f"nvcr.io/nvidia/pytorch@{D1}"]
    assert images.spark_images_stale(None, [{"index_digest": D2}]) == []


def test_registry_overrides_keep_the_catalog_otherwise():
    assert images.spark_images_effective(CATALOG, {"nvcr.io": "127.0.0.1:5000"})[0]["registry"] == "127.0.0.1:5000"
    assert images.spark_images_effective(CATALOG, {}) == CATALOG


def test_the_lock_lives_beside_the_first_inventory_source(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "hosts.yml").write_text("all: {}\n")
    assert images.spark_images_inventory_dir([str(tmp_path / "lab"), "/elsewhere"]) == str(tmp_path / "lab")
    assert images.spark_images_inventory_dir([str(tmp_path / "hosts.yml")]) == str(tmp_path)
    with pytest.raises(AnsibleFilterError, match=r"no inventory source.*-i INVENTORY"):
        images.spark_images_inventory_dir([])
    # A host list has no directory: the lock would land wherever the run happens to be (a temporary directory).
    with pytest.raises(AnsibleFilterError, match=r"'localhost,' is a host list.*run with -i DIR"):
        images.spark_images_inventory_dir([str(tmp_path / "localhost,")])


def test_pin_line_shows_a_fallback():
    line = images.spark_images_pin_line({"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch",
                                         "tag": "25.09-py3", "index_digest": D1, "arm64_digest": D2,
                                         "fallback": {"wanted": "25.11-py3", "reasons": ["404 manifest unknown"]}})
    assert line == (f"ngc: nvcr.io/nvidia/pytorch:25.09-py3 @ {D1} (arm64 {D2}), FALLBACK from 25.11-py3: "
                    f"404 manifest unknown")


def test_pulls_go_through_the_registrys_mirror_and_only_then():
    image = {"registry": "nvcr.io", "repository": "nvidia/pytorch"}
    assert images.spark_images_pull_repository(image, {}) == "nvcr.io/nvidia/pytorch"
    mirrored = images.spark_images_pull_repository(image, {"nvcr.io": "mirror.lan:5001"})
    assert mirrored == "mirror.lan:5001/nvidia/pytorch"
    assert images.spark_images_pull_repository(image, {"docker.io": "mirror.lan:5002"}) == "nvcr.io/nvidia/pytorch"


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
    with pytest.raises(AnsibleFilterError, match="spark_images_registry_overrides"):
        images.spark_images_effective(CATALOG, {"nvcr.io": "127.0.0.1:5000/../x"})


def test_a_derived_images_launcher_must_be_a_plain_file_name():
    recipe = {"name": "ngc-audio", "base": "ngc", "launcher": "../../usr/bin/sudo", "apt_packages": ["ffmpeg"]}
    said = re.escape("derived image ngc-audio: launcher is '../../usr/bin/sudo'")
    with pytest.raises(AnsibleFilterError, match=said):
        images.spark_images_derived_recipes([recipe], CATALOG, "/inv")

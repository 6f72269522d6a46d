"""Derived images: the content hash, the Dockerfile, and the recipes refused before anything is built.

The rule under test (spark-environment-setup.md): rebuild locally FROM one of the base images only, for an
extra system package, never to upgrade a component the image already pins.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.sparkfleet.spark.plugins.filter import sparkfleet_images as images
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._derived import (
    recipe_hash,
    refusals,
    render,
    tag_for,
)

D1, D2 = "sha256:" + "1" * 64, "sha256:" + "2" * 64
CATALOG = [{"name": "ngc", "registry": "nvcr.io", "repository": "nvidia/pytorch", "tags": ["25.11-py3"],
            "launcher": "spark-ngc"},
           {"name": "unsloth", "registry": "docker.io", "repository": "unsloth/unsloth", "tags": ["dgxspark-latest"],
            "launcher": "spark-unsloth"}]
# What `python3 -c <INSTALLED_PROBE>` prints for an NGC image, in part.
NGC_INSTALLED = {"torch": "2.9.0a0+50eac811a6.nv25.9", "transformers": "4.56.1", "opencv-python": "4.11.0.86",
                 "nvidia-cudnn-frontend": "1.14.0", "Pillow": "11.3.0"}


def recipe(**kw) -> dict:
    return {"name": "ngc-extra", "base": "ngc", "launcher": "spark-ngc-extra", "apt_packages": [], "dockerfile": "",
            **kw}


def test_the_hash_moves_with_the_base_the_packages_the_fragment_and_each_file():
    base = recipe_hash(D1, ["ffmpeg"], "RUN true", {"a.sh": b"echo a"})
    assert base == recipe_hash(D1, ["ffmpeg"], "RUN true\n", {"a.sh": b"echo a"}), "whitespace at the ends is no change"
    assert len({base, recipe_hash(D2, ["ffmpeg"], "RUN true", {"a.sh": b"echo a"}),
                recipe_hash(D1, ["ffmpeg", "sox"], "RUN true", {"a.sh": b"echo a"}),
                recipe_hash(D1, ["ffmpeg"], "RUN false", {"a.sh": b"echo a"}),
                recipe_hash(D1, ["ffmpeg"], "RUN true", {"a.sh": b"echo b"})}) == 5
    assert tag_for("ngc-extra", base) == f"sparkfleet/ngc-extra:{base[7:19]}"


def test_the_dockerfile_is_from_the_digest_then_apt_then_the_fragment():
    text = render(f"nvcr.io/nvidia/pytorch@{D1}", recipe(apt_packages=["sox", "ffmpeg"],
                                                         dockerfile="COPY a.sh /usr/local/bin/\n"), D2, "ngc")
    lines = text.splitlines()
    assert lines[1] == f"FROM nvcr.io/nvidia/pytorch@{D1}"
    assert f'io.sparkfleet.recipe="{D2}"' in lines[2]
    assert "apt-get install -y --no-install-recommends ffmpeg sox" in text
    assert text.index("apt-get install") < text.index("COPY a.sh")


@pytest.mark.parametrize(("kw", "expected"), [
    ({"apt_packages": ["libcudnn9-cuda-13"]}, "apt package libcudnn9-cuda-13 is a CUDA/NVIDIA component"),
    ({"dockerfile": "RUN apt-get update && apt-get install -y cuda-toolkit-13-1"}, "apt package cuda-toolkit-13-1"),
    ({"dockerfile": "RUN apt-get -y dist-upgrade"}, "'apt-get dist-upgrade' upgrades the packages the base image pins"),
    ({"dockerfile": "RUN apt-get install --only-upgrade -y libc6"}, "upgrades packages the base image pins"),
    ({"dockerfile": "RUN pip install --no-cache-dir 'torch==2.10.0'"}, "pip package torch is a component"),
    ({"dockerfile": "RUN python3 -m pip install -U \\\n    flash-attn"}, "pip package flash-attn is a component"),
    ({"dockerfile": "RUN pip3 install xformers --index-url https://download.pytorch.org/whl/cu130"},
     "pip package xformers"),
    ({"dockerfile": "RUN pip install Transformers>=5"}, "pip package Transformers is a component"),
    ({"dockerfile": "RUN pip install nvidia-cublas-cu12"}, "pip package nvidia-cublas-cu12 is a component"),
    ({"dockerfile": "RUN pip install opencv_python==4.12.0.88"},
     "pip package opencv_python is already in the base image (opencv-python==4.11.0.86)"),
    ({"dockerfile": "RUN pip install --upgrade pillow"}, "installing it with --upgrade would replace"),
    ({"dockerfile": "RUN pip install -r requirements.txt"}, "pip reads requirements.txt, which is not among"),
    ({"dockerfile": "FROM ubuntu:24.04\nRUN true"}, "the fragment has its own FROM"),
])
def test_a_recipe_that_replaces_what_the_base_pins_is_refused(kw, expected):
    found = refusals(recipe(**kw), NGC_INSTALLED, {})
    assert any(expected in f for f in found), found
    assert all(f.startswith("derived image ngc-extra: ") for f in found)


def test_requirement_files_among_the_recipes_files_are_read():
    found = refusals(recipe(dockerfile="COPY requirements.txt /tmp/\nRUN pip install -r /tmp/requirements.txt"),
                     NGC_INSTALLED, {"requirements.txt": b"# extras\nlibrosa==0.11.0\ntriton>=3\n"})
    assert found == ["derived image ngc-extra: pip package triton is a component the base image pins"]


def test_an_extra_system_package_and_a_new_python_package_are_allowed():
    assert refusals(recipe(apt_packages=["ffmpeg", "libsndfile1"],
                           dockerfile="RUN pip install --no-deps librosa==0.11.0 && rm -rf /root/.cache\n"
                                      "ENV HF_HUB_ENABLE_HF_TRANSFER=1"), NGC_INSTALLED, {}) == []


def test_recipes_are_checked_for_shape_before_any_host_is_touched(tmp_path):
    (ok,) = images.spark_images_derived_recipes([recipe(apt_packages=["ffmpeg"], files={"a.sh": "files/a.sh"})],
                                                CATALOG, [str(tmp_path)])
    assert ok["files"] == {"a.sh": str(tmp_path / "files/a.sh")}, "relative to the inventory"
    (absolute,) = images.spark_images_derived_recipes([recipe(apt_packages=["ffmpeg"], files={"a.sh": "/srv/a.sh"})],
                                                      CATALOG, ["spark-01,"])
    assert absolute["files"] == {"a.sh": "/srv/a.sh"}, "a host list needs no directory where no file is relative"
    with pytest.raises(AnsibleFilterError, match="'spark-01,' is a host list"):
        images.spark_images_derived_recipes([recipe(apt_packages=["ffmpeg"], files={"a.sh": "a.sh"})], CATALOG,
                                            ["spark-01,"])
    for bad, message in [
        (recipe(base="pytorch-nightly", apt_packages=["x"]), "base 'pytorch-nightly' is not one of the pinned"),
        (recipe(name="NGC Extra", apt_packages=["x"]), "is not a valid image name"),
        (recipe(name="ngc", apt_packages=["x"]), "is used twice"),
        (recipe(), "adds nothing"),
        ({"name": "x", "apt_packages": ["y"]}, "lacks base, launcher"),
        (recipe(apt_packages=["x"], files={"../a": "a"}), "must be a plain name"),
    ]:
        with pytest.raises(AnsibleFilterError, match=message):
            images.spark_images_derived_recipes([bad], CATALOG, [str(tmp_path)])


def test_a_derived_image_needs_its_base_in_the_lock():
    recipes = images.spark_images_derived_recipes([recipe(apt_packages=["ffmpeg"])], CATALOG, ["/inv"])
    base = {"name": "ngc", "ref": f"nvcr.io/nvidia/pytorch@{D1}", "index_digest": D1, "unlocked": False,
            "derived": False, "derived_locked": {"ngc-extra": {"recipe": D2}}}
    (target,) = images.spark_images_derived_targets(recipes, [base])
    assert (target["base"]["ref"], target["locked"]) == (base["ref"], D2)
    with pytest.raises(AnsibleFilterError, match=r"base 'ngc' is not in the lock \(locked here: none\)"):
        images.spark_images_derived_targets(recipes, [{**base, "unlocked": True}])

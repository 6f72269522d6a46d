"""The Docker helper every module asks (module_utils/host/_docker_api.py): the engine's API on a real unix socket
served by the test (the Engine API's shapes: GET /info, GET /images/{ref}/json with 404 for an unknown image),
and the CLI through the module's runner where the socket cannot be used."""

from __future__ import annotations

import json

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _docker_api as docker_api
from fake_http import FakeHTTP

INFO = {"ServerVersion": "28.5.1", "DockerRootDir": "/var/lib/docker", "Runtimes": {"runc": {}, "nvidia": {}}}
IMAGE = {"Id": "sha256:" + "a" * 64, "Architecture": "arm64", "RepoDigests": ["r/x@sha256:" + "b" * 64],
         "Size": 12, "Config": {"Labels": {"io.sparkfleet.recipe": "abc"}, "Env": ["PATH=/usr/bin"]}}
SEEN = {"Id": IMAGE["Id"], "Architecture": "arm64", "RepoDigests": IMAGE["RepoDigests"],
        "Labels": {"io.sparkfleet.recipe": "abc"}}


def _engine(request) -> tuple:
    """Docker's engine API as the two calls sparkfleet makes see it."""
    if request.path == "/info":
        return 200, {}, INFO
    if request.path == "/images/r/x:1/json":
        return 200, {}, IMAGE
    return 404, {}, {"message": f"No such image: {request.path}"}


@pytest.fixture
def engine(tmp_path, monkeypatch):
    path = tmp_path / "docker.sock"
    monkeypatch.setenv("DOCKER_HOST", f"unix://{path}")
    monkeypatch.delenv("DOCKER_CONTEXT", raising=False)
    with FakeHTTP(_engine, unix_socket=str(path)) as server:
        yield server.seen


def no_cli(argv):
    raise AssertionError(f"the CLI was run where the API answers: {argv}")


def test_the_api_answers_and_no_cli_is_run(engine):
    assert docker_api.engine_info(no_cli, "/usr/bin/docker") == (INFO, None)
    assert docker_api.inspect_image(no_cli, "/usr/bin/docker", "r/x:1") == SEEN
    assert docker_api.inspect_image(no_cli, "/usr/bin/docker", "r/x:missing") is None
    assert docker_api.data_root(no_cli, "/usr/bin/docker") == "/var/lib/docker"
    assert [r["path"] for r in engine] == ["/info", "/images/r/x:1/json", "/images/r/x:missing/json", "/info"]


def test_a_remote_engine_is_asked_through_the_cli_and_its_words_are_kept(monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.5:2376")  # never connected to: the CLI's business
    ran = []

    def cli(argv):
        ran.append(argv)
        if argv[1] == "info":
            return 1, "", "Cannot connect to the Docker daemon at tcp://10.0.0.5:2376. Is the docker daemon running?"
        # What `docker image inspect --format INSPECT_FORMAT` prints of an image without labels: null.
        return 0, json.dumps({k: IMAGE[k] for k in ("Id", "Architecture", "RepoDigests")} | {"Labels": None}), ""

    info, why = docker_api.engine_info(cli, "/usr/bin/docker")
    assert info == {} and why.startswith("/usr/bin/docker info --format: rc 1: Cannot connect to the Docker daemon")
    assert docker_api.inspect_image(cli, "/usr/bin/docker", "r/x:1") == {**SEEN, "Labels": {}}
    assert ran[1] == ["/usr/bin/docker", "image", "inspect", "--format", docker_api.INSPECT_FORMAT, "r/x:1"]
    assert docker_api.data_root(cli, "/usr/bin/docker") == "", "an engine that does not answer has no data root"
    assert docker_api.engine_info(cli, None) == ({}, "docker not found")


@pytest.mark.parametrize("environ", [{"DOCKER_HOST": "ssh://me@spark"}, {"DOCKER_CONTEXT": "spark"},
                                     {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}])
def test_no_socket_this_process_can_use_means_the_cli(environ):
    assert docker_api.socket_path(environ) is None


def test_the_free_space_of_a_data_root_not_made_yet_is_its_nearest_parents(tmp_path):
    import os

    here = os.statvfs(tmp_path)
    assert docker_api.free_bytes(str(tmp_path / "docker" / "overlay2")) == pytest.approx(
        here.f_bavail * here.f_frsize, rel=0.01), "the parent that exists stands for the folder Docker will make"
    assert docker_api.free_bytes(str(tmp_path)) > 0


# Issue 56, item 3: a host moved to the containerd image store keeps the old overlay2 repositories.json, which no
# pull or removal rewrites; the glob of image/*/ watched it, and a converged record outlived a `docker rmi`. /info
# as Docker documents it: a graph driver (Docker 20.10 to 28 by default) and the containerd image store (Docker
# 29's default: "Storage Driver: overlayfs", "driver-type: io.containerd.snapshotter.v1").
GRAPH_DRIVER = {"Driver": "overlay2", "DriverStatus": [["Backing Filesystem", "extfs"], ["Supports d_type", "true"],
                                                       ["Using metacopy", "false"], ["Native Overlay Diff", "true"],
                                                       ["userxattr", "false"]]}
CONTAINERD = {"Driver": "overlayfs", "DriverStatus": [["driver-type", "io.containerd.snapshotter.v1"]]}


def test_the_image_store_docker_says_it_uses_decides_the_one_file_a_converged_pull_watches(tmp_path):
    stale = tmp_path / "image" / "overlay2" / "repositories.json"
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    assert docker_api.image_store(GRAPH_DRIVER) == "overlay2"
    assert docker_api.store_file(str(tmp_path), "overlay2") == str(stale)
    assert docker_api.image_store(CONTAINERD) == "containerd"
    assert docker_api.store_file(str(tmp_path), "containerd") is None, "the stale overlay2 file is never watched"
    assert docker_api.image_store({}) is None and docker_api.store_file(str(tmp_path), None) is None
    assert docker_api.image_store({"Driver": "../../etc"}) is None, "a driver's name is a folder name, checked"

"""A fleet pulling through a pull-through mirror: one upstream fetch per layer, whatever the number of hosts.

Real parts: an upstream registry and a mirror (Debian's docker-registry, the
second in distribution's proxy mode), the real Docker engine pulling through
spark_image_pull as a host does. Each "host" starts without the image (it is
removed between pulls, as on a fresh box).
"""

from __future__ import annotations

import itertools
import json
import subprocess
import urllib.request

import pytest
from oci_push import push
from registries import Registry, free_port

from conftest import pull_one

pytestmark = pytest.mark.testbed
HOSTS = 3


@pytest.fixture
def upstream_and_mirror(tmp_path):
    upstream = Registry(tmp_path, free_port())
    mirror = Registry(tmp_path, free_port(), proxy=upstream.url)
    yield upstream, mirror
    mirror.stop()
    upstream.stop()


def test_n_hosts_through_the_mirror_fetch_each_layer_from_upstream_once(upstream_and_mirror, tmp_path):
    upstream, mirror = upstream_and_mirror
    pushed = push(upstream.url, "nvidia/pytorch:25.11-py3", ["arm64", "amd64"], "oci", seed="mirror")
    arm64 = pushed["platforms"]["arm64"]
    request = urllib.request.Request(f"{upstream.url}/v2/nvidia/pytorch/manifests/{arm64}",
                                     headers={"Accept": "application/vnd.oci.image.manifest.v1+json"})
    manifest = json.loads(urllib.request.urlopen(request).read())
    blobs = [manifest["config"]["digest"]] + [layer["digest"] for layer in manifest["layers"]]
    repository = f"{mirror.host}/nvidia/pytorch"
    def upstream_blob_gets() -> dict[str, int]:
        return {blob: upstream.requests("GET", f"/v2/nvidia/pytorch/blobs/{blob}") for blob in blobs}

    counts = [upstream_blob_gets()]
    try:
        for host in range(HOSTS):
            subprocess.run(["docker", "image", "rm", "-f", f"{repository}@{pushed['digest']}"], capture_output=True,
                           check=False)
            result = pull_one({"repository": repository, "digest": pushed["digest"],
                               "record": str(tmp_path / "pulled-images.json")})
            assert not result["failed"], result.get("msg")
            assert result["pulled"] is True, f"host {host} pulled nothing"
            assert result["ref"] == f"{repository}@{pushed['digest']}"
            counts.append(upstream_blob_gets())
    finally:
        subprocess.run(["docker", "image", "rm", "-f", f"{repository}@{pushed['digest']}"], capture_output=True,
                       check=False)
    per_host = [{blob: after[blob] - before[blob] for blob in blobs} for before, after in itertools.pairwise(counts)]
    # The cold mirror fetches each blob from upstream on the first host's pull (distribution 2.8's proxy
    # fetches a missing blob twice: once to store it, once to stream it); every further host costs upstream
    # nothing, so the upstream traffic does not grow with the fleet.
    assert all(1 <= n <= 2 for n in per_host[0].values()), per_host[0]
    assert per_host[1:] == [dict.fromkeys(blobs, 0)] * (HOSTS - 1), per_host
    served = sum(mirror.requests("GET", f"/v2/nvidia/pytorch/blobs/{blob}") for blob in blobs)
    assert served == HOSTS * len(blobs), "while the mirror served every host"
    # Same digests on the mirror: the lock (resolved upstream) is the truth for pulls through it.
    index = urllib.request.Request(f"{mirror.url}/v2/nvidia/pytorch/manifests/{pushed['digest']}",
                                   headers={"Accept": "application/vnd.oci.image.index.v1+json"}, method="HEAD")
    assert urllib.request.urlopen(index).headers["Docker-Content-Digest"] == pushed["digest"]

"""Push small stand-in images to a registry over the distribution API.

NVIDIA's and Unsloth's images cannot be pulled here, so the lab registry
holds stand-ins under their real repository names. Each is a real,
pullable image: a gzipped layer with one file, a config for its platform,
a manifest per platform and, for several platforms, an OCI index or a
Docker manifest list - the shapes nvcr.io and Docker Hub serve. Content is
deterministic for a given seed, so the same push gives the same digests and
a new seed moves the tag.

    python testbed/oci_push.py http://127.0.0.1:5000 nvidia/pytorch:25.11-py3 [--platforms arm64,amd64]
        [--list-type oci|docker|single] [--seed TEXT] [--user U --password P]

Prints the digests as JSON: {"digest": ..., "platforms": {"arm64": ..., ...}}.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import json
import sys
import tarfile
import urllib.error
import urllib.request

OCI = {
    "index": "application/vnd.oci.image.index.v1+json",
    "manifest": "application/vnd.oci.image.manifest.v1+json",
    "config": "application/vnd.oci.image.config.v1+json",
    "layer": "application/vnd.oci.image.layer.v1.tar+gzip",
}
DOCKER = {
    "index": "application/vnd.docker.distribution.manifest.list.v2+json",
    "manifest": "application/vnd.docker.distribution.manifest.v2+json",
    "config": "application/vnd.docker.container.image.v1+json",
    "layer": "application/vnd.docker.image.rootfs.diff.tar.gzip",
}


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Pusher:
    def __init__(self, base: str, repository: str, user: str | None = None, password: str | None = None,
                 token: str | None = None) -> None:
        self.base = base.rstrip("/")
        self.repository = repository
        self.headers = {}
        if token:
            self.headers["Authorization"] = f"Bearer {token}"
        elif user:
            self.headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def _call(self, method: str, url: str, data: bytes | None = None, headers: dict | None = None):
        request = urllib.request.Request(url, data=data, method=method, headers={**self.headers, **(headers or {})})
        return urllib.request.urlopen(request, timeout=30)

    def blob(self, data: bytes) -> str:
        digest = sha(data)
        try:
            self._call("HEAD", f"{self.base}/v2/{self.repository}/blobs/{digest}")
            return digest
        except urllib.error.HTTPError as exc:
            if exc.code != 404:
                raise
        response = self._call("POST", f"{self.base}/v2/{self.repository}/blobs/uploads/", b"")
        location = response.headers["Location"]
        if location.startswith("/"):
            location = self.base + location
        sep = "&" if "?" in location else "?"
        self._call("PUT", f"{location}{sep}digest={digest}", data,
                   {"Content-Type": "application/octet-stream"})
        return digest

    def manifest(self, reference: str, body: bytes, media_type: str) -> str:
        self._call("PUT", f"{self.base}/v2/{self.repository}/manifests/{reference}", body,
                   {"Content-Type": media_type})
        return sha(body)


def layer(text: str) -> tuple[bytes, bytes]:
    """(gzipped tar, uncompressed tar) holding /sparkfleet-standin.txt, byte-for-byte reproducible."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        data = text.encode()
        info = tarfile.TarInfo("sparkfleet-standin.txt")
        info.size, info.mtime, info.mode = len(data), 0, 0o644
        tar.addfile(info, io.BytesIO(data))
    plain = raw.getvalue()
    return gzip.compress(plain, mtime=0), plain


def push_platform(pusher: Pusher, types: dict, arch: str, label: str) -> tuple[str, int, str]:
    gz, plain = layer(f"sparkfleet stand-in for {label} ({arch}); not the vendor's image\n")
    config = json.dumps({
        "architecture": arch, "os": "linux",
        "config": {"Cmd": ["/bin/sh"], "Labels": {"io.sparkfleet.standin": label}},
        "rootfs": {"type": "layers", "diff_ids": [sha(plain)]},
    }, sort_keys=True).encode()
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": types["manifest"],
        "config": {"mediaType": types["config"], "digest": pusher.blob(config), "size": len(config)},
        "layers": [{"mediaType": types["layer"], "digest": pusher.blob(gz), "size": len(gz)}],
    }, sort_keys=True).encode()
    digest = pusher.manifest(sha(manifest), manifest, types["manifest"])
    return digest, len(manifest), types["manifest"]


def push(base: str, reference: str, platforms: list[str], list_type: str = "oci", seed: str = "",
         user: str | None = None, password: str | None = None, token: str | None = None) -> dict:
    repository, _, tag = reference.rpartition(":")
    types = DOCKER if list_type == "docker" else OCI
    pusher = Pusher(base, repository, user, password, token)
    label = f"{reference} {seed}".strip()
    pushed = {arch: push_platform(pusher, types, arch, label) for arch in platforms}
    if list_type == "single":
        (digest, _size, media_type), = pushed.values()
        body = pusher._call("GET", f"{base}/v2/{repository}/manifests/{digest}",
                            headers={"Accept": media_type}).read()
        pusher.manifest(tag, body, media_type)
        return {"digest": digest, "platforms": {arch: d for arch, (d, _, _) in pushed.items()}}
    index = json.dumps({
        "schemaVersion": 2, "mediaType": types["index"],
        "manifests": [{"mediaType": mt, "digest": d, "size": size, "platform": {"os": "linux", "architecture": arch}}
                      for arch, (d, size, mt) in pushed.items()],
    }, sort_keys=True).encode()
    return {"digest": pusher.manifest(tag, index, types["index"]),
            "platforms": {arch: d for arch, (d, _, _) in pushed.items()}}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("registry", help="base URL, e.g. http://127.0.0.1:5000")
    parser.add_argument("reference", help="repository:tag, e.g. nvidia/pytorch:25.11-py3")
    parser.add_argument("--platforms", default="arm64,amd64")
    parser.add_argument("--list-type", choices=["oci", "docker", "single"], default="oci")
    parser.add_argument("--seed", default="")
    parser.add_argument("--user")
    parser.add_argument("--password")
    args = parser.parse_args(argv)
    result = push(args.registry, args.reference, args.platforms.split(","), args.list_type, args.seed,
                  args.user, args.password)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

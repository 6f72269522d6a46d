# Copyright: sparkfleet contributors
# Apache License 2.0
"""Pure parts of the OCI distribution protocol: references, challenges, manifests, platforms.

No network here: the registry client is _registry.py; the lock entry built from what it resolves is _pinned.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _validate as validate

DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
# All four, always: a registry answers a list the client did not accept with
# the linux/amd64 manifest (and its digest), an OCI index with 404.
ACCEPT = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})

# One definition of each, in _validate.py.
_DIGEST = validate.DIGEST
_TAG = validate.TAG
_COMPONENT = validate.REPOSITORY_COMPONENT


class BadReference(ValueError):
    """An image reference that cannot be parsed; the message says why."""


@dataclass(frozen=True)
class Reference:
    registry: str  # as written by users: docker.io, nvcr.io, 127.0.0.1:5000
    repository: str  # library/ubuntu, nvidia/pytorch
    tag: str | None = None
    digest: str | None = None

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.registry == DOCKER_HUB else self.registry


def is_digest(value: str | None) -> bool:
    return bool(value) and bool(_DIGEST.match(value))


def parse_reference(text: str) -> Reference:
    """Parse registry/namespace/name:tag@digest with Docker Hub's defaults.

    'ubuntu' is docker.io/library/ubuntu:latest; the first component is a
    registry when it has a '.' or ':' or is 'localhost'.
    """
    ref = text.strip()
    if not ref or any(c.isspace() for c in ref):
        raise BadReference(f"{text!r} is not an image reference (empty or contains spaces)")
    digest = None
    if "@" in ref:
        ref, digest = ref.split("@", 1)
        if not is_digest(digest):
            raise BadReference(f"{text!r}: digest {digest!r} is not sha256: followed by 64 lowercase hex digits")
    tag = None
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        ref, tag = ref.rsplit(":", 1)
        if not _TAG.match(tag):
            raise BadReference(f"{text!r}: tag {tag!r} is not a valid tag")
    parts = ref.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        registry, path = parts[0], parts[1:]
    else:
        registry, path = DOCKER_HUB, parts
    if registry in {"index.docker.io", "registry-1.docker.io"}:
        registry = DOCKER_HUB
    if registry == DOCKER_HUB and len(path) == 1:
        path = ["library", *path]
    if not path or not all(_COMPONENT.match(p) for p in path):
        raise BadReference(f"{text!r}: repository {'/'.join(path)!r} must be lowercase components "
                           f"separated by '/'")
    if tag is None and digest is None:
        tag = "latest"
    return Reference(registry, "/".join(path), tag, digest)


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """Parse a WWW-Authenticate header: ('bearer', {'realm': ..., 'service': ..., 'scope': ...}).

    Generic: nvcr.io sends a realm and no service, values may be quoted and
    contain commas (scope="repository:a:pull,push").
    """
    header = header.strip()
    scheme, _unused, rest = header.partition(" ")
    params: dict[str, str] = {}
    for match in re.finditer(r'([A-Za-z_][A-Za-z0-9_-]*)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^,\s]*))', rest):
        value = match.group(2) if match.group(2) is not None else match.group(3)
        params[match.group(1).lower()] = re.sub(r"\\(.)", r"\1", value)
    return scheme.lower(), params


def select_platform(index: dict, architecture: str = "arm64", os_name: str = "linux") -> tuple[str | None, list[str]]:
    """The digest of the os/architecture manifest in an index, and every platform listed."""
    found = None
    platforms = []
    for entry in index.get("manifests") or []:
        platform = entry.get("platform") or {}
        label = "/".join(p for p in (platform.get("os"), platform.get("architecture"), platform.get("variant")) if p)
        if label:
            platforms.append(label)
        if found is None and platform.get("os") == os_name and platform.get("architecture") == architecture:
            found = entry.get("digest")
    return found, platforms


# The one architecture map: a machine's architecture as uname -m says it -> Debian's name for it (an apt
# repository's directory) and the OCI platform its images are pulled for (linux/<Debian's name>).
DEBIAN_ARCHITECTURES = {"aarch64": "arm64", "x86_64": "amd64"}
PLATFORMS = {name: f"linux/{debian}" for machine, debian in DEBIAN_ARCHITECTURES.items() for name in (machine, debian)}


def debian_architecture(arch: str | None) -> str | None:
    """Debian's name for a machine's architecture (uname -m); None for one sparkfleet does not know."""
    return DEBIAN_ARCHITECTURES.get(arch or "")


def host_platform(arch: str | None) -> str:
    """The platform a host pulls and builds for; a Spark's (linux/arm64) when the architecture is not known."""
    return PLATFORMS.get(arch or "", "linux/arm64")

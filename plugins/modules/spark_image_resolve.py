#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Resolve image tags to digests over the OCI distribution API (controller side)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_image_resolve
short_description: Resolve image tags to index and per-platform digests over the OCI distribution API
description:
  - Speaks the distribution API itself with Ansible's HTTP helpers; run it
    once per run on the controller (C(run_once), C(delegate_to localhost)),
    not once per host.
  - Follows a 401 C(WWW-Authenticate) challenge (Bearer, as nvcr.io and Docker
    Hub use, or Basic), anonymously or with credentials (nvcr.io takes user
    C($oauthtoken) and an NGC API key as password).
  - Resolves a tag with a HEAD request that accepts all four manifest types
    (OCI index, Docker manifest list, OCI manifest, Docker manifest v2), so
    the pin is the index's digest, never a single-platform manifest a
    registry falls back to. When HEAD gives no C(Docker-Content-Digest), the
    body is fetched and hashed.
  - For an index, checks that a linux/arm64 manifest exists (O(architecture)) and
    returns the manifest digest of each platform the index lists (C(digests), keyed
    by platform; an attestation's C(unknown/unknown) left out); a single manifest
    must itself be linux/arm64, and is its own platform's digest.
  - O(images[].tags) is an ordered list of blessed tags, newest first; the
    newest one that resolves (with arm64) is used and a fallback is recorded
    (wanted, used, why).
  - Transient failures (connection refused, timeouts, 429, 5xx) are retried
    with backoff, or after the registry's C(Retry-After) when it sends one (up to
    O(retry_after_max)); 401, 404 and a missing arm64 variant are not.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes, sparkfleet.spark.sparkfleet_read_only]
options:
  images:
    description: Images to resolve.
    type: list
    elements: dict
    required: true
    suboptions:
      name:
        description: Short name (the lock's key), e.g. C(ngc).
        type: str
        required: true
      registry:
        description: Registry host, e.g. C(nvcr.io), C(docker.io).
        type: str
        required: true
      repository:
        description: Repository, e.g. C(nvidia/pytorch).
        type: str
        required: true
      tags:
        description: Blessed tags, newest first.
        type: list
        elements: str
        required: true
      launcher:
        description: Not used here; accepted so that spark_images' catalog can be passed as it is.
        type: str
  credentials:
    description:
      - Per registry host, C(username) and C(password) (e.g. C($oauthtoken)
        and an NGC API key). Never logged.
    type: dict
    default: {}
  plain_http:
    description:
      - Registries spoken to over plain HTTP. Loopback registries
        (127.0.0.0/8, localhost) always are, as Docker treats them.
    type: list
    elements: str
    default: []
  architecture:
    description: The platform the hosts run.
    type: str
    default: arm64
  timeout:
    description: Seconds per request.
    type: int
    default: 30
  retry_after_max:
    description:
      - Longest C(Retry-After) (seconds) a registry's 429 or 503 is waited out for; a longer one fails at once
        with what the registry asked, rather than holding the run.
    type: int
    default: 60
  retries:
    description: Attempts for a transient failure.
    type: int
    default: 3
"""

EXAMPLES = r"""
- name: Resolve the blessed tags once for the fleet
  sparkfleet.spark.spark_image_resolve:
    images:
      - {name: ngc, registry: nvcr.io, repository: nvidia/pytorch, tags: [25.11-py3, 25.09-py3]}
      - {name: unsloth, registry: docker.io, repository: unsloth/unsloth, tags: [dgxspark-latest]}
    credentials:
      nvcr.io: {username: "$oauthtoken", password: "{{ ngc_api_key }}"}
  run_once: true
  delegate_to: localhost
  no_log: true
"""

RETURN = r"""
images:
  description: One entry per image, in the order given.
  returned: success
  type: list
  elements: dict
  sample:
    - name: ngc
      requested: nvcr.io/nvidia/pytorch:25.11-py3
      registry: nvcr.io
      repository: nvidia/pytorch
      tag: 25.09-py3
      index_digest: sha256:0123...
      digests: {linux/amd64: "sha256:89ab...", linux/arm64: "sha256:4567..."}
      media_type: application/vnd.oci.image.index.v1+json
      platforms: [linux/amd64, linux/arm64]
      sizes: {linux/amd64: 9876543210, linux/arm64: 9123456789}
      fallback: {wanted: 25.11-py3, used: 25.09-py3, reasons: ["25.11-py3: 404 manifest unknown"]}
      resolved_at: "2026-12-04T08:00:00+00:00"
requests:
  description: HTTP requests made, per registry (to show that each tag is resolved once).
  returned: success
  type: dict
"""

import datetime

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._lock import fallback_reason
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._oci import BadReference, parse_reference
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._registry import (
    Registry,
    RegistryError,
    resolve_tag,
)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "images": {"type": "list", "elements": "dict", "required": True, "options": {
                "name": {"type": "str", "required": True},
                "registry": {"type": "str", "required": True},
                "repository": {"type": "str", "required": True},
                "tags": {"type": "list", "elements": "str", "required": True},
                "launcher": {"type": "str"},
            }},
            "credentials": {"type": "dict", "default": {}, "no_log": True},
            "plain_http": {"type": "list", "elements": "str", "default": []},
            "architecture": {"type": "str", "default": "arm64"},
            "timeout": {"type": "int", "default": 30},
            "retries": {"type": "int", "default": 3},
            "retry_after_max": {"type": "int", "default": 60},
        },
        supports_check_mode=True,
    )
    registries: dict[str, Registry] = {}
    resolved = []
    # When the tags were resolved (the lock's resolved_at of a digest that moved, and the launchers' comment).
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()
    for image in module.params["images"]:
        host = image["registry"]
        try:
            refs = [parse_reference(f"{host}/{image['repository']}:{tag}") for tag in image["tags"]]
        except BadReference as exc:
            module.fail_json(msg=f"image '{image['name']}': {exc}. Fix it in spark_images_catalog.")
        if not refs:
            module.fail_json(msg=f"image '{image['name']}' lists no tags; expected blessed tags, newest first.")
        registry = registries.setdefault(host, Registry(
            host, refs[0].api_host, credentials=module.params["credentials"], plain_http=module.params["plain_http"],
            timeout=module.params["timeout"], retries=module.params["retries"],
            retry_after_max=module.params["retry_after_max"]))
        wanted = image["tags"][0]
        reasons: list[str] = []
        found = None
        for tag in image["tags"]:
            try:
                found = resolve_tag(registry, image["repository"], tag, module.params["architecture"])
                break
            except RegistryError as exc:
                reasons.append(fallback_reason(str(exc)))  # a line the lock accepts
                if exc.transient:  # the registry is down: an older tag is no answer to that
                    break
        if found is None:
            module.fail_json(msg=f"no tag of {host}/{image['repository']} could be resolved: "
                                 + " | ".join(reasons) + ". The lock was not changed.", reasons=reasons)
        resolved.append({
            "name": image["name"], "requested": f"{host}/{image['repository']}:{wanted}", "registry": host,
            "repository": image["repository"], **found,
            "fallback": (None if found["tag"] == wanted
                         else {"wanted": wanted, "used": found["tag"], "reasons": reasons}),
            "resolved_at": now,
        })
    module.exit_json(changed=False, images=resolved,
                     requests={host: reg.requests for host, reg in registries.items()})


if __name__ == "__main__":
    main()

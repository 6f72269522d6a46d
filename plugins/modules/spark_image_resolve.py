#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Resolve image tags to digests over the OCI distribution API (controller side)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_image_resolve
short_description: Resolve image tags to index and linux/arm64 digests over the OCI distribution API
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
  - For an index, checks that a linux/arm64 manifest exists and returns its
    digest too; a single manifest must itself be linux/arm64.
  - O(images[].tags) is an ordered list of blessed tags, newest first; the
    newest one that resolves (with arm64) is used and a fallback is recorded
    (wanted, used, why).
  - Transient failures (connection refused, timeouts, 429, 5xx) are retried
    with backoff, or after the registry's C(Retry-After) when it sends one (up to
    O(retry_after_max)); 401, 404 and a missing arm64 variant are not.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_read_only]
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
      arm64_digest: sha256:4567...
      media_type: application/vnd.oci.image.index.v1+json
      platforms: [linux/amd64, linux/arm64]
      sizes: {linux/amd64: 9876543210, linux/arm64: 9123456789}
      fallback: {wanted: 25.11-py3, used: 25.09-py3, reasons: ["25.11-py3: 404 manifest unknown"]}
requests:
  description: HTTP requests made, per registry (to show that each tag is resolved once).
  returned: success
  type: dict
"""

import base64
import datetime
import email.utils
import hashlib
import json
import time
from urllib.parse import urlencode, urlsplit

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.urls import open_url
from ansible_collections.sparkfleet.spark.plugins.module_utils._http import (
    MAX_REDIRECTS,
    REDIRECTS,
    UnsafeRedirect,
    follow,
    is_loopback,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils._oci import (
    ACCEPT,
    INDEX_TYPES,
    BadReference,
    parse_challenge,
    parse_reference,
    select_platform,
)

_TRANSIENT = {429, 500, 502, 503, 504}


def retry_after(headers: dict) -> float | None:
    """Seconds a Retry-After header asks for (delta-seconds or an HTTP date); None when absent or unreadable."""
    value = next((v for k, v in (headers or {}).items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    value = str(value).strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, (when - datetime.datetime.now(datetime.UTC)).total_seconds())


class RegistryError(Exception):
    """A failure to report: what registry, what reference, what came back."""

    def __init__(self, message: str, transient: bool = False) -> None:
        super().__init__(message)
        self.transient = transient


class Registry:
    def __init__(self, module: AnsibleModule, host: str, api_host: str) -> None:
        self.module = module
        self.host = host
        self.api_host = api_host
        self.scheme = "http" if is_loopback(host) or host in module.params["plain_http"] else "https"
        creds = (module.params["credentials"] or {}).get(host) or {}
        self.username, self.password = creds.get("username"), creds.get("password")
        self.auth: dict[str, str] = {}  # repository -> Authorization (bearer tokens are per repository)
        self.requests = 0

    def _once(self, method: str, url: str, headers: dict) -> tuple[int, dict, bytes]:
        """One request, redirects followed here (module_utils/_http.follow): the Authorization header goes only
        to the scheme, host and port it was given for; https -> http is refused."""
        for _hop in range(MAX_REDIRECTS + 1):
            self.requests += 1
            try:
                response = open_url(url, method=method, headers=headers, timeout=self.module.params["timeout"],
                                    follow_redirects="none", validate_certs=True)
                return response.status, dict(response.headers), response.read() if method != "HEAD" else b""
            except HTTPError as exc:
                body = exc.read() if hasattr(exc, "read") else b""
                answer = exc.code, dict(exc.headers or {}), body or b""
            except (URLError, OSError, TimeoutError) as exc:
                reason = getattr(exc, "reason", exc)
                raise RegistryError(f"cannot reach {self.scheme}://{self.api_host} ({reason})",
                                    transient=True) from exc
            location = next((v for k, v in answer[1].items() if k.lower() == "location"), None)
            if answer[0] not in REDIRECTS or not location:
                return answer
            try:
                url, keep = follow(url, location)
            except UnsafeRedirect as exc:
                raise RegistryError(f"{self.host}: {exc}") from None
            if not keep:
                headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        raise RegistryError(f"{self.host}: more than {MAX_REDIRECTS} redirects for {url}")

    def _retrying(self, method: str, url: str, headers: dict) -> tuple[int, dict, bytes]:
        attempts = max(1, self.module.params["retries"])
        for attempt in range(attempts):
            wait = 0.5 * 2 ** attempt
            try:
                status, resp_headers, body = self._once(method, url, headers)
            except RegistryError:
                if attempt == attempts - 1:
                    raise
            else:
                if status not in _TRANSIENT or attempt == attempts - 1:
                    return status, resp_headers, body
                asked = retry_after(resp_headers)
                if asked is not None:
                    limit = self.module.params["retry_after_max"]
                    if asked > limit:
                        raise RegistryError(
                            f"{self.host} rate-limits this client (HTTP {status}) and asks to wait {asked:.0f} s, "
                            f"longer than retry_after_max ({limit} s). Try again later, log in (credentials raise "
                            "Docker Hub's limit) or resolve through a mirror")
                    wait = asked
            time.sleep(wait)
        raise AssertionError("unreachable")

    def _authorize(self, challenge: str, repository: str) -> str:
        scheme, params = parse_challenge(challenge)
        if scheme == "basic":
            if not self.username:
                raise RegistryError(f"{self.host} asks for a username and password (Basic auth); set them in "
                                    f"spark_images_registry_credentials['{self.host}']")
            raw = f"{self.username}:{self.password}".encode()
            return "Basic " + base64.b64encode(raw).decode()
        if scheme != "bearer" or "realm" not in params:
            raise RegistryError(f"{self.host} sent an authentication challenge this client does not speak: "
                                f"{challenge!r}")
        query = {"scope": params.get("scope") or f"repository:{repository}:pull"}
        if params.get("service"):
            query["service"] = params["service"]
        realm = params["realm"]
        where = urlsplit(realm)
        if self.username and where.scheme != "https" and not is_loopback(where.netloc):
            raise RegistryError(f"{self.host}: its token service {realm} is not https; the credentials for "
                                f"{self.host} are never sent over plain http")
        url = realm + ("&" if "?" in realm else "?") + urlencode(query)
        headers = {}
        if self.username:
            raw = f"{self.username}:{self.password}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(raw).decode()
        status, _unused, body = self._retrying("GET", url, headers)
        if status != 200:
            who = "with the configured credentials" if self.username else "anonymously"
            raise RegistryError(f"{self.host}: the token service {realm} refused a pull token for {repository} "
                                f"{who} (HTTP {status})")
        try:
            data = json.loads(body)
            token = data.get("token") or data.get("access_token")
        except ValueError:
            token = None
        if not token:
            raise RegistryError(f"{self.host}: the token service {realm} answered without a token")
        return f"Bearer {token}"

    def request(self, method: str, repository: str, path: str, accept: str = ACCEPT) -> tuple[int, dict, bytes]:
        url = f"{self.scheme}://{self.api_host}/v2/{repository}/{path}"
        headers = {"Accept": accept}
        if repository in self.auth:
            headers["Authorization"] = self.auth[repository]
        status, resp_headers, body = self._retrying(method, url, headers)
        if status == 401 and repository not in self.auth:
            challenge = _header(resp_headers, "WWW-Authenticate")
            if not challenge:
                raise RegistryError(f"{self.host}: 401 without a WWW-Authenticate challenge for {repository}")
            self.auth[repository] = headers["Authorization"] = self._authorize(challenge, repository)
            status, resp_headers, body = self._retrying(method, url, headers)
        return status, resp_headers, body


def _header(headers: dict, name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name.lower():
            return value
    return None


def _error_text(status: int, body: bytes) -> str:
    try:
        errors = json.loads(body).get("errors") or []
        detail = "; ".join(e.get("code", "").lower().replace("_", " ") for e in errors)
    except (ValueError, AttributeError):
        detail = ""
    return f"{status}{' ' + detail if detail else ''}"


def resolve_tag(module: AnsibleModule, registry: Registry, repository: str, tag: str) -> dict:
    ref = f"{registry.host}/{repository}:{tag}"
    status, headers, _unused = registry.request("HEAD", repository, f"manifests/{tag}")
    if status == 401:
        raise RegistryError(f"{ref}: 401 unauthorized after authenticating; check the credentials for {registry.host}")
    if status != 200:
        _unused, _unused, body = registry.request("GET", repository, f"manifests/{tag}")
        raise RegistryError(f"{ref}: {_error_text(status, body)}", transient=status in _TRANSIENT)
    media_type = (_header(headers, "Content-Type") or "").split(";")[0].strip()
    digest = _header(headers, "Docker-Content-Digest")
    body = None
    if not digest or media_type in INDEX_TYPES or not media_type:
        status, headers, body = registry.request("GET", repository, f"manifests/{tag}")
        if status != 200:
            raise RegistryError(f"{ref}: {_error_text(status, body)}")
        media_type = (_header(headers, "Content-Type") or media_type).split(";")[0].strip()
        computed = "sha256:" + hashlib.sha256(body).hexdigest()
        if digest and digest != computed:
            raise RegistryError(f"{ref}: Docker-Content-Digest {digest} does not match the body's {computed}")
        digest = computed
    arch = module.params["architecture"]
    if media_type in INDEX_TYPES:
        try:
            index = json.loads(body)
        except ValueError as exc:
            raise RegistryError(f"{ref}: the index is not JSON ({exc})") from exc
        platform_digest, platforms = select_platform(index, arch)
        if not platform_digest:
            raise RegistryError(f"{ref}: no linux/{arch} variant (the index lists {', '.join(platforms) or 'none'})")
        sizes = {}
        for entry in index.get("manifests") or []:
            platform = entry.get("platform") or {}
            label = "/".join(p for p in (platform.get("os"), platform.get("architecture"), platform.get("variant"))
                             if p)
            if label and label not in sizes and entry.get("digest"):
                sizes[label] = manifest_size(registry, repository, entry["digest"])
    else:
        status, _unused, manifest_body = registry.request("GET", repository, f"manifests/{digest}")
        config_digest = (json.loads(manifest_body).get("config") or {}).get("digest") if status == 200 else None
        status, _unused, config_body = registry.request("GET", repository, f"blobs/{config_digest}", accept="*/*")
        config = json.loads(config_body) if status == 200 else {}
        if config.get("architecture") != arch:
            raise RegistryError(f"{ref}: a single-platform image for {config.get('os')}/{config.get('architecture')}, "
                                f"no linux/{arch} variant")
        platform_digest, platforms = digest, [f"{config.get('os')}/{config.get('architecture')}"]
        sizes = {platforms[0]: manifest_size(registry, repository, digest)}
    return {"tag": tag, "index_digest": digest, "arm64_digest": platform_digest, "media_type": media_type,
            "platforms": platforms, "sizes": {k: v for k, v in sizes.items() if v is not None}}


def manifest_size(registry: Registry, repository: str, digest: str) -> int | None:
    """Bytes a host downloads for one platform's image: its config and layers (compressed), from the manifest."""
    status, _unused, body = registry.request("GET", repository, f"manifests/{digest}")
    if status != 200:
        return None
    try:
        manifest = json.loads(body)
        return int((manifest.get("config") or {}).get("size") or 0) + sum(
            int(layer.get("size") or 0) for layer in manifest.get("layers") or [])
    except (ValueError, TypeError, AttributeError):
        return None


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
    for image in module.params["images"]:
        host = image["registry"]
        try:
            refs = [parse_reference(f"{host}/{image['repository']}:{tag}") for tag in image["tags"]]
        except BadReference as exc:
            module.fail_json(msg=f"image '{image['name']}': {exc}. Fix it in spark_images_catalog.")
        if not refs:
            module.fail_json(msg=f"image '{image['name']}' lists no tags; expected blessed tags, newest first.")
        registry = registries.setdefault(host, Registry(module, host, refs[0].api_host))
        wanted = image["tags"][0]
        reasons: list[str] = []
        found = None
        for tag in image["tags"]:
            try:
                found = resolve_tag(module, registry, image["repository"], tag)
                break
            except RegistryError as exc:
                reasons.append(str(exc))
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
        })
    module.exit_json(changed=False, images=resolved,
                     requests={host: reg.requests for host, reg in registries.items()})


if __name__ == "__main__":
    main()

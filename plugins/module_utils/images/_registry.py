# Copyright: sparkfleet contributors
# Apache License 2.0
"""A client of the OCI distribution API, and what a tag resolves to (spark_image_resolve's, on the controller).

Auth as registries ask for it (a 401's WWW-Authenticate: Bearer with its realm, service and scope, as nvcr.io and
Docker Hub, or Basic), one token per repository; transient failures (connection refused, timeouts, 429, 5xx)
retried with backoff, or after the registry's Retry-After up to a limit; redirects followed by _http's rule (the
Authorization header only to the origin it was given for, never https -> http). Unit-tested against a real HTTP
server on 127.0.0.1 (tests/unit/plugins/module_utils/test_registry.py).
"""

from __future__ import annotations

import base64
import datetime
import email.utils
import hashlib
import json
import os
import re
import time
from urllib.parse import urlencode, urlsplit

from ansible.module_utils.six.moves.urllib.error import HTTPError, URLError
from ansible.module_utils.urls import open_url
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._http import (
    MAX_REDIRECTS,
    REDIRECTS,
    UnsafeRedirect,
    follow,
    is_loopback,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._listeners import listeners
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._oci import (
    ACCEPT,
    INDEX_TYPES,
    parse_challenge,
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


# What this client reads of a registry's answer: manifests and indexes are at most 4 MiB (the distribution spec),
# tokens a few KiB; an error's body only for its first codes.
BODY_MAX = 4 * 2**20
ERROR_BODY_MAX = 64 * 2**10


class Registry:
    """One registry's API: requests authorized as it asks, retried, redirected safely; counted (`requests`)."""

    def __init__(self, host: str, api_host: str, credentials: dict | None = None, plain_http: list | None = None,
                 timeout: int = 30, retries: int = 3, retry_after_max: int = 60) -> None:
        self.host = host
        self.api_host = api_host
        self.scheme = "http" if is_loopback(host) or host in (plain_http or []) else "https"
        creds = (credentials or {}).get(host) or {}
        self.username, self.password = creds.get("username"), creds.get("password")
        self.timeout, self.retries, self.retry_after_max = timeout, retries, retry_after_max
        self.auth: dict[str, str] = {}  # repository -> Authorization (bearer tokens are per repository)
        self.requests = 0

    def _stranger(self, url: str) -> None:
        """A plain-http registry on this machine's loopback is trusted as the owner's own (its digests become the
        lock's, its credentials are sent in the clear), but any local user can bind a free loopback port while the
        owner's registry is down: where a user other than root or this one listens there, nothing is asked."""
        parts = urlsplit(url)
        if parts.scheme != "http" or not is_loopback(parts.netloc):
            return
        uids = [uid for uid in listeners(parts.port or 80) if uid not in (0, os.geteuid())]
        if uids:
            raise RegistryError(
                f"{self.host}: {parts.netloc} on this machine's loopback is served by uid {uids[0]}, not by root or "
                "you: any user can bind a free loopback port while your registry is down, and answer with digests "
                "of their choosing (and receive your credentials). Nothing was asked or sent there; stop what "
                "listens there and run your registry as root (a container's published port is), then run again")

    def _once(self, method: str, url: str, headers: dict) -> tuple[int, dict, bytes]:
        """One request, redirects followed here (module_utils/common/_http.follow): the Authorization header goes only
        to the scheme, host and port it was given for; https -> http is refused; a loopback registry only where
        root or this user listens there (_stranger)."""
        for _hop in range(MAX_REDIRECTS + 1):
            self._stranger(url)
            self.requests += 1
            try:
                response = open_url(url, method=method, headers=headers, timeout=self.timeout,
                                    follow_redirects="none", validate_certs=True)
                return response.status, dict(response.headers), self._bounded(response, url) if method != "HEAD" \
                    else b""
            except HTTPError as exc:
                body = exc.read(ERROR_BODY_MAX) if hasattr(exc, "read") else b""  # its start says why
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

    def _bounded(self, response, url: str) -> bytes:
        """The body, BODY_MAX at most: a manifest, an index or a token is far smaller, and a registry that answers
        without end would otherwise fill the controller's memory."""
        body = response.read(BODY_MAX + 1)
        if len(body) > BODY_MAX:
            raise RegistryError(f"{self.host}: {urlsplit(url).path} answered more than {BODY_MAX // 2**20} MiB, "
                                "where a manifest, an index or a token is a few KiB (the distribution spec's limit "
                                "for a manifest is 4 MiB); nothing was pinned from it")
        return body

    def _retrying(self, method: str, url: str, headers: dict) -> tuple[int, dict, bytes]:
        attempts = max(1, self.retries)
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
                    limit = self.retry_after_max
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
        if self.username and is_loopback(where.netloc) and not is_loopback(self.host):
            # A registry elsewhere that names this machine's loopback as its token service would have the
            # credentials sent to whatever local user listens there.
            raise RegistryError(f"{self.host}: its token service {realm} is on this machine's loopback, which no "
                                f"registry elsewhere serves; the credentials for {self.host} are not sent there")
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


# An error code of the distribution spec (MANIFEST_UNKNOWN, NAME_UNKNOWN, DENIED, TOOMANYREQUESTS, ...): upper-case
# letters and underscores. A code that is not one is a registry's free text, and is not repeated.
_ERROR_CODE = re.compile(r"^[A-Z][A-Z_]{0,63}$")


def _error_text(status: int, body: bytes) -> str:
    """'404 manifest unknown' from a registry's error body: its codes only, each as the spec spells codes (what
    else the body says is the registry's free text, which would reach the lock's fallback reasons)."""
    try:
        errors = json.loads(body).get("errors") or []
        codes = [str(e.get("code", "")) for e in errors if isinstance(e, dict)]
    except (ValueError, AttributeError, TypeError):
        codes = []
    detail = "; ".join(c.lower().replace("_", " ") if _ERROR_CODE.match(c) else "(an error code not of the spec)"
                       for c in codes[:5])
    return f"{status}{' ' + detail if detail else ''}"


def resolve_tag(registry: Registry, repository: str, tag: str, arch: str = "arm64") -> dict:
    """What a tag resolves to: the index's digest (a single manifest's own), the manifest digest of each platform
    (one for linux/`arch` required), the media type, the platforms the index lists and the download size of each;
    RegistryError otherwise."""
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
    if media_type in INDEX_TYPES:
        try:
            index = json.loads(body)
        except ValueError as exc:
            raise RegistryError(f"{ref}: the index is not JSON ({exc})") from exc
        platform_digest, platforms = select_platform(index, arch)
        if not platform_digest:
            raise RegistryError(f"{ref}: no linux/{arch} variant (the index lists {', '.join(platforms) or 'none'})")
        sizes, digests = {}, {}
        for entry in index.get("manifests") or []:
            platform = entry.get("platform") or {}
            label = "/".join(p for p in (platform.get("os"), platform.get("architecture"), platform.get("variant"))
                             if p)
            if label and label not in digests and entry.get("digest") and "unknown" not in label.split("/"):
                digests[label] = entry["digest"]  # an attestation's unknown/unknown is no platform to run
                sizes[label] = manifest_size(registry, repository, entry["digest"])
    else:
        status, _unused, manifest_body = registry.request("GET", repository, f"manifests/{digest}")
        config_digest = (json.loads(manifest_body).get("config") or {}).get("digest") if status == 200 else None
        status, _unused, config_body = registry.request("GET", repository, f"blobs/{config_digest}", accept="*/*")
        config = json.loads(config_body) if status == 200 else {}
        if config.get("architecture") != arch:
            raise RegistryError(f"{ref}: a single-platform image for {config.get('os')}/{config.get('architecture')}, "
                                f"no linux/{arch} variant")
        platforms = [f"{config.get('os')}/{config.get('architecture')}"]
        digests, sizes = {platforms[0]: digest}, {platforms[0]: manifest_size(registry, repository, digest)}
    return {"tag": tag, "index_digest": digest, "digests": digests, "media_type": media_type,
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

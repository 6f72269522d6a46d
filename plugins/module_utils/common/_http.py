# Copyright: sparkfleet contributors
# Apache License 2.0
"""Where a credential may go over HTTP (pure: no network here; the modules do the requests).

A credential (a registry password, a bearer token, GITHUB_TOKEN) is sent only
to the scheme, host and port it was given for: a redirect elsewhere is
followed without it, a redirect from https to http is refused, and plain
http is used only for loopback addresses (127.0.0.0/8, ::1, localhost) or
hosts the user named.
"""

from __future__ import annotations

import ipaddress
from urllib.parse import urljoin, urlsplit

REDIRECTS = {301, 302, 303, 307, 308}
MAX_REDIRECTS = 5


class UnsafeRedirect(Exception):
    """A redirect that would lower the transport's security; str() says where it pointed."""


def host_of(netloc: str) -> str:
    """The host of host[:port] or [v6]:port, without the port."""
    if netloc.startswith("["):
        return netloc[1:].split("]", 1)[0]
    return netloc.rsplit(":", 1)[0] if netloc.count(":") == 1 else netloc


def is_loopback(netloc: str) -> bool:
    """localhost or a loopback address - never a name that merely starts with '127.' (127.corp.example)."""
    host = host_of(netloc).lower().rstrip(".")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme.lower(), (parts.hostname or "").lower(), parts.port or {"http": 80, "https": 443}.get(
        parts.scheme.lower())


def follow(url: str, location: str) -> tuple[str, bool]:
    """(the URL a redirect from `url` to `location` leads to, whether a credential may go along).

    The credential goes only to the same scheme, host and port; https -> http is refused (UnsafeRedirect).
    """
    target = urljoin(url, location)
    old, new = _origin(url), _origin(target)
    if new[0] not in ("http", "https"):
        raise UnsafeRedirect(f"{url} redirected to {target}, which is not http(s)")
    if old[0] == "https" and new[0] == "http":
        raise UnsafeRedirect(f"{url} redirected to plain http ({target}); refused rather than send anything "
                             "over an unencrypted connection")
    return target, new == old

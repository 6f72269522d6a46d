# Copyright: sparkfleet contributors
# Apache License 2.0
"""Where a venv's packages come from: the matrix's indexes with the inventory's replacements, the mirrors,
plain http on loopback only, and the environment that points pip or uv at them."""

from __future__ import annotations

import ipaddress
import urllib.parse

from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._secrets import redact_url


def mirrored(url: str, index_mirrors: dict) -> str:
    """The index URL to use: the mirror configured for the upstream URL, else the URL itself."""
    table = {k.rstrip("/"): v.rstrip("/") for k, v in (index_mirrors or {}).items()}
    return table.get(url.rstrip("/"), url.rstrip("/"))


def step_indexes(step: dict, earlier: list, index_mirrors: dict) -> list[str]:
    """The indexes a step is resolved or installed from: its own (mirrored) first, then each earlier step's once
    (what they installed came from there, and a later step may ask for it again)."""
    indexes = [mirrored(step["index_url"], index_mirrors)]
    return indexes + [url for url in dict.fromkeys(mirrored(e["index_url"], index_mirrors) for e in earlier)
                      if url not in indexes]


# Each installer's names for the indexes it asks (the first, the others, the plain-http hosts it may use) and
# what else it needs to ask them as pip does.
_INDEX_ENV = {"pip": ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", {}),
              # uv's own default stops at the first index that has a package: pip takes the best version any
              # index offers, and the matrix check resolved the set as pip does.
              "uv": ("UV_DEFAULT_INDEX", "UV_INDEX", "UV_INSECURE_HOST", {"UV_INDEX_STRATEGY": "unsafe-best-match"})}


def index_env(indexes: list[str], tool: str = "pip") -> dict:
    """pip's (or uv's: tool) index options as its environment: the first index is PIP_INDEX_URL, the others
    PIP_EXTRA_INDEX_URL, plus PIP_TRUSTED_HOST for a plain-http mirror (pip caches nothing from an untrusted
    http origin, and a rebuild must not fetch a wheel twice).

    In the environment, not the argv: a process's argv is readable by every user of the host (ps,
    /proc/PID/cmdline), its environment only by its owner and root, and an index URL may carry a token.
    """
    if not indexes:  # from a wheelhouse (--no-index): no index at all
        return {}
    first, others, trusted, more = _INDEX_ENV[tool]
    env = {first: indexes[0], **more}
    if indexes[1:]:
        env[others] = " ".join(indexes[1:])
    hosts = [urllib.parse.urlsplit(url).hostname for url in indexes if url.startswith("http://")]
    if hosts:
        env[trusted] = " ".join(dict.fromkeys(h for h in hosts if h))
    return env


def uv_env(indexes: list[str]) -> dict:
    """index_env for `uv pip install` (UV_DEFAULT_INDEX, UV_INDEX, UV_INSECURE_HOST, as pip asks them)."""
    return index_env(indexes, "uv")


def loopback(host: str) -> bool:
    """An address of the host itself (127.0.0.0/8, ::1, localhost): the owner's own, reached by no one else."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def mirrors(matrix: dict, index_mirrors: dict) -> list[str]:
    """The mirrors (spark_venv_index_mirrors) the matrix's steps would be installed from instead of their own
    indexes, each as 'upstream -> mirror' (credentials masked), leaving out mirrors on the host's own loopback.

    A mirror is another party between the index the matrix was verified against and the host: it can serve other
    bytes under the same name and version. Its wheels are trusted only against the hash lock (written by
    `sparkfleet matrix lock` through the same mirrors, then reviewed), so a venv built from one needs the lock. An
    index on the loopback is the owner's own (as a loopback registry is Docker's): no lock is asked of it.
    """
    found = []
    for step in matrix.get("steps") or []:
        url = step.get("index_url") if isinstance(step, dict) else None
        if not isinstance(url, str):
            continue
        used = mirrored(url, index_mirrors)
        if used != url.rstrip("/") and not loopback(urllib.parse.urlsplit(used).hostname or ""):
            found.append(f"{redact_url(url.rstrip('/'))} -> {redact_url(used)}")
    return list(dict.fromkeys(found))


def plain_http_refused(indexes: list[str], allowed: list[str]) -> list[str]:
    """The plain-http indexes pip would be told to trust (PIP_TRUSTED_HOST: no TLS, anyone on the path may swap a
    wheel) that are neither on the loopback nor named in `allowed` (host or host:port, like Docker's insecure
    registries); each as a sentence."""
    refused = []
    for url in dict.fromkeys(indexes):
        parts = urllib.parse.urlsplit(url)
        if parts.scheme != "http":
            continue
        host = parts.hostname or ""
        if loopback(host) or host in allowed or parts.netloc.rpartition("@")[2] in allowed:
            continue
        refused.append(f"{redact_url(url)} is plain http (no TLS: anyone on the path can swap a wheel); use https, "
                       f"or name {parts.netloc.rpartition('@')[2]} in spark_venv_insecure_indexes to accept that, "
                       "with spark_venv_require_hashes so each wheel is checked against the hash lock")
    return refused

# Copyright: sparkfleet contributors
# Apache License 2.0
"""One validator per kind of value that reaches a shell script, a file path or a URL.

Each is checked where it enters (the lock, the catalog, the derived recipes,
the matrix, the inventory's names) and each returns None when the value is
good, or a sentence saying what was found and what is expected; the caller
adds where (the file and the entry) and fails with it. Pure Python.
"""

from __future__ import annotations

import datetime
import re

TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# A registry host: a DNS name or an IPv4 address, an optional port.
REGISTRY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
                      r"(?::[0-9]{1,5})?")
REPOSITORY_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
# A file in a bin directory: a plain name, no path.
LAUNCHER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
# An inventory host name as a file name (spark_state's record of it).
HOST_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:@-]{0,252}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
# A relative directory under the current one: plain components, no '..'.
RELATIVE_DIR = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*(?:/[A-Za-z0-9_][A-Za-z0-9_.-]*)*$")
PLATFORM = re.compile(r"^[a-z0-9]+/[a-z0-9_]+(?:/[a-z0-9]+)?$")
MEDIA_TYPE = re.compile(r"^[a-z0-9][a-z0-9.+-]*/[a-z0-9][a-z0-9.+-]*$")


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _matches(pattern: re.Pattern, value: object, expected: str) -> str | None:
    if isinstance(value, str) and len(value) <= 255 and pattern.fullmatch(value):
        return None
    return f"is {_shown(value)}; expected {expected}"


def tag(value: object) -> str | None:
    return _matches(TAG, value, "an image tag (letters, digits, '_', '.', '-'; 128 at most)")


def digest(value: object) -> str | None:
    return _matches(DIGEST, value, "sha256: and 64 lowercase hex digits")


def registry(value: object) -> str | None:
    return _matches(REGISTRY, value, "a registry host name or address with an optional :port")


def repository(value: object) -> str | None:
    ok = isinstance(value, str) and 0 < len(value) <= 255 and all(
        REPOSITORY_COMPONENT.fullmatch(part) for part in value.split("/"))
    return None if ok else (f"is {_shown(value)}; expected lower-case path components "
                            "(letters, digits, '.', '_', '-') separated by '/'")


def launcher(value: object) -> str | None:
    return _matches(LAUNCHER, value, "a plain file name (letters, digits, '.', '_', '+', '-'), no path")


def host_name(value: object) -> str | None:
    bad = _matches(HOST_NAME, value, "an inventory host name (letters, digits, '.', '_', '-', ':', '@'), no path")
    return bad or (None if value not in (".", "..") else f"is {_shown(value)}; expected a host name, not a path")


def iso_datetime(value: object) -> str | None:
    try:
        datetime.datetime.fromisoformat(str(value))
    except ValueError:
        return f"is {_shown(value)}; expected an ISO 8601 date and time (2026-12-01T04:00:00+00:00)"
    return None if isinstance(value, (str, datetime.datetime)) and "\n" not in str(value) else \
        f"is {_shown(value)}; expected an ISO 8601 date and time"


def env_name(value: object) -> str | None:
    return _matches(ENV_NAME, value, "an environment variable name (letters, digits, '_'; not a digit first)")


def env_value(value: object) -> str | None:
    if isinstance(value, (str, int, float)) and not isinstance(value, bool) and not any(
            c in str(value) for c in "\n\r\0"):
        return None
    return f"is {_shown(value)}; expected a one-line string (no newline or NUL)"


def relative_dir(value: object) -> str | None:
    return _matches(RELATIVE_DIR, value, "a relative directory of plain names ('finetuning', 'work/runs'), "
                                         "no '..', no leading '/'")


def platform(value: object) -> str | None:
    return _matches(PLATFORM, value, "an OS/architecture such as linux/arm64")


def media_type(value: object) -> str | None:
    return _matches(MEDIA_TYPE, value, "a media type such as application/vnd.oci.image.index.v1+json")

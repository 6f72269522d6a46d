# Copyright: sparkfleet contributors
# Apache License 2.0
"""What of a stack matrix and a pip environment is secret, and URLs as they may be shown (tokens masked)."""

from __future__ import annotations

import re
import urllib.parse


def redact_url(url: str) -> str:
    """The URL with its credentials (https://user:TOKEN@host/ or https://TOKEN@host/) masked, for what is shown."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url
    user, _sep, where = parts.netloc.rpartition("@")
    shown = f"{user.split(':', 1)[0]}:***" if ":" in user else "***"
    return urllib.parse.urlunsplit(parts._replace(netloc=f"{shown}@{where}"))


def url_secrets(urls) -> set[str]:
    """The credentials in these URLs (the TOKEN of https://user:TOKEN@host/ or https://TOKEN@host/, and the
    user:TOKEN pair), for a module's no_log_values: Ansible then masks them wherever they would appear in its
    result, the invocation's module_args included (what -vvv, runner's job events and callbacks show)."""
    found = set()
    for url in urls:
        if not isinstance(url, str):
            continue
        netloc = urllib.parse.urlsplit(url).netloc
        if "@" not in netloc:
            continue
        userinfo = netloc.rpartition("@")[0]
        found.add(userinfo)
        for part in (userinfo.split(":", 1)[1] if ":" in userinfo else userinfo,
                     urllib.parse.unquote(userinfo.split(":", 1)[-1])):
            if part:
                found.add(part)
    return found


_SECRET_NAME = re.compile(r"TOKEN|PASSWORD|PASSWD|SECRET|KEY|AUTH|CREDENTIAL", re.I)


def env_secrets(env) -> set[str]:
    """The secrets in an environment given for pip (spark_venv_pip_env): the value of a name that says it is one,
    and the credentials in a URL value (a proxy's); not every value, as a masked short value (a timeout of 30)
    would be masked in every string of the result."""
    if not isinstance(env, dict):
        return set()
    values = {str(v) for k, v in env.items() if _SECRET_NAME.search(str(k)) and str(v)}
    return values | url_secrets(str(v) for v in env.values())


def matrix_secrets(matrix, index_mirrors) -> set[str]:
    """url_secrets of every index a matrix and its index_mirrors name (steps, components, the mirrors' both
    sides); a malformed matrix gives what it has."""
    urls = list(index_mirrors.items()) if isinstance(index_mirrors, dict) else []
    urls = [u for pair in urls for u in pair]
    if isinstance(matrix, dict):
        steps, components = matrix.get("steps"), matrix.get("components")
        entries = (steps if isinstance(steps, list) else []) + (
            list(components.values()) if isinstance(components, dict) else [])
        urls += [entry.get("index_url") for entry in entries if isinstance(entry, dict)]
    return url_secrets(urls)

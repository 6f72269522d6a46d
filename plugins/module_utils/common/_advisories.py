# Copyright: sparkfleet contributors
# Apache License 2.0
"""Upstream advisories (matrix/advisories.yml): validation, age, what they affect, and GitHub's issues API.

Pure rules plus one HTTP client (urllib, injectable opener for tests). The
file is data written by people; nothing here ever edits it.
"""

from __future__ import annotations

import datetime
import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request

from ansible.module_utils.urls import open_url
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._http import (
    MAX_REDIRECTS,
    REDIRECTS,
    UnsafeRedirect,
    follow,
    is_loopback,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import (
    MatrixError,
    aged,
    dated_file_problems,
    normalize,
    parse_date,
)

AFFECT_KINDS = ("image", "digest", "package", "playbook")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class AdvisoryError(Exception):
    """The advisories file or the upstream answer is not usable; str() says what and what to do."""


def validate(data) -> list[str]:
    """Every problem in the file, each naming the field, what was found and what is expected."""
    errors, readable = dated_file_problems(data, "advisories file", "matrix/advisories.yml", "checked_on")
    if not readable:
        return errors
    entries = data.get("advisories")
    if not isinstance(entries, list):
        return [*errors, "advisories is missing; expected a list (it may be empty)"]
    for index, entry in enumerate(entries, 1):
        label = entry.get("id") if isinstance(entry, dict) else repr(entry)
        where = f"advisory {index} ({label})"
        if not isinstance(entry, dict):
            errors.append(f"{where}: expected a mapping with id, url, date, summary, affects, action")
            continue
        for key in ("id", "url", "summary", "action"):
            if not isinstance(entry.get(key), str) or not entry[key].strip():
                errors.append(f"{where}: {key} is {entry.get(key)!r}; expected text")
        try:
            parse_date(entry.get("date"), f"{where}: date")
        except MatrixError as exc:
            errors.append(str(exc))
        affects = entry.get("affects")
        if not isinstance(affects, list) or not affects:
            errors.append(f"{where}: affects is {affects!r}; expected a list of {{kind: value}}, kinds "
                          f"{', '.join(AFFECT_KINDS)}")
            continue
        for affect in affects:
            kinds = list(affect) if isinstance(affect, dict) else []
            if len(kinds) != 1 or kinds[0] not in AFFECT_KINDS or not isinstance(affect[kinds[0]], str):
                errors.append(f"{where}: affects entry {affect!r}; expected one of {', '.join(AFFECT_KINDS)} "
                              "with a string value")
            elif kinds[0] == "digest" and not _DIGEST.match(affect["digest"]):
                errors.append(f"{where}: digest {affect['digest']!r}; expected sha256:<64 hex>")
            elif kinds[0] == "image" and ":" not in affect["image"]:
                errors.append(f"{where}: image {affect['image']!r}; expected repository:tag")
    return errors


def check(data) -> dict:
    errors = validate(data)
    if errors:
        raise AdvisoryError("the advisories file is not valid: " + "; ".join(errors))
    return data


def age(data: dict, today: datetime.date, max_age_days: int) -> dict:
    """How long ago the upstream issues were last reviewed (checked_on), like the matrix's last_verified."""
    found = aged(data["checked_on"], "checked_on", today, max_age_days)
    found["message"] = (
        f"the upstream advisories were last reviewed on {found['checked_on']}, {found['age_days']} days ago (older "
        f"than {max_age_days}): run `sparkfleet advisories check`, record what affects you in matrix/advisories.yml "
        "and set checked_on") if found["stale"] else ""
    return found


def _image_refs(image: dict) -> tuple[str, str | None]:
    return f"{image.get('repository')}:{image.get('tag')}", image.get("digest") or image.get("index_digest")


def _package(spec: str) -> tuple[str, str | None]:
    name, _unused, version = spec.partition("==")
    return normalize(name.strip()), version.strip() or None


def affected(data: dict, images: list[dict] = (), packages: list[str] = (), playbooks: list[str] = ()) -> list[dict]:
    """The advisories that affect what is about to be used, each with what matched.

    images: {repository, tag, digest or index_digest} (the registry is not
    compared: a mirror or an override serves the same repository); packages:
    "name==version" pins; playbooks: names.
    """
    used_images = [_image_refs(i) for i in images]
    used_packages = [_package(p) for p in packages]
    found = []
    for entry in data["advisories"]:
        matched = []
        for affect in entry["affects"]:
            kind, value = next(iter(affect.items()))
            if kind == "image" and any(ref == value for ref, _unused in used_images):
                matched.append(f"image {value}")
            elif kind == "digest" and any(digest == value for _unused, digest in used_images):
                matched.append(f"digest {value}")
            elif kind == "package":
                name, version = _package(value)
                if any(n == name and (version is None or v == version) for n, v in used_packages):
                    matched.append(f"package {value}")
            elif kind == "playbook" and value in playbooks:
                matched.append(f"playbook {value}")
        if matched:
            found.append({"id": entry["id"], "url": entry["url"], "matched": matched, "summary": entry["summary"],
                          "action": entry["action"],
                          "message": f"advisory {entry['id']} affects {', '.join(matched)}: "
                                     f"{entry['summary'].strip()} What to do: {entry['action'].strip()} "
                                     f"({entry['url']})"})
    return found


def next_link(header: str | None) -> str | None:
    """The rel="next" URL of an RFC 8288 Link header (GitHub's pagination), or None."""
    for part in (header or "").split(","):
        match = re.match(r'\s*<([^>]+)>\s*;(.*)$', part)
        if match and re.search(r'rel="?next"?', match.group(2)):
            return match.group(1)
    return None


def _retry_after(headers, now: float) -> float | None:
    """Seconds GitHub asks to wait: Retry-After, or x-ratelimit-reset when the limit is spent."""
    value = headers.get("Retry-After")
    if value is not None and value.strip().isdigit():
        return float(value)
    if headers.get("x-ratelimit-remaining") == "0" and (headers.get("x-ratelimit-reset") or "").isdigit():
        return max(0.0, float(headers["x-ratelimit-reset"]) - now)
    return None


def _open_url(request: urllib.request.Request, timeout: float):
    """Ansible's open_url (its proxy, CA and redirect handling) for a prepared request."""
    headers = dict(request.header_items())
    # Redirects come back as HTTPError and are followed by github_issues (the token only to the API's origin).
    return open_url(request.full_url, headers=headers, http_agent=headers.pop("User-agent", None), timeout=timeout,
                    follow_redirects="none")


def _moved(url: str, location: str, headers: dict) -> tuple[str, dict]:
    """The next URL (a redirect, or the next page a Link header names) and the headers to send there: the token
    only to the same scheme, host and port; https -> http refused."""
    try:
        target, keep = follow(url, location)
    except UnsafeRedirect as exc:
        raise AdvisoryError(f"{exc}. Nothing was changed.") from None
    return target, headers if keep else {k: v for k, v in headers.items() if k.lower() != "authorization"}


def github_issues(api_url: str, repository: str, since: str, token: str | None = None, timeout: float = 20,
                  max_wait: float = 60, max_pages: int = 20, opener=_open_url,
                  sleep=time.sleep, clock=time.time) -> dict:
    """The issues (not pull requests) of `repository` created or updated since `since` (YYYY-MM-DD), all pages.

    A rate limit with a short Retry-After is waited out once per page; a long
    one, an unreachable API or a bad answer raises AdvisoryError saying what
    happened and what to do. The token goes in a header, never in the URL.
    """
    query = urllib.parse.urlencode({"since": f"{since}T00:00:00Z", "state": "all", "per_page": 100,
                                    "sort": "created", "direction": "desc"})
    url: str | None = f"{api_url.rstrip('/')}/repos/{repository}/issues?{query}"
    headers = {"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28",
               "User-Agent": "sparkfleet-advisories"}
    if token:
        where = urllib.parse.urlsplit(api_url)
        if where.scheme != "https" and not is_loopback(where.netloc):
            raise AdvisoryError(f"{api_url} is not https: GITHUB_TOKEN is never sent over plain http. Use the "
                                "https API, or unset GITHUB_TOKEN. Nothing was changed.")
        headers["Authorization"] = f"Bearer {token}"
    issues, pages, waited, hops = [], 0, 0.0, 0
    while url and pages < max_pages:
        redirected = False
        for attempt in (1, 2):
            try:
                with opener(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
                    body = json.loads(response.read().decode("utf-8"))
                    link = response.headers.get("Link")
                break
            except urllib.error.HTTPError as exc:
                location = (exc.headers or {}).get("Location") if exc.code in REDIRECTS else None
                if location and hops < MAX_REDIRECTS:
                    hops += 1
                    url, headers = _moved(url, location, headers)
                    redirected = True
                    break
                wait = _retry_after(exc.headers, clock()) if exc.code in (403, 429) else None
                if wait is None:
                    raise AdvisoryError(f"GitHub answered {exc.code} {exc.reason} for {url}; expected the list of "
                                        f"issues of {repository}") from None
                if attempt == 2 or wait > max_wait:
                    raise AdvisoryError(
                        f"GitHub's API is rate-limited for this client (HTTP {exc.code}); it asks to wait "
                        f"{int(wait)} s. Try again later, or set GITHUB_TOKEN for a higher limit.") from None
                sleep(wait)
                waited += wait
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise AdvisoryError(f"could not reach {api_url} ({reason}); the advisories check needs GitHub's "
                                    "API (opt-in network). Nothing was changed.") from None
            except ValueError as exc:
                raise AdvisoryError(f"{url} did not answer JSON ({exc}); expected GitHub's issues API") from None
        if redirected:
            continue
        if not isinstance(body, list):
            raise AdvisoryError(f"{url} answered {type(body).__name__}; expected a list of issues")
        pages += 1
        issues += [{"number": i.get("number"), "title": i.get("title"), "url": i.get("html_url"),
                    "created_at": i.get("created_at"), "updated_at": i.get("updated_at"), "state": i.get("state")}
                   for i in body if isinstance(i, dict) and "pull_request" not in i]
        following = next_link(link)
        url, headers = _moved(url, following, headers) if following else (None, headers)
    return {"issues": issues, "pages": pages, "waited_s": waited, "truncated": url is not None}

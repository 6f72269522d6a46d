# Copyright: sparkfleet contributors
# Apache License 2.0
"""The pinned image: one model, from the lock to what a host runs. Each of its shapes is made here and nowhere else.

- The lock entry (LOCK_FIELDS, validate_lock): what pin.yml and a refresh write into the inventory
  (group_vars/all/spark_images_lock.yml) from what the registry resolved, and what every run reads.
- The pull request (pull_request): one lock entry made complete for one host - where it pulls from (the registry's
  mirror, when there is one), the digest, the platforms the index has, the size for the host's platform, the
  blessed tags to fall back to, the launcher - and the entry itself. spark_image_pull takes it as it is.
- The pinned record (pinned, derived): what a host runs. spark_image_pull returns one for each image it pulled or
  had, spark_image_build one for each derived image; the role keeps them as spark_images_pinned, which the
  launchers, the verification, the host summary (_fleet_table) and the reports read.

A record is never rebuilt elsewhere (in Jinja, or by joining a module's input back to its result).
"""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.module_utils import _validate as validate
from ansible_collections.sparkfleet.spark.plugins.module_utils._oci import BadReference, parse_reference

# The lock entry's fields, in the order the file is written (its diff is the review).
LOCK_FIELDS = ("requested", "registry", "repository", "tag", "index_digest", "arm64_digest", "media_type",
               "platforms", "sizes", "fallback", "resolved_at", "derived")
# What a pull request carries of its lock entry into the record (the lock's, never the host's).
RECORD_LOCK_FIELDS = ("registry", "repository", "tag", "index_digest", "arm64_digest", "resolved_at", "fallback")


def validate_lock(lock: object, path: str) -> list[str]:
    """Problems with a lock as loaded from YAML, each naming the file and the entry."""
    if lock is None:
        return []
    if not isinstance(lock, dict):
        return [f"{path}: spark_images_lock must be a mapping of image name to entry, found {type(lock).__name__}"]
    problems = []
    for name, entry in lock.items():
        if not isinstance(entry, dict):
            problems.append(f"{path}: entry {name!r} must be a mapping, found {type(entry).__name__}")
            continue
        missing = [f for f in ("registry", "repository", "index_digest", "arm64_digest") if not entry.get(f)]
        if missing:
            problems.append(f"{path}: entry {name!r} lacks {', '.join(missing)}")
        problems += [f"{path}: entry {name!r} {problem}" for problem in _entry_problems(name, entry)]
    return problems


# What each field of a lock entry may hold: every one reaches a launcher (a shell script), a pull or a URL.
_LOCK_CHECKS = {"registry": validate.registry, "repository": validate.repository, "tag": validate.tag,
                "index_digest": validate.digest, "arm64_digest": validate.digest, "media_type": validate.media_type,
                "resolved_at": validate.iso_datetime}


def _entry_problems(name: object, entry: dict) -> list[str]:
    said = [] if validate.launcher(name) is None else [f"name {validate.launcher(name)}"]
    said += [f"{field} {problem}" for field, check in _LOCK_CHECKS.items()
             if entry.get(field) is not None and (problem := check(entry[field]))]
    requested = entry.get("requested")
    if requested is not None:
        try:
            if not isinstance(requested, str) or requested != requested.strip() or len(requested) > 255:
                raise BadReference(f"{requested!r} is not an image reference")
            parse_reference(requested)
        except BadReference as exc:
            said.append(f"requested: {exc}")
    platforms = entry.get("platforms") or []
    said += [f"platforms {problem}" for p in (platforms if isinstance(platforms, list) else [platforms])
             if (problem := validate.platform(p))]
    sizes = entry.get("sizes") or {}
    said += [f"sizes {p!r} is {v!r}; expected a platform and a size in bytes"
             for p, v in (sizes.items() if isinstance(sizes, dict) else [("sizes", sizes)])
             if validate.platform(p) or not isinstance(v, int) or isinstance(v, bool)]
    derived = entry.get("derived") or {}
    for child, recipe in derived.items() if isinstance(derived, dict) else [("derived", derived)]:
        said += [f"derived name {problem}" for problem in [validate.launcher(child)] if problem]
        if not isinstance(recipe, dict):
            said.append(f"derived.{child} is {recipe!r}; expected a mapping with recipe and tag")
            continue
        said += [f"derived.{child}.recipe {problem}" for problem in [validate.digest(recipe.get("recipe"))] if problem]
        repo, colon, tag = str(recipe.get("tag")).rpartition(":")
        if not colon or validate.repository(repo) or validate.tag(tag):
            said.append(f"derived.{child}.tag is {recipe.get('tag')!r}; expected sparkfleet/<name>:<recipe hash>")
    return said


def lock_entry(resolved: dict) -> dict:
    """The lock's entry for an image as the registry resolved it (spark_image_resolve's result), in field order;
    its derived recipes are added by the writer."""
    return {k: resolved.get(k) for k in LOCK_FIELDS if k not in ("resolved_at", "derived")}


def pull_repository(entry: dict, mirrors: dict | None) -> str:
    """Where a host pulls a locked image from: its registry's pull-through mirror when one is configured.

    Digests are the same on a mirror, so the lock (resolved against the registry itself) stays the truth.
    Every path that pulls or runs a locked image goes through here, so the entry and the mirror are checked
    here, as validate_lock checks them (a value such as '--volume=/:/host' never reaches docker's argv): a
    ValueError says what was found and what is expected.
    """
    name = entry.get("name", "?") if isinstance(entry, dict) else "?"
    if not isinstance(entry, dict):
        raise ValueError(f"spark_images_lock entry {name!r}: must be a mapping, found {type(entry).__name__}")
    missing = [f for f in ("registry", "repository") if not entry.get(f)]
    problems = [f"lacks {', '.join(missing)}"] if missing else []
    problems += _entry_problems("image" if name == "?" else name, entry)
    registry = entry.get("registry")
    mirror = (mirrors or {}).get(registry) if isinstance(registry, str) else None
    if mirror is not None and validate.registry(mirror):
        problems.append(f"mirror of {registry} in spark_images_mirrors {validate.registry(mirror)}")
    if problems:
        raise ValueError(f"spark_images_lock entry {name!r}: {'; '.join(problems)}. Run sparkfleet pin to write "
                         "the lock again, and set spark_images_mirrors to registry host names")
    return f"{mirror or registry}/{entry['repository']}"


def blessed_local(entry: dict, tags: list[str], mirrors: dict | None, moving: list[str]) -> list[str]:
    """The REPO:TAG names a host may already have for an image's blessed tags (the catalog's, newest first).

    Moving tags are left out: what a host has under one is of unknown date, never a pin.
    """
    registry = entry["registry"]
    sources = [registry] + ([mirrors[registry]] if (mirrors or {}).get(registry) else [])
    return [f"{source}/{entry['repository']}:{tag}" for tag in tags or [] if tag not in (moving or [])
            for source in sources]


def launcher_path(launcher_dir: str, launcher: str | None) -> str:
    return f"{launcher_dir.rstrip('/')}/{launcher}"


def pull_request(entry: dict, image: dict | None, *, mirrors: dict | None, platform: str, moving: list[str],
                 launcher_dir: str, blessed_fallback: bool = True, sized: bool = True) -> dict:
    """One lock entry (with its name) made complete for a host of `platform`: what spark_image_pull takes.

    `image` is the catalog's entry of the same name (its launcher, its blessed tags); `sized` False leaves the
    size out (no free-space check: images a host ran until now, kept to roll back to).
    """
    image = image or {}
    request = {"name": entry["name"], "repository": pull_repository(entry, mirrors),
               "digest": entry.get("index_digest"), "platforms": entry.get("platforms") or [],
               "local_fallback": (blessed_local(entry, image.get("tags") or [], mirrors, moving)
                                  if blessed_fallback else []),
               "launcher": image.get("launcher"), "launcher_path": launcher_path(launcher_dir, image.get("launcher")),
               "lock": {**{k: entry.get(k) for k in RECORD_LOCK_FIELDS}, "derived": entry.get("derived") or {},
                        "unlocked": bool(entry.get("unlocked"))}}
    size = (entry.get("sizes") or {}).get(platform)
    if size and sized:
        request["size"] = size
    return request


def pull_requests(entries: list[dict], catalog: list[dict], *, mirrors: dict | None, platform: str, moving: list[str],
                  launcher_dir: str, blessed_fallback: bool = True, sized: bool = True) -> list[dict]:
    """pull_request() for each entry, each joined to its catalog image by name."""
    by_name = {image["name"]: image for image in catalog or []}
    return [pull_request(entry, by_name.get(entry["name"]), mirrors=mirrors, platform=platform, moving=moving,
                         launcher_dir=launcher_dir, blessed_fallback=blessed_fallback, sized=sized)
            for entry in entries or []]


def pinned(request: dict, result: dict) -> dict:
    """What a host runs for one pull request, from what spark_image_pull did with it (ref, pulled, local_fallback)."""
    lock = request.get("lock") or {}
    return {
        "name": request.get("name"),
        **{k: lock.get(k) for k in RECORD_LOCK_FIELDS},
        "derived": False,
        "derived_locked": lock.get("derived") or {},
        "unlocked": bool(lock.get("unlocked")),
        "ref": result.get("ref"),
        "pulled": bool(result.get("pulled")),
        "local_fallback": result.get("local_fallback"),
        "launcher": request.get("launcher"),
        "launcher_path": request.get("launcher_path"),
    }


def derived(*, name: str, base: str, base_ref: str, base_digest: str, launcher: str | None, launcher_dir: str,
            result: dict) -> dict:
    """What a host runs for a derived image, from what spark_image_build did (tag, recipe, image_id, built):
    its launcher runs the image ID."""
    tag = result.get("tag")
    return {
        "name": name, "derived": True, "base": base, "base_ref": base_ref, "index_digest": base_digest,
        "registry": None, "repository": f"sparkfleet/{name}", "tag": (tag or "").rpartition(":")[2],
        "recipe": result.get("recipe"), "image_tag": tag, "ref": result.get("image_id") or tag,
        "built": bool(result.get("built")), "pulled": False, "unlocked": False, "fallback": None,
        "resolved_at": None, "launcher": launcher, "launcher_path": launcher_path(launcher_dir, launcher),
    }


def pin_line(image: dict) -> str:
    """'ngc: nvcr.io/nvidia/pytorch:25.09-py3 @ sha256:... (arm64 sha256:...), wanted 25.11-py3: <why>'."""
    line = (f"{image['name']}: {image['registry']}/{image['repository']}:{image['tag']} @ {image['index_digest']} "
            f"(arm64 {image['arm64_digest']})")
    fallback = image.get("fallback")
    if fallback:
        line += f", FALLBACK from {fallback['wanted']}: {'; '.join(fallback['reasons'])}"
    return line

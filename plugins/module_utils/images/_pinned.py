# Copyright: sparkfleet contributors
# Apache License 2.0
"""The pinned image: one model, from the lock to what a host runs. Each of its shapes is made here and nowhere else.

- The lock entry: its fields, validation, plan and writing are the lock's own (module_utils/images/_lock.py).
- The pull request (pull_request): one lock entry made complete for one host - where it pulls from (the registry's
  mirror, when there is one), the digest, the platforms the index has, the size for the host's platform, the
  local blessed tags it may run when the pull fails, the launcher - and the entry itself. spark_image_pull takes it
  as it is.
- The pinned record (pinned, derived): what a host runs. spark_image_pull returns one for each image it pulled or
  had, spark_image_build one for each derived image; the role keeps them as spark_images_pinned, which the
  launchers, the verification, the host summary (_fleet_table) and the reports read.

A record is never rebuilt elsewhere (in Jinja, or by joining a module's input back to its result).
"""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _validate as validate
from ansible_collections.sparkfleet.spark.plugins.module_utils.images import _lock as image_lock

# What a pull request carries of its lock entry into the record (the lock's, never the host's).
RECORD_LOCK_FIELDS = image_lock.RECORD_FIELDS


def pull_repository(entry: dict, mirrors: dict | None) -> str:
    """Where a host pulls a locked image from: its registry's pull-through mirror when one is configured.

    Digests are the same on a mirror, so the lock (resolved against the registry itself) stays the truth.
    Every path that pulls or runs a locked image goes through here, so the entry and the mirror are checked
    here, as the lock's load() checks them (a value such as '--volume=/:/host' never reaches docker's argv): a
    ValueError says what was found and what is expected.
    """
    name = entry.get("name", "?") if isinstance(entry, dict) else "?"
    if not isinstance(entry, dict):
        raise ValueError(f"spark_images_lock entry {name!r}: must be a mapping, found {type(entry).__name__}")
    missing = [f for f in ("registry", "repository") if not entry.get(f)]
    problems = [f"lacks {', '.join(missing)}"] if missing else []
    problems += image_lock.entry_problems("image" if name == "?" else name, image_lock.current_entry(entry))
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
                 launcher_dir: str, local_blessed: bool = True, sized: bool = True) -> dict:
    """One lock entry (with its name) made complete for a host of `platform`: what spark_image_pull takes.

    `image` is the catalog's entry of the same name (its launcher, its blessed tags); `sized` False leaves the
    size out (no free-space check: images a host ran until now, kept to roll back to).
    """
    image = image or {}
    request = {"name": entry["name"], "repository": pull_repository(entry, mirrors),
               "digest": entry.get("index_digest"), "platforms": entry.get("platforms") or [],
               "local_blessed": (blessed_local(entry, image.get("tags") or [], mirrors, moving)
                                 if local_blessed else []),
               "launcher": image.get("launcher"), "launcher_path": launcher_path(launcher_dir, image.get("launcher")),
               "lock": {**{k: entry.get(k) for k in RECORD_LOCK_FIELDS}, "derived": entry.get("derived") or {},
                        "unlocked": bool(entry.get("unlocked"))}}
    size = (entry.get("sizes") or {}).get(platform)
    if size and sized:
        request["size"] = size
    return request


def pull_requests(entries: list[dict], catalog: list[dict], *, mirrors: dict | None, platform: str, moving: list[str],
                  launcher_dir: str, local_blessed: bool = True, sized: bool = True) -> list[dict]:
    """pull_request() for each entry, each joined to its catalog image by name."""
    by_name = {image["name"]: image for image in catalog or []}
    return [pull_request(entry, by_name.get(entry["name"]), mirrors=mirrors, platform=platform, moving=moving,
                         launcher_dir=launcher_dir, local_blessed=local_blessed, sized=sized)
            for entry in entries or []]


def pinned(request: dict, result: dict) -> dict:
    """What a host runs for one pull request, from what spark_image_pull did with it (ref, pulled, local_blessed)."""
    lock = request.get("lock") or {}
    return {
        "name": request.get("name"),
        **{k: lock.get(k) for k in RECORD_LOCK_FIELDS},
        "derived": False,
        "derived_locked": lock.get("derived") or {},
        "unlocked": bool(lock.get("unlocked")),
        "ref": result.get("ref"),
        "pulled": bool(result.get("pulled")),
        "local_blessed": result.get("local_blessed"),
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


def _short(ref: str | None) -> str:
    """sha256:0123456789ab (a digest's first 12 hex digits), an image ID's the same way, or the reference as it is."""
    digest = str(ref or "").rpartition("@")[2]
    return digest[:19] if digest.startswith("sha256:") else (digest or "nothing")


def _apart(runs: str | None, locked: str | None) -> tuple[str, str]:
    """Two references as a drift line shows them: digests to the shortest length that tells them apart (twelve hex
    digits at least), whole references where their digests are the same (another repository or registry)."""
    a, b = (str(ref or "").rpartition("@")[2] for ref in (runs, locked))
    if a == b and a:
        return str(runs), str(locked)
    if not (a.startswith("sha256:") and b.startswith("sha256:")):
        return _short(runs), _short(locked)
    shown = 7 + 12
    while shown < max(len(a), len(b)) and a[:shown] == b[:shown]:
        shown += 1
    return a[:shown], b[:shown]


def as_run(records: list[dict], pulled: list[dict] | None, launchers: list[dict] | None) -> list[dict]:
    """What a host runs, read without changing it (sparkfleet verify): each pinned record (the lock's, as
    spark_image_pull and spark_image_build return them in check mode) with `ref` what its launcher on the host runs
    now, `locked_ref` what the lock (or the derived image's recipe) pins, and `drift`: each way the host differs,
    with the command that moves it there (`drift_kinds`, one a line: image or launcher, for the metrics)."""
    pulls = {entry.get("name"): entry for entry in pulled or [] if isinstance(entry, dict)}
    by_launcher = {entry.get("name"): entry for entry in launchers or [] if isinstance(entry, dict)}
    out = []
    for record in records or []:
        what, locked = f"image {record.get('name')}", record.get("ref")
        launcher = by_launcher.get(record.get("launcher")) or {}
        runs = launcher.get("running") if launcher.get("present") else None
        drift, kinds = [], []  # each line, and what it is about: the image (its digest) or its launcher
        if record.get("derived") and not locked:
            drift.append(f"{what}: not built from its recipe on this host - `sparkfleet provision` builds it")
            kinds.append("image")
        elif (not record.get("derived") and pulls.get(record.get("name"), {}).get("present_before") is False
              and (runs in (None, locked))):  # one that runs another digest is told below, with what moves it
            drift.append(f"{what}: the locked {_short(locked)} is not on the host - `sparkfleet provision` pulls it")
            kinds.append("image")
        if not launcher.get("present"):
            drift.append(f"{what}: no launcher {record.get('launcher_path')} - `sparkfleet provision` writes it")
            kinds.append("launcher")
        elif locked and runs != locked:
            mover = ("`sparkfleet provision` builds and switches it" if record.get("derived") else
                     "`sparkfleet refresh` moves the fleet to the lock, canary first (`sparkfleet provision`: every "
                     "host at once)")
            shown_runs, shown_locked = _apart(runs, locked)
            drift.append(f"{what}: runs {shown_runs}, the {'recipe builds' if record.get('derived') else 'lock says'}"
                         f" {shown_locked} - {mover}")
            kinds.append("image")
        elif launcher.get("changed"):
            drift.append(f"{what}: its launcher {launcher.get('path')} differs from the one this sparkfleet writes "
                         "(edited by hand, or written by another version) - `sparkfleet provision --check --diff` "
                         "shows how, `sparkfleet provision` writes it again")
            kinds.append("launcher")
        out.append({**record, "ref": runs or locked, "locked_ref": locked, "drift": drift, "drift_kinds": kinds})
    return out

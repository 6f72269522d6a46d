# Copyright: sparkfleet contributors
# Apache License 2.0
"""The image lock, in one place: its fields, their validation, reading it, the plan, the diff and the file written.

The lock is the file `sparkfleet pin` writes: spark_images_lock_file, by default group_vars/all/spark_images_lock.yml
in the inventory, where Ansible also loads it as the variable spark_images_lock. Its three entry points:

- load(): the lock as every reader has it - the file, validated, in today's fields; refused when the inventory's
  variable says another lock (the file was moved, or the variable set elsewhere), naming both. The plan reads it
  this way (provision, verify), and so do a refresh and cluster verify (the same module with no images to plan, its
  result's lock) and the driver's check before a run.
- plan(): which catalog images the lock pins (and what each host pulls), which it does not; refused when a moving
  tag has no entry or an entry pins another repository (the action and module spark_image_plan).
- write(): the one writer (the module spark_image_lock: pin, and a refresh once its canary passed) - the
  resolution merged with the lock (a digest that did not move keeps its date, derived recipes hashed on the new
  base), validated, in field order, atomically.

An entry's digests are keyed by platform (`digests: {linux/arm64: sha256:...}`), so a host of any platform finds
its own. Locks written before kept one field, arm64_digest: read as digests {linux/arm64: ...}, rewritten so by
the next pin.
"""

from __future__ import annotations

import datetime
import json
from collections import namedtuple

from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _validate as validate
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._files import atomic_write
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._yaml import (
    inert_dump,
    inert_load,
    template_markers,
    yaml,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._derived import recipe_hash, tag_for
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._oci import BadReference, parse_reference

VARIABLE = "spark_images_lock"
# Where the lock file is in an inventory unless spark_images_lock_file says otherwise (the role's default names the
# same path; tests/unit/roles/test_role_contracts.py holds them together).
DEFAULT_FILE = "group_vars/all/spark_images_lock.yml"
# An entry's field: its name and what it holds, in words (spark_image_lock's documentation, written by make docs).
Field = namedtuple("Field", ["name", "meaning"])
# An entry's fields, in the order the file is written (its diff is the review). To add one: CONTRIBUTING.md.
ENTRY_FIELDS = (
    Field("requested", "the reference pin asked for, `registry/repository:tag`, before any mirror"),
    Field("registry", "the registry the tag was resolved at"),
    Field("repository", "the repository there"),
    Field("tag", "the blessed tag locked: the newest that resolved"),
    Field("index_digest", "the digest of the tag's index (or of its one manifest): what every host pulls"),
    Field("digests", "each platform's manifest digest, `linux/arm64: sha256:...`"),
    Field("media_type", "the index's media type, as the registry served it"),
    Field("platforms", "the platforms the index lists"),
    Field("sizes", "each platform's download size in bytes, checked against a host's free space before a pull"),
    Field("fallback", "where an older blessed tag was locked: the tag wanted, the one used and why"),
    Field("resolved_at", "when the digest was resolved, kept while it does not change"),
    Field("derived", "each derived image built on this entry: its recipe's hash and its tag"),
)
FIELDS = tuple(f.name for f in ENTRY_FIELDS)
REQUIRED = ("registry", "repository", "index_digest", "digests")
# Fields of earlier locks, each read as today's digests of one platform.
LEGACY_DIGESTS = {"arm64_digest": "linux/arm64"}
# What a host's record of an image carries of its entry (the lock's, never the host's).
RECORD_FIELDS = ("registry", "repository", "tag", "index_digest", "digests", "resolved_at", "fallback")
# spark_image_plan's options: the module's and its action plugin's (which runs it in the controller's process).
PLAN_OPTIONS = {
    "path": {"type": "path", "required": True},
    "images": {"type": "list", "elements": "dict", "required": True},
    "inventory_lock": {"type": "raw"},
    "moving_tags": {"type": "list", "elements": "str", "default": ["latest"]},
}
HEADER = ("# Written by `sparkfleet pin` (playbooks/pin.yml): the images every host pulls, by digest.\n"
          "# Review a refresh by its diff; edit only through pin.\n")


class LockRefused(Exception):
    """The lock, or the catalog against it, is refused; str() says why and what to do, `problems` lists each."""

    def __init__(self, msg: str, problems: list[str] | None = None) -> None:
        super().__init__(msg)
        self.msg, self.problems = msg, problems or []


# --- the fields ---------------------------------------------------------------------------------------------------

def current(lock: object) -> object:
    """The lock in today's fields: an entry's legacy digest fields folded into `digests` at their place. Anything
    that is not a mapping of mappings is returned as it is, for problems() to name."""
    if not isinstance(lock, dict):
        return lock
    return {name: current_entry(entry) for name, entry in lock.items()}


def current_entry(entry: object) -> object:
    """One entry in today's fields (see current())."""
    if not isinstance(entry, dict) or not any(field in entry for field in LEGACY_DIGESTS):
        return entry
    digests = dict(entry.get("digests") or {}) if isinstance(entry.get("digests"), dict) else {}
    out: dict = {}
    for field, value in entry.items():
        if field in LEGACY_DIGESTS:
            digests.setdefault(LEGACY_DIGESTS[field], value)
            out.setdefault("digests", digests)
        elif field == "digests":
            out["digests"] = digests
        else:
            out[field] = value
    return out


def legacy(lock: object) -> list[str]:
    """The entries of a lock written in earlier fields (what the next pin rewrites)."""
    return [name for name, entry in (lock.items() if isinstance(lock, dict) else [])
            if isinstance(entry, dict) and any(field in entry for field in LEGACY_DIGESTS)]


def problems(lock: object, path: str) -> list[str]:
    """Problems with a lock as loaded from YAML (earlier fields accepted), each naming the file and the entry."""
    if lock is None:
        return []
    if not isinstance(lock, dict):
        return [f"{path}: {VARIABLE} must be a mapping of image name to entry, found {type(lock).__name__}"]
    # Text that would be a template is refused wherever it is, before any field is read: Ansible loads the lock as
    # a variable, and pin writes it !unsafe, so such text came from a hand edit (SECURITY.md).
    found = [f"{path}: {where} would run as a template; the lock holds data only (names, digests, dates): remove "
             "the text, or the file, and run `sparkfleet pin` again" for where in template_markers(lock)]
    for name, entry in current(lock).items():
        if not isinstance(entry, dict):
            found.append(f"{path}: entry {name!r} must be a mapping, found {type(entry).__name__}")
            continue
        unknown = [str(field) for field in entry if field not in FIELDS]
        if unknown:
            found.append(f"{path}: entry {name!r} has {', '.join(map(repr, unknown))}, which is no field of the "
                         f"lock (its fields: {', '.join(FIELDS)}); remove it, or run `sparkfleet pin` again")
        missing = [field for field in REQUIRED if not entry.get(field)]
        if missing:
            found.append(f"{path}: entry {name!r} lacks {', '.join(missing)}")
        found += [f"{path}: entry {name!r} {problem}" for problem in entry_problems(name, entry)]
    return found


# What each field of an entry may hold: every one reaches a launcher (a shell script), a pull or a URL.
_CHECKS = {"registry": validate.registry, "repository": validate.repository, "tag": validate.tag,
           "index_digest": validate.digest, "media_type": validate.media_type, "resolved_at": validate.iso_datetime}


def entry_problems(name: object, entry: dict) -> list[str]:
    """What is wrong with the values of one entry (in today's fields), each naming the field."""
    said = [] if validate.launcher(name) is None else [f"name {validate.launcher(name)}"]
    said += [f"{field} {problem}" for field, check in _CHECKS.items()
             if entry.get(field) is not None and (problem := check(entry[field]))]
    said += _requested_problems(entry.get("requested"))
    digests = entry.get("digests") or {}
    if not isinstance(digests, dict):
        said.append(f"digests is {digests!r}; expected a mapping of platform to digest (linux/arm64: sha256:...)")
    said += [f"digests {p!r} is {v!r}; expected a platform and a digest (sha256: and 64 hex digits)"
             for p, v in (digests.items() if isinstance(digests, dict) else [])
             if validate.platform(p) or validate.digest(v)]
    platforms = [] if entry.get("platforms") is None else entry["platforms"]
    if not isinstance(platforms, list):
        said.append(f"platforms is {platforms!r}; expected a list of platforms (linux/arm64)")
        platforms = []
    said += [f"platforms {problem}" for p in platforms if (problem := validate.platform(p))]
    sizes = {} if entry.get("sizes") is None else entry["sizes"]
    if not isinstance(sizes, dict):
        said.append(f"sizes is {sizes!r}; expected a mapping of platform to size in bytes")
    said += [f"sizes {p!r} is {v!r}; expected a platform and a size in bytes"
             for p, v in (sizes.items() if isinstance(sizes, dict) else [])
             if validate.platform(p) or not isinstance(v, int) or isinstance(v, bool)]
    derived = {} if entry.get("derived") is None else entry["derived"]
    return said + _fallback_problems(entry.get("fallback")) + _derived_problems(derived)


REASON_MAX = 500


# A reason holds no brace: every template marker has one ({{ {% {#), and the text is a registry's.
_REASON_BRACES = str.maketrans("{}", "()")


def fallback_reason(text: str) -> str:
    """A registry's answer as a reason the lock's fallback may hold: one line of printable text without braces,
    REASON_MAX at most (what the registry said can hold newlines, escapes, a template or a whole error body)."""
    line = "".join(c if c.isprintable() else " " for c in " ".join(str(text).split())).translate(_REASON_BRACES)
    return line if len(line) <= REASON_MAX else line[:REASON_MAX - 3] + "..."


def _fallback_problems(fallback: object) -> list[str]:
    """A fallback is shown in the pin line, reports and the summary: its tags are tags, its reasons printable."""
    if fallback is None:
        return []
    expected = "expected null or a mapping with wanted and used (tags) and reasons (lines of text)"
    if not isinstance(fallback, dict) or not isinstance(fallback.get("reasons", []), list):
        return [f"fallback is {fallback!r}; {expected}"]
    said = [f"fallback.{key} {problem}" for key in ("wanted", "used")
            if (problem := validate.tag(fallback.get(key)))]
    said += [f"fallback.reasons has {reason!r}; expected a line of printable text without braces ({REASON_MAX} "
             "characters at most)" for reason in fallback.get("reasons", [])
             if not isinstance(reason, str) or len(reason) > REASON_MAX or not reason.isprintable()
             or "{" in reason or "}" in reason]
    said += [f"fallback has {key!r}, which is no field of a fallback (wanted, used, reasons)"
             for key in fallback if key not in ("wanted", "used", "reasons")]
    return said


def _requested_problems(requested: object) -> list[str]:
    if requested is None:
        return []
    try:
        if not isinstance(requested, str) or requested != requested.strip() or len(requested) > 255:
            raise BadReference(f"{requested!r} is not an image reference")
        parse_reference(requested)
    except BadReference as exc:
        return [f"requested: {exc}"]
    return []


def _derived_problems(derived: object) -> list[str]:
    if not isinstance(derived, dict):
        return [f"derived is {derived!r}; expected a mapping of each derived image's name to its recipe and tag"]
    said = []
    for child, recipe in derived.items():
        said += [f"derived name {problem}" for problem in [validate.launcher(child)] if problem]
        if not isinstance(recipe, dict):
            said.append(f"derived.{child} is {recipe!r}; expected a mapping with recipe and tag")
            continue
        said += [f"derived.{child} has {key!r}, which is no field of a derived image (recipe, tag)"
                 for key in recipe if key not in ("recipe", "tag")]
        said += [f"derived.{child}.recipe {problem}" for problem in [validate.digest(recipe.get("recipe"))] if problem]
        repo, colon, tag = str(recipe.get("tag")).rpartition(":")
        if not colon or validate.repository(repo) or validate.tag(tag):
            said.append(f"derived.{child}.tag is {recipe.get('tag')!r}; expected sparkfleet/<name>:<recipe hash>")
    return said


def entry(resolved: dict) -> dict:
    """The lock's entry for an image as the registry resolved it (spark_image_resolve's result), in field order;
    resolved_at and its derived recipes are given by write()."""
    return {field: resolved.get(field) for field in FIELDS if field not in ("resolved_at", "derived")}


def line(image: dict) -> str:
    """What pin shows of an entry: 'ngc: nvcr.io/nvidia/pytorch:25.09-py3 @ sha256:... (linux/arm64 sha256:...),
    FALLBACK from 25.11-py3: <why>'."""
    digests = ", ".join(f"{platform} {digest}" for platform, digest in (image.get("digests") or {}).items())
    text = (f"{image['name']}: {image['registry']}/{image['repository']}:{image['tag']} @ {image['index_digest']}"
            + (f" ({digests})" if digests else ""))
    fallback = image.get("fallback")
    if fallback:
        text += f", FALLBACK from {fallback['wanted']}: {'; '.join(fallback['reasons'])}"
    return text


# --- reading: load() ----------------------------------------------------------------------------------------------

def read(path: str) -> tuple[object, str]:
    """The lock in a file as written (None and "" when there is no file), and its text."""
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        data = inert_load(text)
    except FileNotFoundError:
        return None, ""
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise LockRefused(f"{path} cannot be read as the image lock ({exc}); it was left untouched. Fix it, or "
                          "remove it and run `sparkfleet pin -i INVENTORY` to write it again.") from exc
    if data is not None and (not isinstance(data, dict) or set(data) - {VARIABLE}):
        raise LockRefused(f"{path} is the image lock's file and holds only {VARIABLE}; found "
                          f"{', '.join(map(str, data)) if isinstance(data, dict) else type(data).__name__}. Keep "
                          "other variables in another file of group_vars/all.")
    return (data or {}).get(VARIABLE), text


def _canonical(lock: object) -> str:
    return json.dumps(current(lock) or {}, sort_keys=True, default=str)


def load(path: str, inventory_lock: object = None) -> dict:
    """The lock every reader uses: the file pin writes (`path`), validated, in today's fields.

    `inventory_lock` is the variable as the inventory gives it (None where no inventory sets it). Where the lock
    file is inside the inventory's group_vars/all, Ansible loaded that same file into it; any other value means
    two locks, and a run would pull from one while pin writes the other: refused, naming both. Without a path
    (a host list, -i a,b,) the variable is the lock.
    """
    if not path:
        found = problems(inventory_lock, f"{VARIABLE} (given with -e or in the play)")
        if found:
            raise LockRefused("; ".join(found) + ". Fix the entry or run `sparkfleet pin` again.", found)
        return current(inventory_lock) or {}
    lock, _text = read(path)
    found = problems(lock, path)
    if found:
        raise LockRefused("; ".join(found) + ". Fix the entry or run `sparkfleet pin` (playbooks/pin.yml) again.",
                          found)
    if inventory_lock is not None and _canonical(inventory_lock) != _canonical(lock):
        raise LockRefused(_disagree(path, lock, inventory_lock))
    return current(lock) or {}


def _disagree(path: str, lock: object, inventory_lock: object) -> str:
    file_lock, variable = current(lock) or {}, current(inventory_lock)
    if lock is None:
        what = f"{path} is not there"
    elif not isinstance(variable, dict):
        what = f"the variable is a {type(variable).__name__}"
    else:
        names = sorted({str(n) for n in set(file_lock) | set(variable)
                        if json.dumps(file_lock.get(n), sort_keys=True, default=str)
                        != json.dumps(variable.get(n), sort_keys=True, default=str)})
        what = f"they differ in {', '.join(names)}"
    return (f"two image locks: the inventory sets {VARIABLE}, and the lock file spark_images_lock_file is {path}, "
            f"which `sparkfleet pin` writes and every run reads; {what}. Keep one: remove {VARIABLE} from where the "
            "inventory sets it (a copy or an old lock), or point spark_images_lock_file at the file that holds it. "
            "Nothing was pulled.")


# --- the plan: plan() ---------------------------------------------------------------------------------------------

def plan(lock: dict, images: list[dict], moving_tags: list[str], path: str) -> dict:
    """{"plan": [the locked entry of each catalog image the lock pins], "unlocked": [the images it does not], "lock":
    the lock itself}, from a lock as load() gives it."""
    planned, unlocked = [], []
    for image in images:
        locked = (lock or {}).get(image["name"])
        if locked is None:
            moving = [t for t in image["tags"] if t in moving_tags]
            if moving:
                raise LockRefused(f"{image['registry']}/{image['repository']}:{moving[0]} is a moving tag and "
                                  f"{path or VARIABLE} has no entry '{image['name']}' for it; nothing was pulled. Run "
                                  "`sparkfleet pin -i INVENTORY` (ansible-playbook playbooks/pin.yml -i INVENTORY) "
                                  "to resolve and pin it.")
            unlocked.append(image)
            continue
        if (locked["registry"], locked["repository"]) != (image["registry"], image["repository"]):
            raise LockRefused(f"{path or VARIABLE}: entry '{image['name']}' pins {locked['registry']}/"
                              f"{locked['repository']} but the image is configured as {image['registry']}/"
                              f"{image['repository']}; run `sparkfleet pin` (playbooks/pin.yml) again.")
        planned.append({"name": image["name"], **{k: locked.get(k) for k in FIELDS if k != "requested"}})
    return {"changed": False, "plan": planned, "unlocked": unlocked, "lock": lock or {}}


# --- comparing: diff(), dated(), removed() ------------------------------------------------------------------------

def diff(lock: dict | None, resolved: list[dict]) -> list[dict]:
    """One row per resolved image: name, tag, old and new index digests, changed, and the line users read. The
    one computation behind pin's changes, a refresh's diff, and the summary's and reports' lines."""
    lock = lock if isinstance(lock, dict) else {}
    rows = []
    for image in resolved:
        previous = lock.get(image["name"])
        old = previous.get("index_digest") if isinstance(previous, dict) else None
        new = image["index_digest"]
        where = f"{image['name']} {image['registry']}/{image['repository']}:{image.get('tag')}"
        rows.append({"name": image["name"], "tag": image.get("tag"), "old": old, "new": new, "changed": old != new,
                     "line": f"{where}: {old or '(none)'} -> {new}" if old != new else f"{where}: unchanged {old}"})
    return rows


def dated(lock: dict | None, resolved: list[dict]) -> list[dict]:
    """The resolved images as the lock will hold them: an image whose digest did not move keeps the lock's
    resolved_at (write() keeps it), one that moved has its resolution's. A refresh writes the launchers from
    these, so they say what a provision after it writes from the new lock, and that provision changes nothing."""
    lock = lock if isinstance(lock, dict) else {}
    rows = diff(lock, resolved)
    return [{**image, "resolved_at": lock[image["name"]].get("resolved_at") or image.get("resolved_at")}
            if not row["changed"] and isinstance(lock.get(image["name"]), dict) else image
            for image, row in zip(resolved, rows, strict=True)]


def entries(lock: dict | None, names: list[str]) -> list[dict]:
    """The lock's entries for these image names, each with its name (what a host ran before a refresh)."""
    lock = lock if isinstance(lock, dict) else {}
    return [{**lock[name], "name": name} for name in names if isinstance(lock.get(name), dict)]


def removed(lock: dict | None, names: list[str]) -> list[str]:
    """Lines for the images the lock has that are no longer configured."""
    return [f"{name} removed (no longer configured)" for name in (lock if isinstance(lock, dict) else {})
            if name not in names]


# --- writing: write() ---------------------------------------------------------------------------------------------

def render(lock: dict) -> str:
    """The lock's file, written so Ansible, which loads it as a variable, never renders its text (inert_dump)."""
    return inert_dump({VARIABLE: lock}, HEADER)


def merged(old: dict, resolved: list[dict], derived: list[dict], now: str) -> tuple[dict, list[str]]:
    """The new lock and its change lines, from the lock as it is (today's fields) and a resolution. `derived`: each
    derived image's recipe with its files' bytes (`contents`), hashed on its base's new digest."""
    rows = diff(old, resolved)
    changes = [row["line"] for row in rows if row["changed"]]
    new = {}
    for image, row in zip(resolved, rows, strict=True):
        previous = old.get(image["name"])
        made = entry(image)
        kept = not row["changed"] and isinstance(previous, dict) and previous.get("resolved_at")
        made["resolved_at"] = previous["resolved_at"] if kept else (image.get("resolved_at") or now)
        new[image["name"]] = made
    for recipe in derived:
        base = new.get(recipe["base"])
        if base is None:
            raise LockRefused(f"derived image {recipe['name']}: base {recipe['base']!r} is not among the images "
                              f"resolved ({', '.join(new) or 'none'}); the lock was left untouched.")
        sha = recipe_hash(base["index_digest"], recipe.get("apt_packages") or [], recipe.get("dockerfile") or "",
                          recipe.get("contents") or {})
        previous = ((old.get(recipe["base"]) or {}).get("derived") or {}).get(recipe["name"])
        base.setdefault("derived", {})[recipe["name"]] = {"recipe": sha, "tag": tag_for(recipe["name"], sha)}
        if not isinstance(previous, dict) or previous.get("recipe") != sha:
            before = previous.get("recipe") if isinstance(previous, dict) else "(none)"
            changes.append(f"{recipe['name']} (derived from {recipe['base']}) {before} -> {sha}")
    return new, changes + removed(old, list(new))


def _with_contents(derived: list[dict]) -> list[dict]:
    """Each derived recipe with the bytes of its files, as this controller has them."""
    out = []
    for recipe in derived or []:
        contents = {}
        for name, src in (recipe.get("files") or {}).items():
            try:
                with open(src, "rb") as handle:
                    contents[name] = handle.read()
            except OSError as exc:
                raise LockRefused(f"derived image {recipe['name']}: file {name} ({src}) cannot be read ({exc}); "
                                  "the lock was left untouched.") from exc
        out.append({**recipe, "contents": contents})
    return out


def write(path: str, resolved: list[dict], derived: list[dict], check_mode: bool = False) -> dict:
    """Write the resolution as the lock at `path`: {changed, changes, lock, diff}. The file is left untouched when
    it is not a lock this function would accept, when a derived recipe cannot be hashed, when what the registry
    gave would not pass load(), and in check mode."""
    written, before_text = read(path)
    found = problems(written, path)
    if found:  # the plan refuses it: so does the writer, rather than replace what someone must review
        raise LockRefused("; ".join(found) + ". The lock was left untouched: fix the entry (or remove the file to "
                          "start over), then run pin again.", found)
    old = current(written) or {}
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()
    new, changes = merged(old, resolved, _with_contents(derived), now)
    found = problems(new, path)
    if found:  # what a registry or the catalog gave must be as safe as what the plan accepts
        raise LockRefused("; ".join(found) + ". Nothing was written.", found)
    rewritten = legacy(written)
    if rewritten:
        changes.append(f"{', '.join(rewritten)}: arm64_digest rewritten as digests (keyed by platform)")
    after_text = render(new)
    result = {"changed": after_text != before_text, "changes": changes, "lock": new, "path": path}
    if result["changed"]:
        result["diff"] = {"before": before_text, "after": after_text, "before_header": path, "after_header": path}
        if not check_mode:
            atomic_write(path, after_text)
    return result

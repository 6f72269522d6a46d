# Copyright: sparkfleet contributors
# Apache License 2.0
"""The image lock's plan and diff.

The plan: which catalog images the lock pins (and what each host pulls), which it does not, refused when the lock
is malformed or a moving tag has no entry. spark_image_lock's state=plan runs it, in the controller's own process
(plugins/action/spark_image_lock.py) or as a module.

The diff: per image, the digest the lock pins and the one its tag resolves to now. One home for it:
spark_image_lock reports it when it writes the lock (pin, refresh), the filter spark_images_lock_diff shows it
before a refresh rolls out, and the driver's summary and report.json print its lines as they are.
"""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.module_utils._pinned import LOCK_FIELDS, validate_lock

# spark_image_lock's options: the module's and its action plugin's (which runs state=plan in process).
ARGUMENT_SPEC = {
    "state": {"type": "str", "choices": ["plan", "write"], "default": "plan"},
    "path": {"type": "path", "required": True},
    "images": {"type": "list", "elements": "dict", "required": True},
    "lock": {"type": "raw"},
    "moving_tags": {"type": "list", "elements": "str", "default": ["latest"]},
    "resolved": {"type": "list", "elements": "dict", "default": []},
    "derived": {"type": "list", "elements": "dict", "default": []},
}


class LockRefused(Exception):
    """The plan refuses the lock or the catalog; str() says why and what to do, `problems` lists each."""

    def __init__(self, msg: str, problems: list[str] | None = None) -> None:
        super().__init__(msg)
        self.msg, self.problems = msg, problems or []


def plan(lock, images: list[dict], moving_tags: list[str], path: str) -> dict:
    """{"plan": [the locked entry of each catalog image the lock pins], "unlocked": [the images it does not]}."""
    problems = validate_lock(lock, path)
    if problems:
        raise LockRefused("; ".join(problems) + ". Fix the entry or run `sparkfleet pin` (playbooks/pin.yml) again.",
                          problems)
    lock = lock or {}
    planned, unlocked = [], []
    for image in images:
        entry = lock.get(image["name"])
        if entry is None:
            moving = [t for t in image["tags"] if t in moving_tags]
            if moving:
                raise LockRefused(f"{image['registry']}/{image['repository']}:{moving[0]} is a moving tag and "
                                  f"{path} has no entry '{image['name']}' for it; nothing was pulled. Run "
                                  "`sparkfleet pin -i INVENTORY` (ansible-playbook playbooks/pin.yml -i INVENTORY) "
                                  "to resolve and pin it.")
            unlocked.append(image)
            continue
        if (entry["registry"], entry["repository"]) != (image["registry"], image["repository"]):
            raise LockRefused(f"{path}: entry '{image['name']}' pins {entry['registry']}/{entry['repository']} "
                              f"but the image is configured as {image['registry']}/{image['repository']}; run "
                              f"`sparkfleet pin` (playbooks/pin.yml) again.")
        planned.append({"name": image["name"], **{k: entry.get(k) for k in LOCK_FIELDS if k != "requested"}})
    return {"changed": False, "plan": planned, "unlocked": unlocked}


def diff(lock: dict | None, resolved: list[dict]) -> list[dict]:
    """One row per resolved image: name, tag, old and new index digests, changed, and the line users read."""
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
    resolved_at (spark_image_lock keeps it), one that moved has its resolution's. A refresh writes the launchers
    from these, so they say what a provision after it writes from the new lock, and that provision changes
    nothing."""
    lock = lock if isinstance(lock, dict) else {}
    rows = diff(lock, resolved)
    return [{**image, "resolved_at": lock[image["name"]].get("resolved_at") or image.get("resolved_at")}
            if not row["changed"] and isinstance(lock.get(image["name"]), dict) else image
            for image, row in zip(resolved, rows, strict=True)]


def removed(lock: dict | None, names: list[str]) -> list[str]:
    """Lines for the images the lock has that are no longer configured."""
    return [f"{name} removed (no longer configured)" for name in (lock if isinstance(lock, dict) else {})
            if name not in names]

# Copyright: sparkfleet contributors
# Apache License 2.0
"""The image lock's diff: per image, the digest the lock pins and the one its tag resolves to now.

One home for it: spark_image_lock reports it when it writes the lock (pin,
refresh), the filter spark_images_lock_diff shows it before a refresh rolls
out, and the driver's summary and report.json print its lines as they are.
"""

from __future__ import annotations


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


def removed(lock: dict | None, names: list[str]) -> list[str]:
    """Lines for the images the lock has that are no longer configured."""
    return [f"{name} removed (no longer configured)" for name in (lock if isinstance(lock, dict) else {})
            if name not in names]

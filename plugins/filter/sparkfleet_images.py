# Copyright: sparkfleet contributors
# Apache License 2.0
"""Filters for spark_images: what each host runs, and what may be pruned."""

from __future__ import annotations

DOCUMENTATION = r"""
name: spark_images_pinned
short_description: The images a host runs, from spark_image_pull's loop results and the image configuration
positional: _input, images, launcher_dir
options:
  _input:
    description: The registered loop results of spark_image_pull (each item is a planned lock entry).
    type: dict
    required: true
  images:
    description: spark_images_catalog (for each image's launcher name).
    type: list
    required: true
  launcher_dir:
    description: Where the launchers are installed.
    type: str
    required: true
"""


def spark_images_pinned(pulled: dict, images: list[dict], launcher_dir: str) -> list[dict]:
    launchers = {image["name"]: image.get("launcher") for image in images}
    pinned = []
    for result in pulled.get("results", []):
        item = result.get("item") or {}
        pinned.append({
            "name": item.get("name"),
            "registry": item.get("registry"),
            "repository": item.get("repository"),
            "tag": item.get("tag"),
            "index_digest": item.get("index_digest"),
            "arm64_digest": item.get("arm64_digest"),
            "resolved_at": item.get("resolved_at"),
            "fallback": item.get("fallback"),
            "unlocked": bool(item.get("unlocked")),
            "ref": result.get("ref"),
            "pulled": bool(result.get("pulled")),
            "launcher": launchers.get(item.get("name")),
            "launcher_path": f"{launcher_dir.rstrip('/')}/{launchers.get(item.get('name'))}",
        })
    return pinned


def spark_images_stale(recorded: list[str], pinned: list[dict]) -> list[str]:
    """Images this project pulled (REPO@DIGEST) whose digest no pinned image uses."""
    keep = {p["index_digest"] for p in pinned}
    return sorted(ref for ref in recorded or [] if ref.rpartition("@")[2] not in keep)


def spark_images_pin_line(image: dict) -> str:
    """'ngc: nvcr.io/nvidia/pytorch:25.09-py3 @ sha256:... (arm64 sha256:...), wanted 25.11-py3: <why>'."""
    line = (f"{image['name']}: {image['registry']}/{image['repository']}:{image['tag']} @ {image['index_digest']} "
            f"(arm64 {image['arm64_digest']})")
    fallback = image.get("fallback")
    if fallback:
        line += f", FALLBACK from {fallback['wanted']}: {'; '.join(fallback['reasons'])}"
    return line


def spark_images_effective(catalog: list[dict], overrides: dict) -> list[dict]:
    """The catalog with registries replaced as spark_images_registry_overrides says (a lab's stand-in)."""
    return [{**image, "registry": (overrides or {}).get(image["registry"], image["registry"])} for image in catalog]


def spark_images_pull_repository(image: dict, mirrors: dict) -> str:
    """Where a host pulls a locked image from: its registry's pull-through mirror when one is configured.

    Digests are the same on a mirror, so the lock (resolved against the registry itself) stays the truth.
    """
    registry = image["registry"]
    return f"{(mirrors or {}).get(registry, registry)}/{image['repository']}"


def spark_images_lock_diff(lock: dict | None, resolved: list[dict]) -> list[dict]:
    """Per image: the digest the lock pins now and the one the tag resolves to (old -> new)."""
    lock = lock or {}
    rows = []
    for image in resolved:
        old = (lock.get(image["name"]) or {}).get("index_digest")
        rows.append({"name": image["name"], "tag": image.get("tag"), "old": old, "new": image["index_digest"],
                     "changed": old != image["index_digest"],
                     "line": f"{image['name']} {image['registry']}/{image['repository']}:{image.get('tag')}: "
                             + (f"{old} -> {image['index_digest']}" if old != image["index_digest"]
                                else f"unchanged {old}")})
    return rows


class FilterModule:
    def filters(self):
        return {"spark_images_pinned": spark_images_pinned, "spark_images_stale": spark_images_stale,
                "spark_images_effective": spark_images_effective,
                "spark_images_pull_repository": spark_images_pull_repository,
                "spark_images_lock_diff": spark_images_lock_diff,
                "spark_images_pin_line": spark_images_pin_line}

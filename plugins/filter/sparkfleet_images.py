# Copyright: sparkfleet contributors
# Apache License 2.0
"""Filters for spark_images: what each host runs, and what may be pruned.
(ansible-doc reads each filter's documentation from plugins/filter/<filter>.yml.)
"""

from __future__ import annotations

import difflib
import os
import re

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkfleet.spark.plugins.filter.sparkfleet_inputs import spark_inventory_dir as inventory_dir
from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _validate as validate
from ansible_collections.sparkfleet.spark.plugins.module_utils.images import _lock as image_lock
from ansible_collections.sparkfleet.spark.plugins.module_utils.images import _pinned as pinned_model
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._oci import host_platform


def spark_images_pull_requests(targets: list[dict], mirrors: dict, platform: str, catalog: list[dict],
                               moving: list[str], launcher_dir: str, local_blessed: bool = True,
                               sized: bool = True, blessed_fallback: bool | None = None) -> list[dict]:
    """What spark_image_pull's O(images) takes for the lock entries a host pulls: one complete request each
    (module_utils/images/_pinned.py's pull_request), so that provision and refresh pull the same way.
    blessed_fallback: local_blessed's old keyword (deprecated)."""
    if blessed_fallback is not None:
        from ansible.utils.display import Display

        Display().deprecated("spark_images_pull_requests: the keyword blessed_fallback is now local_blessed",
                             version="1.0.0", collection_name="sparkfleet.spark")
        local_blessed = blessed_fallback
    try:
        return pinned_model.pull_requests(targets, catalog, mirrors=mirrors, platform=platform, moving=moving,
                                          launcher_dir=launcher_dir, local_blessed=local_blessed, sized=sized)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def spark_images_as_run(pinned: list[dict], pulled: list[dict] | None, launchers: list[dict] | None) -> list[dict]:
    """What a host runs, read without changing it (sparkfleet verify): each pinned record with C(ref) what its
    launcher runs now, C(locked_ref) what the lock pins, and C(drift), how the host differs and what moves it."""
    return pinned_model.as_run(pinned, pulled, launchers)


def spark_images_lock_entries(lock: dict | None, names: list[str]) -> list[dict]:
    """The lock's entries for these image names, each with its name (what a host ran before a refresh)."""
    return image_lock.entries(lock, names)


def spark_images_unused(recorded: list[str], pinned: list[dict]) -> list[str]:
    """Images this project pulled (REPO@DIGEST) whose digest no pinned image uses."""
    keep = {p["index_digest"] for p in pinned}
    return sorted(ref for ref in recorded or [] if ref.rpartition("@")[2] not in keep)


def spark_images_pin_line(image: dict) -> str:
    """'ngc: nvcr.io/nvidia/pytorch:25.09-py3 @ sha256:... (linux/arm64 sha256:...), FALLBACK from 25.11-py3:
    <why>'."""
    return image_lock.line(image)


# What each catalog field may hold: it reaches a launcher (a shell script and its file name), a pull and a URL.
_CATALOG_CHECKS = {"name": validate.launcher, "registry": validate.registry, "repository": validate.repository,
                   "launcher": validate.launcher}


def spark_images_effective(catalog: list[dict], replacements: dict) -> list[dict]:
    """The catalog with registries replaced as spark_images_registry_replacements says (a lab's stand-in), each
    value checked first: a bad one fails naming the entry, the field, what was found and what is expected."""
    for index, image in enumerate(catalog or []):
        if not isinstance(image, dict):
            raise AnsibleFilterError(f"spark_images_catalog[{index}] is {image!r}; expected a mapping with name, "
                                     "registry, repository, tags and launcher")
        said = [f"{field} {problem}" for field, check in _CATALOG_CHECKS.items()
                if (problem := check(image.get(field)))]
        said += [f"tags {problem}" for tag in image.get("tags") or [] if (problem := validate.tag(tag))]
        if said:
            raise AnsibleFilterError(f"spark_images_catalog[{index}] ({image.get('name')!r}): {'; '.join(said)}. "
                                     "Fix the catalog in your inventory's group_vars.")
    for source, target in (replacements or {}).items():
        said = [problem for problem in (validate.registry(source), validate.registry(target)) if problem]
        if said:
            raise AnsibleFilterError(f"spark_images_registry_replacements {source!r}: {target!r}: registry "
                                     f"{'; '.join(said)}")
    return [{**image, "registry": (replacements or {}).get(image["registry"], image["registry"])} for image in catalog]


def spark_images_pull_repository(image: dict, mirrors: dict) -> str:
    """Where a host pulls a locked image from: its registry's pull-through mirror when one is configured; the
    entry and the mirror checked (module_utils/images/_pinned.py)."""
    try:
        return pinned_model.pull_repository(image, mirrors)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from exc


def spark_images_lock_diff(lock: dict | None, resolved: list[dict]) -> list[dict]:
    """Per image: the digest the lock pins now and the one the tag resolves to (old -> new)."""
    return image_lock.diff(lock, resolved)


def spark_images_fleet(own: list[dict], hostvars, hosts: list, key: str) -> list[dict]:
    """The images (or derived images) of every host of the inventory, by name: `own` (the controller's value of
    `key`, the catalog group_vars/all gives) and each host's own `key` where its inventory sets one (host_vars).
    The lock is the inventory's one, so pin and refresh lock every host's images; an image named alike by two
    hosts but defined otherwise is refused, naming both."""
    found: dict[str, tuple[str, dict]] = {}
    sources = [("the inventory (group_vars/all, or the role's default)", own)]
    for host in hosts or []:
        values = hostvars[host]
        if key in values:
            sources.append((f"host {host}", values[key]))
    for where, images in sources:
        if not isinstance(images, list):
            raise AnsibleFilterError(f"{key} of {where} is a {type(images).__name__}, expected a list of images")
        for image in images:
            name = image.get("name") if isinstance(image, dict) else None
            if name is None:
                raise AnsibleFilterError(f"{key} of {where} has an entry without a name: {image!r}")
            if name in found and found[name][1] != image:
                raise AnsibleFilterError(f"image {name!r} is defined differently by {found[name][0]} and {where}; "
                                         "the lock has one entry per name: give one of them another name")
            found.setdefault(name, (where, image))
    return [image for _where, image in found.values()]


def spark_images_dated(resolved: list[dict], lock: dict | None) -> list[dict]:
    """The resolved images with the resolved_at the lock will give them (the lock's where the digest did not
    move): what a refresh writes the launchers from."""
    return image_lock.dated(lock, resolved)


DERIVED_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


def spark_images_derived_recipes(derived: list[dict], catalog: list[dict], sources: list) -> list[dict]:
    """spark_images_derived checked and normalized: files as absolute paths (relative ones from the inventory's
    directory, module_utils/common/_inventory.py's, asked only when a file is relative: `sources` are
    ansible_inventory_sources).

    Fails with what was found and what is expected: a missing field, a bad name, a name used twice or by a
    catalog image, a base that is not a catalog image.
    """
    bases = [image["name"] for image in catalog]
    seen = set(bases)
    recipes = []
    for index, recipe in enumerate(derived or []):
        if not isinstance(recipe, dict):
            raise AnsibleFilterError(f"spark_images_derived[{index}] is {recipe!r}; expected a mapping with name, "
                                     "base, launcher and apt_packages and/or dockerfile.")
        name = recipe.get("name")
        missing = [f for f in ("name", "base", "launcher") if not recipe.get(f)]
        if missing:
            raise AnsibleFilterError(f"spark_images_derived[{index}] ({name or 'no name'}) lacks "
                                     f"{', '.join(missing)}; each derived image needs a name, a base (one of "
                                     f"{', '.join(bases)}) and a launcher.")
        if not DERIVED_NAME.match(str(name)):
            raise AnsibleFilterError(f"derived image name {name!r} is not a valid image name; expected lower-case "
                                     "letters, digits, '.', '_' or '-' (it becomes sparkfleet/<name>:<hash>).")
        if name in seen:
            raise AnsibleFilterError(f"derived image name {name!r} is used twice (catalog images: "
                                     f"{', '.join(bases)}); give each image its own name.")
        seen.add(name)
        if validate.launcher(recipe["launcher"]):
            raise AnsibleFilterError(f"derived image {name}: launcher {validate.launcher(recipe['launcher'])} "
                                     "(it becomes a file in spark_images_launcher_dir)")
        if recipe["base"] not in bases:
            near = difflib.get_close_matches(str(recipe["base"]), bases, n=1, cutoff=0.6)
            raise AnsibleFilterError(f"derived image {name}: base {recipe['base']!r} is not one of the pinned images "
                                     f"({', '.join(bases)}){f': did you mean {near[0]}?' if near else ''}; a "
                                     "derived image is built FROM a locked image only.")
        if not (recipe.get("apt_packages") or (recipe.get("dockerfile") or "").strip()):
            raise AnsibleFilterError(f"derived image {name} adds nothing (no apt_packages, no dockerfile); "
                                     "use its base's launcher instead.")
        files = {}
        for file_name, src in (recipe.get("files") or {}).items():
            if "/" in file_name or file_name.startswith("."):
                raise AnsibleFilterError(f"derived image {name}: file name {file_name!r} must be a plain name "
                                         "(it is copied into the build context as it is named).")
            files[file_name] = src if os.path.isabs(src) else os.path.join(inventory_dir(sources), src)
        recipes.append({"name": name, "base": recipe["base"], "launcher": recipe["launcher"],
                        "apt_packages": list(recipe.get("apt_packages") or []),
                        "dockerfile": recipe.get("dockerfile") or "", "files": files})
    return recipes


def spark_images_derived_files(recipes: list[dict]) -> list[dict]:
    """One row per file to copy into a build context: image, name, src (on the controller)."""
    return [{"image": r["name"], "name": name, "src": src} for r in recipes or [] for name, src in r["files"].items()]


def spark_images_derived_targets(recipes: list[dict], pinned: list[dict]) -> list[dict]:
    """Each recipe with the locked base this host has (from spark_images_pinned); a base not locked is refused."""
    by_name = {p["name"]: p for p in pinned or [] if not p.get("derived")}
    targets = []
    for recipe in recipes or []:
        base = by_name.get(recipe["base"])
        if base is None or base.get("unlocked"):
            locked = ", ".join(sorted(n for n, p in by_name.items() if not p.get("unlocked"))) or "none"
            raise AnsibleFilterError(f"derived image {recipe['name']}: its base {recipe['base']!r} is not in the "
                                     f"lock (locked here: {locked}); nothing was built. A derived image is built "
                                     "FROM a locked digest only: run `sparkfleet pin` (playbooks/pin.yml) first.")
        targets.append({"recipe": recipe, "base": base,
                        "locked": ((base.get("derived_locked") or {}).get(recipe["name"]) or {}).get("recipe", "")})
    return targets


def spark_images_host_platform(arch: str | None) -> str:
    """The platform a host pulls and builds images for, from its architecture (spark_preflight's arch)."""
    return host_platform(arch)


class FilterModule:
    def filters(self):
        return {"spark_images_unused": spark_images_unused,
                "spark_images_effective": spark_images_effective,
                "spark_images_pull_repository": spark_images_pull_repository,
                "spark_images_pull_requests": spark_images_pull_requests,
                "spark_images_lock_diff": spark_images_lock_diff,
                "spark_images_dated": spark_images_dated,
                "spark_images_fleet": spark_images_fleet,
                "spark_images_pin_line": spark_images_pin_line,
                "spark_images_derived_recipes": spark_images_derived_recipes,
                "spark_images_derived_targets": spark_images_derived_targets,
                "spark_images_derived_files": spark_images_derived_files,
                "spark_images_lock_entries": spark_images_lock_entries,
                "spark_images_as_run": spark_images_as_run,
                "spark_images_host_platform": spark_images_host_platform}

"""sparkfleet's own variables, named or typed wrong: an inventory or -e variable that looks like one of
sparkfleet's (spark_*, sparkfleet_*, cluster_*) but is not, named with the nearest known one; one of the wrong type
(a string where a list of mappings is expected), named with the file it came from, the type found and the type
expected; and an image lock that is not one. All before any host is touched (exit 4).

Ansible ignores a variable nothing reads, so a typo (spark_verify_can_run_container for
spark_verify_can_run_containers) surfaced later as a Docker error, or never. The names sparkfleet knows are the
roles' argument specs, the variables its playbooks read, and the image lock pin writes into the inventory.
"""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

import yaml

from sparkfleet.collection_home import PROJECT_DIR
from sparkfleet.input_errors import AnyTagLoader

PREFIX = re.compile(r"^(spark|sparkfleet|cluster)_")
# Written into an inventory by sparkfleet itself (group_vars/all/<name>.yml), with the commands that write each:
# every one must pass the check below, or the command that wrote it would lock its owner out (exit 4 on every run).
WRITTEN = {"spark_images_lock": "sparkfleet pin, sparkfleet refresh", "spark_venv_lock": "sparkfleet matrix lock"}
# Read by the playbooks (not by a role's argument spec).
PLAYBOOK_VARIABLES = {"cluster_verify_nccl_image", "cluster_verify_nccl_max_bytes", "cluster_verify_nccl_headroom",
                      "cluster_verify_tcp_seconds", "cluster_verify_rdma_seconds", "cluster_verify_thresholds_file"}


def specs() -> dict[str, dict]:
    """Each role variable's spec (type, elements) from the roles' argument specs, the first role's where two
    declare it."""
    found: dict[str, dict] = {}
    for path in sorted((PROJECT_DIR / "roles").glob("*/meta/argument_specs.yml")):
        for entry in (yaml.safe_load(path.read_text()) or {}).get("argument_specs", {}).values():
            for name, spec in ((entry or {}).get("options") or {}).items():
                found.setdefault(name, {**(spec or {}), "role": path.parts[-3]})
    for old, new in renamed().items():  # an old name is held to its new name's type
        if new in found:
            found.setdefault(old, found[new])
    return found


# A renamed variable's role default reads its old name through the filter spark_renamed (one place for each rename:
# `new: "{{ old | sparkfleet.spark.spark_renamed('old', 'new') if old is defined else ... }}"`).
_RENAMED = re.compile(r"spark_renamed\('(\w+)',\s*'(\w+)'\)")


def renamed() -> dict[str, str]:
    """{old name: new name} for each variable a role renamed and still reads under its old name."""
    found = {}
    for path in sorted((PROJECT_DIR / "roles").glob("*/defaults/main.yml")):
        found.update(dict(_RENAMED.findall(path.read_text())))
    return found


def known() -> set[str]:
    return set(PLAYBOOK_VARIABLES) | set(WRITTEN) | set(specs()) | set(renamed())


def renamed_in_use(names_by_source: dict[str, set[str]], files: dict[str, list[str]] | None = None) -> list[str]:
    """One warning per old name still set: where (the inventory's files that set it, when `files` knows them, as
    files_setting finds them; else the hosts and groups it reaches), and what to rename it to."""
    old_to_new = renamed()
    found: dict[str, list[str]] = {}
    for source, names in names_by_source.items():
        for name in names & set(old_to_new):
            found.setdefault(name, []).append(source)

    def where(name: str, sources: list[str]) -> str:
        said = sorted((files or {}).get(name) or [])
        said, how = (said, "set in") if said else (sorted(sources), "set for")
        return f"{how} {', '.join(said[:4])}{' ...' if len(said) > 4 else ''}"

    return [f"{name} is now {old_to_new[name]} ({where(name, sources)}): rename it there; the old name is still "
            "read, until 1.0.0" for name, sources in sorted(found.items())]


BOOLEANS = {"yes", "no", "true", "false", "on", "off", "y", "n", "t", "f", "1", "0"}


def _type_name(value) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean", int: "an integer",
            float: "a number", type(None): "null"}.get(type(value), type(value).__name__)


def wrong_type(value, spec: dict) -> str | None:
    """What is wrong with a value of a role variable, as Ansible's argument spec would find it later - raw, without
    the file: the type found and the type expected; None when the value is fine (or a template, judged when it is
    rendered). A value's text is never said: it may be a password."""
    kind, elements = spec.get("type", "str"), spec.get("elements")
    if isinstance(value, str) and ("{{" in value or "{%" in value):
        return None
    if isinstance(value, dict) and set(value) == {"__ansible_vault"}:  # a vaulted string, as ansible-inventory lists it
        return None
    if value is None:  # Ansible's argument spec leaves a null alone (the role's default is not used either)
        return None
    expected = {"list": f"a list{' of ' + ('mappings' if elements == 'dict' else elements + 's') if elements else ''}",
                "dict": "a mapping", "bool": "true or false", "int": "a whole number"}.get(kind)
    if kind == "list":  # Ansible splits a string at commas into a list of strings: not into mappings
        bad = not isinstance(value, list | str) or (isinstance(value, str) and elements == "dict")
        if not bad and isinstance(value, list) and elements == "dict":
            bad = any(not isinstance(item, dict) for item in value)
            if bad:
                held = ", ".join(sorted({_type_name(item) for item in value if not isinstance(item, dict)}))
                return f"a list holding {held.replace('a ', '').replace('an ', '')}s, expected {expected}"
    elif kind == "dict":
        bad = not isinstance(value, dict | str) or (isinstance(value, str) and "=" not in value
                                                    and not value.lstrip().startswith("{"))
    elif kind == "bool":
        bad = not isinstance(value, bool) and str(value).lower() not in BOOLEANS
    elif kind == "int":
        bad = isinstance(value, bool) or not (isinstance(value, int) or str(value).strip().lstrip("-").isdigit())
    else:  # str, path, raw: a scalar
        bad, expected = isinstance(value, list | dict), "a single value (a string)"
    return f"{_type_name(value)}, expected {expected}" if bad else None


def mistyped(values_by_source: dict[str, dict], files: dict[str, list[str]] | None = None) -> list[str]:
    """One sentence per role variable of the wrong type: where it was set (the file, where it is known), the type
    found and the type expected. `files`: variable name -> the inventory files that set it."""
    known_specs = specs()
    found: dict[tuple[str, str], list[str]] = {}
    for source, values in values_by_source.items():
        for name, value in values.items():
            spec = known_specs.get(name)
            problem = wrong_type(value, spec) if spec else None
            if problem:
                found.setdefault((name, problem), []).append(source)
    out = []
    for (name, problem), sources in sorted(found.items()):
        # a host's value: the inventory's files that set it (else the host); an -e value: the -e it came from
        hosts = sorted(source for source in sources if source.startswith("host "))
        where = ((files or {}).get(name) or hosts) if hosts else []
        where += sorted(source for source in sources if not source.startswith("host "))
        role = known_specs[name]["role"]
        out.append(f"{name} in {', '.join(where[:4])}{' ...' if len(where) > 4 else ''} is {problem} (roles/{role}"
                   f"/README.md describes it)")
    return out


def files_setting(inventory: str, names: set[str]) -> dict[str, list[str]]:
    """For each name, the inventory's variable files (group_vars/, host_vars/ beside its sources) that set it."""
    found: dict[str, list[str]] = {}
    base = Path(inventory)
    base = base if base.is_dir() else base.parent
    for folder in ("group_vars", "host_vars"):
        for path in sorted((base / folder).rglob("*")) if (base / folder).is_dir() else []:
            if not path.is_file() or path.suffix not in ("", ".yml", ".yaml", ".json"):
                continue
            try:
                data = yaml.load(path.read_text(), Loader=AnyTagLoader)
            except (OSError, UnicodeDecodeError, yaml.YAMLError):
                continue
            for name in names & set(data if isinstance(data, dict) else {}):
                found.setdefault(name, []).append(str(path))
    return found


def lock_problems(values_by_source: dict[str, dict], inventory: str) -> list[str]:
    """What is wrong with the image lock the inventory gives its hosts, as every run would find it later, host by
    host (module_utils/images/_lock.py): the variable spark_images_lock, the lock file (spark_images_lock_file where
    the inventory sets it to a path of its own, else the inventory's group_vars/all/spark_images_lock.yml), and the
    two disagreeing."""
    from sparkfleet.collection_home import collection_module

    image_lock = collection_module("images._lock")
    where = files_setting(inventory, {image_lock.VARIABLE}).get(image_lock.VARIABLE) or ["the inventory"]
    default = str(Path(inventory if Path(inventory).is_dir() else Path(inventory).parent) / image_lock.DEFAULT_FILE)
    # The hosts of an inventory share one lock, as a rule: each different (file, variable) is judged once, so a
    # fleet of a hundred hosts reads the file once, not a hundred times.
    judged: dict[tuple[str, str], list[str]] = {}
    problems: list[str] = []
    for values in values_by_source.values():
        path = values.get("spark_images_lock_file")
        path = path if isinstance(path, str) and path and "{" not in path else default
        variable = values.get(image_lock.VARIABLE)
        key = (path, json.dumps(variable, sort_keys=True, default=str) if image_lock.VARIABLE in values else "")
        if key not in judged:
            found = image_lock.problems(variable, where[0]) if image_lock.VARIABLE in values else []
            if not found:
                try:
                    image_lock.load(path, variable)
                except image_lock.LockRefused as exc:
                    found = exc.problems or [exc.msg]
            judged[key] = found
        problems += [problem for problem in judged[key] if problem not in problems]
    return problems


def _default_catalog() -> list:
    data = yaml.safe_load((PROJECT_DIR / "roles" / "spark_images" / "defaults" / "main.yml").read_text()) or {}
    return data.get("spark_images_catalog") or []


def _nearest(name: object, names: list[str]) -> str:
    near = difflib.get_close_matches(str(name), names, n=1, cutoff=0.6)
    return f": did you mean {near[0]}?" if near else ""


def catalog_problems(values_by_source: dict[str, dict], inventory: str) -> list[str]:
    """What the image lock and the derived recipes name that no host's catalog has, in sparkfleet's words with the
    nearest name (issue 58, item 4: a lock entry renamed 'unslot' failed the run as "has no entry 'unsloth'", a
    derived image's base 'ngcc' as a filter's traceback). A lock serves the whole fleet and keeps an image no
    longer configured until the next pin: an entry is named only where a catalog image with a moving tag has none
    (every run would stop there), with the stray entry it may have been renamed to."""
    from sparkfleet.collection_home import collection_module

    image_lock = collection_module("images._lock")
    default = _default_catalog()
    catalogs = {source: values.get("spark_images_catalog", default) for source, values in values_by_source.items()}
    images = {str(image.get("name")): image for catalog in catalogs.values() if isinstance(catalog, list)
              for image in catalog if isinstance(image, dict) and image.get("name")}
    names = sorted(images)
    if not names:
        return []
    found: list[str] = []
    folder = Path(inventory if Path(inventory).is_dir() else Path(inventory).parent)
    default_path = str(folder / image_lock.DEFAULT_FILE)
    paths = {values.get("spark_images_lock_file") for values in values_by_source.values()}
    moving = {str(tag) for values in values_by_source.values()
              for tag in (values.get("spark_images_moving_tags") or ["latest", "dgxspark-latest"])}
    for path in sorted(p if isinstance(p, str) and p and "{" not in p else default_path for p in paths):
        try:
            lock, _text = image_lock.read(path)
        except image_lock.LockRefused:
            continue  # lock_problems says why
        if not isinstance(lock, dict):
            continue
        stray = sorted(str(n) for n in lock if str(n) not in names)
        for name in names:
            tags = [t for t in images[name].get("tags") or [] if str(t) in moving]
            if name in lock or not tags or not lock:
                continue
            near = difflib.get_close_matches(name, stray, n=1, cutoff=0.6)
            found.append(f"{path}: no entry {name!r} for {images[name].get('registry')}/"
                         f"{images[name].get('repository')}:{tags[0]}, a moving tag, which no run pulls unlocked"
                         + (f"; the entry {near[0]!r} names no image of the catalog ({', '.join(names)}): did you "
                            f"mean {name}? Rename it" if near else "") + ", or run `sparkfleet pin` to lock it")
    where = None
    for source, values in sorted(values_by_source.items()):
        catalog = catalogs[source] if isinstance(catalogs[source], list) else []
        bases = [str(image.get("name")) for image in catalog if isinstance(image, dict)]
        for recipe in values.get("spark_images_derived") or []:
            base = recipe.get("base") if isinstance(recipe, dict) else None
            if base is None or str(base) in bases:
                continue
            where = where or ", ".join(files_setting(inventory, {"spark_images_derived"}).get(
                "spark_images_derived") or ["the inventory"])
            line = (f"{where}: spark_images_derived: derived image {recipe.get('name')}: base {base!r} is not one of "
                    f"the images it can be built from ({', '.join(bases) or 'none'}){_nearest(base, bases)}")
            if line not in found:
                found.append(line)
    return found


def unknown(names_by_source: dict[str, set[str]], names: set[str] | None = None) -> list[str]:
    """One sentence per variable that looks like sparkfleet's and is not: where it was set, the nearest name."""
    names = known() if names is None else names
    found: dict[str, list[str]] = {}
    for source, variables in names_by_source.items():
        for name in variables:
            if PREFIX.match(name) and name not in names:
                found.setdefault(name, []).append(source)
    out = []
    for name, sources in sorted(found.items()):
        near = difflib.get_close_matches(name, sorted(names), n=1, cutoff=0.75)
        out.append(f"{name}, set for {', '.join(sorted(sources)[:4])}{' ...' if len(sources) > 4 else ''}: "
                   + (f"did you mean {near[0]}?" if near else "no role reads it (each role's README lists its "
                                                               "variables)"))
    return out


def inventory_values(inventory: str, env: dict[str, str], listing=None) -> dict[str, dict]:
    """Each host's inventory variables (group_vars and host_vars merged), as ansible-inventory lists them; empty
    when it cannot list them without help (a vaulted file, a dynamic source that fails): Ansible then says why.
    `listing`: the inventory already listed (selection.list_inventory), so that it is listed once a run."""
    from sparkfleet.selection import is_host_list, list_inventory

    if is_host_list(inventory):
        return {}
    listing = listing or list_inventory(inventory, env)
    return {f"host {host}": values for host, values in listing.hostvars.items()}


def inventory_names(inventory: str, env: dict[str, str]) -> dict[str, set[str]]:
    return {source: set(values) for source, values in inventory_values(inventory, env).items()}


def extra_values(extra_vars: list[str]) -> dict[str, dict]:
    """The variables each -e sets (inline JSON/YAML, key=value, or @file), with their values; one that cannot be
    read is left to Ansible, which says why."""
    out: dict[str, dict] = {}
    for value in extra_vars or []:
        try:
            text = Path(value[1:]).expanduser().read_text() if value.startswith("@") else value
            data = yaml.safe_load(text)
        except (OSError, yaml.YAMLError):
            continue
        if not isinstance(data, dict):
            data = dict(word.split("=", 1) for word in value.split() if "=" in word) if "=" in value else {}
        if data:
            out.setdefault(f"-e {value if value.startswith('@') else '(inline)'}", {}).update(
                {str(k): v for k, v in data.items()})
    return out


def extra_names(extra_vars: list[str]) -> dict[str, set[str]]:
    return {source: set(values) for source, values in extra_values(extra_vars).items()}

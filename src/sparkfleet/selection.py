"""What a run selects, checked before it starts: the inventory it reads (-i, else ANSIBLE_INVENTORY, else the
ansible.cfg in effect), the hosts --limit picks and the tags --tags and --skip-tags name.

Ansible takes a --limit term that matches nothing, and a tag that no task has, without a word (a warning in the
run's output at most): `verify -l spark-02,spark-09` checked one host and passed, `provision --tags spark_imagez` ran
nothing and passed. Here each term and tag is matched against what exists, and one that matches nothing is bad
input (exit 4), named with the nearest that exists, before any host is touched.
"""

from __future__ import annotations

import difflib
import fnmatch
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sparkfleet.collection_home import PROJECT_DIR
from sparkfleet.processes import run_ended_with_us

# Tags Ansible itself gives a meaning to.
SPECIAL_TAGS = ("all", "always", "never", "tagged", "untagged")
# Always in an inventory, whether listed or not.
IMPLICIT_HOSTS = ("localhost", "127.0.0.1")


@dataclass
class Listing:
    """An inventory as ansible-inventory lists it: each host's variables, each group's hosts (children's
    included). `read` is False where it could not be listed without help (a vault, a failing dynamic source):
    Ansible then says why, and nothing here is judged."""

    hostvars: dict[str, dict] = field(default_factory=dict)
    groups: dict[str, set[str]] = field(default_factory=dict)
    read: bool = True

    @property
    def hosts(self) -> set[str]:
        return set(self.hostvars) | {h for members in self.groups.values() for h in members}

    def populated_groups(self) -> list[str]:
        return sorted(name for name, members in self.groups.items() if members and name not in ("all", "ungrouped"))


def is_host_list(inventory: str) -> bool:
    """Whether `-i` names hosts ("spark-01,spark-02,") rather than an inventory's path: as Ansible's host_list plugin
    decides, a comma in a value that names no existing path (a folder whose name holds a comma is an inventory)."""
    return "," in inventory and not os.path.exists(inventory)


def host_list(inventory: str) -> Listing:
    """A host list typed as the inventory ("spark-01,spark-02,"): its hosts, no variables, no groups."""
    hosts = [h.strip() for h in inventory.split(",") if h.strip()]
    return Listing(hostvars={h: {} for h in hosts}, groups={"all": set(hosts), "ungrouped": set(hosts)})


def _unwrapped(obj: dict) -> object:
    """ansible-inventory --list writes a !unsafe string (text that could start a template, in a lock) as
    {"__ansible_unsafe": "text"}: the text, as every play has it."""
    return obj["__ansible_unsafe"] if len(obj) == 1 and isinstance(obj.get("__ansible_unsafe"), str) else obj


def list_inventory(inventory: str, env: dict[str, str]) -> Listing:
    """The inventory as Ansible reads it (one ansible-inventory --list for the whole check)."""
    if is_host_list(inventory):
        return host_list(inventory)
    try:
        rc, out = run_ended_with_us([str(Path(sys.executable).parent / "ansible-inventory"), "-i", inventory,
                                     "--list"], timeout=60, env={**os.environ, **env})
        data = json.loads(out, object_hook=_unwrapped) if rc == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        data = None
    if not isinstance(data, dict):
        return Listing(read=False)
    hostvars = (data.get("_meta") or {}).get("hostvars") or {}
    direct = {name: (set(group.get("hosts") or []), list(group.get("children") or []))
              for name, group in data.items() if name != "_meta" and isinstance(group, dict)}

    def members(name: str, seen: frozenset = frozenset()) -> set[str]:
        hosts, children = direct.get(name, (set(), []))
        out = set(hosts)
        for child in children:
            if child not in seen:
                out |= members(child, seen | {name})
        return out

    groups = {name: members(name) for name in direct}
    return Listing(hostvars={h: v for h, v in hostvars.items() if isinstance(v, dict)}, groups=groups)


def _terms(limit: str) -> list[str]:
    """A --limit's terms, as Ansible splits a pattern: at commas, and at colons outside a subscript or an
    address (a.b:c is host a.b and c; [::1] an address)."""
    if limit.startswith("@"):
        return []
    out = []
    for part in (p.strip() for p in limit.split(",")):
        if not part:
            continue
        if "[" in part or re.fullmatch(r"[0-9a-fA-F:]+", part):
            out.append(part)
        else:
            out += [p for p in part.split(":") if p]
    return out


def _matches(term: str, listing: Listing) -> set[str]:
    """The hosts one term (no ! or &) names: a group's hosts, a host, a glob, or ~regex."""
    name = re.sub(r"\[[0-9:\-]*\]$", "", term)  # a subscript of a group (sparks[0], sparks[0:2])
    names = {**{g: listing.groups[g] for g in listing.groups}, **{h: {h} for h in listing.hosts}}
    names.update({h: {h} for h in IMPLICIT_HOSTS})
    if name.startswith("~"):
        try:
            pattern = re.compile(name[1:])
        except re.error:
            return set()
        return {h for key, hosts in names.items() if pattern.match(key) for h in hosts}
    if any(c in name for c in "*?["):
        return {h for key, hosts in names.items() if fnmatch.fnmatchcase(key, name) for h in hosts}
    return set(names.get(name, set()))


def _nearest(word: str, known: list[str]) -> str:
    near = difflib.get_close_matches(word, known, n=1, cutoff=0.6)
    return f"did you mean {near[0]}? " if near else ""


def limit_problems(limit: str | None, listing: Listing, inventory: str) -> list[str]:
    """Each term of --limit that names no host or group of the inventory, and a limit that leaves no host; one
    sentence each, with the nearest name and what exists."""
    if not limit or not listing.read:
        return []
    terms = _terms(limit)
    known = sorted(listing.hosts) + listing.populated_groups()
    hosts_said = ", ".join(sorted(listing.hosts)[:12]) + (" ..." if len(listing.hosts) > 12 else "")
    groups_said = ", ".join(listing.populated_groups()) or "none"
    problems = []
    for term in terms:
        bare = term.lstrip("!&")
        if not _matches(bare, listing):
            problems.append(f"--limit names {bare}, which is no host or group of inventory {inventory}: "
                            f"{_nearest(bare, known)}its hosts: {hosts_said or 'none'}; its groups: {groups_said}")
    if problems or not terms:
        return problems
    chosen: set[str] = set()
    for term in (t for t in terms if not t.startswith(("!", "&"))):
        chosen |= _matches(term, listing)
    for term in (t for t in terms if t.startswith("&")):
        chosen &= _matches(term[1:], listing)
    for term in (t for t in terms if t.startswith("!")):
        chosen -= _matches(term[1:], listing)
    if not chosen:
        return [f"--limit {limit} leaves no host of inventory {inventory} (its hosts: {hosts_said or 'none'})"]
    return []


def _tags_of(node, found: set[str]) -> None:
    if isinstance(node, dict):
        tags = node.get("tags")
        if isinstance(tags, str):
            found.update(t.strip() for t in tags.split(",") if t.strip() and "{" not in t)
        elif isinstance(tags, list):
            found.update(str(t) for t in tags if isinstance(t, str | int) and "{" not in str(t))
        for value in node.values():
            _tags_of(value, found)
    elif isinstance(node, list):
        for item in node:
            _tags_of(item, found)


def collection_tags(root: Path = PROJECT_DIR) -> set[str]:
    """Every tag a task, block, role or play of the collection carries (its playbooks and roles)."""
    found: set[str] = set()
    for path in sorted([*(root / "playbooks").glob("*.yml"), *(root / "roles").glob("*/tasks/*.yml")]):
        try:
            _tags_of(yaml.safe_load(path.read_text()), found)
        except (OSError, yaml.YAMLError):
            continue
    return found


def tag_problems(tags: str | None, skip_tags: str | None, known: set[str] | None = None) -> list[str]:
    """Each tag of --tags or --skip-tags that no task of the collection has, with the nearest that exists."""
    known = collection_tags() if known is None else known
    problems = []
    for flag, value in (("--tags", tags), ("--skip-tags", skip_tags)):
        for tag in (t.strip() for t in (value or "").split(",") if t.strip()):
            if tag not in known and tag not in SPECIAL_TAGS:
                roles = sorted(p.name for p in (PROJECT_DIR / "roles").iterdir() if p.name in known)
                problems.append(f"{flag} names {tag}, which no task of sparkfleet has: {_nearest(tag, sorted(known))}"
                                f"the roles' tags are {', '.join(roles)} (each role's README lists its stages' tags)")
    return problems

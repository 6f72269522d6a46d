"""Which ansible.cfg a run uses, and the few settings sparkfleet adds to it.

The user's own configuration applies, found as Ansible finds it
(ANSIBLE_CONFIG, ./ansible.cfg, ~/.ansible.cfg, /etc/ansible/ansible.cfg):
their ssh_args, ProxyJump, remote_user, forks and the rest work as with plain
ansible-playbook. ansible-runner starts ansible-playbook in the collection's
directory, so "./ansible.cfg" is looked up here, in the directory the user
typed the command in, and handed over by its full path. Without any file of
the user's, sparkfleet's own ansible.cfg is used.

sparkfleet adds, through environment variables (which Ansible ranks above
any file), only what it needs:
- REQUIRED always: its collection first on the collections path (the user's
  path after it), a typo in an inventory is an error, an inventory's files/
  and matrix/ folders are not inventory sources, its callback that loads its
  filters once per run (plugins/callback/filters_preload.py) beside the
  user's own callbacks;
- DEFAULTS only where the user's file and environment say nothing:
  pipelining, and no interpreter-discovery warning.
"""

from __future__ import annotations

import configparser
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from sparkfleet.collection_home import collection_module

# The settings sparkfleet itself needs, as (environment variable, value).
REQUIRED = {"ANSIBLE_INVENTORY_ANY_UNPARSED_IS_FAILED": "True"}
# An inventory's files/ folder holds the files roles copy (derived images), its matrix/ folder the stack matrices
# `sparkfleet matrix propose` writes: never inventory sources.
IGNORE_PATTERNS = ("^files$", "^matrix$")
# (section, key) in ansible.cfg, the environment variables that say the same, sparkfleet's default.
DEFAULTS = (
    ((("connection", "pipelining"), ("ssh_connection", "pipelining"), ("defaults", "pipelining")),
     ("ANSIBLE_PIPELINING", "ANSIBLE_SSH_PIPELINING"), "True"),
    ((("defaults", "interpreter_python"),), ("ANSIBLE_PYTHON_INTERPRETER",), "auto_silent"),
)
DEFAULT_COLLECTIONS_PATH = ("~/.ansible/collections", "/usr/share/ansible/collections")
# Loads the collection's filters once, in the main process, not once per task's worker (issue 49).
PRELOAD_CALLBACK = "sparkfleet.spark.filters_preload"


def find_user_config(cwd: Path, environ: Mapping[str, str]) -> Path | None:
    """The ansible.cfg Ansible would read when run in `cwd` (None: none of the user's)."""
    chosen = environ.get("ANSIBLE_CONFIG")
    if chosen:
        path = Path(chosen).expanduser()
        path = path / "ansible.cfg" if path.is_dir() else path
        return path.resolve() if path.is_file() else None
    # Like Ansible: ./ansible.cfg is not read from a world-writable directory.
    candidates = [] if cwd.stat().st_mode & stat.S_IWOTH else [cwd / "ansible.cfg"]
    candidates += [Path("~/.ansible.cfg").expanduser(), Path("/etc/ansible/ansible.cfg")]
    return next((p.resolve() for p in candidates if p.is_file()), None)


def _read(path: Path) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, inline_comment_prefixes=(";",), strict=False)
    try:
        parser.read(path, encoding="utf-8")
    except configparser.Error as exc:
        raise ValueError(f"{path} is not an ansible.cfg Ansible can read ({str(exc).splitlines()[0]}); fix it, or "
                         "point ANSIBLE_CONFIG at another file") from None
    return parser


@dataclass
class AnsibleConfig:
    path: Path  # the file in use
    own: bool  # sparkfleet's own file (the user has none)
    env: dict[str, str]  # what sparkfleet adds
    inventory: str | None = None  # the inventory the user's configuration names (ANSIBLE_INVENTORY, [defaults])

    @property
    def described(self) -> str:
        return f"{self.path}" + (" (sparkfleet's own: no ansible.cfg of yours was found)" if self.own else "")


def _paths(value: str, base: Path) -> list[str]:
    return [str((base / Path(p).expanduser()) if not Path(p).expanduser().is_absolute() else Path(p).expanduser())
            for p in value.replace(",", os.pathsep).split(os.pathsep) if p]


def resolve(cwd: Path, environ: Mapping[str, str], own_config: Path, own_collections: Path) -> AnsibleConfig:
    user = find_user_config(cwd, environ)
    if user:
        # Its settings name the code Ansible loads (library, roles_path, plugins) as the user running sparkfleet:
        # judged by the one rule as every file root reads (module_utils/common/_trusted.py).
        trusted = collection_module("common._trusted")
        try:
            trusted.check_path(str(user), "the ansible.cfg in use", "file")
        except trusted.Untrusted as exc:
            raise ValueError(f"{exc}; it names the code Ansible loads, so sparkfleet does not run with it") from None
    path = user or own_config
    parser = _read(path) if user else configparser.ConfigParser()
    env = dict(REQUIRED)
    configured = environ.get("ANSIBLE_COLLECTIONS_PATH") or environ.get("ANSIBLE_COLLECTIONS_PATHS")
    if configured:
        rest = _paths(configured, cwd)
    else:
        raw = parser.get("defaults", "collections_path", fallback=None) or parser.get(
            "defaults", "collections_paths", fallback=None)
        rest = _paths(raw, path.parent) if raw else list(DEFAULT_COLLECTIONS_PATH)
    env["ANSIBLE_COLLECTIONS_PATH"] = os.pathsep.join(dict.fromkeys([str(own_collections), *rest]))
    ignore = environ.get("ANSIBLE_INVENTORY_IGNORE_REGEX") or parser.get("inventory", "ignore_patterns",
                                                                         fallback="")
    env["ANSIBLE_INVENTORY_IGNORE_REGEX"] = ",".join(dict.fromkeys([p.strip() for p in ignore.split(",") if p.strip()]
                                                                   + list(IGNORE_PATTERNS)))
    enabled = environ.get("ANSIBLE_CALLBACKS_ENABLED") or environ.get("ANSIBLE_CALLBACK_WHITELIST")
    if enabled is None:
        enabled = parser.get("defaults", "callbacks_enabled", fallback=None) or parser.get(
            "defaults", "callback_whitelist", fallback="")
    env["ANSIBLE_CALLBACKS_ENABLED"] = ",".join(dict.fromkeys([c.strip() for c in enabled.split(",") if c.strip()]
                                                              + [PRELOAD_CALLBACK]))
    for keys, variables, value in DEFAULTS:
        said = any(v in environ for v in variables) or any(parser.has_option(s, k) for s, k in keys
                                                           if parser.has_section(s))
        if not said:
            env[variables[0]] = value
    env["ANSIBLE_CONFIG"] = str(path)
    return AnsibleConfig(path=path, own=user is None, env=env, inventory=configured_inventory(parser, path, environ,
                                                                                            cwd))


def configured_inventory(parser: configparser.ConfigParser, path: Path, environ: Mapping[str, str],
                         cwd: Path) -> str | None:
    """The inventory the user's configuration names, as Ansible reads it: ANSIBLE_INVENTORY (relative to the
    working directory), else [defaults] inventory (or the old hostfile), relative to the file's directory; the
    first entry of a list. None when nothing names one."""
    raw, base = environ.get("ANSIBLE_INVENTORY"), cwd
    if not raw:
        raw = parser.get("defaults", "inventory", fallback=None) or parser.get("defaults", "hostfile", fallback=None)
        base = path.parent
    entries = [e.strip() for e in (raw or "").split(",") if e.strip()]
    if not entries:
        return None
    paths = [e for e in entries if (base / Path(e).expanduser()).exists()]
    if raw.strip().endswith(",") or (not paths and len(entries) > 1):
        return raw.strip()  # a host list ("spark-01,spark-02,")
    entries = paths or entries
    first = Path(entries[0]).expanduser()
    return str(first if first.is_absolute() else base / first)

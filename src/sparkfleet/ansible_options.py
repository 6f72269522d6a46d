"""Ansible's own options as sparkfleet takes them, and as ansible-playbook's arguments; values given with -e
reach Ansible through private files, never argv."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from sparkfleet.collection_home import collection_module


@dataclass
class AnsibleOptions:
    """The ansible-playbook options sparkfleet passes through, with Ansible's own meaning."""

    limit: str | None = None
    check: bool = False
    diff: bool = False
    tags: str | None = None
    skip_tags: str | None = None
    user: str | None = None
    connection: str | None = None
    become: bool = False
    ask_become_pass: bool = False
    ask_vault_pass: bool = False
    vault_ids: list[str] = field(default_factory=list)
    vault_password_file: str | None = None
    private_key: str | None = None
    forks: int | None = None
    verbose: int = 0

    @classmethod
    def from_args(cls, args, tags: str | None = None) -> AnsibleOptions:
        """From parsed command-line options; `tags` is the command's own default."""
        known = {name: getattr(args, name) for name in cls.__dataclass_fields__ if getattr(args, name, None)}
        return cls(**{**known, "tags": getattr(args, "tags", None) or tags})

    def argv(self, base: Path | None = None) -> list[str]:
        """The options for ansible-playbook; with `base`, the files they name made absolute from there
        (ansible-runner starts ansible-playbook in the collection's directory, not the user's)."""
        def path(value: str | None) -> str | None:
            return value and (str(base / Path(value).expanduser()) if base else value)

        def vault_id(value: str) -> str:
            label, at, source = value.rpartition("@")
            return value if not base or source == "prompt" else f"{label}{at}{path(source)}"

        cmd: list[str] = []
        for flag, value in (("--limit", self.limit), ("--tags", self.tags), ("--skip-tags", self.skip_tags),
                            ("--user", self.user), ("--connection", self.connection),
                            ("--vault-password-file", path(self.vault_password_file)),
                            ("--private-key", path(self.private_key)), ("--forks", self.forks)):
            if value:
                cmd += [flag, str(value)]
        for flag, on in (("--check", self.check), ("--diff", self.diff), ("--become", self.become),
                         ("--ask-become-pass", self.ask_become_pass), ("--ask-vault-pass", self.ask_vault_pass)):
            if on:
                cmd.append(flag)
        cmd += [word for value in self.vault_ids for word in ("--vault-id", vault_id(value))]
        if self.verbose:
            cmd.append("-" + "v" * self.verbose)
        return cmd

    def files(self) -> list[tuple[str, str]]:
        """(what, path) of each file these options make Ansible read or run as the user running sparkfleet: a vault
        password file (run where it is executable), each --vault-id's source, the SSH key; for the trust rule."""
        named = [("the vault password file", self.vault_password_file), ("the SSH key", self.private_key)]
        named += [("the vault id's password file", value.rpartition("@")[2]) for value in self.vault_ids]
        return [(what, str(Path(path).expanduser())) for what, path in named if path and path != "prompt"]

    def prompts(self) -> list[tuple[str, str]]:
        """(what to ask the user, the regex of ansible-playbook's own prompt) for each password it will ask."""
        asked = []
        if self.ask_become_pass:
            asked.append(("BECOME password: ", r"BECOME password.*:\s*$"))
        if self.ask_vault_pass:
            asked.append(("Vault password: ", r"Vault password:\s*$"))
        for vault_id in self.vault_ids:
            label, _, source = vault_id.rpartition("@")
            if source == "prompt":
                asked.append((f"Vault password ({label or 'default'}): ",
                               rf"Vault password \({re.escape(label or 'default')}\):\s*$"))
        return asked


def extra_vars_files(values: list[str], directory: Path) -> list[str]:
    """-e values as Ansible takes them, each inline one moved into a file (no secret in argv)."""
    args = []
    for index, value in enumerate(values or []):
        if value.startswith("@"):
            source = Path(value[1:]).expanduser()
            if not source.is_file():
                raise ValueError(f"extra-variables file {value[1:]} not found; expected -e @FILE to name a "
                                 "YAML or JSON file")
            # Judged by the one rule and copied once (a vaulted file stays vaulted): Ansible reads the copy, never
            # the user's file by name again (issue 70). Untrusted is a ValueError: the run is refused, naming it.
            data = collection_module("common._trusted").read_file(str(source), "the extra-variables file")
            copied = directory / f"extra-vars-{index}-{source.name}"
            fd = os.open(copied, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            args += ["--extra-vars", f"@{copied}"]
            continue
        stripped = value.strip()
        if stripped.startswith(("{", "[")) or (":" in stripped.split("=", 1)[0] and "=" not in stripped):
            try:
                data = yaml.safe_load(stripped)
            except yaml.YAMLError as exc:
                where = getattr(exc, "problem_mark", None)
                raise ValueError(f"extra variables '{stripped[:80]}' are not valid YAML/JSON"
                                 + (f" (line {where.line + 1}, column {where.column + 1}: {exc.problem})" if where
                                    else "") + "; expected key=value, YAML/JSON or @file") from None
        else:
            data = {}
            for word in shlex.split(stripped):
                key, sep, val = word.partition("=")
                if not sep or not key:
                    raise ValueError(f"extra variable '{word}' is not key=value, YAML/JSON or @file")
                data[key] = val
        path = directory / f"extra-vars-{index}.json"
        path.write_text(json.dumps(data))
        path.chmod(0o600)
        args += ["--extra-vars", f"@{path}"]
    return args


@contextlib.contextmanager
def private_files():
    """What sparkfleet itself writes (reports and artifacts, the inventory's .sparkfleet/) is its user's alone,
    whatever the umask; the processes it starts keep the user's umask (a venv on a Spark driven locally is for
    every user)."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)

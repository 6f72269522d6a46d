"""Bad input said in Ansible's own words: the errors ansible-playbook printed, and variable files it cannot read."""

from __future__ import annotations

import re
from pathlib import Path

import yaml


def ansible_errors(stdout: Path, inventory: str | None = None) -> list[str]:
    """Why Ansible stopped: its error lines from a run's stdout ('[ERROR]: ...' in ansible-core 2.19, 'ERROR! ...'
    before), each file:line:column it named ('Origin: ...'), and the inventory's variable file that does not parse
    (Ansible 2.19 names none for a broken group_vars file)."""
    try:
        text = stdout.read_text(errors="replace")
    except OSError:
        text = ""
    lines = [line.strip() for line in text.splitlines()]
    errors = [line for line in lines if line.startswith(("[ERROR]", "ERROR!"))]
    errors += dict.fromkeys(line for line in lines if line.startswith("Origin: ") and re.search(r":\d+:\d+$", line))
    from sparkfleet.selection import is_host_list

    return errors + (broken_variable_files(Path(inventory)) if inventory and not is_host_list(inventory) else [])


class AnyTagLoader(yaml.SafeLoader):
    """YAML as Ansible reads variable files: its own tags (!vault, !unsafe: what sparkfleet writes into an
    inventory tags text that could start a template with the latter) are values, not errors."""


def _tagged(loader: AnyTagLoader, _suffix: str, node: yaml.Node) -> object:
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


AnyTagLoader.add_multi_constructor("!", _tagged)


def broken_variable_files(inventory: Path) -> list[str]:
    """'file:line:column: problem' for each group_vars/host_vars file of the inventory that is not valid YAML."""
    base = (inventory if inventory.is_dir() else inventory.parent).absolute()
    found = []
    for folder in ("group_vars", "host_vars"):
        for path in sorted((base / folder).rglob("*")) if (base / folder).is_dir() else []:
            if not path.is_file() or path.suffix not in ("", ".yml", ".yaml", ".json"):
                continue
            try:
                text = path.read_text(errors="replace")
                if not text.startswith("$ANSIBLE_VAULT"):
                    yaml.load(text, Loader=AnyTagLoader)  # a SafeLoader
            except yaml.YAMLError as exc:
                mark = getattr(exc, "problem_mark", None)
                where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
                found.append(f"{where}: {getattr(exc, 'problem', None) or exc}")
            except OSError:
                continue
    return found

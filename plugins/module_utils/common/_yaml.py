# Copyright: sparkfleet contributors
# Apache License 2.0
"""PyYAML for the modules that read and write YAML on the controller (ansible-core brings it there), and the one
way sparkfleet writes a file Ansible may load as variables.

A host without PyYAML gets the standard "missing required library" failure, not an ImportError.

What sparkfleet writes into an inventory (the image lock, the hash lock, a proposed matrix) holds text a peer chose:
a registry's error, an index's file names, a hand edit. Ansible renders every string of group_vars as a template
when a play uses the variable, so `{{ lookup('pipe', ...) }}` in a registry's answer would run as root on the
controller, even under --check. inert_dump() writes every string (keys too) with Ansible's `!unsafe` tag, which
Ansible loads as text it never renders; inert_load() reads such a file back (PyYAML's safe loader, `!unsafe` read as
the text it tags); template_markers() finds the strings of a value that would be a template if they were rendered,
for the readers that refuse them (a hand edit has no tag).
"""

from __future__ import annotations

import traceback

from ansible.module_utils.basic import missing_required_lib

try:
    import yaml
except ImportError:
    yaml = None
    YAML_IMPORT_ERROR = traceback.format_exc()
else:
    YAML_IMPORT_ERROR = None

UNSAFE = "!unsafe"
# What starts or ends a Jinja expression, statement or comment: text holding one is refused where sparkfleet reads it.
MARKERS = ("{{", "}}", "{%", "%}", "{#", "#}")


def require_yaml(module) -> None:
    """Fail the module, saying so, when PyYAML is not there."""
    if yaml is None:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR)


class _Name(str):
    """A top-level key of inert_dump(): a variable's name."""


if yaml is not None:
    class InertDumper(yaml.SafeDumper):
        """Every string tagged !unsafe; mappings in the order given (the file's order is its review)."""

    InertDumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(UNSAFE, text))
    # A variable's own name is no text of a peer's: written plain, as Ansible expects a name.
    InertDumper.add_representer(_Name, lambda dumper, text: dumper.represent_str(str(text)))
    InertDumper.add_representer(dict, lambda dumper, data: dumper.represent_mapping("tag:yaml.org,2002:map",
                                                                                    data.items()))

    class InertLoader(yaml.SafeLoader):
        """PyYAML's safe loader with Ansible's !unsafe read as the text it tags."""

    InertLoader.add_constructor(UNSAFE, lambda loader, node: loader.construct_scalar(node))


def _plain(value: object) -> object:
    """`value` in Python's own types (Ansible hands a filter its tagged subclasses of str, dict, list and int, which
    PyYAML's representers do not know)."""
    if isinstance(value, dict):
        return {_plain(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    for kind in (bool, str, int, float):
        if isinstance(value, kind):
            return kind(value)
    return value


def inert_dump(data: object, header: str = "") -> str:
    """YAML of `data` that Ansible loads as data: every string !unsafe. `header`: comment lines after `---`."""
    data = _plain(data)
    if isinstance(data, dict):
        data = {_Name(key) if isinstance(key, str) else key: value for key, value in data.items()}
    return "---\n" + header + yaml.dump(data, Dumper=InertDumper, sort_keys=False, default_flow_style=False,
                                        width=200, allow_unicode=True)


def inert_load(text: str) -> object:
    """What inert_dump() wrote (and any plain YAML), read with the safe loader."""
    return yaml.load(text, Loader=InertLoader)


def template_markers(value: object, where: str = "") -> list[str]:
    """Where in `value` (keys and values, nested) a string holds a template marker: 'where: text' for each."""
    if isinstance(value, dict):
        return [found for key, item in value.items()
                for found in template_markers(key, f"{where}key ") + template_markers(item, f"{where}{key}.")]
    if isinstance(value, (list, tuple)):
        return [found for index, item in enumerate(value) for found in template_markers(item, f"{where}{index}.")]
    if isinstance(value, str) and any(marker in value for marker in MARKERS):
        return [f"{where.rstrip('. ') or 'the value'}: {value[:80]!r}"]
    return []

# Copyright: sparkfleet contributors
# Apache License 2.0
"""PyYAML for the modules that read and write YAML on the controller (ansible-core brings it there), and the one
way sparkfleet writes a file Ansible may load as variables.

A host without PyYAML gets the standard "missing required library" failure, not an ImportError.

What sparkfleet writes into an inventory (the image lock, the hash lock) holds text a peer chose: a registry's error,
an index's file names, a hand edit. Ansible renders every string of group_vars as a template when a play uses the
variable, so `{{ lookup('pipe', ...) }}` in a registry's answer would run as root on the controller, even under
--check. inert_dump() writes every string that could start a template (one holding '{{', '{%', '{#' or a
'#jinja2:' header) with Ansible's `!unsafe` tag, which Ansible loads as text it never renders, and every other
string as PyYAML's safe dumper does: Ansible reads a tagged scalar's type anew, ignoring its quotes ('25.10' tagged
is the float 25.1, a date a datetime), so only text that cannot be read as another type is tagged. inert_load()
reads such a file back (PyYAML's safe loader, `!unsafe` read as the text it tags); template_markers() finds the
strings of a value that would be a template if rendered, for the readers that refuse them (a hand edit has no tag).
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
# What makes Ansible take a string for a template: text holding one is written !unsafe.
STARTS = ("{{", "{%", "{#", "#jinja2:")


def require_yaml(module) -> None:
    """Fail the module, saying so, when PyYAML is not there."""
    if yaml is None:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR)


if yaml is not None:
    class InertDumper(yaml.SafeDumper):
        """A string that could start a template tagged !unsafe, every other as the safe dumper writes it; mappings
        in the order given (the file's order is its review)."""

        def represent_str(self, data):
            if any(start in data for start in STARTS):
                return self.represent_scalar(UNSAFE, data)
            return super().represent_str(data)

    InertDumper.add_representer(str, InertDumper.represent_str)
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
    """YAML of `data` that Ansible loads as data: a string that could start a template !unsafe. `header`: comment
    lines after `---`."""
    data = _plain(data)
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

# Copyright: sparkfleet contributors
# Apache License 2.0
"""PyYAML for the modules that read and write YAML on the controller (ansible-core brings it there).

A host without it gets the standard "missing required library" failure, not an ImportError.
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


def require_yaml(module) -> None:
    """Fail the module, saying so, when PyYAML is not there."""
    if yaml is None:
        module.fail_json(msg=missing_required_lib("PyYAML"), exception=YAML_IMPORT_ERROR)

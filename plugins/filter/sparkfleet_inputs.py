# Copyright: sparkfleet contributors
# Apache License 2.0
"""What enters from the inventory. spark_checked: one value from an inventory, a lock or a matrix, checked where
it enters a path, a script or a URL, by the validator of its kind (module_utils/common/_validate.py).
spark_inventory_dir: the inventory's one directory (module_utils/common/_inventory.py), or a path in it.
spark_renamed: a variable's value under its old name, read with a deprecation warning (a role's defaults say
`new: "{{ old | spark_renamed('old', 'new') if old is defined else <default> }}"`; the CLI reads the renames there).
(ansible-doc reads each filter's documentation from plugins/filter/<filter>.yml.)
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _validate as validate
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._inventory import NoInventoryDirectory, directory

KINDS = ("tag", "digest", "registry", "repository", "launcher", "host_name", "iso_datetime", "env_name",
         "env_value", "relative_dir", "platform")


def spark_checked(value, kind: str, what: str):
    """The value itself when it is a good `kind`; otherwise fail naming `what`, the value and what is expected."""
    if kind not in KINDS:
        raise AnsibleFilterError(f"spark_checked: kind {kind!r} is not one of {', '.join(KINDS)}")
    problem = getattr(validate, kind)(value)
    if problem:
        raise AnsibleFilterError(f"{what} {problem}")
    return value


def spark_renamed(value, old: str, new: str, kind: str = "variable"):
    """The value set under a variable's old name (or a role entry point's, kind="entry point"), with a deprecation
    warning naming the new one."""
    from ansible.utils.display import Display

    if kind == "variable":
        said = f"the variable {old} is now {new}: rename it where you set it ({old} is still read)"
    else:
        said = f"the {kind} {old} is now {new}: rename it where you name it ({old} still works)"
    Display().deprecated(said, version="1.0.0", collection_name="sparkfleet.spark")
    return value


def spark_inventory_dir(sources: list, path: str = "", host_list: str | None = None) -> str:
    """The inventory's directory (or `path` in it); for a host list, `host_list` when it is given, else fail."""
    try:
        found = directory(sources)
    except NoInventoryDirectory as exc:
        if host_list is not None and exc.host_list:
            return host_list
        raise AnsibleFilterError(str(exc)) from None
    return os.path.join(found, path) if path else found


class FilterModule:
    def filters(self):
        return {"spark_checked": spark_checked, "spark_inventory_dir": spark_inventory_dir,
                "spark_renamed": spark_renamed}

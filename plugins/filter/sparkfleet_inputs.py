# Copyright: sparkfleet contributors
# Apache License 2.0
"""spark_checked: one value from an inventory, a lock or a matrix, checked where it enters a path, a script or a
URL, by the validator of its kind (module_utils/_validate.py).
(ansible-doc reads the filter's documentation from plugins/filter/spark_checked.yml.)
"""

from __future__ import annotations

from ansible.errors import AnsibleFilterError
from ansible_collections.sparkfleet.spark.plugins.module_utils import _validate as validate

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


class FilterModule:
    def filters(self):
        return {"spark_checked": spark_checked}

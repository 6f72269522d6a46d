# Copyright: sparkfleet contributors
# Apache License 2.0
"""Filters of spark_container_runtime over what the preflight facts read of Docker's configuration.
(ansible-doc reads each filter's documentation from plugins/filter/<filter>.yml.)
"""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.module_utils.host._docker_daemon import (
    RUNTIME_PATH,
    registration_gaps,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._oci import debian_architecture


def spark_docker_registration_gaps(daemon_json: dict | None, path: str, set_as_default: bool = False,
                                   enable_cdi: bool = False, runtime_path: str = RUNTIME_PATH) -> list[str] | None:
    """What daemon.json lacks for the nvidia runtime's registration, from the preflight facts'
    C(docker_daemon_json); None when the facts cannot tell (another file, or one that is not JSON), so that
    spark_docker_runtime reads the file itself.

    The same judgement as spark_docker_runtime's (module_utils/host/_docker_daemon.registration_gaps): an empty list
    is a registered runtime, and the module call is not needed.
    """
    if not isinstance(daemon_json, dict) or daemon_json.get("path") != path \
            or not isinstance(daemon_json.get("registration"), dict):
        return None
    return registration_gaps(daemon_json["registration"], runtime_path, set_as_default, enable_cdi)


def spark_debian_architecture(arch: str | None) -> str | None:
    """Debian's name for a machine's architecture (uname -m): the toolkit repository's directory; None for one
    sparkfleet does not know (module_utils/images/_oci.py holds the one architecture map)."""
    return debian_architecture(arch)


class FilterModule:
    def filters(self):
        return {"spark_docker_registration_gaps": spark_docker_registration_gaps,
                "spark_debian_architecture": spark_debian_architecture}

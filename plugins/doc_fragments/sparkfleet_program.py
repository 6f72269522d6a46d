# Copyright: sparkfleet contributors
# Apache License 2.0
"""The options of the modules that run a program of theirs in an interpreter under test: on the host, or in an
image through its launcher (spark_gpu_verify's probe, spark_smoke_train's step)."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  python:
    description: The interpreter on the host to run the program in. Exactly one of O(python) and O(launcher).
    type: path
  launcher:
    description:
      - A launcher installed by spark_images; it is run as C(LAUNCHER python3 -) with the program on stdin and
        C(SPARK_CONTAINER_NAME) set, so a container still running at the deadline can be removed.
    type: path
  environment:
    description: Extra environment variables for the program (O(python)) or the launcher (O(launcher)).
    type: dict
    default: {}
"""

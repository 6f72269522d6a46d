# Copyright: sparkfleet contributors
# Apache License 2.0
"""The Docker CLI option of the modules that talk to the host's engine."""


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  docker:
    description: The Docker CLI, a name on C(PATH) or a path.
    type: path
    default: docker
"""

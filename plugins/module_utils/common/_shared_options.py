# Copyright: sparkfleet contributors
# Apache License 2.0
"""The argument specs several modules share, one place each (their documentation: plugins/doc_fragments/)."""

from __future__ import annotations

# The Docker CLI (doc fragment sparkfleet_docker): a name on PATH or a path.
DOCKER = {"docker": {"type": "path", "default": "docker"}}
# A program run in an interpreter under test, on the host or through an image's launcher (doc fragment
# sparkfleet_program), with the AnsibleModule arguments that make them exactly one of the two.
PROGRAM = {"python": {"type": "path"}, "launcher": {"type": "path"}, "environment": {"type": "dict", "default": {}}}
ONE_INTERPRETER = {"required_one_of": [["python", "launcher"]], "mutually_exclusive": [["python", "launcher"]]}

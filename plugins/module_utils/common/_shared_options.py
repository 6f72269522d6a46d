# Copyright: sparkfleet contributors
# Apache License 2.0
"""The argument specs several modules share, one place each (their documentation: plugins/doc_fragments/)."""

from __future__ import annotations

# The Docker CLI (doc fragment sparkfleet_docker): a name on PATH or a path.
DOCKER = {"docker": {"type": "path", "default": "docker"}}

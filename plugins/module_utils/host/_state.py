# Copyright: sparkfleet contributors
# Apache License 2.0
"""The host state file: what was provisioned and verified, and when (pure logic)."""

from __future__ import annotations

import json
from typing import Any

SCHEMA = 1
# Where a host keeps it (spark_state's, spark_doctor's and the preflight facts' default).
STATE_FILE = "/var/lib/sparkfleet/state.json"
# Timestamps that must not make an unchanged state look changed.
_TIMES = ("written_at",)


def without_times(state: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (state or {}).items() if k not in _TIMES}


def merge(previous: dict[str, Any] | None, content: dict[str, Any], now: str) -> tuple[dict[str, Any], str]:
    """The state to write and what happened: 'created', 'updated' or 'unchanged'.

    An unchanged state keeps its timestamp, so a converged re-run writes nothing.
    """
    new = {"schema": SCHEMA, **content}
    if previous is None:
        return {**new, "written_at": now, "first_written_at": now}, "created"
    first = previous.get("first_written_at") or previous.get("written_at") or now
    new["first_written_at"] = first
    if without_times(previous) == without_times(new):
        return previous, "unchanged"
    return {**new, "written_at": now}, "updated"


def parse(text: str | None) -> dict[str, Any] | None:
    """The previous state; None when absent or damaged (spark_state keeps a damaged file aside)."""
    if not text:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def render(state: dict[str, Any]) -> str:
    return json.dumps(state, indent=2, sort_keys=True) + "\n"

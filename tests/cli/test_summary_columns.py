"""The CLI's summary takes its columns from the collection's tables (_fleet_table.COLUMNS, TARGET_COLUMNS)."""

from __future__ import annotations

from sparkfleet import terminal
from sparkfleet.report import table


def test_the_terminal_and_the_play_take_the_columns_from_the_table():
    """The terminal's order and folding widths are the columns' own; the play's table is the same row less the
    counts Ansible's recap already gives."""
    assert table.priority(table.COLUMNS) == terminal.PRIORITY
    assert set(terminal.FOLDING) == {c.name for c in (*table.COLUMNS, *table.TARGET_COLUMNS) if c.fold}
    assert set(terminal.PRIORITY) == set(table.HEADERS)

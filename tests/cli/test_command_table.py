"""The command table walked (issue 50): each command's playbook is there and is named where users look, so a
command whose playbook is missing fails here rather than at run time, blaming the user's inventory."""

from __future__ import annotations

import re

import yaml

from conftest import REPO
from sparkfleet.command_table import COMMANDS, GROUPS

# Where users look for a command: the README and the pages of docs/; the map of the tree is CONTRIBUTING.md's.
# The pages users read for a job (the reference's table of every command is written from the table: not counted).
PAGES = "\n".join(path.read_text() for path in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
                  if path.name != "reference.md")
CONTRIBUTING = (REPO / "CONTRIBUTING.md").read_text()


def test_each_commands_playbook_is_there_and_is_a_play_list():
    for command in COMMANDS:
        path = REPO / command.playbook
        assert path.is_file(), f"sparkfleet {' '.join(command.words)} runs {command.playbook}, which is not there"
        plays = yaml.safe_load(path.read_text())
        assert isinstance(plays, list) and plays and all("hosts" in p or "import_playbook" in p for p in plays), \
            f"{command.playbook} is not a list of plays"


def test_each_command_is_in_the_docs_and_each_playbook_in_the_maps_playbooks_row():
    for command in COMMANDS:
        assert f"sparkfleet {' '.join(command.words)}" in PAGES, (
            f"no page of docs/ shows `sparkfleet {' '.join(command.words)}`: show its command line in the page for "
            "its job (docs/README.md lists them)")
        assert command.words[0] in GROUPS or len(command.words) == 1, (
            f"sparkfleet {' '.join(command.words)} is in the group {command.words[0]!r}, which has no line in GROUPS "
            f"of src/sparkfleet/command_table.py: add one (its line in --help and its description)")
    row = next(line for line in CONTRIBUTING.splitlines() if line.startswith("| `playbooks/` |"))
    named = set(re.findall(r"`([a-z_]+\.yml)`", row))
    on_disk = {path.name for path in (REPO / "playbooks").glob("*.yml")}
    assert named == on_disk, f"the map's playbooks row names {sorted(named)}; playbooks/ holds {sorted(on_disk)}"
    assert {command.playbook for command in COMMANDS} <= {f"playbooks/{name}" for name in on_disk}

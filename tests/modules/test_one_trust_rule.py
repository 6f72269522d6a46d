"""Issue 70: one rule for every path root reads or writes (module_utils/common/_trusted.py). Every earlier finding of
root reading a path another user could swap came from a place that judged a path its own way: only the last folder,
only world-writable folders above it, a link's target only. This walks the driver's and the collection's code and
fails on any place that makes a trust decision of its own (an owner compared, a mode's write or sticky bits read)
that is not listed below with the reason it is not a second rule; the list fails too where an entry no longer
does what it says (a stale exemption hides the next one)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RULE = "plugins/module_utils/common/_trusted.py"
DECISION = re.compile(r"\bst_uid\b|\bS_IWOTH\b|\bS_IWGRP\b|\bS_ISVTX\b|st_mode\)?\s*&\s*0o0[0-7]{2}\b|"
                      r"\btrusted_owners\(|\bwritable_by_others\(")
# Each place that reads owners or modes and why it is not a trust rule of its own.
NOT_A_SECOND_RULE = {
    "src/sparkfleet/ansible_config.py": "which ./ansible.cfg Ansible itself reads (it skips a world-writable "
                                        "folder's, as ansible-core does); the file chosen is judged by check_path",
    "src/sparkfleet/watch.py": "the unit's stricter demand on top of check_path (no folder every user can write, even "
                               "sticky), and `remove` taking only a trusted owner's regular files through the "
                               "descriptor of the folder check_dir judged",
    "plugins/module_utils/common/_files.py": "atomic_write keeps an existing file's owner and mode where it is a "
                                             "trusted owner's (trusted_owners), after make_dir judged the folder",
    "plugins/module_utils/host/_user_files.py": "root acting for a less privileged user in their own home: each "
                                                "component through its parent's descriptor, the user's own files "
                                                "only (a stricter rule for a folder that is theirs by design)",
    "plugins/module_utils/host/_converged.py": "closes a folder of root's own that an older sparkfleet left open "
                                               "(chmod), before check_dir judges it",
    "plugins/modules/spark_cluster_measure.py": "which user a listening process runs as, not a path",
    "plugins/modules/spark_docker_runtime.py": "daemon.json's replacement keeps the file's owner (chown), not a "
                                               "trust decision",
}


def _decisions() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in sorted([*REPO.glob("src/sparkfleet/**/*.py"), *REPO.glob("plugins/**/*.py")]):
        name = str(path.relative_to(REPO))
        if name == RULE:
            continue
        lines = [f"{name}:{number}: {line.strip()}" for number, line in enumerate(path.read_text().splitlines(), 1)
                 if DECISION.search(line)]
        if lines:
            found[name] = lines
    return found


def test_no_place_but_the_rule_decides_whom_a_path_belongs_to_or_who_may_write_it():
    found = _decisions()
    second = [line for name, lines in found.items() if name not in NOT_A_SECOND_RULE for line in lines]
    assert second == [], ("a trust decision outside module_utils/common/_trusted.py: judge the path with "
                          "check_path/check_dir/read_file there, or say here why it is not a second rule:\n"
                          + "\n".join(second))
    stale = sorted(set(NOT_A_SECOND_RULE) - set(found))
    assert stale == [], f"listed as exempt, but no longer reads owners or modes: {stale}"


def test_the_rule_catches_what_a_second_rule_would_look_like():
    """The walk's pattern is checked on the forms the review found (not a pattern that matches nothing)."""
    for line in ("if info.st_uid not in (0, os.getuid()):", "if above.st_mode & stat.S_IWOTH and not sticky:",
                 "if stat.S_IMODE(info.st_mode) & 0o022:", "mode & stat.S_ISVTX", "trusted.writable_by_others(x)"):
        assert DECISION.search(line), line
    assert not DECISION.search("os.chmod(path, 0o755)")

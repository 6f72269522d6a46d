"""ansible-runner's artifacts as they are kept in the report directory: nothing secret, nothing others may write."""

from __future__ import annotations

import json
import stat
from pathlib import Path


def scrub_artifacts(artifacts: Path) -> None:
    """Keep the names of the environment ansible-runner records in each run's `command` artifact, not the
    values: the controller's environment may hold secrets (an NGC_API_KEY, cloud credentials, GITHUB_TOKEN).
    And make what ansible-runner and ansible-playbook wrote there under the user's umask (stdout, stderr, the
    fact cache) the user's alone, as the directory that holds them is."""
    for path in [artifacts, *artifacts.rglob("*")]:
        try:
            mode = path.lstat().st_mode
            if not stat.S_ISLNK(mode) and mode & 0o077:
                path.chmod(stat.S_IMODE(mode) & 0o700)
        except OSError:
            continue
    for path in artifacts.glob("*/command"):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("env"), dict):
            data["env"] = sorted(data["env"])
            path.write_text(json.dumps(data))

"""The content key of what bench/fleet.py measures: a sha256 over the path and bytes of every tracked file under
roles/ and plugins/ (as they are in the work tree). bench/results/fleet.json records it; `make test`'s timing
table (bench/suite_timings.py) says when the roles and plugins differ from those the figures were measured on,
so a regression is seen in the next run, not forty commits later (issue 49).

    python bench/content_key.py
"""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MEASURED = ("roles", "plugins")


def content_key(repo: Path = REPO) -> str:
    listed = subprocess.run(["git", "ls-files", "-z", *MEASURED], cwd=repo, capture_output=True, check=True).stdout
    digest = hashlib.sha256()
    for name in sorted(p for p in listed.decode().split("\0") if p):
        path = repo / name
        digest.update(name.encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() and not path.is_symlink() else b"")
        digest.update(b"\0")
    return digest.hexdigest()[:16]


if __name__ == "__main__":
    print(content_key())

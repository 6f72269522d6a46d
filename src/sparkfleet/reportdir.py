"""A run's report directory is sparkfleet's own: made fresh (exclusive, 0700) or one sparkfleet made before,
never a link, never a folder that holds someone else's files.

sparkfleet often runs as root, from a directory other users may write to. So nothing here follows a link: the
report root and the run's folder are checked with lstat, made with an exclusive mkdir, and each file is written
through a new temporary file opened with O_EXCL and O_NOFOLLOW. A --report-dir that already holds anything
sparkfleet did not write (a CI job's artifacts, a project's files) is refused before anything in it is touched.
"""

from __future__ import annotations

import datetime
import errno
import os
import shutil
from pathlib import Path

from sparkfleet.collection_home import collection_module

# Written into every report directory sparkfleet makes: a directory with it may be used again (--report-dir).
MARK = ".sparkfleet-report"
# What sparkfleet writes into a report directory; anything else there is the user's.
OWN = {MARK, "artifacts", "report.json", "report.md", "report.junit.xml", "doctor.md", "doctor.json"}


class Refused(ValueError):
    """A report directory sparkfleet will not write into; str() says what was found and what to do."""


def _owner_checked(path: Path, what: str) -> None:
    """A directory sparkfleet may write into: the rule every folder root writes into follows
    (module_utils/common/_trusted.py) - a real directory (not a link), this user's (or root's), writable by nobody
    else - but that a folder others can write with the sticky bit is taken, since each run's folder is made in it
    with an exclusive mkdir (they cannot swap or remove it)."""
    trusted = collection_module("common._trusted")
    try:
        trusted.check_dir(str(path), what, sticky_ok=True)
    except trusted.Untrusted as exc:
        raise Refused(str(exc)) from None


def _make(path: Path) -> None:
    os.mkdir(path, 0o700)  # exclusive: a link or a directory someone made first makes this fail
    fd = os.open(path / MARK, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    os.close(fd)
    os.mkdir(path / "artifacts", 0o700)


def default(command: str, root: Path) -> Path:
    """reports/<time>-<command>, made now: the root checked (or made, 0700), the run's folder new."""
    if root.is_symlink() or root.exists():
        _owner_checked(root, "the report root")
    else:
        os.mkdir(root, 0o700)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    for suffix in ["", *(f"-{n}" for n in range(2, 100))]:
        path = root / f"{stamp}-{command}{suffix}"
        try:
            _make(path)
        except FileExistsError:
            continue  # a run in the same second, or something planted: another name, never that one
        return path
    raise Refused(f"could not make a new report directory under {root} ({stamp}-{command}, -2, ... -99 all "
                  "exist); name one with --report-dir")


def chosen(path: Path) -> Path:
    """A --report-dir: made new, or one sparkfleet made before (its earlier run's artifacts removed), or an
    empty directory of this user's. Anything else is refused, naming what is there, before anything is deleted."""
    path = Path(os.path.abspath(path))
    if not (path.is_symlink() or path.exists()):
        path.parent.mkdir(parents=True, exist_ok=True)
        _owner_checked(path.parent, "the report directory's parent")
        try:
            _make(path)
        except FileExistsError as exc:
            raise Refused(f"the report directory {path} appeared while sparkfleet made it; name another "
                          "--report-dir") from exc
        return path
    _owner_checked(path, "the report directory")
    entries = sorted(os.listdir(path))
    if MARK not in entries:
        if entries:
            shown = ", ".join(entries[:6]) + (f" and {len(entries) - 6} more" if len(entries) > 6 else "")
            raise Refused(f"the report directory {path} already holds files sparkfleet did not write ({shown}); "
                          "sparkfleet replaces its own reports and artifacts there and would delete them: name a "
                          "new or empty directory with --report-dir")
        fd = os.open(path / MARK, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        os.close(fd)
    foreign = [name for name in entries if name not in OWN and not name.endswith(".tmp")]
    if foreign:
        raise Refused(f"the report directory {path} holds files sparkfleet did not write ({', '.join(foreign[:6])}); "
                      "move them, or name a new or empty directory with --report-dir")
    artifacts = path / "artifacts"
    if artifacts.is_symlink() or artifacts.exists():
        _owner_checked(artifacts, "the report directory's artifacts")
        # The earlier run's events would be read as this run's (ansible-runner's stats come from them).
        run = artifacts / "run"
        if run.is_symlink() or run.is_file():
            run.unlink()
        elif run.exists():
            shutil.rmtree(run)
        leftovers = sorted(os.listdir(artifacts))
        if leftovers:
            raise Refused(f"{artifacts} holds {', '.join(leftovers[:6])}, which sparkfleet did not write; move "
                          "them or name another --report-dir")
    else:
        os.mkdir(artifacts, 0o700)
    return path


def write_text(path: Path, text: str) -> None:
    """Replace path with text, through a new temporary file beside it: a link planted at either name is
    replaced, never followed."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(text)
    try:
        os.replace(tmp, path)
    except OSError as exc:
        if exc.errno == errno.EISDIR:
            raise Refused(f"{path} is a directory; sparkfleet writes its report there as a file") from exc
        raise

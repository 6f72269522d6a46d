# Copyright: sparkfleet contributors
# Apache License 2.0
"""What a host module left converged, so that a converged re-run asks the host once (issue 49).

A module that makes a part of the host match its inputs (the apt key and source, the pulled images, the launchers)
records, after a run that succeeded, in a file under /var/lib/sparkfleet/converged/ (one a module): the key of its
inputs (a sha256 the controller computes from the task's arguments), what a converged re-run would return, the
time, and the stat of each file that holds the state it made (change time and mtime in nanoseconds, size, inode
and mode: the keyring, the source file, each launcher, Docker's image store's repositories.json). The preflight
facts (spark_preflight_facts) read every record in the one call a run makes anyway, and return, by key, each
record whose files are as the run left them, less than a day old: the controller skips the module where the key
of this run's arguments is a recorded one, and takes the recorded result instead.

Anything else runs the module as before: another input, a file touched, replaced or removed (a launcher edited by
hand, an image pulled or removed, which rewrites Docker's repositories.json), a record missing or unreadable, a
module run in check mode (never recorded), a failed run (its record removed), a state held outside a file (no
record). The read-only run (sparkfleet verify) never uses a record: it reads the host afresh.

The records are trusted only as far as root's own files (SECURITY.md, "The converged records"): /var/lib/sparkfleet
and converged/ are made root's and closed to others whatever the umask (one that an earlier sparkfleet left open is
closed again), and checked like every folder root trusts (module_utils/common/_trusted.py) before each read and
write; a record is opened without following a link, and must be a regular file of root's that no one else can
write. A record with no watched file, or whose folder or file fails the rule, is not used: the module runs.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
import tempfile
import time

from ansible_collections.sparkfleet.spark.plugins.module_utils.common._trusted import (
    Untrusted,
    check_dir,
    make_dir,
    open_file,
)

DIR = "/var/lib/sparkfleet/converged"
_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_KEY = re.compile(r"^[0-9a-f]{64}$")
# A record older than this is not used: the module runs again (the apt key's URL is asked again once a day: a key
# whose expiry its publisher extended is then installed, as without a record).
MAX_AGE_S = 86400


def stat_of(path: str) -> list[int] | None:
    """The file's change time and mtime (ns), size, inode and mode, not following a link at the end; None where there
    is none. The change time moves on every write and every change of its attributes, and no one sets it back."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return [st.st_ctime_ns, st.st_mtime_ns, st.st_size, st.st_ino, st.st_mode]


def _path(directory: str, name: str, key: str) -> str:
    return os.path.join(directory, f"{name}.{key}.json")


def remember(name: str, key: str | None, watched: list[str], result: dict, directory: str = DIR) -> bool:
    """Record a run that left the host converged, in place of the module's earlier record; False (nothing recorded)
    where it cannot be (no key, a name or key of another shape, a path that is not absolute, a folder that cannot be
    written: not root)."""
    if not key or not _NAME.match(name) or not _KEY.match(key) or not all(os.path.isabs(p) for p in watched):
        return False
    record = {"module": name, "key": key, "watched": {path: stat_of(path) for path in watched}, "result": result,
              "recorded_at": time.time()}
    try:
        _private(directory)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{name}.")
        with os.fdopen(fd, "w") as handle:
            json.dump(record, handle, sort_keys=True)
        os.replace(tmp, _path(directory, name, key))
        for entry in os.listdir(directory):  # one record a module: the state it left last
            if entry.startswith(f"{name}.") and entry.endswith(".json") and entry != f"{name}.{key}.json":
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(directory, entry))
    except (OSError, TypeError, ValueError):  # Untrusted is a ValueError
        return False
    return True


def _private(directory: str) -> None:
    """The records' folder and the one above it (/var/lib/sparkfleet), made where missing, root's (the user's) and
    closed to others: a folder of the user's own left writable by others (an old sparkfleet's makedirs under umask
    000) is closed again; then checked (Untrusted where it is another's, or a link)."""
    directory = os.path.abspath(directory)
    # /var/lib/sparkfleet: no one else writes it; converged/: no one else reads it either (unchanged() asks the same)
    for folder, mode, closed in ((os.path.dirname(directory), 0o755, 0o022), (directory, 0o700, 0o077)):
        if not os.path.lexists(folder):
            make_dir(folder, mode, "the converged records' folder")
        info = os.lstat(folder)
        if stat.S_ISDIR(info.st_mode) and info.st_uid == os.geteuid() and stat.S_IMODE(info.st_mode) & closed:
            os.chmod(folder, stat.S_IMODE(info.st_mode) & ~closed)
        check_dir(folder, "the converged records' folder")


def _read(path: str) -> object:
    """A record's JSON, opened as root trusts a file: no link followed, a regular file of root's (the user's) with
    one name, writable by its owner alone; ValueError (Untrusted) or OSError otherwise."""
    fd = open_file(path, os.O_RDONLY, what="the converged record")
    with os.fdopen(fd) as handle:
        if stat.S_IMODE(os.fstat(handle.fileno()).st_mode) & 0o022:
            raise Untrusted(f"the converged record {path} can be written by other users")
        return json.load(handle)


def forget(name: str, key: str | None, directory: str = DIR) -> None:
    """Remove the record of a run with these arguments: a run given a key starts so, and one that fails leaves none
    (a run without a key, another's, touches no record)."""
    if key and _NAME.match(name) and _KEY.match(key):
        with contextlib.suppress(OSError):
            os.unlink(_path(directory, name, key))


def unchanged(directory: str = DIR, now: float | None = None) -> dict[str, dict]:
    """Every record whose files are as its run left them, less than MAX_AGE_S old, by the key of the run's arguments:
    {key: {module, result}}. A record that cannot be read, is older, or names a file that changed, is left out (the
    module runs)."""
    now = time.time() if now is None else now
    found: dict[str, dict] = {}
    try:
        check_dir(os.path.dirname(os.path.abspath(directory)), "the converged records' folder")
        check_dir(directory, "the converged records' folder")
        if stat.S_IMODE(os.lstat(directory).st_mode) & 0o077:
            return found  # open to others: made by someone else, or by an earlier sparkfleet (remember() closes it)
        names = sorted(os.listdir(directory))
    except (OSError, Untrusted):
        return found
    for entry in names:
        name, _dot, rest = entry.partition(".")
        key = rest.removesuffix(".json")
        if not entry.endswith(".json") or not _NAME.match(name) or not _KEY.match(key):
            continue
        try:
            record = _read(os.path.join(directory, entry))
        except (OSError, ValueError):  # Untrusted is a ValueError
            continue
        if not isinstance(record, dict) or record.get("key") != key or record.get("module") != name:
            continue
        watched = record.get("watched")
        recorded_at = record.get("recorded_at")
        if not isinstance(watched, dict) or not watched or not isinstance(recorded_at, (int, float)) \
                or not 0 <= now - recorded_at < MAX_AGE_S:
            continue  # a record that watches nothing would hold whatever it says forever
        if all(stat_of(path) == sig for path, sig in watched.items()):
            found[key] = {"module": name, "result": record.get("result")}
    return found

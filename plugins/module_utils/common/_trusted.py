# Copyright: sparkfleet contributors
# Apache License 2.0
"""The one rule for every path root reads or writes (check_path), and the ways sparkfleet writes and reads files
by it: every path from the CLI, a module or the watch is judged here, over its whole length.

sparkfleet often runs as root, from or into folders other users may write to. A path is trusted when every entry
on it from / down - each folder, each link and each link's own target, judged the same way - belongs to root, the
user running sparkfleet or the user who typed sudo, and no folder on it can be written by another user (its group
counts as another user unless it is its owner's own private group: Ubuntu's and DGX OS's default, user alice,
group alice, no other member), except a folder with the sticky bit (/tmp), below which nobody but its owner can
rename the next entry, itself a trusted owner's. Else a stranger could rename a folder on the way and put their
own in its place between sparkfleet's check and its read. A folder sparkfleet writes into is never a link itself
(check_dir), and neither it nor a file it reads (read_file) is writable by others. A file in such a folder is
created with O_EXCL or opened with O_NOFOLLOW, and must be a regular file of root's or the user's (open_file).
Every refusal is Untrusted, whose text names the path, the entry that failed, what was found (owner, mode) and
what to do; nothing is touched before it. SECURITY.md says the same; tests/unit/.../test_trusted.py holds each
case, and tests/modules/test_one_trust_rule.py fails on a place that judges a path another way.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import stat


class Untrusted(ValueError):
    """A folder or file sparkfleet will not create, truncate, lock or replace anything in; str() says why."""


def _owner(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _private_group(info: os.stat_result) -> bool:
    """The folder's group is its owner's own: the owner's primary group, with no other member listed."""
    try:
        owner, group = pwd.getpwuid(info.st_uid), grp.getgrgid(info.st_gid)
    except KeyError:
        return False
    return owner.pw_gid == info.st_gid and set(group.gr_mem) <= {owner.pw_name}


def writable_by_others(info: os.stat_result) -> bool:
    """Another user than the owner can create, rename or remove entries in the folder."""
    return bool(info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP and not _private_group(info)))


def trusted_owners() -> tuple[int, ...]:
    """root, the user running sparkfleet, and under sudo the user who typed it (who can be root already: trusting
    their folders gives nobody more than they have)."""
    owners = [0, os.geteuid()]
    sudo = os.environ.get("SUDO_UID", "")
    if os.geteuid() == 0 and sudo.isdigit():
        owners.append(int(sudo))
    return tuple(owners)


def _judge(what: str, shown: str, place: str, info: os.stat_result, last: bool, sticky_ok: bool) -> None:
    """One entry on the way to `shown` judged by check_path's rule; `last`: the entry `shown` names itself."""
    link = stat.S_ISLNK(info.st_mode)
    owner, mode = _owner(info.st_uid), f"mode {stat.S_IMODE(info.st_mode):04o}"
    if last and not link:
        subject = f"{what} {shown}"
    elif link:
        subject = f"{what} {shown} is reached through the link {place} (to {os.readlink(place)}), which"
    else:
        subject = f"{what} {shown} is inside {place}, which"
    if info.st_uid not in trusted_owners():
        raise Untrusted(f"{subject} belongs to {owner}, not to root or the user running sparkfleet "
                        f"({_owner(os.geteuid())}); its owner could swap "
                        f"{'what sparkfleet reads or writes there' if last and not link else 'what lies below it'}"
                        " for a link or a file of their own. Nothing was read or written: use a path whose every "
                        "folder is root's or yours, or have it made anew by root or you")
    if link or not writable_by_others(info):
        return  # a link's own mode means nothing: who may change it is its folder's say, judged one step before
    if stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_ISVTX and (not last or sticky_ok):
        return  # /tmp: nobody but its owner renames or removes the entry below, which is judged next
    if last and stat.S_ISDIR(info.st_mode):
        raise Untrusted(f"{subject} ({owner}, {mode}) can be written by other users, who could put links or files "
                        f"of their own into it. Nothing was read or written: chmod go-w {shown}, or use another "
                        "folder")
    if last:
        raise Untrusted(f"{subject} ({owner}, {mode}) can be written by other users, who could change what it "
                        f"says. Nothing was read: chmod go-w {shown}")
    raise Untrusted(f"{what} {shown} is inside {place} ({owner}, {mode}), which other users can write without the "
                    "sticky bit: they could rename what lies below it away and put their own in its place. Nothing was "
                    f"read or written: use a path elsewhere, or chmod +t or go-w {place}")


def check_path(path: str, what: str = "the path", kind: str = "any", sticky_ok: bool = False) -> str:
    """The one rule for every path root reads or writes, over the whole path; returns the path with every link
    followed (what a later open of it reaches), or raises Untrusted saying which entry failed, whose it is and what
    to do. Nothing is made or touched.

    From / down, every folder on the way and every link (a link's target is judged the same way, from / again where
    it is absolute) belongs to root, the user running sparkfleet or the user who typed sudo (trusted_owners), and no
    folder can be written by another user (a group counts as other users unless it is its owner's private group),
    except where the folder has the sticky bit (/tmp): then nobody can rename or remove the entry below it, which is
    itself a trusted owner's. The entry `path` names: `kind` "dir" a folder, "file" a regular file, "any" either;
    a folder as the last entry must not be writable by others even with the sticky bit unless `sticky_ok` (the
    report root, whose entries sparkfleet makes exclusively and reads back as its own); a file never."""
    shown = path
    pending = [p for p in os.path.abspath(path).split("/") if p]
    current, hops = "/", 0
    _judge(what, shown, "/", os.lstat("/"), not pending, sticky_ok)
    while pending:
        name = pending.pop(0)
        if name == ".":
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        place = os.path.join(current, name)
        try:
            info = os.lstat(place)
        except FileNotFoundError:
            raise Untrusted(f"{what} {shown} does not exist" + (f" ({place} is missing)" if place != shown else "")
                            ) from None
        except NotADirectoryError:
            raise Untrusted(f"{what} {shown} is not there: {current} is not a folder") from None
        _judge(what, shown, place, info, not pending, sticky_ok)
        if stat.S_ISLNK(info.st_mode):
            hops += 1
            if hops > 40:
                raise Untrusted(f"{what} {shown} goes through more than 40 links (a loop at {place}?)")
            target = os.readlink(place)
            pending = [p for p in target.split("/") if p] + pending
            if target.startswith("/"):
                current = "/"
            continue
        if pending and not stat.S_ISDIR(info.st_mode):
            raise Untrusted(f"{what} {shown} is not there: {place} is not a folder")
        current = place
    final = os.lstat(current)
    if kind == "dir" and not stat.S_ISDIR(final.st_mode):
        raise Untrusted(f"{what} {shown} is not a folder")
    if kind == "file" and not stat.S_ISREG(final.st_mode):
        raise Untrusted(f"{what} {shown} is not a regular file")
    if kind == "any" and not (stat.S_ISDIR(final.st_mode) or stat.S_ISREG(final.st_mode)):
        raise Untrusted(f"{what} {shown} is neither a folder nor a regular file")
    return current


def check_dir(path: str, what: str = "the folder", sticky_ok: bool = False) -> None:
    """Refuse (Untrusted) a folder that is not trusted: a link itself (sparkfleet writes into a real folder, never
    through a link at its end), or one check_path refuses; nothing is made or touched. The folder is named as given.
    `sticky_ok`: a folder others can write with the sticky bit is taken too, where each file or folder sparkfleet
    puts in it is made exclusively and read back as its own (the report root)."""
    try:
        info = os.lstat(os.path.abspath(path))
    except FileNotFoundError:
        raise Untrusted(f"{what} {path} does not exist") from None
    if stat.S_ISLNK(info.st_mode):
        raise Untrusted(f"{what} {path} is a symbolic link (to {os.readlink(os.path.abspath(path))}); sparkfleet "
                        "writes only into a real folder, never through a link: remove the link, or point sparkfleet "
                        "at the folder itself")
    check_path(path, what, "dir", sticky_ok)


def read_file(path: str, what: str = "the file") -> bytes:
    """What a file says, read once through the descriptor of the file check_path judged (O_NOFOLLOW at its end,
    a regular file of a trusted owner's that nobody else may write): never opened again by name."""
    return read_file_and_mode(path, what)[0]


def read_file_and_mode(path: str, what: str = "the file") -> tuple[bytes, int]:
    """read_file(), and the file's mode as its descriptor had it (a copy keeps an owner's executable bit without
    asking the path again)."""
    real = check_path(path, what, "file")
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_uid not in trusted_owners() or writable_by_others(info):
            raise Untrusted(f"{what} {path} changed while it was read; nothing was read: run again")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                return b"".join(chunks), info.st_mode
            chunks.append(chunk)
    finally:
        os.close(fd)


def make_dir(path: str, mode: int = 0o700, what: str = "the folder") -> None:
    """The folder, made where missing (each missing component `mode`, exclusive: a name someone made first is then
    checked like any other), and checked (check_dir)."""
    path = os.path.abspath(path)
    missing = []
    probe = path
    while not os.path.lexists(probe):
        missing.append(probe)
        probe = os.path.dirname(probe)
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):
            os.mkdir(folder, mode)
    check_dir(path, what)


def open_file(path: str, flags: int, mode: int = 0o600, what: str = "the file") -> int:
    """A descriptor of a file in a trusted folder (check it first), opened with O_NOFOLLOW (a link is refused,
    never followed) and O_NONBLOCK (a FIFO never blocks), that is a regular file of root's or the user's."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    except OSError as exc:
        if os.path.islink(path):
            raise Untrusted(f"{what} {path} is a symbolic link (to {os.readlink(path)}); sparkfleet never opens a "
                            "file through a link. Nothing was written: remove it (sparkfleet makes it anew)") from exc
        raise
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_uid not in trusted_owners() or info.st_nlink > 1:
        os.close(fd)
        found = ("not a regular file" if not stat.S_ISREG(info.st_mode)
                 else f"a hard link ({info.st_nlink} names) to a file" if info.st_nlink > 1
                 else f"owned by {_owner(info.st_uid)}")
        raise Untrusted(f"{what} {path} is {found}; sparkfleet writes only its own files (root's or the user "
                        "running it). Nothing was written: remove it (sparkfleet makes it anew)")
    os.set_blocking(fd, True)
    return fd

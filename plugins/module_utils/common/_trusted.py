# Copyright: sparkfleet contributors
# Apache License 2.0
"""The one rule for every file sparkfleet creates, truncates, locks or replaces in a folder it did not make itself
(the inventory's .sparkfleet/, the wheel cache, the report root, the venv root and its installer, a launcher's
working folder): the folder is trusted, and the file is opened without following a link.

sparkfleet often runs as root, from or into folders other users may write to. A folder is trusted when it is a real
directory (never a link), owned by root or by the user running sparkfleet, and writable by nobody else - its group
only where the group is its owner's own private group (Ubuntu's and DGX OS's default: user alice, group alice, no
other member) - and when no folder above it can be written by another user without the sticky bit (else the
folder itself could be renamed away and replaced). A file in it is created with O_EXCL or opened with O_NOFOLLOW,
and must be a regular file of root's or the user's. Every refusal is Untrusted, whose text names the path, what
was found (owner, mode) and what to do; nothing is touched before it.
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


def check_dir(path: str, what: str = "the folder", sticky_ok: bool = False) -> None:
    """Refuse (Untrusted) a folder that is not trusted (see the module's text); nothing is made or touched. The
    folder is named as given. `sticky_ok`: a folder others can write with the sticky bit is taken too, where each
    file or folder sparkfleet puts in it is made exclusively and read back as its own (the report root)."""
    shown, path = path, os.path.abspath(path)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        raise Untrusted(f"{what} {shown} does not exist") from None
    if stat.S_ISLNK(info.st_mode):
        raise Untrusted(f"{what} {shown} is a symbolic link (to {os.readlink(path)}); sparkfleet writes only into "
                        "a real folder, never through a link: remove the link, or point sparkfleet at the folder "
                        "itself")
    if not stat.S_ISDIR(info.st_mode):
        raise Untrusted(f"{what} {shown} is not a folder")
    mode = f"mode {stat.S_IMODE(info.st_mode):04o}"
    if info.st_uid not in trusted_owners():
        raise Untrusted(f"{what} {shown} belongs to {_owner(info.st_uid)}, not to root or the user running "
                        f"sparkfleet ({_owner(os.geteuid())}); its owner could swap what sparkfleet writes there for "
                        f"a link to another file. Nothing was written: use a folder of your own, or have it "
                        f"removed (sparkfleet makes it anew)")
    if writable_by_others(info) and not (sticky_ok and info.st_mode & stat.S_ISVTX):
        raise Untrusted(f"{what} {shown} ({_owner(info.st_uid)}, {mode}) can be written by other users, who could "
                        f"put links or files of their own into it. Nothing was written: chmod go-w {shown}, or use "
                        "another folder")
    parent = os.path.dirname(path)
    while parent and parent != path:
        above = os.stat(parent)
        if above.st_mode & stat.S_IWOTH and not above.st_mode & stat.S_ISVTX:
            raise Untrusted(f"{what} {path} is inside {parent} ({_owner(above.st_uid)}, mode "
                            f"{stat.S_IMODE(above.st_mode):04o}), which any user can write without the sticky bit: "
                            f"they could rename {path} away and put a folder of their own in its place. Nothing was "
                            "written: use a folder elsewhere, or chmod +t or o-w the folder above")
        path, parent = parent, os.path.dirname(parent)


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

# Copyright: sparkfleet contributors
# Apache License 2.0
"""Files in a less privileged user's home, read and written by root without following that user's links.

A user owns their home and everything in it, so they can make any name there a symbolic link (to
/root/.ssh/authorized_keys, /etc/shadow), a FIFO or a device. Root must never act through such a name. Here
each component below the home is opened relative to its parent's descriptor with O_NOFOLLOW; a file is read only
when fstat says it is a regular file of the user's (or root's), at most `limit` bytes, opened O_NONBLOCK so a
FIFO never blocks; and a file is replaced through a temporary file made O_EXCL in the same directory, renamed
over it, so a link planted there is refused, never written through. Every refusal is UnsafeFile, whose text
names the path and what was found.
"""

from __future__ import annotations

import contextlib
import os
import stat

LIMIT = 1 << 20  # 1 MiB: more than any key, known_hosts or nccl.conf; a link to /dev/zero never eats memory

KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device",
         stat.S_IFBLK: "a block device", stat.S_IFSOCK: "a socket", stat.S_IFDIR: "a directory",
         stat.S_IFREG: "a regular file"}


class UnsafeFile(Exception):
    """A file or folder in a user's home that root will not read or write: what was found, and what to do."""


def kind(mode: int) -> str:
    return KINDS.get(stat.S_IFMT(mode), "an unknown kind of file")


def _refuse(path: str, found: str) -> UnsafeFile:
    return UnsafeFile(f"{path} is {found}; sparkfleet reads and writes a user's files as root only when they "
                      "are the user's own regular files and folders, never through a link, a FIFO or a device. "
                      f"Remove it (rm {path}) and run again: sparkfleet makes it anew")


def _check(path: str, info: os.stat_result, want: int, uid: int) -> None:
    if stat.S_IFMT(info.st_mode) != want:
        raise _refuse(path, kind(info.st_mode))
    if info.st_uid not in (uid, 0):
        raise _refuse(path, f"{kind(info.st_mode)} of uid {info.st_uid}, not of the user (uid {uid}) or root")
    if want == stat.S_IFREG and info.st_nlink > 1:
        # a hard link the user made to a root file (where fs.protected_hardlinks is 0): root's, yet not theirs
        raise _refuse(path, f"a hard link to a file with {info.st_nlink} names (uid {info.st_uid})")


def open_dir(home: str, parts: list[str], uid: int, gid: int | None = None, make: bool = False) -> int:
    """A descriptor of home/parts..., each component a real directory of the user's (or root's), never a link.
    With make, a missing component is made (0700, the user's): pass gid."""
    fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY)
    path = home
    try:
        for part in parts:
            path = os.path.join(path, part)
            try:
                info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if not make:
                    raise
                os.mkdir(part, 0o700, dir_fd=fd)
                os.chown(part, uid, gid, dir_fd=fd, follow_symlinks=False)
                info = os.stat(part, dir_fd=fd, follow_symlinks=False)
            _check(path, info, stat.S_IFDIR, uid)
            child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
        return fd
    except BaseException:
        os.close(fd)
        raise


def read(home: str, relative: str, uid: int, limit: int = LIMIT) -> str | None:
    """The text of home/relative, or None when it is not there; UnsafeFile when it is not the user's regular
    file or is larger than limit."""
    *parts, name = relative.split("/")
    try:
        dfd = open_dir(home, parts, uid)
    except FileNotFoundError:
        return None
    path = os.path.join(home, relative)
    try:
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY, dir_fd=dfd)
        except FileNotFoundError:
            return None
        except OSError as exc:  # ELOOP: the name is a link
            info = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            raise _refuse(path, kind(info.st_mode)) from exc
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            _check(path, info, stat.S_IFREG, uid)
            data = handle.read(limit + 1)
        if len(data) > limit:
            raise UnsafeFile(f"{path} is larger than {limit} bytes; it is not a file sparkfleet reads")
        return data.decode("utf-8", errors="replace")
    finally:
        os.close(dfd)


def write(home: str, relative: str, text: str, uid: int, gid: int, mode: int) -> None:
    """Replace home/relative with text (the user's, mode), its folders made as needed; a name in the way that
    is not the user's regular file or folder is refused, never followed."""
    *parts, name = relative.split("/")
    dfd = open_dir(home, parts, uid, gid, make=True)
    path = os.path.join(home, relative)
    tmp = f".{name}.sparkfleet-tmp"
    try:
        with contextlib.suppress(FileNotFoundError):
            _check(path, os.stat(name, dir_fd=dfd, follow_symlinks=False), stat.S_IFREG, uid)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp, dir_fd=dfd)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fchown(handle.fileno(), uid, gid)
                os.fchmod(handle.fileno(), mode)
                os.fsync(handle.fileno())
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)

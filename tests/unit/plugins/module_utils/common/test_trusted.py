"""module_utils/common/_trusted.py and _isolated.py: the one rule for the folders root writes into, and the Python
root starts (issue 46). Each case is a folder or an environment as another user could leave it."""

from __future__ import annotations

import grp
import os
import pwd
import re

import pytest
from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _isolated as isolated
from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _trusted as trusted

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="the folders of another user are made by root")
OTHER = 4242


def folder(tmp_path, name, mode, uid=0, gid=0):
    path = tmp_path / name
    path.mkdir()
    path.chmod(mode)
    os.chown(path, uid, gid)
    return path


@pytest.mark.parametrize("mode, uid, said", [
    (0o755, 0, None),
    (0o700, OTHER, f"belongs to uid {OTHER}"),
    (0o777, 0, "can be written by other users"),
    (0o1777, 0, "can be written by other users"),  # sticky: others still add files (an inventory source)
    (0o775, 0, None),  # root's group root: root's own
])
def test_a_folder_is_trusted_when_root_or_the_user_owns_it_and_nobody_else_writes_it(tmp_path, mode, uid, said):
    path = folder(tmp_path, "f", mode, uid)
    if said is None:
        trusted.check_dir(str(path))
    else:
        with pytest.raises(trusted.Untrusted, match=said):
            trusted.check_dir(str(path))


def test_a_users_private_group_may_write_and_a_shared_group_may_not(tmp_path):
    """Ubuntu's and DGX OS's umask 002 makes a user's folders 0775 in their own group: theirs alone."""
    user = next((p for p in pwd.getpwall() if p.pw_uid >= 1 and set(grp.getgrgid(p.pw_gid).gr_mem) <= {p.pw_name}
                 and grp.getgrgid(p.pw_gid).gr_name == p.pw_name), None)
    if user is None:
        pytest.skip("no user with a private group here")
    path = folder(tmp_path, "theirs", 0o775, 0, user.pw_gid)
    with pytest.raises(trusted.Untrusted, match="can be written by other users"):
        trusted.check_dir(str(path))  # root's folder, another's group: that group writes it
    os.chown(path, user.pw_uid, user.pw_gid)
    assert not trusted.writable_by_others(os.stat(path)), "their own group: theirs alone"


def test_a_link_and_a_folder_inside_one_every_user_can_rename_are_refused(tmp_path):
    real = folder(tmp_path, "real", 0o755)
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(trusted.Untrusted, match="is a symbolic link"):
        trusted.check_dir(str(tmp_path / "link"))
    open_above = folder(tmp_path, "open", 0o777)
    inside = folder(open_above, "inv", 0o755)
    with pytest.raises(trusted.Untrusted, match="without the sticky bit"):
        trusted.check_dir(str(inside))
    open_above.chmod(0o1777)
    trusted.check_dir(str(inside))  # sticky: nobody renames root's folder


def test_a_file_is_opened_without_following_a_link_and_only_when_it_is_root_s_or_the_users(tmp_path):
    base = folder(tmp_path, "base", 0o700)
    victim = tmp_path / "victim"
    victim.write_text("root's")
    (base / "lock").symlink_to(victim)
    with pytest.raises(trusted.Untrusted, match="is a symbolic link"):
        trusted.open_file(str(base / "lock"), os.O_RDWR | os.O_CREAT)
    (base / "theirs").write_text("x")
    os.chown(base / "theirs", OTHER, OTHER)
    with pytest.raises(trusted.Untrusted, match=f"owned by uid {OTHER}"):
        trusted.open_file(str(base / "theirs"), os.O_RDONLY)
    os.link(victim, base / "hard")
    with pytest.raises(trusted.Untrusted, match="a hard link"):
        trusted.open_file(str(base / "hard"), os.O_RDONLY)
    os.mkfifo(base / "fifo")
    with pytest.raises(trusted.Untrusted, match="not a regular file"):  # and it never blocks
        trusted.open_file(str(base / "fifo"), os.O_RDONLY)
    os.close(trusted.open_file(str(base / "new"), os.O_RDWR | os.O_CREAT))
    assert victim.read_text() == "root's"


def test_a_module_that_starts_python_works_in_root_s_folder_without_the_callers_python_environment(tmp_path):
    environ = {"PYTHONPATH": "/tmp/x", "PYTHONSTARTUP": "/tmp/s.py", "HF_HOME": "/tmp/hf", "TRITON_CACHE_DIR": "/t",
               "PATH": "/usr/bin", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}
    here = os.getcwd()
    try:
        os.chdir(tmp_path)
        left = isolated.isolate(environ)
        assert os.getcwd() == "/"
    finally:
        os.chdir(here)
    assert sorted(left) == ["HF_HOME", "PYTHONPATH", "PYTHONSTARTUP", "TRITON_CACHE_DIR"]
    caches = {name: environ.pop(name) for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    assert environ == {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "PYTHONSAFEPATH": "1"}
    # Issue 70, finding 7: the compilers' caches are a folder of the module's own, never /tmp/torchinductor_root
    # (Inductor's default without the variable), which another user could make first.
    own = {os.path.dirname(path) for path in caches.values()}
    assert len(own) == 1, caches
    info = os.stat(own.pop())
    assert (info.st_uid, oct(info.st_mode & 0o777)) == (os.getuid(), "0o700"), caches
    assert "torchinductor_" not in caches["TORCHINDUCTOR_CACHE_DIR"]


# Issue 70, finding 1: the rule over the whole path. Each case is a path whose last folder is root's and tight, with
# something on the way another user can change; each was accepted before (only the last folder and world-writable
# folders above it without the sticky bit were judged).
@pytest.mark.parametrize("above_mode, above_uid, above_gid, said", [
    (0o755, OTHER, 0, f"is inside {{above}}, which belongs to uid {OTHER}"),
    (0o2775, 0, OTHER, "is inside {above} (root (uid 0), mode 2775), which other users can write"),  # /srv/lab
    (0o775, 0, 0, None),  # root's group root: root's own
    (0o1777, 0, 0, None),  # sticky: the folder below is root's, nobody renames it
])
def test_every_folder_above_is_judged_not_only_the_last(tmp_path, above_mode, above_uid, above_gid, said):
    above = folder(tmp_path, "lab", above_mode, above_uid, above_gid)
    inventory = folder(above, "inv", 0o755)
    if said is None:
        trusted.check_dir(str(inventory))
        assert trusted.check_path(str(inventory / "."), kind="dir") == str(inventory)
        return
    for judge in (lambda: trusted.check_dir(str(inventory)), lambda: trusted.check_path(str(inventory))):
        with pytest.raises(trusted.Untrusted, match=re.escape(said.format(above=above))):
            judge()


def test_below_a_sticky_folder_the_next_entry_must_be_a_trusted_owners(tmp_path):
    shared = folder(tmp_path, "tmp", 0o1777)
    theirs = folder(shared, "w", 0o755, OTHER, OTHER)  # what another user made first in /tmp
    mine = folder(theirs, "inv", 0o755)
    with pytest.raises(trusted.Untrusted, match=f"is inside {theirs}, which belongs to uid {OTHER}"):
        trusted.check_path(str(mine))


def test_every_link_on_the_way_is_judged_and_so_is_its_target(tmp_path):
    """An -i through a link was judged at its target only: a stranger's link, or a root link into a stranger's
    folder, now fails on the link or on the folder it leads through; root's link to root's folder is followed and
    the path it reaches is what check_path returns."""
    real = folder(tmp_path, "real", 0o755)
    (real / "hosts.yml").write_text("all: {}\n")
    (tmp_path / "ours").symlink_to(real)
    assert trusted.check_path(str(tmp_path / "ours" / "hosts.yml"), kind="file") == str(real / "hosts.yml")
    (tmp_path / "theirs").symlink_to(real)
    os.chown(tmp_path / "theirs", OTHER, OTHER, follow_symlinks=False)
    with pytest.raises(trusted.Untrusted, match=f"through the link {tmp_path}/theirs .* belongs to uid {OTHER}"):
        trusted.check_path(str(tmp_path / "theirs" / "hosts.yml"))
    stranger = folder(tmp_path, "home", 0o755, OTHER, OTHER)
    folder(stranger, "inv", 0o755)
    (tmp_path / "relative").symlink_to("home/inv")
    with pytest.raises(trusted.Untrusted, match=f"is inside {stranger}, which belongs to uid {OTHER}"):
        trusted.check_path(str(tmp_path / "relative"))
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(trusted.Untrusted, match="more than 40 links"):
        trusted.check_path(str(tmp_path / "loop"))


def test_a_file_root_reads_is_read_once_and_only_when_nobody_else_may_change_it(tmp_path):
    base = folder(tmp_path, "base", 0o755)
    lock = base / "lock.yml"
    lock.write_text("images: {}\n")
    assert trusted.read_file(str(lock)) == b"images: {}\n"
    lock.chmod(0o666)
    with pytest.raises(trusted.Untrusted, match=r"mode 0666\) can be written by other users, who could change"):
        trusted.read_file(str(lock))
    lock.chmod(0o644)
    os.chown(lock, OTHER, OTHER)
    with pytest.raises(trusted.Untrusted, match=f"belongs to uid {OTHER}"):
        trusted.read_file(str(lock))
    os.mkfifo(base / "fifo")
    with pytest.raises(trusted.Untrusted, match="is not a regular file"):
        trusted.read_file(str(base / "fifo"))
    with pytest.raises(trusted.Untrusted, match="does not exist"):
        trusted.read_file(str(base / "gone" / "lock.yml"))

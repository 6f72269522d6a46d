"""module_utils/common/_trusted.py and _isolated.py: the one rule for the folders root writes into, and the Python
root starts (issue 46). Each case is a folder or an environment as another user could leave it."""

from __future__ import annotations

import grp
import os
import pwd

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
    assert environ == {"PATH": "/usr/bin", "LD_LIBRARY_PATH": "/usr/local/cuda/lib64", "PYTHONSAFEPATH": "1"}

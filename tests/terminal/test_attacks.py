"""Attacks on what the sparkfleet command writes and shows (issue 34): the report directory (findings 2 and 3),
the doctor's redaction (9), and text from a host reaching the terminal. Each test performs the attack as it
was reproduced, as root, and checks the victim is untouched and the user told why (exit 4, before anything is
deleted). The doctor on this machine is the command: it needs no inventory, as an owner types it.
"""

from __future__ import annotations

import json
import os
import stat

from pty_screen import Screen, piped

from sparkfleet import reportdir

OTHER_UID = 4242  # a user with a login on the box, not the one running sparkfleet


def test_a_reused_report_dir_holding_the_operators_files_is_refused_and_nothing_deleted(tmp_path):
    """`sparkfleet doctor --report-dir .` in a project with artifacts/{build-1,build-2,release-0.9}: ansible-
    runner's artifact rotation left only artifacts/run."""
    project = tmp_path / "project"
    for name in ("build-1", "build-2", "release-0.9"):
        (project / "artifacts" / name).mkdir(parents=True)
        (project / "artifacts" / name / "app.bin").write_text(name)
    (project / "Makefile").write_text("all:\n")
    proc = piped(["doctor", "--plain", "--report-dir", "."], project)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "already holds files sparkfleet did not write (Makefile, artifacts)" in proc.stderr
    assert "name a new or empty directory with --report-dir" in proc.stderr
    assert sorted(p.name for p in (project / "artifacts").iterdir()) == ["build-1", "build-2", "release-0.9"]
    assert (project / "artifacts" / "release-0.9" / "app.bin").read_text() == "release-0.9"
    assert not (project / "report.json").exists()


def test_reports_planted_by_another_user_in_a_world_writable_directory_are_refused(tmp_path):
    """In a world-writable working directory, pre-made reports/<time>-doctor/artifacts links made root delete
    files elsewhere and chmod a root-owned file through the link."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("root's")
    (victim / "keep").chmod(0o644)
    planted = shared / "reports"
    planted.mkdir()
    for n in range(60):  # the next minute's stamps
        run = planted / f"x{n}-doctor"
        run.mkdir()
        (run / "artifacts").symlink_to(victim)
    os.chown(planted, OTHER_UID, OTHER_UID)
    proc = piped(["doctor", "--plain"], shared)
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert f"the report root reports belongs to uid {OTHER_UID}" in proc.stderr
    assert (victim / "keep").read_text() == "root's"
    assert stat.S_IMODE((victim / "keep").stat().st_mode) == 0o644


def test_a_planted_tmp_link_is_replaced_not_followed_and_reports_are_files(tmp_path):
    """A report.md.tmp link made root overwrite a root-owned file with the report. The directory here is one
    sparkfleet made before (used again with --report-dir), the links put there since."""
    home = tmp_path / "work"
    home.mkdir()
    first = piped(["doctor", "--plain", "--report-dir", "same"], home)
    assert first.returncode == 0, first.stdout[-2000:]
    target = tmp_path / "root-owned.conf"
    target.write_text("PermitRootLogin no\n")
    for name in ("report.md.tmp", "report.json.tmp", "doctor.md.tmp"):
        (home / "same" / name).symlink_to(target)
    second = piped(["doctor", "--plain", "--report-dir", "same"], home)
    assert second.returncode == 0, second.stdout[-2000:]
    assert target.read_text() == "PermitRootLogin no\n"
    for name in ("report.md", "report.json", "doctor.md"):
        assert not (home / "same" / name).is_symlink() and (home / "same" / name).is_file()
    assert json.loads((home / "same" / "report.json").read_text())["exit_code"] == 0
    assert stat.S_IMODE((home / "same").stat().st_mode) == 0o700


def test_a_report_dir_or_its_artifacts_as_a_link_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "run").mkdir(parents=True)
    (elsewhere / "run" / "keep").write_text("x")
    link = tmp_path / "link"
    link.symlink_to(elsewhere)
    proc = piped(["doctor", "--plain", "--report-dir", str(link)], tmp_path)
    assert proc.returncode == 4 and f"{link} is a symbolic link (to {elsewhere})" in proc.stderr, proc.stderr
    made = reportdir.chosen(tmp_path / "mine")
    (made / "artifacts").rmdir()
    (made / "artifacts").symlink_to(elsewhere)
    proc = piped(["doctor", "--plain", "--report-dir", str(made)], tmp_path)
    assert proc.returncode == 4 and "artifacts" in proc.stderr and "symbolic link" in proc.stderr, proc.stderr
    assert (elsewhere / "run" / "keep").read_text() == "x"


def test_default_report_dirs_are_new_each_run_even_within_one_second(tmp_path):
    root = tmp_path / "reports"
    made = [reportdir.default("verify", root) for _ in range(3)]
    assert len(set(made)) == 3
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    for path in made:
        assert stat.S_IMODE(path.stat().st_mode) == 0o700 and (path / reportdir.MARK).is_file()
    assert made[1].name.endswith("-verify-2") and made[2].name.endswith("-verify-3")


def test_an_empty_directory_of_the_users_is_taken_and_a_group_writable_one_refused(tmp_path):
    empty = tmp_path / "ci-out"
    empty.mkdir()
    assert reportdir.chosen(empty) == empty and (empty / "artifacts").is_dir()
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)
    try:
        reportdir.chosen(loose)
    except reportdir.Refused as exc:
        assert "(root (uid 0), mode 0777) can be written by other users" in str(exc)
    else:
        raise AssertionError("a directory every user can write was taken")
    assert list(loose.iterdir()) == []


def doctor_through_ssh(work, says: str, host_line: str, **env: str):
    """`sparkfleet doctor` from `work` on one host reached through an ssh_executable of the user's that connects
    nowhere and says what real ssh says (`says`, on stderr)."""
    work.mkdir(parents=True)
    fake = work / "ssh"
    fake.write_text(f'#!/bin/sh\necho "{says}" >&2\nexit 255\n')
    fake.chmod(0o755)
    (work / "ansible.cfg").write_text(f"[ssh_connection]\nssh_executable = {fake}\n")
    (work / "hosts.ini").write_text(f"[sparks]\n{host_line}\n")
    return piped(["doctor", "-i", str(work / "hosts.ini"), "--plain", "--report-dir", "out"], work, **env)


def test_the_doctors_reports_hide_an_unreachable_hosts_name_address_and_the_users_home(tmp_path):
    """Issue 34, finding 9: with a host unreachable, report.json/md/junit kept its real name and address, and
    report.json absolute paths with user names in them. The host is reached through an ssh_executable of the
    user's that connects nowhere and says what real ssh says."""
    home = tmp_path / "home" / "alice"
    work = home / "fleet"
    proc = doctor_through_ssh(work, "ssh: connect to host 203.0.113.77 port 22: Connection timed out",
                              "spark-secret-lab ansible_host=203.0.113.77", HOME=str(home))
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    for name in ("report.json", "report.md", "report.junit.xml"):
        text = (work / "out" / name).read_text()
        for private in ("spark-secret-lab", "203.0.113.77", "alice"):
            assert private not in text, (name, private, text[:3000])
    data = json.loads((work / "out" / "report.json").read_text())
    assert list(data["hosts"]) == ["host-1"]
    assert "<address>" in json.dumps(data["hosts"]["host-1"])
    for private in ("spark-secret-lab", "203.0.113.77"):
        assert private not in proc.stdout, "the screen shows the report as written"


def test_escape_sequences_a_host_sends_reach_neither_the_terminal_nor_the_reports(tmp_path):
    """Issue 34, suspected and proved: text from a host (here what its ssh says, as a hostile network or host
    could make it) reached the screen as it came, escape sequences and all: a window title set, the screen
    cleared. It is shown with each control character written out."""
    work = tmp_path / "work"
    work.mkdir()
    fake = work / "ssh"
    fake.write_text("#!/bin/sh\nprintf 'ssh: \\033]0;owned\\007\\033[2Jbanner\\n' >&2\nexit 255\n")
    fake.chmod(0o755)
    (work / "ansible.cfg").write_text(f"[ssh_connection]\nssh_executable = {fake}\n")
    (work / "hosts.ini").write_text("[sparks]\nspark-01 ansible_host=127.0.0.1\n")
    screen = Screen(["verify", "-i", "hosts.ini", "--report-dir", "out"], work).wait()
    assert screen.rc == 3, screen.text[-3000:]
    assert "\x1b]0;owned" not in screen.raw and "\x1b[2J" not in screen.raw
    assert "\\x1b]0;owned\\x07\\x1b[2Jbanner" in screen.text, screen.text[-2000:]
    for name in ("report.md", "report.junit.xml"):
        assert "\x1b" not in (work / "out" / name).read_text()


def test_the_doctors_reports_hide_an_ssh_users_and_a_dns_host_name_as_ssh_says_them(tmp_path):
    """Issue 46, finding 4: with ansible_host a DNS name and a login user, ssh's own words
    (`alice@spark7.corp.example.com: Permission denied`) passed the redaction whole into report.json, report.md and
    the JUnit file."""
    work = tmp_path / "work"
    proc = doctor_through_ssh(work, "alice@spark7.corp.example.com: Permission denied (publickey,password).",
                              "spark-07 ansible_host=spark7.corp.example.com ansible_user=alice")
    assert proc.returncode == 3, proc.stdout[-3000:] + proc.stderr[-2000:]
    for name in ("report.json", "report.md", "report.junit.xml"):
        text = (work / "out" / name).read_text()
        for private in ("spark-07", "spark7", "corp.example.com", "alice"):
            assert private not in text, (name, private, text[:3000])
    assert "<user>@<host>: Permission denied" in (work / "out" / "report.md").read_text()

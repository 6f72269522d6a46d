"""spark_apt_keyring against the test bed's signed apt repository on 127.0.0.1."""

from __future__ import annotations

import re
import subprocess
import urllib.request

import pytest
from fake_http import FakeHTTP

from conftest import REPO, run_module

pytestmark = pytest.mark.testbed

APT = "http://127.0.0.1:5080"


@pytest.fixture(scope="module")
def fingerprint(tmp_path_factory) -> str:
    """The fingerprint of the key the repository serves, as gpg itself reads it."""
    subprocess.run([str(REPO / "testbed" / "aptrepo.sh"), "start"], check=True, capture_output=True)
    key = tmp_path_factory.mktemp("key") / "gpgkey"
    key.write_bytes(urllib.request.urlopen(f"{APT}/gpgkey", timeout=10).read())
    return re.search(r"^fpr:+([0-9A-F]{40}):", _show(key), re.MULTILINE).group(1)


def _show(path) -> str:
    return subprocess.run(["gpg", "--batch", "--with-colons", "--show-keys", str(path)],
                          capture_output=True, text=True, check=True).stdout


def test_installs_the_dearmored_key_once(tmp_path, fingerprint):
    dest = tmp_path / "keyrings" / "nvidia.gpg"
    first = run_module("spark_apt_keyring", {"url": f"{APT}/gpgkey", "dest": str(dest),
                                             "fingerprint": " ".join([fingerprint[:4], fingerprint[4:]])})
    assert first["changed"] is True, first
    assert first["fingerprints"] == [fingerprint]
    assert not dest.read_bytes().startswith(b"-----BEGIN")
    assert fingerprint in _show(dest)
    second = run_module("spark_apt_keyring", {"url": f"{APT}/gpgkey", "dest": str(dest)})
    assert second["changed"] is False


def test_a_host_without_gpg_agent_installs_the_pinned_key(tmp_path, fingerprint):
    """Ubuntu's gpg without the gpg-agent package (the lab's hosts; minimal installs): gpg tried to start the agent
    to import the pinned key, failed with "failed to start agent ... Configuration error" and exited 2 after the
    import, and the module refused a good key (found by a fleet host with a fingerprint of its own, issue 35). The
    agent is made unreachable here as it is there: gpg is told of an agent program that is not installed."""
    import os
    import shutil

    bindir = tmp_path / "bin"
    bindir.mkdir()
    wrapper = bindir / "gpg"
    wrapper.write_text(f"#!/bin/sh\nexec {shutil.which('gpg')} --agent-program /nonexistent/gpg-agent \"$@\"\n")
    wrapper.chmod(0o755)
    dest = tmp_path / "keyrings" / "nvidia.gpg"
    result = run_module("spark_apt_keyring", {"url": f"{APT}/gpgkey", "dest": str(dest), "fingerprint": fingerprint},
                        PATH=f"{bindir}:{os.environ['PATH']}")
    assert not result["failed"], result.get("msg")
    assert result["fingerprints"] == [fingerprint] and fingerprint in _show(dest)


def test_a_key_with_another_fingerprint_is_refused_and_the_keyring_kept(tmp_path, fingerprint):
    dest = tmp_path / "nvidia.gpg"
    dest.write_bytes(b"previous keyring")
    wrong = "0" * 40
    result = run_module("spark_apt_keyring", {"url": f"{APT}/gpgkey", "dest": str(dest), "fingerprint": wrong})
    assert result["failed"] is True
    assert f"has fingerprint {fingerprint}, expected {wrong}" in result["msg"]
    assert dest.read_bytes() == b"previous keyring"


def test_a_damaged_keyring_is_replaced_and_the_diff_says_what_it_was(tmp_path, fingerprint):
    """Found at a terminal (issue 49): a keyring gpg cannot read (damaged, truncated) failed the module - reading
    its fingerprints for the diff - with "gpg could not read the key from <url>", blaming the key served."""
    dest = tmp_path / "nvidia.gpg"
    dest.write_bytes(b"junk\n")
    result = run_module("spark_apt_keyring", {"url": f"{APT}/gpgkey", "dest": str(dest), "fingerprint": fingerprint},
                        "--diff")
    assert not result["failed"] and result["changed"] is True, result.get("msg")
    assert f"-{dest}: (not a keyring gpg can read)" in result["_stdout"]
    assert f"+{dest}: {fingerprint}" in result["_stdout"]
    assert fingerprint in _show(dest)


def test_check_mode_writes_nothing(tmp_path, fingerprint):
    dest = tmp_path / "nvidia.gpg"
    result = run_module("spark_apt_keyring", {"url": f"{APT}/gpgkey", "dest": str(dest)}, "--check", "--diff")
    assert result["changed"] is True
    assert f"{dest}: {fingerprint}" in result["_stdout"]
    assert not dest.exists()


def test_a_missing_key_says_what_came_back(tmp_path, fingerprint):
    dest = tmp_path / "nvidia.gpg"
    result = run_module("spark_apt_keyring", {"url": f"{APT}/no-such-key", "dest": str(dest)})
    assert result["failed"] is True
    assert f"could not download the signing key from {APT}/no-such-key: HTTP 404" in result["msg"]
    assert not dest.exists()


def test_a_page_that_is_not_a_key_is_refused(tmp_path, fingerprint):
    result = run_module("spark_apt_keyring", {"url": f"{APT}/stable/deb/arm64/Packages",
                                              "dest": str(tmp_path / "k.gpg")})
    assert result["failed"] is True
    assert "k.gpg was left as it was" in result["msg"]


def test_a_second_key_served_beside_the_pinned_one_is_left_out_of_the_keyring(tmp_path, fingerprint):
    """A key file that holds the wanted fingerprint plus another key (e.g. an attacker's) gives a keyring of the
    wanted key alone; served on 127.0.0.1 by an HTTP server of the test's own."""
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    gpg = ["gpg", "--batch", "--homedir", str(home)]
    subprocess.run([*gpg, "--passphrase", "", "--quick-gen-key", "intruder <intruder@localhost>", "ed25519", "sign",
                    "never"], check=True, capture_output=True)
    intruder = subprocess.run([*gpg, "--armor", "--export"], check=True, capture_output=True).stdout
    served = urllib.request.urlopen(f"{APT}/gpgkey", timeout=10).read()
    both = tmp_path / "both.asc"
    both.write_bytes(served + b"\n" + intruder)
    assert len(re.findall(r"^fpr:", _show(both), re.MULTILINE)) >= 2
    dest = tmp_path / "nvidia.gpg"
    with FakeHTTP.folder(tmp_path) as server:
        result = run_module("spark_apt_keyring", {"url": f"{server.url}/both.asc", "dest": str(dest),
                                                  "fingerprint": fingerprint})
    assert not result["failed"], result.get("msg")
    keys = re.findall(r"^pub:.*?\n(?:.*\n)*?fpr:+([0-9A-F]{40}):", _show(dest), re.MULTILINE)
    assert keys == [fingerprint], "the keyring holds the pinned key and nothing else"


def test_the_key_the_source_and_no_one_line_definition_in_one_call(tmp_path, fingerprint):
    dest, sources, legacy = tmp_path / "nvidia.gpg", tmp_path / "nvidia.sources", tmp_path / "nvidia.list"
    legacy.write_text(f"deb [signed-by={dest}] {APT}/stable/deb/amd64 /\n")
    text = f"Types: deb\nURIs: {APT}/stable/deb/amd64\nSuites: /\nSigned-By: {dest}\n"
    args = {"url": f"{APT}/gpgkey", "dest": str(dest), "fingerprint": fingerprint, "source_path": str(sources),
            "source": text, "replaces": [str(legacy)]}

    check = run_module("spark_apt_keyring", args, "--check", "--diff")
    assert check["changed"] is True and check["changes"] == ["keyring", "source", f"{legacy} removed"], check
    assert not dest.exists() and not sources.exists() and legacy.exists(), "check mode wrote nothing"
    assert f"+Signed-By: {dest}" in check["_stdout"]

    first = run_module("spark_apt_keyring", args)
    assert first["changes"] == ["keyring", "source", f"{legacy} removed"], first
    assert sources.read_text() == text and oct(sources.stat().st_mode & 0o777) == "0o644"
    assert not legacy.exists()
    assert run_module("spark_apt_keyring", args)["changed"] is False, "a converged repository changes nothing"

    sources.write_text("Types: deb\nURIs: http://elsewhere.invalid/\n")
    assert run_module("spark_apt_keyring", args)["changes"] == ["source"]
    assert sources.read_text() == text


def test_a_refused_key_writes_no_source_either(tmp_path, fingerprint):
    sources, legacy = tmp_path / "nvidia.sources", tmp_path / "nvidia.list"
    legacy.write_text("deb http://old/ /\n")
    result = run_module("spark_apt_keyring", {
        "url": f"{APT}/gpgkey", "dest": str(tmp_path / "k.gpg"), "fingerprint": "0" * 40,
        "source_path": str(sources), "source": "Types: deb\n", "replaces": [str(legacy)]})
    assert result["failed"] is True
    assert not sources.exists() and legacy.read_text() == "deb http://old/ /\n", "nothing moved"

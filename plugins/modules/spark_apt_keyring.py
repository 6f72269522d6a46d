#!/usr/bin/python
# Copyright: sparkfleet contributors
# Apache License 2.0
"""Fetch an apt signing key, check its fingerprint, install it dearmored."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: spark_apt_keyring
short_description: Fetch an apt repository's signing key, check its fingerprint and install it as a keyring
description:
  - Downloads the key from O(url) with Ansible's own HTTP client, reads its
    fingerprint with C(gpg --show-keys) (in a throwaway GnuPG home; the host's
    own keys are never touched), refuses a key whose fingerprint is not
    O(fingerprint), and installs at O(dest), atomically, for an apt
    C(signed-by=) option, exactly the key with that fingerprint (exported
    from the throwaway home, so another key served beside it is left out).
    No C(apt-key).
  - A refused or unreadable key leaves O(dest) as it was.
  - With O(source_path) and O(source), also writes the repository's deb822 source file that names the
    keyring (atomically, mode 0644, only when its text differs) and removes the files of O(replaces) (a
    one-line definition of the same repository, which would make apt refuse to run) - the key, the source and
    the old definition in one module call, changed when any of them changed. The source is written only after
    the key passed its check.
version_added: "0.1.0"
author: sparkfleet contributors (@sparkfleet)
extends_documentation_fragment: [sparkfleet.spark.sparkfleet_attributes, sparkfleet.spark.sparkfleet_converged]
options:
  url:
    description: Where the key is published (ASCII-armored or binary).
    type: str
    required: true
  dest:
    description: The keyring file apt's C(signed-by=) names.
    type: path
    required: true
  fingerprint:
    description:
      - Expected fingerprint of the key (spaces and case ignored). When set, a
        key with another fingerprint is refused.
    type: str
  timeout:
    description: Seconds for the download.
    type: int
    default: 30
  validate_certs:
    description: Check the server's TLS certificate.
    type: bool
    default: true
  source_path:
    description: The repository's deb822 source file (C(/etc/apt/sources.list.d/NAME.sources)).
    type: path
  source:
    description: The text of O(source_path).
    type: str
  replaces:
    description: Other definitions of the same repository, removed (a one-line C(.list) file).
    type: list
    elements: path
    default: []
requirements:
  - gpg on the target host
attributes:
  check_mode:
    support: full
    details: Downloads and checks the key, writes nothing.
  diff_mode:
    support: full
    details: Shows the keyring's fingerprints, the source file and each removed file before and after.
  idempotent:
    support: full
    details: An installed keyring with the same bytes reports C(changed=false).
"""

EXAMPLES = r"""
- name: Install NVIDIA's container toolkit signing key
  sparkfleet.spark.spark_apt_keyring:
    url: https://nvidia.github.io/libnvidia-container/gpgkey
    dest: /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
    fingerprint: "{{ expected_fingerprint }}"

- name: The key, the deb822 source that names it, and no one-line definition beside it
  sparkfleet.spark.spark_apt_keyring:
    url: https://nvidia.github.io/libnvidia-container/gpgkey
    dest: /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
    fingerprint: "{{ expected_fingerprint }}"
    source_path: /etc/apt/sources.list.d/nvidia-container-toolkit.sources
    source: |
      Types: deb
      URIs: https://nvidia.github.io/libnvidia-container/stable/deb/arm64
      Suites: /
      Signed-By: /usr/share/keyrings/nvidia-container-toolkit-keyring.gpg
    replaces: [/etc/apt/sources.list.d/nvidia-container-toolkit.list]
"""

RETURN = r"""
fingerprints:
  description: Fingerprints of the primary keys in the downloaded key.
  returned: success
  type: list
  elements: str
  sample: ["70F0903611435845A14A6E1932140EED742619B1"]
changes:
  description: What changed (or, in check mode, would change), of C(keyring), C(source) and each removed file.
  returned: success
  type: list
  elements: str
  sample: [keyring, /etc/apt/sources.list.d/nvidia-container-toolkit.list removed]
"""

import os
import shutil
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._files import atomic_write
from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _converged as converged
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._gpg import (
    normalize_fingerprint,
    primary_fingerprints,
)

_ARMOR = b"-----BEGIN PGP PUBLIC KEY BLOCK-----"


class Keyring:
    def __init__(self, module: AnsibleModule, gpg: str, home: str) -> None:
        self.module = module
        self.gpg_path = gpg
        self.home = home

    def gpg(self, *args: str) -> tuple[list[str], int, str, str]:
        # --no-autostart: reading, importing and exporting public keys needs no gpg-agent, and a host without one
        # (Ubuntu's gpg without the gpg-agent package) made gpg fail an import that had worked.
        cmd = [self.gpg_path, "--batch", "--no-tty", "--no-autostart", "--homedir", self.home, *args]
        rc, out, err = self.module.run_command(cmd, environ_update={"LC_ALL": "C"})
        return cmd, rc, out, err

    def gpg_run(self, *args: str) -> str:
        cmd, rc, out, err = self.gpg(*args)
        if rc != 0:
            self.module.fail_json(msg=f"gpg could not read the key from {self.module.params['url']}: "
                                      f"{err.strip() or out.strip()}; {self.module.params['dest']} "
                                      f"was left as it was.", cmd=cmd, rc=rc, stdout=out, stderr=err)
        return out

    def fetch(self) -> bytes:
        url = self.module.params["url"]
        response, info = fetch_url(self.module, url, timeout=self.module.params["timeout"])
        if info["status"] != 200 or response is None:
            self.module.fail_json(msg=f"could not download the signing key from {url}: "
                                      f"HTTP {info['status']} {info.get('msg', '')}".rstrip()
                                  + f"; {self.module.params['dest']} was left as it was.")
        return response.read()

    def fingerprints_of(self, path: str) -> list[str]:
        return primary_fingerprints(self.gpg_run("--with-colons", "--show-keys", path))

    def described(self, path: str) -> str:
        """The installed keyring's fingerprints, for the diff: a file gpg cannot read (damaged, truncated) is said
        so and replaced, never a reason to fail."""
        _cmd, rc, out, _err = self.gpg("--with-colons", "--show-keys", path)
        found = primary_fingerprints(out) if rc == 0 else []
        return ", ".join(found) if found else "(not a keyring gpg can read)"

    def run(self) -> dict:
        params = self.module.params
        raw = self.fetch()
        downloaded = os.path.join(self.home, "key")
        with open(downloaded, "wb") as handle:
            handle.write(raw)
        found = self.fingerprints_of(downloaded)
        if not found:
            self.module.fail_json(msg=f"{params['url']} served no OpenPGP public key; "
                                      f"{params['dest']} was left as it was.")
        if params["fingerprint"]:
            want = normalize_fingerprint(params["fingerprint"])
            if want not in found:
                self.module.fail_json(
                    msg=f"the key at {params['url']} has fingerprint {', '.join(found)}, expected {want}; "
                        f"refused, {params['dest']} was left as it was. If the publisher rotated its key, "
                        f"verify the new fingerprint from a trusted source and set it.",
                    fingerprints=found)
        keyring = os.path.join(self.home, "keyring.gpg")
        if params["fingerprint"]:
            # The keyring holds exactly the pinned key: a file that carries another key beside it (served by
            # whoever controls the URL) does not get that one trusted too.
            self.gpg_run("--import", downloaded)
            self.gpg_run("--yes", "--output", keyring, "--export", want)
            found = [want]
        elif raw.lstrip().startswith(_ARMOR):
            self.gpg_run("--yes", "--output", keyring, "--dearmor", downloaded)
        else:
            shutil.copyfile(downloaded, keyring)
        with open(keyring, "rb") as handle:
            new = handle.read()
        dest = params["dest"]
        old = None
        if os.path.exists(dest):
            with open(dest, "rb") as handle:
                old = handle.read()
        result = {"changed": old != new, "fingerprints": found, "changes": [], "diff": []}
        if result["changed"]:
            before = self.described(dest) if old else "(absent)"
            result["changes"].append("keyring")
            result["diff"].append({"before": f"{dest}: {before}\n", "after": f"{dest}: {', '.join(found)}\n"})
            if not self.module.check_mode:
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                os.chmod(keyring, 0o644)
                self.module.atomic_move(keyring, dest)
        self.source(result)
        result["changed"] = bool(result["changes"])
        if not result["diff"]:
            del result["diff"]
        return result

    def source(self, result: dict) -> None:
        """The deb822 source naming the keyring, and no other definition of the repository beside it."""
        params = self.module.params
        path, text = params["source_path"], params["source"]
        if path:
            try:
                with open(path, encoding="utf-8") as handle:
                    before = handle.read()
            except FileNotFoundError:
                before = None
            except (OSError, UnicodeDecodeError) as exc:
                self.module.fail_json(msg=f"cannot read {path}: {exc}; expected an apt source file or none.")
            if before != text:
                result["changes"].append("source")
                result["diff"].append({"before": before or "", "after": text, "before_header": path,
                                       "after_header": path})
                if not self.module.check_mode:
                    atomic_write(path, text, mode=0o644)
        for old in params["replaces"]:
            if os.path.lexists(old):
                result["changes"].append(f"{old} removed")
                result["diff"].append({"before_header": old, "after_header": f"{old} (removed)",
                                       "before": _text(old), "after": ""})
                if not self.module.check_mode:
                    os.unlink(old)


def _text(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError as exc:
        return f"({exc.strerror})\n"


NAME = "spark_apt_keyring"


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "url": {"type": "str", "required": True},
            "dest": {"type": "path", "required": True},
            "fingerprint": {"type": "str"},
            "timeout": {"type": "int", "default": 30},
            "validate_certs": {"type": "bool", "default": True},
            "source_path": {"type": "path"},
            "source": {"type": "str"},
            "replaces": {"type": "list", "elements": "path", "default": []},
            "converged_key": {"type": "str", "no_log": False},
        },
        required_together=[("source_path", "source")],
        supports_check_mode=True,
    )
    if module.params["fingerprint"]:
        try:
            normalize_fingerprint(module.params["fingerprint"])
        except ValueError as exc:
            module.fail_json(msg=f"fingerprint: {exc}; set the key's full fingerprint, e.g. from "
                                 f"'gpg --show-keys KEYFILE'.")
    gpg = module.get_bin_path("gpg")
    if gpg is None:
        module.fail_json(msg="gpg not found on the host; it is needed to check and dearmor the signing "
                             "key. Install the 'gpg' package.")
    home = tempfile.mkdtemp(prefix="spark-keyring-")
    try:
        os.chmod(home, 0o700)
        if not module.check_mode:
            converged.forget(NAME, module.params["converged_key"])
        result = Keyring(module, gpg, home).run()
        if not module.check_mode:
            # What a converged re-run returns; the keyring, the source and the files it replaces hold the state.
            p = module.params
            converged.remember(NAME, p["converged_key"],
                               [p["dest"], *([p["source_path"]] if p["source_path"] else []), *p["replaces"]],
                               {"changed": False, "fingerprints": result["fingerprints"], "changes": []})
        module.exit_json(**result)
    finally:
        shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Install the collections named in requirements.yml from PyPI, not Galaxy.

Galaxy is out of reach on our machines; PyPI is not. The `ansible` community
package on PyPI is the same collection set Galaxy serves, release-tested
together. This script downloads that one wheel (pinned below), and extracts
only the collections requirements.yml names plus their declared dependencies
into collections/ansible_collections, which ansible.cfg puts on the path.
Nothing is installed into the venv and nothing else is unpacked.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import yaml
from packaging.specifiers import SpecifierSet

# The community package release whose collections we take (Ansible 12, the
# newest this machine's index has; its collections declare no upper bound
# on ansible-core, and run on the test venv's 2.21).
ANSIBLE_DIST = "ansible==12.3.0"
HERE = Path(__file__).resolve().parent
TARGET = HERE / "ansible_collections"
STAMP = TARGET / ".installed-from"
# collections/ansible_collections/sparkfleet/spark links to the repository root (committed).
OWN_NAMESPACE = "sparkfleet"


def _manifest(wheel: zipfile.ZipFile, name: str) -> dict:
    ns, coll = name.split(".")
    path = f"ansible_collections/{ns}/{coll}/MANIFEST.json"
    try:
        return json.loads(wheel.read(path))["collection_info"]
    except KeyError:
        sys.exit(f"{ANSIBLE_DIST} has no collection {name} ({path} missing); "
                 f"pick another release in {Path(__file__).name} or drop {name} from requirements.yml")


def _installed_namespaces() -> set[str]:
    """The namespaces a previous run extracted (all but this repository's own link)."""
    if not TARGET.is_dir():
        return set()
    return {p.name for p in TARGET.iterdir() if p.is_dir() and not p.is_symlink() and p.name != OWN_NAMESPACE}


def main() -> int:
    reqs = yaml.safe_load((HERE / "requirements.yml").read_text())["collections"]
    wanted = {r["name"]: r.get("version", "*") for r in reqs}
    stamp = f"{ANSIBLE_DIST} {sorted(wanted.items())}"
    if STAMP.exists() and STAMP.read_text() == stamp:
        print(f"[collections] current: {', '.join(sorted(wanted))} from {ANSIBLE_DIST}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        print(f"[collections] downloading {ANSIBLE_DIST} from PyPI (one wheel, no dependencies)")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
             "-d", tmp, ANSIBLE_DIST],
            check=True,
        )
        wheel_path = next(Path(tmp).glob("ansible-*.whl"))
        with zipfile.ZipFile(wheel_path) as wheel:
            todo, chosen = list(wanted), {}
            while todo:
                name = todo.pop()
                if name in chosen:
                    continue
                info = _manifest(wheel, name)
                spec = wanted.get(name, "*")
                if spec != "*" and info["version"] not in SpecifierSet(spec):
                    sys.exit(f"{ANSIBLE_DIST} carries {name} {info['version']}, requirements.yml "
                             f"asks for {spec}; change one of them so they agree")
                chosen[name] = info["version"]
                todo.extend(info.get("dependencies") or {})
            # Each namespace we take is replaced whole; sparkfleet/ (this
            # repository, linked in as the collection sparkfleet.spark) is not ours to touch.
            for namespace in {name.split(".")[0] for name in chosen} | _installed_namespaces():
                shutil.rmtree(TARGET / namespace, ignore_errors=True)
            for name in chosen:
                prefix = "ansible_collections/{}/{}/".format(*name.split("."))
                for member in wheel.namelist():
                    if member.startswith(prefix):
                        wheel.extract(member, HERE)
    STAMP.write_text(stamp)
    for name, version in sorted(chosen.items()):
        print(f"[collections] {name} {version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

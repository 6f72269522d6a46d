"""Packaging for sparkfleet: the CLI (src/sparkfleet) and, inside it, the collection sparkfleet.spark.

pyproject.toml holds everything static. Two facts live elsewhere, once:
- the version is galaxy.yml's (the collection and the CLI are one release);
- the ansible-core range is meta/runtime.yml's requires_ansible;
- the collection's own Python requirements (uv) are its requirements.txt's.
A wheel carries the collection (what `ansible-galaxy collection build` ships:
galaxy.yml, meta/, roles/, playbooks/, plugins/, matrix/) and ansible.cfg under
sparkfleet/collection/, so `sparkfleet provision -i inv` works from any
directory. A checkout (editable install) runs the repository itself.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# Everything of the collection a user runs; the rest (tests, test bed, bench) stays in the repository.
COLLECTION_PARTS = ("galaxy.yml", "README.md", "CHANGELOG.md", "requirements.txt", "meta", "roles", "playbooks",
                    "plugins", "matrix", "monitoring")
COLLECTION_IN_PACKAGE = Path("collection", "ansible_collections", "sparkfleet", "spark")


def _field(path: str, key: str) -> str:
    match = re.search(rf"^{key}:\s*[\"']?([^\"'\n]+)[\"']?\s*$", (HERE / path).read_text(), re.M)
    if not match:
        raise SystemExit(f"{path} has no '{key}:' line; setup.py takes the {key} from there")
    return match.group(1).strip()


def _requirements(path: str) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in (HERE / path).read_text().splitlines())
    return [line for line in lines if line]


class BuildWithCollection(build_py):
    """build_py, plus the collection and ansible.cfg copied into the package."""

    def run(self) -> None:
        super().run()
        package = Path(self.build_lib, "sparkfleet")
        target = package / COLLECTION_IN_PACKAGE
        shutil.rmtree(package / "collection", ignore_errors=True)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
        for part in COLLECTION_PARTS:
            source = HERE / part
            if source.is_dir():
                shutil.copytree(source, target / part, ignore=ignore)
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, target / part)
        shutil.copy2(HERE / "ansible.cfg", package / "collection" / "ansible.cfg")


setup(
    version=_field("galaxy.yml", "version"),
    install_requires=[
        f"ansible-core{_field('meta/runtime.yml', 'requires_ansible')}",
        "ansible-runner>=2.4,<2.5",
        "jinja2>=3.1",
        "pyyaml>=6",
        "rich>=13",
        # sparkfleet report --metrics (and watch): the fleet as Prometheus metrics, in its text format.
        "prometheus-client>=0.20,<1",
        # sparkfleet completion bash|zsh|tcsh: the scripts written from the argument parser itself.
        "shtab>=1.7",
        *_requirements("requirements.txt"),
    ],
    cmdclass={"build_py": BuildWithCollection},
)

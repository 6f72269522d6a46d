"""sparkfleet installed as the watch requires it (issue 70): from its wheel into a venv in root's own folders, never
under /tmp, as `pip install .` into /opt/sparkfleet would give an owner. The test's checkout may lie anywhere (a
clean clone under /tmp): the wheel is built from it, and the venv takes the checkout venv's installed packages as
hard links (a copy where the file system differs), so nothing the service runs is left below /tmp.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path

from conftest import BIN, REPO

# Root's own, outside /tmp and /var/tmp (which systemd's PrivateTmp= replaces): under root's home.
ROOTED_BASE = Path.home() / ".cache" / "sparkfleet-tests"


@dataclass
class Rooted:
    folder: Path  # everything of it, removed by remove()

    @property
    def python(self) -> Path:
        return self.folder / "venv" / "bin" / "python"

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def rooted_folder(prefix: str) -> Path:
    """A new folder in ROOTED_BASE (0700), for a test's own paths the watch must take as root's."""
    ROOTED_BASE.mkdir(parents=True, exist_ok=True, mode=0o700)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=ROOTED_BASE))


def _linked(source: str, dest: str) -> None:
    try:
        os.link(source, dest)
    except OSError:
        shutil.copy2(source, dest)


def install() -> Rooted:
    """sparkfleet's wheel and its requirements in a venv in a new rooted_folder()."""
    rooted = Rooted(rooted_folder("install-"))
    try:
        wheels = rooted.folder / "wheel"
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                        str(wheels), str(REPO)], check=True, capture_output=True, cwd=rooted.folder)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(rooted.folder / "venv")], check=True)
        site = Path(subprocess.run([str(rooted.python), "-c", "import sysconfig; print(sysconfig.get_paths()["
                                    "'purelib'])"], check=True, capture_output=True, text=True).stdout.strip())
        here = Path(sysconfig.get_paths()["purelib"])
        skip = shutil.ignore_patterns("__editable__*", "sparkfleet-*.dist-info", "sparkfleet", "__pycache__")
        for entry in here.iterdir():
            if skip(str(here), [entry.name]):
                continue
            if entry.is_dir():
                shutil.copytree(entry, site / entry.name, copy_function=_linked, symlinks=True)
            else:
                _linked(str(entry), str(site / entry.name))
        subprocess.run([sys.executable, "-m", "pip", "--python", str(rooted.python), "install", "-q", "--no-deps",
                        "--no-index", str(next(wheels.glob("sparkfleet-*.whl")))], check=True, capture_output=True)
        # Ansible's commands (ansible-runner starts ansible-playbook from the interpreter's folder), for this venv.
        for script in BIN.glob("ansible*"):
            text = script.read_text().split("\n", 1)
            target = rooted.python.parent / script.name
            target.write_text(f"#!{rooted.python}\n{text[1] if len(text) > 1 else ''}")
            target.chmod(0o755)
    except BaseException:
        rooted.remove()
        raise
    return rooted

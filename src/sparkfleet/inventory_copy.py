"""What a run reads of the user's inventory, judged once and copied into a folder of the run's own; Ansible is
given only the copy.

Ansible reads an inventory by path, again and again: ansible-inventory for the checks before the run, then
ansible-playbook, its vars plugin on each host, a script source it runs. Judged once and read again by path, a
folder another user could rename on the way would let them swap in an inventory of their own between the check and
the read (issue 70: an executable source run as root). So every file Ansible would read - the inventory's sources
(a folder's every entry but the hidden ones, which Ansible skips too) and the group_vars/ and host_vars/ beside
them - is judged by the one trust rule (module_utils/common/_trusted.py: the whole path, each link on it) and read
once through its descriptor into a 0700 folder the run made (runner.temporary_base()); nothing later opens the
user's files by name. What sparkfleet keeps with the inventory (the image and hash locks it writes, the hosts'
records, the run lock: module_utils/common/_inventory.py) still goes to the inventory's own folder, judged again
by the same rule when it is written: the copy's folder tells ansible-playbook where that is (COPY_ENV, ORIGIN_ENV).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sparkfleet.collection_home import collection_module
from sparkfleet.selection import is_host_list

# Read by module_utils/common/_inventory.py in ansible-playbook: a source in COPY_ENV's folder is kept in
# ORIGIN_ENV's (the one place a copy and its inventory are tied together).
_inventory = collection_module("common._inventory")
COPY_ENV, ORIGIN_ENV = _inventory.COPY_ENV, _inventory.ORIGIN_ENV
# An inventory is a few files; a folder with more is most likely a checkout given as -i by mistake.
MOST_ENTRIES = 5000


@dataclass
class InventoryCopy:
    typed: str  # the inventory as the user named it: the run lock, the report, every message
    source: str  # what ansible-inventory and ansible-playbook read: the copy, or the host list as typed
    folder: Path | None = None  # the copy's folder (None: a host list, nothing to copy)
    origin: str | None = None  # the inventory's own folder, which the copy's folder stands for

    def env(self) -> dict[str, str]:
        return {COPY_ENV: str(self.folder), ORIGIN_ENV: str(self.origin)} if self.folder else {}

    def remove(self) -> None:
        if self.folder:
            shutil.rmtree(self.folder, ignore_errors=True)

    def shown(self, text: str, as_typed: bool = True) -> str:
        """Text about the copy, as it would be about the user's inventory: its folder as the user typed it (what
        sparkfleet's own checks say), or its absolute path (as_typed=False: Ansible was given one)."""
        if not self.folder:
            return text
        typed = self.typed if os.path.isdir(self.typed) else os.path.dirname(self.typed) or "."
        return text.replace(str(self.folder), typed if as_typed else str(self.origin))


def _copy_file(path: str, dest: Path) -> None:
    data, mode = collection_module("common._trusted").read_file_and_mode(path, "the inventory's file")
    executable = mode & stat.S_IXUSR  # a script source stays one (its owner's say)
    fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o700 if executable else 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _copy_tree(path: str, dest: Path, seen: set[str], counted: list[int]) -> None:
    """`path`, a folder, copied into `dest` (a folder of the copy's), each entry judged; links are followed (an
    owner's group_vars/all -> ../common), their targets judged, a loop refused."""
    trusted = collection_module("common._trusted")
    real = trusted.check_path(path, "the inventory's folder", "dir")
    if real in seen:
        raise trusted.Untrusted(f"the inventory's folder {path} leads back to {real}, which is copied already: a "
                                "link loop; remove the link")
    seen.add(real)
    for name in sorted(os.listdir(real)):
        if name.startswith("."):  # .sparkfleet/, .git/: Ansible loads no hidden entry as inventory or variables
            continue
        counted[0] += 1
        if counted[0] > MOST_ENTRIES:
            raise trusted.Untrusted(f"the inventory {path} holds more than {MOST_ENTRIES} files and folders; an "
                                    "inventory is a few: give -i the inventory's own folder")
        entry = os.path.join(real, name)
        if os.path.isdir(entry):
            (dest / name).mkdir(mode=0o700)
            _copy_tree(entry, dest / name, seen, counted)
        else:
            _copy_file(entry, dest / name)


def copy(inventory: str, base: Path) -> InventoryCopy:
    """The inventory judged and copied into a new folder in `base`; Untrusted (nothing copied, nothing left) where
    any of it fails the trust rule. The inventory's own folder, where sparkfleet writes, must also be one no other
    user can write (check_dir), as every folder sparkfleet writes into."""
    if is_host_list(inventory):
        return InventoryCopy(inventory, inventory)
    trusted = collection_module("common._trusted")
    origin = os.path.abspath(collection_module("common._inventory").directory([inventory]))
    trusted.check_dir(origin, "the inventory's folder")
    real = trusted.check_path(inventory, "the inventory", "any")
    folder = Path(tempfile.mkdtemp(prefix="sf-inventory-", dir=base))
    try:
        if os.path.isdir(real):
            _copy_tree(real, folder, set(), [0])
            source = folder
        else:
            beside = os.path.dirname(real)
            trusted.check_dir(beside, "the inventory's folder")
            source = folder / os.path.basename(real)
            _copy_file(real, source)
            seen: set[str] = set()
            for name in ("group_vars", "host_vars"):
                if os.path.isdir(os.path.join(beside, name)):
                    (folder / name).mkdir(mode=0o700)
                    _copy_tree(os.path.join(beside, name), folder / name, seen, [0])
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return InventoryCopy(inventory, str(source), folder, origin)

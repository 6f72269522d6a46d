# Copyright: sparkfleet contributors
# Apache License 2.0
"""The inventory's directory: where sparkfleet keeps what belongs to an inventory - the image lock
(group_vars/all/spark_images_lock.yml), the stack matrix's hash lock (group_vars/all/spark_venv_lock.yml), the hosts'
records and the run lock (.sparkfleet/) - and where a derived
image's relative files are read from. One function, for the roles' defaults (the filter spark_inventory_dir) and
for the CLI's run lock, so the lock, the records and the run lock can never be kept in different places.

Controller only: it reads the controller's file system. A run of the sparkfleet CLI gives Ansible a copy of the
inventory (src/sparkfleet/inventory_copy.py) and names, in the environment, the copy's folder and the inventory's
own: what is kept with the inventory is kept there, never in the copy, which goes with the run.
"""

from __future__ import annotations

import os

# Set by the sparkfleet CLI for the run's ansible-playbook (src/sparkfleet/inventory_copy.py): the folder of the
# inventory's copy Ansible reads, and the inventory's own folder it stands for.
COPY_ENV, ORIGIN_ENV = "SPARKFLEET_INVENTORY_COPY", "SPARKFLEET_INVENTORY_ORIGIN"


class NoInventoryDirectory(ValueError):
    """The sources name no single directory; str() says what was found and what to do. `host_list` is True when
    they are host lists only (which have none, and need none where nothing is kept)."""

    def __init__(self, msg: str, host_list: bool = False) -> None:
        super().__init__(msg)
        self.host_list = host_list


def directory(sources: list | tuple | None) -> str:
    """The one directory of the inventory sources (ansible_inventory_sources, or the CLI's -i): a source that is a
    directory is its own, a file's is the one it is in. A host list (-i spark-01,spark-02,) has none. Refused: no
    source, only host lists, or sources in two directories (which one would hold the lock?)."""
    sources = [str(source) for source in sources or []]
    if not sources:
        raise NoInventoryDirectory("no inventory source (ansible_inventory_sources is empty), expected the inventory "
                                   "the lock belongs to; run with -i INVENTORY or set spark_images_lock_file")
    found: dict[str, list[str]] = {}  # each directory as the first of its sources names it -> its sources
    seen: dict[str, str] = {}  # the same directory however it is spelled
    copy, origin = os.environ.get(COPY_ENV), os.environ.get(ORIGIN_ENV)
    for source in sources:
        if os.path.exists(source):  # what is not a path is a host list (Ansible's rule: a ',' and no such file)
            place = source if os.path.isdir(source) else os.path.dirname(os.path.abspath(source))
            if copy and origin and os.path.realpath(place) == os.path.realpath(copy):
                place = origin
            place = seen.setdefault(os.path.realpath(place), place)
            found.setdefault(place, []).append(source)
    if not found:
        lists = ", ".join(repr(os.path.basename(source)) for source in sources)
        raise NoInventoryDirectory(f"the inventory {lists} is a host list, which has no directory for the lock "
                                   "(group_vars/all/spark_images_lock.yml), the matrix's hash lock "
                                   "(group_vars/all/spark_venv_lock.yml) or the hosts' records (.sparkfleet/); "
                                   "run with -i DIR, an inventory directory, or name the file (spark_images_lock_file, "
                                   "spark_venv_lock_file, matrix_lock_file)",
                                   host_list=True)
    if len(found) > 1:
        said = "; ".join(f"{', '.join(named)} in {place}" for place, named in found.items())
        raise NoInventoryDirectory(f"the inventory sources are in {len(found)} directories ({said}), and the image "
                                   "lock and the hosts' records belong to one; run with one inventory directory "
                                   "(-i DIR, its hosts in one or more files there), or set spark_images_lock_file "
                                   "and spark_verify_fleet_record_dir")
    return next(iter(found))

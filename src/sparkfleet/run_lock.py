"""One sparkfleet run per inventory at a time: the run lock, kept in the inventory's .sparkfleet/ folder."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
from pathlib import Path

from sparkfleet.ansible_options import private_files
from sparkfleet.collection_home import collection_module


class InventoryBusy(Exception):
    """Another sparkfleet run holds the inventory; str() names it."""


@contextlib.contextmanager
def run_lock(inventory: str, command: str):
    """Hold <inventory>/.sparkfleet/run.lock for the run, so two runs never write the image lock or the hosts'
    records at once; a second run is refused at once, naming the one that holds it. The directory is the one the
    roles keep the lock and the records in (module_utils/common/_inventory.py); a host list (a,b,) has none to lock."""
    inventories = collection_module("common._inventory")
    try:
        directory = Path(inventories.directory([inventory])) / ".sparkfleet"
    except inventories.NoInventoryDirectory as exc:
        if not exc.host_list:
            raise
        yield  # a host list: no lock, no records
        return
    path = directory / "run.lock"
    trusted = collection_module("common._trusted")
    with private_files():
        # Another user's .sparkfleet/ (or a run.lock linked to a root file) is refused, never followed or truncated.
        try:
            trusted.make_dir(str(directory), 0o700, "the inventory's .sparkfleet folder")
            handle = os.fdopen(trusted.open_file(str(path), os.O_RDWR | os.O_CREAT, 0o600, "the run lock"), "r+")
        except OSError as exc:  # a read-only inventory (a sandbox that did not let the folder be made), no right
            raise trusted.Untrusted(
                f"cannot take the run lock {path}: {exc.strerror}. sparkfleet keeps the run lock and the hosts' "
                f"records in {directory}: make it writable for this user (sparkfleet watch install makes it before "
                "its timer's sandbox is set up), or give an inventory in a folder of your own") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another run"
            raise InventoryBusy(f"{holder} holds inventory {inventory} ({path}); wait for it to finish and run "
                                "again. Nothing was changed.") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"sparkfleet {command} (pid {os.getpid()}, since "
                     f"{datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat()})")
        handle.flush()
        try:
            yield
        finally:
            handle.truncate(0)
            fcntl.flock(handle, fcntl.LOCK_UN)

"""Where the collection sparkfleet.spark this CLI runs is, and its pure-Python module_utils imported from there.

The CLI reads what only the collection should know (the fleet table and the facts it reads, the cluster
verdict's lines, the doctor's redaction) from the collection itself rather than a copy.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent
_CHECKOUT = _PACKAGE_DIR.parents[1]


def _where() -> tuple[Path, Path, Path]:
    """(the collection sparkfleet.spark, the collections path that holds it, the ansible.cfg to use).

    From a checkout (an editable install, the tests) that is the repository
    itself, linked in as collections/ansible_collections/sparkfleet/spark;
    from a wheel, the copy setup.py put into the package.
    """
    if (_CHECKOUT / "galaxy.yml").is_file() and (_CHECKOUT / "collections" / "ansible_collections").is_dir():
        return _CHECKOUT, _CHECKOUT / "collections", _CHECKOUT / "ansible.cfg"
    shipped = _PACKAGE_DIR / "collection"
    return shipped / "ansible_collections" / "sparkfleet" / "spark", shipped, shipped / "ansible.cfg"


PROJECT_DIR, COLLECTIONS_DIR, ANSIBLE_CFG = _where()


def collection_module(name: str):
    """A pure-Python module_utils of the collection sparkfleet.spark that runs (PROJECT_DIR), imported by its name
    under module_utils (its concept folder and module: "images._lock")."""
    if str(COLLECTIONS_DIR) not in sys.path:
        sys.path.append(str(COLLECTIONS_DIR))
    return importlib.import_module(f"ansible_collections.sparkfleet.spark.plugins.module_utils.{name}")

"""spark_wheelhouse natively, through real Ansible, against an index of this test's own (tests/integration/indexes.py:
the shipped matrix's packages as wheels pyindex builds, served over HTTP, each request counted).

What the venv makes of the wheelhouse (a host cut off from the indexes builds from it; each wheel crosses once for
the fleet) is proved in test_spark_venv.py; here, the module's own promises: check mode fetches and makes nothing,
the bundle is one tar made once per lock, an untrusted cache and a lock that is not the matrix's are refused before
anything is fetched, and an index's token never reaches the result.
"""

from __future__ import annotations

import os
import tarfile
import time

import pytest
from indexes import Index
from test_spark_venv import HERE, _lock

from conftest import run_module


@pytest.fixture
def index(tmp_path):
    served = Index(tmp_path / "index")
    yield served
    served.close()


def wheelhouse(index: Index, lock: dict, cache, *flags: str, **extra) -> dict:
    return run_module("spark_wheelhouse", {"lock": lock, "matrix": HERE, "index_mirrors": index.overrides,
                                           "cache": str(cache), **extra}, *flags)


def test_check_mode_says_what_it_would_fetch_and_fetches_and_makes_nothing(index, tmp_path):
    lock = _lock(index, HERE)
    wheels = sorted({e["wheel"] for entries in lock["steps"].values() for e in entries})
    before = index.wheels_fetched()
    said = wheelhouse(index, lock, tmp_path / "cache", "--check", bundle=True)
    assert not said["failed"], said.get("msg")
    assert (said["changed"], sorted(set(said["fetched"])), said["bundle"]) == (True, wheels, None)
    assert index.wheels_fetched() == before, "no wheel crossed"
    assert not (tmp_path / "cache").exists(), "no cache made"


def test_the_bundle_is_one_tar_of_the_locks_wheels_made_once_and_an_old_ones_unused_a_day_go(index, tmp_path):
    lock = _lock(index, HERE)
    cache = tmp_path / "cache"
    stale = cache / "bundles" / "0123456789abcdef.tar"
    stale.parent.mkdir(parents=True)
    stale.write_bytes(b"")
    os.utime(stale, (time.time() - 2 * 86400,) * 2)
    kept = cache / "bundles" / "fedcba9876543210.tar"
    kept.write_bytes(b"")  # another lock's, used an hour ago
    os.utime(kept, (time.time() - 3600,) * 2)

    first = wheelhouse(index, lock, cache, bundle=True)
    assert not first["failed"], first.get("msg")
    with tarfile.open(first["bundle"]) as archive:
        members = archive.getmembers()
    names = [m.name for m in members]
    assert names[-1] == os.path.basename(first["bundle"]) + ".done", "the marker last: a host has it once all unpack"
    assert sorted(names[:-1]) == sorted({os.path.basename(f) for f in first["files"]}), "each wheel once, flat"
    assert all((m.uid, m.gid, m.mode) == (0, 0, 0o644) for m in members), "nothing of the controller's users"
    assert not stale.exists() and kept.exists(), "a bundle unused for a day goes, a recent one stays"

    made = os.stat(first["bundle"]).st_ino
    fetched = index.wheels_fetched()
    again = wheelhouse(index, lock, cache, bundle=True)
    assert (again["changed"], again["fetched"], again["bundle"]) == (False, [], first["bundle"])
    assert os.stat(again["bundle"]).st_ino == made, "the same tar, not made again"
    assert index.wheels_fetched() == fetched, "no wheel crossed again"


def test_a_cache_others_can_write_to_is_refused_before_anything_is_fetched(index, tmp_path):
    lock = _lock(index, HERE)
    cache = tmp_path / "shared"
    cache.mkdir()
    cache.chmod(0o777)
    before = index.wheels_fetched()
    refused = wheelhouse(index, lock, cache)
    assert refused["failed"]
    assert "the wheel cache" in refused["msg"] and "Nothing was fetched" in refused["msg"], refused["msg"]
    assert index.wheels_fetched() == before and os.listdir(cache) == []


def test_a_lock_that_is_not_the_matrixs_is_refused_naming_what_differs(index, tmp_path):
    lock = _lock(index, HERE)
    step = next(iter(lock["steps"]))
    other = {**lock, "steps": {**lock["steps"], step: [{**lock["steps"][step][0], "sha256": "z" * 64}]}}
    refused = wheelhouse(index, other, tmp_path / "cache")
    assert refused["failed"] and refused["msg"].startswith("the hash lock cannot be used: "), refused["msg"]
    assert refused["msg"].endswith("Nothing was fetched.")
    assert not (tmp_path / "cache").exists()


def test_an_index_token_never_reaches_the_result_when_the_fetch_fails(index, tmp_path):
    lock = _lock(index, HERE)
    token = "tok3n-" + os.urandom(6).hex()
    dead = {upstream: f"http://fleet:{token}@127.0.0.1:9/simple" for upstream in index.overrides}  # port 9: nobody
    failed = wheelhouse(index, lock, tmp_path / "cache", index_mirrors=dead, timeout=2)
    assert failed["failed"] and "could not be fetched from" in failed["msg"], failed["msg"]
    assert token not in failed["_stdout"] + failed["_stderr"] + str(failed), "the token reached the output"

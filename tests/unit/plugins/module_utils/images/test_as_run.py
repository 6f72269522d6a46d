"""What a host runs, read without changing it (sparkfleet verify, issue 45 item 1): module_utils/images/_pinned.py's
as_run and the launcher's reference read back (_launchers.running), from what spark_image_pull and spark_launchers
say in check mode."""

from __future__ import annotations

from ansible_collections.sparkfleet.spark.plugins.module_utils.images._launchers import running, script
from ansible_collections.sparkfleet.spark.plugins.module_utils.images._pinned import as_run

OLD, NEW = "r/unsloth@sha256:" + "1" * 64, "r/unsloth@sha256:" + "2" * 64


def record(ref=NEW, **extra) -> dict:
    return {"name": "unsloth", "ref": ref, "launcher": "spark-unsloth",
            "launcher_path": "/usr/local/bin/spark-unsloth", "derived": False, **extra}


def launcher(runs=NEW, present=True, changed=False) -> dict:
    return {"name": "spark-unsloth", "path": "/usr/local/bin/spark-unsloth", "present": present, "running": runs,
            "changed": changed}


def test_a_launcher_written_by_sparkfleet_says_what_it_runs_and_one_without_an_image_says_nothing():
    text = script({"launcher": "spark-unsloth", "ref": NEW, "registry": "r", "repository": "unsloth"}, "finetuning",
                  {"HF_HOME": "/workspace/finetuning/.hf"}, ["--runtime=nvidia", "--gpus", "all"])
    assert running(text) == NEW
    assert running(text + "# edited by hand\n") == NEW, "a comment below the line that runs changes nothing it runs"
    assert running(text.replace(NEW, OLD)) == OLD
    assert running(None) is None and running("#!/bin/sh\nexec docker run 'x y' \"$@\"\n") == "x y"


def test_a_converged_host_has_no_drift_and_runs_the_locked_digest():
    (out,) = as_run([record()], [{"name": "unsloth", "present_before": True}], [launcher()])
    assert (out["ref"], out["locked_ref"], out["drift"]) == (NEW, NEW, [])


def test_a_lock_that_moved_is_one_line_naming_both_digests_and_the_refresh():
    (out,) = as_run([record()], [{"name": "unsloth", "present_before": False}], [launcher(runs=OLD, changed=True)])
    assert out["ref"] == OLD, "what the host runs, for the verification to name"
    assert out["drift"] == ["image unsloth: runs sha256:111111111111, the lock says sha256:222222222222 - "
                            "`sparkfleet refresh` moves the fleet to the lock, canary first (`sparkfleet provision`: "
                            "every host at once)"]


def test_an_edited_launcher_a_missing_launcher_and_a_missing_image_are_each_named():
    (edited,) = as_run([record()], [{"name": "unsloth", "present_before": True}], [launcher(changed=True)])
    assert edited["drift"][0].startswith("image unsloth: its launcher /usr/local/bin/spark-unsloth differs from the "
                                         "one this sparkfleet writes")
    (gone,) = as_run([record()], [{"name": "unsloth", "present_before": False}], [launcher(runs=None, present=False)])
    assert gone["drift"] == ["image unsloth: the locked sha256:222222222222 is not on the host - `sparkfleet "
                             "provision` pulls it",
                             "image unsloth: no launcher /usr/local/bin/spark-unsloth - `sparkfleet provision` "
                             "writes it"]
    (unbuilt,) = as_run([record(ref=None, derived=True)], [], [launcher(runs="sha256:" + "3" * 64)])
    assert unbuilt["drift"][0] == ("image unsloth: not built from its recipe on this host - `sparkfleet provision` "
                                   "builds it")


def test_digests_that_share_their_first_twelve_digits_are_shown_until_they_differ():
    """Issue 58, item 3: 'runs sha256:cf2b496b9f5a, the lock says sha256:cf2b496b9f5a' told the owner nothing."""
    same = "cf2b496b9f5a" + "07"
    runs, locked = f"r/unsloth@sha256:{same}{'1' * 50}", f"r/unsloth@sha256:{same}{'2' * 50}"
    (out,) = as_run([record(ref=locked)], [{"name": "unsloth", "present_before": True}], [launcher(runs=runs)])
    assert out["drift"][0].startswith(f"image unsloth: runs sha256:{same}1, the lock says sha256:{same}2 - ")
    # the same digest from another registry: the references, whole
    (moved,) = as_run([record(ref="127.0.0.1:5000/unsloth@sha256:" + "2" * 64)],
                      [{"name": "unsloth", "present_before": True}], [launcher(runs=NEW)])
    assert f"runs {NEW}, the lock says 127.0.0.1:5000/unsloth@sha256:{'2' * 64}" in moved["drift"][0]

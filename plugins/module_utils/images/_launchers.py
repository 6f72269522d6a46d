# Copyright: sparkfleet contributors
# Apache License 2.0
"""The launcher script of a pinned image: what `spark-<name>` on a host runs, written by spark_launchers.

The script runs exactly the pinned reference (a digest, or a derived image's ID), never a tag, mounts
./<workdir> (or $SPARK_WORKDIR) so checkpoints survive --rm - only a folder of the user's own (or root's) that no
other user can write to, since it is the container's working directory, first on its Python's path - and passes
the configured docker flags and environment. Every value that reaches the script is checked here and
single-quoted where it is written.
"""

from __future__ import annotations

import posixpath
import shlex

from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _validate as validate

HEADER = "# Written by sparkfleet (spark_images); a change here is replaced on the next run."


# In check mode, what a launcher of a derived image not built yet names in place of its image ID.
UNBUILT = "<the image ID this run builds>"


def problems(image: dict, workdir: str, environment: dict, run_flags: list, check_mode: bool = False) -> list[str]:
    """What is wrong with the values a launcher would carry (empty when it can be written). In check mode a
    derived image has no ID yet (nothing was built): its launcher is shown with UNBUILT in its place."""
    name = image.get("launcher")
    checks = [("launcher", validate.launcher(name)), ("workdir", validate.relative_dir(workdir))]
    if not image.get("ref") and check_mode and image.get("derived"):
        pass
    elif not image.get("ref"):
        checks.append((f"{name}: ref", "is empty; expected the pinned reference (a digest or an image ID)"))
    else:
        checks.append((f"{name}: ref", validate.env_value(image.get("ref"))))
    for key, value in environment.items():
        checks += [("environment name", validate.env_name(key)), (f"environment {key}", validate.env_value(value))]
    checks += [("run flag", validate.env_value(flag)) for flag in run_flags]
    return [f"{what} {problem}" for what, problem in checks if problem]


def _comment(image: dict) -> list[str]:
    if image.get("derived"):
        return [f"# Runs derived image {image.get('image_tag')} (recipe {image.get('recipe')}), built FROM",
                f"# {image.get('base_ref')}; by image ID, never a tag."]
    return [f"# Runs {image.get('registry')}/{image.get('repository')} pinned by digest "
            f"(tag {image.get('tag')} when pinned, {image.get('resolved_at')})."]


def script(image: dict, workdir: str, environment: dict, run_flags: list) -> str:
    """The launcher's text. Call problems() first: the values are assumed checked."""
    mount = "/workspace/" + posixpath.basename(workdir.rstrip("/"))
    lines = [
        "#!/bin/sh",
        HEADER,
        *_comment(image),
        "# Never a tag: the image below is what spark_verify verified on this host.",
        f"# Usage: {image['launcher']} [command [args...]]   (default: the image's own command)",
        f"# Mounts ./{workdir} (or $SPARK_WORKDIR) at {mount} so checkpoints survive --rm.",
        "set -eu",
        f'default_workdir="$PWD"/{shlex.quote(workdir)}',
        'workdir="${SPARK_WORKDIR:-$default_workdir}"',
        "# The folder is the container's working directory, first on its Python's path: yours alone, or refused.",
        'if [ -L "$workdir" ]; then',
        '    echo "$0: $workdir is a symbolic link; run from a folder of your own or set SPARK_WORKDIR" >&2; exit 126',
        "fi",
        'mkdir -p "$workdir"',
        "# (group-writable only where the group is the owner's own: alice:alice, a umask of 002)",
        'owner=$(stat -c %u "$workdir"); mode=$(stat -c %a "$workdir")',
        'shared=$((0$mode & 002))',
        '[ "$(stat -c %G "$workdir")" = "$(stat -c %U "$workdir")" ] || shared=$((0$mode & 022))',
        'if [ "$owner" != "$(id -u)" ] && [ "$owner" != 0 ] || [ "$shared" -ne 0 ]; then',
        '    echo "$0: $workdir (uid $owner, mode $mode) is not yours alone: files another user puts there would run"'
        ' \\',
        '         "in the container; run from a folder of your own or set SPARK_WORKDIR" >&2; exit 126',
        "fi",
        'tty=""',
        'if [ -t 0 ] && [ -t 1 ]; then tty="-t"; fi',
        "# SPARK_CONTAINER_NAME names the container (spark_verify uses it to clean up a hung probe).",
        'exec docker run --rm -i $tty ${SPARK_CONTAINER_NAME:+--name "$SPARK_CONTAINER_NAME"} \\',
        f"    {' '.join(shlex.quote(str(flag)) for flag in run_flags)} \\",
        *[f"    --env {shlex.quote(f'{key}={value}')} \\" for key, value in environment.items()],
        f'    --volume "$workdir":{shlex.quote(mount)} \\',
        f"    --workdir {shlex.quote(mount)} \\",
        f'    {shlex.quote(str(image["ref"]))} "$@"',
    ]
    return "\n".join(lines) + "\n"


def running(text: str | None) -> str | None:
    """The reference a launcher on the host runs (its last line that runs one, `REF "$@"`, as spark_launchers
    writes it: a comment a hand added below it changes nothing it runs); None for no launcher, or one that names
    no image."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip().endswith('"$@"')]
    if not lines:
        return None
    try:
        words = shlex.split(lines[-1])
    except ValueError:
        return None
    return words[-2] if len(words) >= 2 and words[-1] == "$@" else None

"""`make docs`: the lists and figures the documentation repeats, written from the table that holds them.

A page of docs/ or a module's DOCUMENTATION marks each generated part with a start line and an end line:

    <!-- make docs: NAME -->            (Markdown)          # make docs: NAME      (a module's YAML)
    ...                                                      ...
    <!-- end make docs -->                                   # end make docs

and everything between is this script's: edit the table (FRAMEWORKS, FRAMEWORK_SECONDS, ...), then run
`make docs`. `tests/modules/test_docs.py` fails while any part differs from what the tables say, naming the file,
the part and the command. Where a Markdown part sits, it is a paragraph of its own; in a module's YAML, the marker
lines' indentation is the list item's.

    .venv/bin/python tools/docs.py [--check]
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "collections"))

# Where generated parts may sit: the users' pages and the modules' documentation.
FILES = ("README.md", "docs/*.md", "roles/*/README.md", "plugins/modules/*.py")
MD = re.compile(r"^<!-- make docs: (?P<name>[a-z-]+) -->\n(?P<body>.*?)^<!-- end make docs -->$", re.M | re.S)
YAML = re.compile(r"^(?P<indent> *)# make docs: (?P<name>[a-z-]+)\n(?P<body>.*?)^(?P=indent)# end make docs$",
                  re.M | re.S)
MD_WIDTH = 78
YAML_WIDTH = 118


def _probe():
    """The GPU probe program's part that holds its deadline (FRAMEWORK_SECONDS, MIN_SECONDS)."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _program_gpu_probe

    return _program_gpu_probe


def _frameworks():
    """The GPU probe program's part that holds FRAMEWORKS."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _program_probe_frameworks

    return _program_probe_frameworks


def _verify_timeout() -> int:
    import yaml

    return yaml.safe_load((REPO / "roles" / "spark_verify" / "defaults" / "main.yml").read_text())[
        "spark_verify_timeout"]


def _paragraph(text: str) -> str:
    return textwrap.fill(text, MD_WIDTH, break_long_words=False, break_on_hyphens=False)


def frameworks(kind: str) -> str:
    """FRAMEWORKS: each probed framework with what its probe does on the GPU, then the ones only imported."""
    table = _frameworks().FRAMEWORKS
    probed = ", ".join(f"{f.name} ({f.exercise})" for f in table if f.probe)
    imported = ", ".join(f.name for f in table if not f.probe)
    text = (f"Beside torch's line, each GPU framework the image or venv holds runs its own smallest real GPU "
            f"operation on the run's input, in a process of its own: {probed}. The others it knows ({imported}) "
            f"are imported and listed as not exercised, with why.")
    return _paragraph(text) if kind == "md" else text


def probe_deadline(kind: str) -> str:
    """FRAMEWORK_SECONDS and MIN_SECONDS of the probe, the verify role's timeout."""
    probe = _probe()
    text = (f"Each framework's process has a hard deadline ({probe.FRAMEWORK_SECONDS} s at most, all of them "
            f"within `spark_verify_timeout`, {_verify_timeout()} s by default): a call stuck in C is killed with "
            f"everything it started, reported as \"timed out after N s at STAGE (killed)\" with the last lines the "
            f"library wrote on stderr, never as another diagnosis; one left less than {probe.MIN_SECONDS} s is not "
            f"started and says so.")
    return _paragraph(text) if kind == "md" else text


def doctor_checks(kind: str) -> str:
    """CHECKS of the doctor, each by its docstring (the phrase for the problem it finds), in the order they run."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _doctor

    missing = [check.__name__ for check in _doctor.CHECKS if not (check.__doc__ or "").strip()]
    if missing:
        raise ValueError(f"{', '.join(missing)} in CHECKS of plugins/module_utils/host/_doctor.py has no docstring: "
                         "write the problem it finds there, as the doctor's page lists it")
    said = [" ".join(check.__doc__.split()) for check in _doctor.CHECKS]
    if kind == "md":
        return "\n".join(f"{n}. {phrase}" for n, phrase in enumerate(said, 1))
    return ("Diagnoses, read-only, each problem with its evidence and what to do, in RV(report.problems), in this "
            "order - " + "; ".join(said) + ".")


def commands(kind: str) -> str:
    """The command table: each command as typed, what it runs and its line of `sparkfleet --help`."""
    from sparkfleet.command_table import COMMANDS

    def runs(command) -> str:
        played = command.playbook + (f" --tags {command.tags}" if command.tags else "")
        return f"`{played}`" + (f" {command.runs_note}" if command.runs_note else "")

    rows = [f"| `sparkfleet {' '.join(c.words)}` | {runs(c)} | {c.short} |" for c in COMMANDS]
    return "\n".join(["| command | runs | does |", "|---|---|---|", *rows])


def lock_fields(kind: str) -> str:
    """The image lock's fields (_lock.ENTRY_FIELDS), in the order the file is written, each with what it holds."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.images import _lock

    if kind == "md":
        return "\n".join(f"- `{f.name}`: {f.meaning}" for f in _lock.ENTRY_FIELDS)
    fields = "; ".join(f"`{f.name}`, {f.meaning}" for f in _lock.ENTRY_FIELDS)
    return f"Each entry holds, in this order - {fields}."


PARTS: dict[str, Callable[[str], str]] = {
    "frameworks": frameworks,
    "probe-deadline": probe_deadline,
    "doctor-checks": doctor_checks,
    "commands": commands,
    "lock-fields": lock_fields,
}


def _doc_code(text: str) -> str:
    return f"C({text})"


def _backticks(text: str, code: Callable[[str], str]) -> str:
    """A table's words mark code with backticks; a module's documentation with C()."""
    return re.sub(r"`([^`]+)`", lambda m: code(m.group(1)), text)


def render(name: str, kind: str, indent: str = "") -> str:
    if name not in PARTS:
        raise KeyError(f"no part named {name!r} in tools/docs.py's PARTS (it knows {', '.join(sorted(PARTS))})")
    if kind == "md":
        return PARTS[name]("md") + "\n"
    text = _backticks(PARTS[name]("yaml"), _doc_code)
    # a folded block: the words may hold what a plain YAML scalar may not (": ", "#")
    return f"{indent}- >-\n" + textwrap.fill(text, YAML_WIDTH, initial_indent=f"{indent}  ",
                                             subsequent_indent=f"{indent}  ", break_long_words=False,
                                             break_on_hyphens=False) + "\n"


def rewrite(text: str, suffix: str) -> tuple[str, list[str]]:
    """The text with every generated part written anew, and the names of the parts that changed."""
    changed: list[str] = []

    def md(match: re.Match) -> str:
        body = render(match["name"], "md")
        if body != match["body"]:
            changed.append(match["name"])
        return f"<!-- make docs: {match['name']} -->\n{body}<!-- end make docs -->"

    def yml(match: re.Match) -> str:
        body = render(match["name"], "yaml", match["indent"])
        if body != match["body"]:
            changed.append(match["name"])
        return f"{match['indent']}# make docs: {match['name']}\n{body}{match['indent']}# end make docs"

    return (MD if suffix == ".md" else YAML).sub(md if suffix == ".md" else yml, text), changed


def files() -> list[Path]:
    return sorted(p for pattern in FILES for p in REPO.glob(pattern))


def drift() -> list[str]:
    """'FILE: part NAME' for each generated part that differs from its table."""
    found = []
    for path in files():
        _new, changed = rewrite(path.read_text(), path.suffix)
        found += [f"{path.relative_to(REPO)}: part {name}" for name in changed]
    return found


def used() -> set[str]:
    """The parts some file holds."""
    names = set()
    for path in files():
        text = path.read_text()
        names |= {m["name"] for m in (MD if path.suffix == ".md" else YAML).finditer(text)}
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 where a part differs")
    args = parser.parse_args()
    if args.check:
        stale = drift()
        for line in stale:
            print(f"{line} differs from its table: run make docs")
        return 1 if stale else 0
    for path in files():
        new, changed = rewrite(path.read_text(), path.suffix)
        if changed:
            path.write_text(new)
            print(f"{path.relative_to(REPO)}: {', '.join(changed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

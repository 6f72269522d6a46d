"""What a person sees at the end of a run: the console (width, colour) and the summary fitted to it.

At a terminal the console takes the terminal's width and colour; piped (CI,
`| less`, `> log`), rich's default of 80 columns (or $COLUMNS) sizes the
table and other lines are written whole (soft wrap: no line broken, no
trailing padding). NO_COLOR (any value) or --no-color turns colour off.
"""

from __future__ import annotations

import io
import itertools
import sys
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from sparkfleet import report
from sparkfleet.collection_home import collection_module

# Which columns of each table stay when the width is short, most important first, and the columns whose cells may
# take several lines (long by nature), each with the width it may narrow to: both from the tables' columns
# (_fleet_table.COLUMNS, TARGET_COLUMNS). Every other cell stays on one line. A cell breaks at a space, or after a
# '-' or '/' inside a word (a path, a version), and inside a word only where no such place is near (_wrap); a word
# that never breaks (an image's name and short digest, ngc@cf2b496b9f5a) widens its column instead.
PRIORITY = report.table.priority(report.table.COLUMNS)
TARGET_PRIORITY = report.table.priority(report.table.TARGET_COLUMNS)
FOLDING = {**report.table.folding(report.table.COLUMNS), **report.table.folding(report.table.TARGET_COLUMNS)}


def make_console(stderr: bool = False, no_color: bool = False) -> Console:
    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    # no_color None: rich reads NO_COLOR itself.
    return Console(stderr=stderr, highlight=False, soft_wrap=not tty, no_color=True if no_color else None)


def _header_width(header: str) -> int:
    """The least width at which a header takes at most two lines, never one word a line: 'image or venv' takes 7
    ('image' / 'or venv'); a header of two words ('ABI findings', 'images (digest)') stays on one line."""
    words = header.split()
    if len(words) < 3:
        return len(header)
    return min(max(len(" ".join(words[:cut])), len(" ".join(words[cut:]))) for cut in range(1, len(words)))


def _breaks(text: str) -> list[int]:
    """Where a line of `text` may end: before a space, or after a '-' or '/' that follows a letter, digit, '.' or
    '_' ('unsloth-' / '2026.7.2', '/opt/' / 'sparkfleet'; never inside '->' or after '(/')."""
    found = []
    for i in range(1, len(text)):
        if text[i] == " " or (text[i - 1] in "-/" and text[i] not in " ->" and i >= 2
                              and (text[i - 2].isalnum() or text[i - 2] in "._")):
            found.append(i)
    return found


def _atoms(text: str) -> list[str]:
    """The pieces of `text` no line may cut (between two of its break places)."""
    cuts = [0, *_breaks(text), len(text)]
    return [text[a:b].strip() for a, b in itertools.pairwise(cuts) if text[a:b].strip()]


def _wrap(text: str, width: int) -> str:
    """The cell at `width` columns: each line cut at the last break place that fits (_breaks), inside a word only
    where there is none (a word longer than the column)."""
    out = []
    for line in text.split("\n"):
        while len(line) > width:
            fitting = [i for i in _breaks(line) if i <= width]
            cut = fitting[-1] if fitting else width
            out.append(line[:cut].rstrip())
            line = line[cut:].lstrip()
        out.append(line)
    return "\n".join(out)


def _header_lines(header: str, width: int) -> str:
    """The header as shown in a column `width` wide: on one line where it fits, else cut at the words into the two
    lines that fit (the cells never wrap; a header that wrapped with them took one word a line)."""
    if len(header) <= width:
        return header
    words = header.split()
    cuts = [(" ".join(words[:cut]), " ".join(words[cut:])) for cut in range(1, len(words))]
    fitting = [c for c in cuts if max(len(c[0]), len(c[1])) <= width] or cuts
    return "\n".join(min(fitting, key=lambda c: max(len(c[0]), len(c[1])))) if fitting else header


def _widths(header: str, cells: list[str]) -> tuple[int, int]:
    """(the least, the most) columns a column takes: its header in two lines at most, its longest cell; folding
    ones fold down to their cap."""
    least_header = _header_width(header)
    widest = max([least_header] + [len(line) for cell in cells for line in cell.split("\n")])
    most = max(widest, len(header))  # room enough: the header on one line
    if header not in FOLDING:
        return widest, most
    atom = max([len(a) for cell in cells for line in cell.split("\n") for a in _atoms(line)] or [0])
    return min(widest, max(FOLDING[header], least_header, atom)), most


def _table(title: str | None, headers: list[str], rows: list[list[str]], widths: dict[str, int]) -> Table:
    table = Table(title=title, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1),
                  collapse_padding=True, title_justify="left", title_style="bold")
    for header, width in widths.items():
        shown = _header_lines(header, width)
        table.add_column(shown, no_wrap=True, min_width=width, max_width=width)
    for cells in rows:  # a folding column's cells cut where they may (_wrap), each other cell whole
        table.add_row(*(_wrap(cells[headers.index(h)], w) if h in FOLDING else cells[headers.index(h)]
                        for h, w in widths.items()))
    return table


def fitted_table(title: str | None, headers: list[str], rows: list[list[str]], width: int,
                 priority: tuple[str, ...] = PRIORITY) -> tuple[Table, list[str]]:
    """The table at `width` columns, leaving out the least important columns until it fits; (table, left out).
    The room left is given to the folding columns, most important first."""
    least, most = {}, {}
    for h in headers:
        least[h], most[h] = _widths(h, [r[headers.index(h)] for r in rows])
    keep = list(headers)

    def total() -> int:  # two columns between cells: the box's blank separator and the padding
        return sum(least[h] for h in keep) + 2 * (len(keep) - 1)

    empty = [h for h in headers if all(r[headers.index(h)] in ("-", "") for r in rows)]  # says nothing: first out
    while total() > width:
        droppable = [h for h in empty if h in keep and h != "host"] + [
            h for h in reversed(priority) if h in keep and h != "host"]
        if not droppable:
            break
        keep.remove(droppable[0])
    # A column left out for a wide one above it that did not fit either comes back where it fits on its own.
    for h in (h for h in priority if h in headers and h not in keep and h not in empty):
        if total() + least[h] + 2 <= width:
            keep = [k for k in headers if k in keep or k == h]
    room = width - total()
    # The room left goes first to the folding columns that need least of it to take their cells on one line (a
    # short smoke cell whole before a long path a line shorter), in priority order where they need the same.
    for h in sorted((h for h in priority if h in keep and h in FOLDING), key=lambda h: most[h] - least[h]):
        grow = max(0, min(room, most[h] - least[h]))
        least[h] += grow
        room -= grow
    for h in (h for h in priority if h in keep):  # then each header on one line, where there is room
        grow = max(0, min(room, most[h] - least[h]))
        least[h] += grow
        room -= grow
    return _table(title, headers, rows, {h: least[h] for h in keep}), [h for h in headers if h not in keep]


# A log or a pipe has no width to fit: its table has every column, each cell whole, on lines up to this long.
PIPED_WIDTH = 1000


def print_table(console: Console, headers: list[str], rows: list[list[str]], priority: tuple[str, ...]) -> None:
    """A table fitted to the terminal (what it leaves out named under it), or, piped, whole: a log or `| less`
    keeps every column and cell, on lines without the padding that fills each to the table's width."""
    if console.is_terminal:
        table, left_out = fitted_table(None, headers, rows, console.width, priority)
        console.print(table, soft_wrap=False)
        if left_out:
            console.print(f"(left out at {console.width} columns: {', '.join(left_out)}; all in report.md)",
                          style="dim", markup=False)
        return
    table, _ = fitted_table(None, headers, rows, PIPED_WIDTH, priority)
    wide = Console(file=io.StringIO(), width=PIPED_WIDTH, no_color=True, highlight=False)  # a console never caps it
    wide.print(table, soft_wrap=False)
    console.print("\n".join(line.rstrip() for line in wide.file.getvalue().splitlines()), markup=False,
                  highlight=False, soft_wrap=True)


DIFF_STYLES = {"+": "green", "-": "red", "@": "cyan"}


def print_diffs(data: dict, console: Console) -> None:
    """--diff: each change of each host with its diff, as ansible-playbook shows them (removed lines red, added
    green)."""
    for name, host in data["hosts"].items():
        for change in host.get("changes") or []:
            if not change["diff"]:
                continue
            console.print(f"{name}: {'would change' if data.get('check') else 'changed'} {change['task']}",
                          style="bold", markup=False, soft_wrap=True)
            for line in change["diff"].splitlines():
                style = None if line.startswith(("---", "+++")) else DIFF_STYLES.get(line[:1])
                console.print(line, style=style, markup=False, highlight=False, soft_wrap=True)


def print_summary(data: dict, paths: dict[str, Path] | None, console: Console, diffs: bool = False) -> None:
    """The end of every run: the diffs (--diff), warnings, the lock diff, the fleet table, each failure (red) and
    the reports line."""
    if diffs:
        print_diffs(data, console)
    else:  # what the controller wrote (pin's lock, the matrix's hash lock): where to find it
        for change in (data["hosts"].get("localhost") or {}).get("changes") or []:
            if change.get("path"):
                console.print(f"{'would write' if data.get('check') else 'wrote'}: {change['path']} "
                              f"({change['task']})", markup=False, soft_wrap=True)
                for line in change.get("lines") or []:
                    console.print(f"  {line}", markup=False, soft_wrap=True)
        # What each host's run changed (a repair says what it repaired), a line a change; --diff shows how.
        for name, host in data["hosts"].items():
            if name == "localhost":
                continue
            for change in host.get("changes") or []:
                for line in report.change_lines(change, bool(data.get("check"))):
                    console.print(f"{name}: {line}" if not line.startswith(" ") else f"  {line}", markup=False,
                                  soft_wrap=True)
    for warning in data.get("warnings") or []:
        console.print(f"warning: {warning}", style="yellow", markup=False)
    if data.get("refresh"):
        for d in data["refresh"]["diff"]:  # each line as spark_images_lock_diff wrote it
            console.print(f"lock diff: {d['line']}", markup=False)
    # The title on a line of its own, whatever the run (a controller's check, bad input): a table's title wraps at
    # the table's width, narrower than the screen.
    title = (f"sparkfleet {data['command']}: {data['status']} (exit {data['exit_code']}, "
             f"{data['duration_s']} s)" + (", check mode: nothing changed" if data.get("check") else ""))
    console.print(title, style="bold", markup=False, soft_wrap=True)
    if data["hosts"]:
        print_table(console, list(report.HEADERS), report.summary_rows(data), PRIORITY)
        # Each image and venv a check ran on, on a row of its own (what the host's row joins).
        rows = report.target_rows(data)
        checked = [row for row in rows if any(cell != "-" for cell in row[2:])]
        if checked:
            print_table(console, list(report.table.TARGET_HEADERS), checked, TARGET_PRIORITY)
        if len(checked) < len(rows):  # the host was not verified in this run: nothing to show of them
            left = len(rows) - len(checked)
            console.print(f"({left} image{'s' if left != 1 else ''} or venv{'s' if left != 1 else ''} with no check "
                          "in this run left out; all in report.md)", style="dim", markup=False, soft_wrap=True)
    for name, host in data["hosts"].items():
        if host.get("override"):  # at any width: a host provisioned on purpose though it is not a Spark
            console.print(f"{name}: {host['override']}: spark_preflight_require_spark is false for it", markup=False,
                          soft_wrap=True)
        refresh = host.get("refresh")
        if refresh and refresh["images"]:  # at any width: where the host was in the rollout, each image old -> new
            console.print(f"{name}: {report.table.refresh_line(refresh)}", markup=False, soft_wrap=True)
    for name, host in data["hosts"].items():
        for failure in host["failures"]:
            console.print(f"{name}: FAILED {failure['task']}: {failure['msg']}", style="bold red", markup=False,
                          soft_wrap=True)
        if host["unreachable"]:
            console.print(f"{name}: UNREACHABLE {host['unreachable']}", style="bold red", markup=False,
                          soft_wrap=True)
    if paths:
        console.print("reports: " + ", ".join(str(p) for p in paths.values()), markup=False, soft_wrap=True)


def proposal_lines(fleet, data: dict) -> list[str]:
    """matrix propose: the candidate against the matrix in use, pin by pin; when proved, the file written, how it
    was proved and what to do next (a failure is the summary's, with its stage and the pins to blame)."""
    lines = fleet.check_lines("proposal")
    if lines and data.get("check"):
        lines.append("check mode: the candidate was worked out and checked; it was not built, proved or written")
    written = data.get("proposal")
    if written:
        smoke = written.get("smoke") or {}
        matrix = collection_module("venv._stack_matrix")
        proof, _sep, how = matrix.proof({"evidence": written.get("evidence")}).rpartition(" (")
        peak = smoke.get("peak_gpu_memory_mb")
        lines += [f"written: {written['file']}", f"  {proof}", f"  ({how}" if how else "",
                  f"  smoke step on the {smoke.get('device')}: loss {smoke.get('first_loss')} -> "
                  f"{smoke.get('last_loss')}, {smoke.get('seconds_per_step')} s per step"
                  + (f", peak GPU memory {peak} MiB" if peak else ""),
                  "  to use it: review and commit it, set spark_venv_matrix_file to it",
                  "  (group_vars/all), sparkfleet matrix lock -i INVENTORY, then provision"]
    return [line for line in lines if line]

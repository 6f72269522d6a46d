"""Live progress of a run, drawn from events.Fleet with rich (or one line per task when not on a terminal)."""

from __future__ import annotations

import time

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from sparkfleet.events import Fleet


def _seconds(elapsed: float) -> int:
    """Whole seconds of a difference of two monotonic readings: (t + 12) - t can come out 11.999..., and a task
    12 s old must not read 11."""
    return int(round(elapsed, 6))


def status_lines(fleet: Fleet, now: float | None = None) -> list[str]:
    """What the progress shows, as text: the play, the task and how long it runs, each host's tally."""
    now = time.monotonic() if now is None else now
    lines = [f"play: {fleet.play or '-'}"]
    if fleet.task:
        elapsed = _seconds(now - fleet.task_started) if fleet.task_started else 0
        lines.append(f"task: {fleet.task} ({elapsed} s{fleet.task_progress()})")
    done = [h for h in fleet.hosts.values() if not h.failures and not h.unreachable]
    failed = sorted(h.name for h in fleet.hosts.values() if h.failures)
    unreachable = sorted(h.name for h in fleet.hosts.values() if h.unreachable)
    lines.append(f"hosts: {len(done)} ok, {len(failed)} failed{(' (' + ', '.join(failed) + ')') if failed else ''}, "
                 f"{len(unreachable)} unreachable{(' (' + ', '.join(unreachable) + ')') if unreachable else ''}")
    return lines


class Progress:
    def __init__(self, fleet: Fleet, live: bool, console: Console | None = None):
        self.fleet = fleet
        self.console = console or Console(stderr=False)
        self._last_task: str | None = None
        self._notes: list[str] = []
        self._still = 0  # how many STILL_EVERY periods of the current task were said
        # Last: rich's Live draws render() once in its constructor, which reads the state above.
        self.live = Live(console=self.console, refresh_per_second=4, transient=True,
                         get_renderable=self.render) if live else None

    def __enter__(self):
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc):
        if self.live:
            self.live.__exit__(*exc)

    def note(self, text: str) -> None:
        self._notes.append(text)
        if not self.live:
            self.console.print(text)

    def render(self):
        table = Table.grid(padding=(0, 2))
        for name, host in sorted(self.fleet.hosts.items()):
            state = ("[red]unreachable[/]" if host.unreachable else "[red]failed[/]" if host.failures
                     else "[green]ok[/]")
            table.add_row(name, Text.from_markup(state), f"{host.finished_tasks} tasks", host.last_task or "")
        head = [Text(line) for line in status_lines(self.fleet)] + [Text(n, style="yellow") for n in self._notes]
        return Group(*head, table)

    # Without the live display, a task still running after this many seconds says so again (a controller step
    # such as the matrix check's index queries runs a minute without an event).
    STILL_EVERY = 15

    def tick(self, now: float | None = None) -> None:
        """Called every few seconds while the run goes on (ansible-runner's cancel check)."""
        if self.live or not self.fleet.task or not self.fleet.task_started:
            return
        now = time.monotonic() if now is None else now
        elapsed = _seconds(now - self.fleet.task_started)
        if elapsed >= self.STILL_EVERY and elapsed // self.STILL_EVERY != self._still:
            self._still = elapsed // self.STILL_EVERY
            self.console.print(f"[{time.strftime('%H:%M:%S')}] still: {self.fleet.task} "
                               f"({elapsed} s{self.fleet.task_progress()})",
                               highlight=False, markup=False)

    def update(self) -> None:
        if self.live:
            return  # Live redraws from render() on its own clock
        if self.fleet.task and self.fleet.task != self._last_task:
            self._last_task = self.fleet.task
            self._still = 0
            self.console.print(f"[{time.strftime('%H:%M:%S')}] {self.fleet.play or ''} | {self.fleet.task}",
                               highlight=False, markup=False)

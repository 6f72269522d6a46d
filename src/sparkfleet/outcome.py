"""What the end of a run means to the user: sparkfleet's exit codes and the outcome they are read from."""

from __future__ import annotations

from dataclasses import dataclass, field

EXIT_OK = 0


EXIT_FAILED_HOSTS = 2


EXIT_UNREACHABLE = 3


EXIT_BAD_INPUT = 4


EXIT_BUSY = 5


EXIT_CANCELLED = 130


@dataclass
class RunOutcome:
    status: str
    rc: int
    failed: set[str] = field(default_factory=set)
    unreachable: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)  # Ansible's own error lines, when it stopped on bad input
    nothing_targeted: bool = False  # the run ended well having done nothing: no host matched

    @property
    def bad_input(self) -> bool:
        """ansible-playbook stopped on an error of its own - 1 error (an inventory it cannot parse, a vault it
        cannot open), 4 parser error, 5 bad options - with no host failed or unreachable."""
        return self.nothing_targeted or (
            self.status != "canceled" and self.rc in (1, 4, 5) and not self.failed and not self.unreachable)

    def exit_code(self) -> int:
        if self.status == "canceled":
            return EXIT_CANCELLED
        if self.bad_input:
            return EXIT_BAD_INPUT
        if self.unreachable:
            return EXIT_UNREACHABLE
        if self.failed or self.status != "successful" or self.rc != 0:
            return EXIT_FAILED_HOSTS
        return EXIT_OK


def outcome_from_stats(status: str, rc: int, stats: dict | None) -> RunOutcome:
    stats = stats or {}
    return RunOutcome(status=status, rc=rc, failed=set(stats.get("failures", {})),
                      unreachable=set(stats.get("dark", {})))

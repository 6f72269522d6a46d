"""--fast: Ansible under Mitogen's strategy, refused with why where this ansible-core and Mitogen do not fit."""

from __future__ import annotations

import re
from pathlib import Path


def mitogen_refuses(core: str, loaders_source: str) -> str | None:
    """Why the installed Mitogen cannot run this ansible-core (None: it can), from the range its
    ansible_mitogen/loaders.py declares (ANSIBLE_VERSION_MIN, and ANSIBLE_VERSION_MAX where a release has one)."""
    have = tuple(int(part) for part in re.findall(r"\d+", core)[:2])
    bounds = {name: tuple(int(n) for n in value.split(","))
              for name, value in re.findall(r"^ANSIBLE_VERSION_(MIN|MAX)\s*=\s*\((\d+\s*,\s*\d+)\)", loaders_source,
                                            re.M)}
    low, high = bounds.get("MIN"), bounds.get("MAX")
    if (low and have < low) or (high and have > high):
        wanted = f"{'.'.join(map(str, low)) if low else '?'} to {'.'.join(map(str, high)) if high else 'newer'}"
        return (f"--fast: the installed Mitogen supports ansible-core {wanted}, and this is ansible-core {core}; "
                "leave --fast out, or install a Mitogen that supports it (pip install -U 'sparkfleet[fast]')")
    return None


def mitogen_env() -> dict[str, str]:
    """The environment that runs a playbook under Mitogen's strategy (`sparkfleet --fast`).

    Mitogen keeps one Python interpreter per host for the whole run instead of starting one per task: on a
    converged host, where nearly every task only checks, that is most of the time. It takes over connections
    named `ssh`, `local` and `docker` (not `community.docker.docker`); any other runs as without it.
    """
    try:
        import ansible_mitogen
    except ImportError as exc:
        raise ValueError("--fast runs Ansible under Mitogen, which is not installed next to sparkfleet; install "
                         "it with: pip install 'sparkfleet[fast]' (mitogen 0.3.x), or leave --fast out") from exc
    from ansible.release import __version__ as core

    loaders = Path(ansible_mitogen.__file__).parent / "loaders.py"
    refused = mitogen_refuses(core, loaders.read_text() if loaders.is_file() else "")
    if refused:
        raise ValueError(refused)
    strategies = Path(ansible_mitogen.__file__).parent / "plugins" / "strategy"
    return {"ANSIBLE_STRATEGY_PLUGINS": str(strategies), "ANSIBLE_STRATEGY": "mitogen_linear"}

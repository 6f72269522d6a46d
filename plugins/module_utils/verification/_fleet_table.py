# Copyright: sparkfleet contributors
# Apache License 2.0
"""The per-host summary of a run: one entry per host, and the fleet table's rows. The one home of both.

Two readers: the play (spark_verify's last task prints the table through the
filter spark_fleet_table, from hostvars) and the sparkfleet CLI (report.json's
hosts, its Markdown table and the terminal summary, from the runner's events).
Both give host_entry() the same facts, the ones the roles set:

- spark_preflight (spark_preflight_facts), spark_preflight_override;
- spark_container_runtime_registered, spark_images_pinned, spark_venv_active;
- spark_verify_result (spark_verify's summary, with its history).

Pure Python and no Ansible import: the CLI imports it from the collection it runs.
"""

from __future__ import annotations

from collections import namedtuple

from ansible_collections.sparkfleet.spark.plugins.module_utils.verification import _verification

# The facts a host's entry is built from (set_fact or ansible_facts, by these names).
FACTS = ("spark_preflight", "spark_preflight_override", "spark_container_runtime_registered", "spark_images_pinned",
         "spark_venv_active", "spark_verify_result", "spark_verify_refresh_check", "spark_images_refresh_failure",
         "spark_verify_advisories")

# A column of a table: its header; the cell it shows (a function of the row's subject: the host's name and entry, or
# a host's target); how early it stays where the terminal is narrow (1 first; the others are named under the table
# and all are in report.md); the width its cells may fold down to, several lines each, or None where each cell
# stays on one line. The fleet table is COLUMNS below; the table of each image and venv TARGET_COLUMNS. To change
# a table: CONTRIBUTING.md, "To add …", a column of the summary.
Column = namedtuple("Column", ["name", "cell", "priority", "fold"])


def _true(value) -> bool:
    return value in (True, "True", "true")


def _digest(ref) -> str:
    """The first 12 hex digits of a reference's digest (the reference itself when it has none)."""
    digest = str(ref).rsplit("@", 1)[-1]
    return (digest[len("sha256:"):] if digest.startswith("sha256:") else digest)[:12]


def image_source(pinned: dict) -> str:
    """Where a host's image comes from: the lock, a build FROM a locked image, or a blessed tag already on the host."""
    if pinned.get("derived"):
        return f"derived from {pinned.get('base')} ({pinned.get('image_tag')})"
    local = pinned.get("local_blessed") or pinned.get("local_fallback")  # (its old key, in older records)
    if local:
        return f"local blessed tag {local.get('used')} (wanted {local.get('wanted')}: {local.get('reason')})"
    return "not locked, resolved for this run" if pinned.get("unlocked") else "lock"


def refresh_entry(pinned: list, plan: list, batch: int | None, failure: str | None, check: bool = False) -> dict:
    """What a refresh did to one host: its batch (1 is the canary), each planned image's old -> new digest on
    this host (what it runs now: the new one, or the old one after a rollback), and the outcome. Under --check,
    what it would do: every host of the run would move (or has nothing to move)."""
    now = {p.get("name"): str(p.get("ref") or "").rsplit("@", 1)[-1] for p in pinned}
    moving = [d for d in plan if d.get("changed")]
    if check:  # the rollout does not start: no batch, nothing run
        batch, now = None, {}
        outcome = "would move" if moving else "nothing to move"
    else:
        outcome = ("rolled back" if failure else "not reached" if batch is None
                   else "moved" if all(now.get(d["name"]) == d.get("new") for d in moving) else "not moved")
    return {"batch": batch, "canary": batch == 1, "outcome": outcome,
            "images": [{"name": d.get("name"), "old": d.get("old"), "new": d.get("new"),
                        "now": now.get(d.get("name"))} for d in moving]}


def host_entry(facts: dict, unreachable: str | None = None, counts: dict | None = None,
               failures: list | None = None, refresh: dict | None = None, changes: list | None = None) -> dict:
    """A host's entry in report.json (report-schema.json's hosts.*) from its facts.

    counts (Ansible's per-host task counts) and failures (failed tasks) come from a run's events; the play
    has neither (None: not known), nor changes (the tasks that changed the host, each with its diff under
    --diff and the lines its result says moved). refresh: refresh_entry(), for a refresh run.
    """
    preflight = facts.get("spark_preflight") or {}
    # A refresh judges only the new images (spark_verify's images.yml), with the same judge.
    verify = facts.get("spark_verify_result") or facts.get("spark_verify_refresh_check") or {}
    state = verify.get("state") or {}
    runtime = facts.get("spark_container_runtime_registered")
    venv = facts.get("spark_venv_active") or None
    entry = {
        "host_class": _verification.host_class(preflight) or _verification.host_class(state),
        "simulated": bool(preflight.get("simulated") or state.get("simulated")),
        "override": "not a Spark (override)" if _true(facts.get("spark_preflight_override")) else None,
        "reachable": unreachable is None,
        "unreachable": unreachable,
        "history": verify.get("history"),
        "health": health(preflight),
        # The upstream advisories that affect what the host runs (a verify checks them: playbooks/verify.yml).
        "advisories": [{"id": a.get("id"), "url": a.get("url"), "matched": list(a.get("matched") or [])}
                       for a in facts.get("spark_verify_advisories") or [] if isinstance(a, dict)],
        "runtime": ({"registered": _true(runtime.get("registered")), "runtimes": runtime.get("runtimes", []),
                     "toolkit_version": runtime.get("toolkit_version"),
                     # Docker's own words where it did not answer (not installed, not running): not "NOT registered"
                     "unanswered": " ".join(str(runtime["unanswered"]).split())[:300] if runtime.get("unanswered")
                     else None} if runtime else None),
        "images": [{"name": p.get("name"), "ref": p.get("ref"), "tag": p.get("tag"), "source": image_source(p)}
                   for p in facts.get("spark_images_pinned") or []],
        "venv": ({"path": venv.get("path"), "matrix": venv.get("matrix"), "fingerprint": venv.get("fingerprint"),
                  # a venv checked with the test bed's stand-in torch on a simulated host is never "verified"
                  "status": "simulated" if (venv.get("verification") or {}).get("simulated")
                  and venv.get("status") == "verified" else venv.get("status"),
                  "line": (venv.get("verification") or {}).get("line"),
                  "verified_by": (venv.get("verification") or {}).get("verified_by"),
                  "stale": bool((venv.get("staleness") or {}).get("stale"))} if venv and venv.get("path") else None),
        "verification": {"verdict": state.get("verdict"), "lines": verify.get("lines") or [],
                         "gpu": [{"target": g.get("target"), "name": g.get("name"), "digest": g.get("digest"),
                                  "verdict": g.get("verdict"), "line": g.get("line"),
                                  "frameworks": [{k: r.get(k) for k in FRAMEWORK_FIELDS}
                                                 for r in (g.get("frameworks") or {}).get("results") or []]}
                                 for g in state.get("gpu") or []],
                         "smoke": [{k: m.get(k) for k in ("target", "name", "digest", "verdict", "device", "stage",
                                                          "first_loss", "last_loss", "drop", "seconds_per_step",
                                                          "peak_gpu_memory_mb", "gpu_verified")}
                                   for m in state.get("smoke") or []],
                         "abi": [{"target": a.get("target"), "verdict": a.get("verdict"),
                                  "findings": a.get("findings") or []} for a in state.get("abi") or []],
                         "smoke_not_run": state.get("smoke_not_run"),
                         "drift": state.get("drift") or [],
                         "drift_items": state.get("drift_items") or [],
                         "failures": verify.get("failures") or []} if verify else None,
        "abi_findings": [f for a in state.get("abi") or [] for f in a.get("findings") or []],
        "abi_evidence": sorted({k for a in state.get("abi") or [] for k in a.get("evidence") or []}),
        "abi_notes": [n for a in state.get("abi") or [] for n in a.get("notes") or []],
        "refresh_failure": facts.get("spark_images_refresh_failure"),
        "refresh": refresh,
        "counts": dict(counts) if counts is not None else None,
        "failures": list(failures) if failures is not None else None,
        "changes": [{"task": c.get("task"), "diff": c.get("diff") or "", "path": c.get("path"),
                     "lines": list(c.get("lines") or [])} for c in changes]
        if changes is not None
        else None,
    }
    entry["targets"] = targets(entry)
    return entry


def health(preflight: dict) -> dict | None:
    """The host's health as its preflight read it (report.json's hosts.*.health; the watch's metrics): per GPU its
    temperatures and active clock-event reasons, the unified memory's bytes, the OOM guards running. None where
    no preflight ran (a controller-side play)."""
    if not preflight:
        return None
    read = preflight.get("gpu_health") or {}
    return {"gpus": [{"index": g.get("index"), "temperature_c": g.get("temperature_c"),
                      "memory_temperature_c": g.get("memory_temperature_c"),
                      "clock_event_reasons": list(g.get("clock_event_reasons") or [])}
                     for g in read.get("gpus") or [] if isinstance(g, dict)],
            "error": read.get("error"),
            "memory_total_bytes": preflight.get("memory_total_bytes"),
            "memory_available_bytes": preflight.get("memory_available_bytes"),
            "oom_guard": list(preflight.get("oom_guard") or [])}


# What report.json keeps of each framework the probe exercised: what an owner needs to act without the host's state
# file - its verdict and where it stopped, its error and fix in its own words, the last lines of its stderr, and
# the run's challenge with the answer it gave (module_utils/verification/_gpu_probe.py).
FRAMEWORK_FIELDS = ("name", "verdict", "stage", "version", "device", "cause", "error", "fix", "stderr", "challenge",
                    "value", "moved", "seconds")


def targets(entry: dict) -> list[dict]:
    """Each image and interpreter the host's verification names, one record each: what it is (an image by name
    and digest, the venv by matrix and path, another interpreter by path), its GPU check, frameworks, ABI scan
    and smoke step - the results the host's row joins, each mapped back to what it checked."""
    verification = entry.get("verification") or {}
    venv = entry.get("venv") or {}
    found: dict[str, dict] = {}

    def record(key: str, what: str) -> dict:
        return found.setdefault(key, {"what": what, "gpu": None, "frameworks": [], "abi": None, "smoke": None})

    images = {i.get("ref"): i for i in entry.get("images") or []}
    for image in entry.get("images") or []:
        record(f"image {image.get('name')}", f"image {image.get('name')}@{_digest(image.get('ref'))}")

    def key_of(result: dict) -> str:
        if result.get("name"):
            return f"image {result['name']}"
        target = str(result.get("target") or "")
        if target in images:
            return f"image {images[target].get('name')}"
        # the venv's interpreter, by its versioned path or through the link users activate (.../venv/bin/python)
        if venv.get("path") and (target.startswith(venv["path"].rstrip("/") + "/")
                                 or target.endswith("/venv/bin/python")):
            return "venv"
        return f"python {target}"

    def what(key: str, target: str) -> str:
        if key == "venv":
            return f"venv {venv.get('matrix')} ({venv.get('path')})"
        return key if key.startswith("image ") else f"python {target}"

    for gpu in verification.get("gpu") or []:
        key = key_of(gpu)
        target = record(key, what(key, str(gpu.get("target"))))
        target["gpu"] = f"{gpu.get('verdict')} {gpu.get('line') or ''}".strip()
        target["frameworks"] = [f"{f.get('name')} {f.get('verdict')}" for f in gpu.get("frameworks") or []]
    for abi in verification.get("abi") or []:
        key = key_of(abi)
        findings = abi.get("findings") or []
        record(key, what(key, str(abi.get("target"))))["abi"] = (
            f"{len(findings)} finding{'s' if len(findings) != 1 else ''}" if findings else abi.get("verdict"))
    for smoke in verification.get("smoke") or []:
        key = key_of(smoke)
        record(key, what(key, str(smoke.get("target"))))["smoke"] = (
            f"ok -{round((smoke.get('drop') or 0) * 100)}%" if smoke.get("verdict") == "ok"
            else f"{smoke.get('verdict')} at {smoke.get('stage')}")
    if venv.get("path") and "venv" not in found:
        record("venv", what("venv", ""))["gpu"] = f"{venv.get('status')} {venv.get('line') or ''}".strip()
    # An empty smoke cell says why, where the host was verified: asked for where the GPU cannot be verified, run on
    # the others but not this one, or not asked (verify --smoke, spark_verify_smoke).
    why = verification.get("smoke_not_run")
    for target in found.values() if verification else []:
        target["smoke"] = target["smoke"] or (
            f"not run: {why.split(':')[0]}" if why else
            "not run on it" if verification.get("smoke") else "not asked (--smoke)")
    return list(found.values())


TARGET_COLUMNS = (
    Column("host", lambda name, t: name, 1, None),
    Column("image or venv", lambda name, t: t["what"], 2, 24),
    Column("GPU", lambda name, t: t["gpu"] or "-", 3, 14),
    Column("frameworks", lambda name, t: ", ".join(t["frameworks"]) or "-", 6, 16),
    Column("ABI", lambda name, t: t["abi"] or "-", 5, None),
    Column("smoke", lambda name, t: t["smoke"] or "-", 4, 12),
)
TARGET_HEADERS = tuple(c.name for c in TARGET_COLUMNS)


def target_rows(name: str, entry: dict) -> list[list[str]]:
    """The host's rows of the table of each image and venv, one cell per TARGET_COLUMNS."""
    found = entry.get("targets")
    return [[column.cell(name, t) for column in TARGET_COLUMNS] for t in (targets(entry) if found is None else found)]


def _refresh_cell(refresh: dict) -> str:
    """canary moved, batch 2 rolled back, not reached: where a refresh's host was and how it ended."""
    where = "canary" if refresh["canary"] else f"batch {refresh['batch']}" if refresh["batch"] else ""
    return f"{where} {refresh['outcome']}".strip()


def _moved(image: dict) -> str:
    """'unsloth 0123456789ab -> ba9876543210', and '(runs 0123456789ab)' where the host runs another digest (a
    rollback): one image of a refresh, its digests short and whole."""
    line = f"{image['name']} {_digest(image['old'] or '(none)')} -> {_digest(image['new'])}"
    return line + (f" (runs {_digest(image['now'])})" if image.get("now") and image["now"] != image["new"] else "")


def _images_cell(entry: dict) -> str:
    """One line per image, its digest short and whole (12 hex digits): name@digest, LOCAL for a blessed tag used
    in place of the lock; in a refresh, each image it moves (or would move) as name old -> new, and how it ended
    where that is not the new one."""
    refresh = entry.get("refresh") or {}
    moved = {i["name"]: i for i in refresh.get("images") or []}
    lines = [_moved(i) for i in moved.values()]
    lines += [f"{i['name']}@{_digest(i['ref'])}" + (" LOCAL" if str(i.get("source", "")).startswith("local") else "")
              for i in entry["images"] if i["name"] not in moved]
    return "\n".join(lines) or "-"


def refresh_line(refresh: dict) -> str:
    """'canary moved: unsloth 0123456789ab -> ba9876543210': a refresh's host, its batch and outcome, and each
    image it moved (or would move, or was rolled back from), digests short and whole."""
    images = "; ".join(_moved(i) for i in refresh.get("images") or [])
    return f"{_refresh_cell(refresh)}: {images}" if images else _refresh_cell(refresh)


def _class_cell(name: str, entry: dict) -> str:
    # No class gathered: the controller's own plays (pin, the checks); a host whose run never read it (stopped
    # before preflight, or --tags that leave it out) says so with '-', as every column not known.
    host_class = entry.get("override") or entry["host_class"] or ("controller" if name == "localhost" else "-")
    return f"{host_class}" + (" (simulated)" if entry["simulated"] else "")


def _history_cell(_name: str, entry: dict) -> str:
    refresh = entry.get("refresh")
    return entry["history"] or (_refresh_cell(refresh) if refresh else "-")


def _runtime_cell(_name: str, entry: dict) -> str:
    runtime = entry["runtime"]
    if runtime is None:
        return "-"
    return ("registered" if runtime["registered"] else
            "Docker did not answer" if runtime.get("unanswered") else "NOT registered")


def _venv_cell(_name: str, entry: dict) -> str:
    venv = entry["venv"]
    return "-" if not venv else f"{venv['matrix']} {venv['status']}" + (" STALE" if venv["stale"] else "")


def _verdict_cell(_name: str, entry: dict) -> str:
    verification = entry["verification"] or {}
    return verification.get("verdict") or (
        "unreachable" if not entry["reachable"] else "stopped" if entry.get("failures") else "-")


def _line_cell(_name: str, entry: dict) -> str:
    # The GPU lines; none on a simulated host (its class says simulated; the verdict says it was not verified)
    verification = entry["verification"] or {}
    return ("; ".join(g["line"] for g in verification.get("gpu") or [] if g.get("line")) or "-")[:60]


def _abi_cell(_name: str, entry: dict) -> str:
    return str(len(entry["abi_findings"])) if entry["verification"] else "-"


def _count_cell(key: str):
    def cell(_name: str, entry: dict) -> str:
        counts = entry.get("counts")
        return "-" if counts is None else str(counts.get(key, 0))
    return cell


# The fleet table: a row per host. What an Ansible user reads first (the host, its verdict, changed and failed)
# stays at any width from 80 columns, and what each host runs (each image's short digest) next.
COLUMNS = (
    Column("host", lambda name, entry: name, 1, None),
    Column("class", _class_cell, 10, 11),
    Column("history", _history_cell, 7, None),
    Column("runtime", _runtime_cell, 8, None),
    Column("images (digest)", lambda name, entry: _images_cell(entry), 5, 20),
    Column("venv", _venv_cell, 9, 12),
    Column("verdict", _verdict_cell, 2, None),
    Column("line", _line_cell, 6, 18),
    Column("ABI findings", _abi_cell, 11, None),
    Column("changed", _count_cell("changed"), 3, None),
    Column("failed", _count_cell("failed"), 4, None),
)
HEADERS = tuple(c.name for c in COLUMNS)
# What Ansible's PLAY RECAP already says: the play's own table leaves these out.
COUNT_HEADERS = ("changed", "failed")


def priority(columns) -> tuple:
    """The columns' headers, the one to keep longest first."""
    return tuple(c.name for c in sorted(columns, key=lambda c: c.priority))


def folding(columns) -> dict:
    """{header: the width its cells fold down to} of the columns whose cells may take several lines."""
    return {c.name: c.fold for c in columns if c.fold}


def row(name: str, entry: dict) -> list[str]:
    """The host's row of the fleet table, one cell per COLUMNS (the counts '-' where not known). The images cell
    has a line per image."""
    return [column.cell(name, entry) for column in COLUMNS]


def cell(name: str, entry: dict, header: str) -> str:
    """One cell of the host's row, by its header."""
    return next(c for c in COLUMNS if c.name == header).cell(name, entry)


def text_lines(rows: list[list[str]], headers=HEADERS) -> list[str]:
    """The table as aligned lines of text (a header line first), for a terminal without the CLI."""
    lines = [list(headers), *([cell.replace("\n", ", ") for cell in cells] for cells in rows)]
    widths = [max(len(cells[i]) for cells in lines) for i in range(len(headers))]
    return ["  ".join(cells[i].ljust(widths[i]) for i in range(len(headers))).rstrip() for cells in lines]

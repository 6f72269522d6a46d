# Copyright: sparkfleet contributors
# Apache License 2.0
"""The venv builder of spark_venv: a venv of the stack matrix built beside the active one at a versioned path,
from its pip steps (the hash lock's wheels where given), its imports and declared dependencies checked, recorded
by its marker, and only then made active by the link; a failed build is marked and never linked.

The module (plugins/modules/spark_venv.py) parses its options and calls built(), switch() or mark_failed().
"""

from __future__ import annotations

import datetime
import inspect
import json
import os
import shutil
import subprocess
import time
import urllib.parse

from ansible_collections.sparkfleet.spark.plugins.module_utils.common import _trusted as trusted
from ansible_collections.sparkfleet.spark.plugins.module_utils.common._files import atomic_write
from ansible_collections.sparkfleet.spark.plugins.module_utils.host._listeners import listeners
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv import _closure as closure
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv import _program_imports
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv import _venv as venv_files
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._hash_lock import (
    hashed_requirements,
    lock_python_mismatch,
    validate_lock,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._indexes import (
    index_env,
    loopback,
    mirrors,
    plain_http_refused,
    uv_env,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._pip_commands import display, hashes_file, pip_steps
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._secrets import redact_url
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._stack_matrix import (
    MatrixError,
    fingerprint,
    installer,
    normalize,
    parse_pin,
    pins,
    plan_extras,
    staleness,
)
from ansible_collections.sparkfleet.spark.plugins.module_utils.venv._venv import (
    CONSTRAINTS,
    FINISHED,
    MARKER,
    now,
    pip_error,
    read_marker,
    write_marker,
)

# The import check is the program _program_imports.py, run by the venv's python.
IMPORT_PROBE = inspect.getsource(_program_imports)


class Venv:
    def __init__(self, module, matrix: dict):  # the AnsibleModule of spark_venv
        self.module = module
        p = module.params
        self.root, self.link = p["root"], p["link"]
        self.matrix = matrix
        try:
            self.extras = plan_extras(self.matrix, p["extra_packages"])
            today = datetime.date.fromisoformat(p["today"]) if p["today"] else datetime.date.today()
            self.staleness = staleness(self.matrix, today, p["max_age_days"])
        except (MatrixError, ValueError) as exc:
            module.fail_json(msg=f"{exc}. Nothing was changed.")
        if self.staleness["stale"]:
            if p["strict_age"]:
                module.fail_json(msg=f"{self.staleness['message']}. strict mode: nothing was built or switched.",
                                 staleness=self.staleness)
            module.warn(self.staleness["message"])
        self.lock = p["lock"]
        if self.lock is not None:
            errors = validate_lock(self.lock, self.matrix)
            if errors:
                module.fail_json(msg="the hash lock cannot be used: " + "; ".join(errors) + ". Nothing was changed.")
            if self.extras:
                module.fail_json(msg=f"extra_packages ({', '.join(e['requirement'] for e in self.extras)}) are not "
                                     "in the hash lock, which holds the matrix's steps only: drop them, or build "
                                     "without the lock (spark_venv_require_hashes: false, from the matrix's own "
                                     "indexes). Nothing was changed.")
        self.fp = fingerprint(self.matrix, self.extras, self.lock)
        self.path = os.path.join(self.root, f"{self.matrix['name']}-{self.fp[:12]}")
        if p["wheelhouse"] and self.lock is None:
            module.fail_json(msg=f"wheelhouse {p['wheelhouse']} is given without the hash lock: its wheels are "
                                 "installed only against the lock's sha256. Give the lock too. Nothing was changed.")
        self.steps = self.steps_into(self.path)
        refused = plain_http_refused([url for step in self.steps for url in step["indexes"]],
                                     p["insecure_indexes"])
        if refused:
            module.fail_json(msg="; ".join(refused) + ". Nothing was changed.")
        strangers = loopback_strangers([url for step in self.steps for url in step["indexes"]]) \
            if self.lock is None else []
        if strangers:
            module.fail_json(msg="; ".join(strangers) + ". Nothing was changed.")
        unlocked = mirrors(self.matrix, p["index_mirrors"]) if self.lock is None else []
        if unlocked:
            module.fail_json(msg=f"the venv would be built from a mirror ({'; '.join(unlocked)}) without the hash "
                                 "lock: a mirror can serve other bytes under the same name and version, so its "
                                 "wheels are installed only against the lock. Write it with `sparkfleet matrix lock "
                                 "-i INVENTORY` (it resolves through the same mirrors), review and commit it, then "
                                 "run again; or build from the matrix's own indexes. Nothing was changed.")
        self.result = {"changed": False, "path": self.path, "fingerprint": self.fp, "staleness": self.staleness,
                       "steps": [{"id": s["id"], "why": s["why"], "command": display(s)} for s in self.steps],
                       "extras": [{"requirement": e["requirement"], "policy": e["policy"], "says": e["says"]}
                                  for e in self.extras], "contents_drift": []}

    def steps_into(self, path: str) -> list[dict]:
        p = self.module.params
        return pip_steps(self.matrix, self.extras, p["index_mirrors"], os.path.join(path, CONSTRAINTS), self.lock,
                         path, p["wheelhouse"])

    def venv_pins(self) -> dict[str, str]:
        """The matrix's pins a venv holds: all but its installer's (uv is installed beside the venvs)."""
        beside = {normalize(parse_pin(spec)[0]) for spec in (installer(self.matrix) or {}).get("packages", [])}
        return {name: spec for name, spec in pins(self.matrix).items() if name not in beside}

    def beside(self) -> None:
        """Build anew beside a venv of this matrix whose contents changed: the next free path of its name (-2, -3,
        ...), so the changed one stays as it is until the new one is verified and active (then pruned as any)."""
        number = 2
        while os.path.lexists(f"{self.path}-{number}"):  # the drifted one among them
            number += 1
        self.path = f"{self.path}-{number}"
        self.steps = self.steps_into(self.path)
        self.result.update(path=self.path, steps=[{"id": s["id"], "why": s["why"], "command": display(s)}
                                                  for s in self.steps])

    # ----- the active venv -------------------------------------------------
    def active(self) -> dict | None:
        try:
            return venv_files.active(self.link)
        except ValueError as exc:
            self.module.fail_json(msg=str(exc))

    # ----- state=built ------------------------------------------------------
    def python(self) -> tuple[str, str]:
        exe = self.module.params["python"]
        if not os.path.isabs(exe):
            exe = self.module.get_bin_path(exe, required=True)
        rc, out, err = self.module.run_command([exe, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        if rc != 0:
            self.module.fail_json(msg=f"{exe} does not run: {err.strip()}; expected a Python 3 for the venv.")
        return exe, out.strip()

    def pip_environment(self) -> dict:
        # The host's pip and uv configuration must not change the sequence: no pip.conf or uv.toml, no
        # PIP_CONSTRAINT (NGC sets one), no PIP_INDEX_URL or UV_INDEX; one cache each under root so a rebuild
        # fetches no wheel twice; uv compiles the bytecode pip compiles (the same venv either way).
        # No COLUMNS: uv wraps its explanation at that width, and the error is read as one line per cause.
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_")) and k != "COLUMNS"}
        env.update({"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1",
                    "PIP_CACHE_DIR": os.path.join(self.root, ".pip-cache"), "PYTHONDONTWRITEBYTECODE": "1",
                    "UV_NO_CONFIG": "1", "UV_CACHE_DIR": os.path.join(self.root, ".uv-cache"),
                    "UV_PYTHON_DOWNLOADS": "never", "UV_NO_PROGRESS": "1", "UV_COMPILE_BYTECODE": "1"})
        env.update({str(k): str(v) for k, v in self.module.params["pip_env"].items()})
        return env

    def installer(self, exe: str, step: dict, shown: dict, env: dict) -> str:
        """The installer's program (uv), installed by pip into a venv of its own beside the venvs
        (<root>/.installer/<name>-<version>[-<the locked wheel's sha256>]), reused by later builds from the same
        pin and wheel; made aside and renamed into place, so a half-made one is never used."""
        home = os.path.join(self.root, ".installer")
        (pin,) = next(s["packages"] for s in self.matrix["steps"] if s["id"] == step["id"])
        locked = [e["sha256"][:12] for e in (self.lock or {}).get("steps", {}).get(step["id"], [])]
        name = "-".join([pin.replace("==", "-"), *locked])  # another wheel of the same pin: another installer
        path = os.path.join(home, name)
        program = os.path.join(path, "bin", "uv")
        started = time.monotonic()
        if self.trusted_program(path, program):
            shown.update(seconds=0.0, rc=0, reused=path)
            return program
        work = f"{path}.sparkfleet-new"
        shutil.rmtree(work, ignore_errors=True)
        self.trusted_dir(home, 0o755, "the venvs' installer folder")
        rc, out, err = self.module.run_command([exe, "-m", "venv", work])
        if rc != 0:
            self.fail_build(step["id"], f"{exe} -m venv {work} said: {(err or out).strip()[-800:]}")
        # subprocess: pip's environment of its own (the host's PIP_* left out), which run_command cannot give.
        proc = subprocess.run([os.path.join(work, "bin", "python"), "-m", "pip", "install", *step["args"]],  # pylint: disable=ansible-bad-function
                              env={**env, **index_env(step["indexes"])}, capture_output=True, text=True, check=False)
        shown.update(seconds=round(time.monotonic() - started, 1), rc=proc.returncode)
        if proc.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            self.fail_build(step["id"], f"`{shown['command']}` (the installer, into {path}) exited "
                                        f"{proc.returncode}: {pip_error(proc.stdout, proc.stderr)[-1500:]}",
                            pip_stdout=proc.stdout[-4000:], pip_stderr=proc.stderr[-4000:])
        shutil.rmtree(path, ignore_errors=True)
        os.rename(work, path)
        for entry in os.listdir(home):  # an earlier pin's installer: no venv needs it once built
            if entry != name:
                shutil.rmtree(os.path.join(home, entry), ignore_errors=True)
        return program

    def trusted_dir(self, path: str, mode: int, what: str) -> None:
        """The folder made where missing and trusted (module_utils/common/_trusted.py), else the host fails before
        anything is built."""
        try:
            trusted.make_dir(path, mode, what)
        except trusted.Untrusted as exc:
            self.module.fail_json(msg=f"{exc}. Nothing was built; the active venv is untouched.")

    @staticmethod
    def trusted_program(folder: str, program: str) -> bool:
        """An installer made before is run again (as root) only where it and its folder are root's alone: one that
        another user planted, or can change, is made anew."""
        try:
            trusted.check_dir(folder)
            trusted.check_path(program, "the installer", "file")
        except (trusted.Untrusted, OSError):
            return False
        return os.access(program, os.X_OK)

    def fail_build(self, step: str, msg: str, **extra) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        active = self.active()
        kept = f"the active venv {active['path']} is untouched" if active else "no venv was active"
        self.module.fail_json(msg=f"step {step} failed: {msg}. The half-built venv {self.path} was removed; {kept}.",
                              failed_step=step, **self.result, **extra)

    def built(self) -> None:
        exe, version = self.python()
        target = self.matrix["target"]["python"]
        if version != target:
            other, wheels = lock_python_mismatch(self.lock, version)
            if other:  # pip would refuse them half-way through the build: refused before anything is built
                self.module.fail_json(
                    msg=f"{exe} is Python {version}; the hash lock holds {len(other)} wheels built for the matrix's "
                        f"Python {target} ({', '.join(other[:3])}{' ...' if len(other) > 3 else ''}), which pip "
                        f"cannot install on {version}. Nothing was built; the active venv is untouched. Set "
                        f"spark_venv_python to a Python {target} on the host (DGX OS has it), or use a matrix "
                        f"verified for Python {version} and lock it (sparkfleet matrix lock).", **self.result)
            why = (f"; the hash lock's {wheels} wheels are all pure Python or built for {version}, so they install"
                   if self.lock is not None and wheels else ": wheels and behaviour may differ")
            self.result["python_warning"] = (f"{exe} is Python {version}; the matrix {self.matrix['name']} was "
                                             f"verified for Python {target}{why}")
            self.module.warn(self.result["python_warning"])
        active = self.active()
        self.result["active"] = active
        if active and active["fingerprint"] == self.fp and active["status"] == "verified":
            # The marker says this matrix; what is installed must say so too (a `pip install -U` into the shared
            # venv, a package removed): each difference is drift, and a provision builds anew beside it.
            drift = venv_files.contents_drift(venv_files.installed(active["path"]),
                                              (read_marker(active["path"]) or {}).get("packages") or {},
                                              self.venv_pins())
            if not drift:
                self.result["action"] = "none"
                self.module.exit_json(**self.result)
            self.result["contents_drift"] = drift
            self.beside()
        marker = read_marker(self.path)
        if marker and marker.get("fingerprint") == self.fp and marker.get("status") in FINISHED:
            self.result.update(action="reuse", imports=marker.get("imports", []), packages=marker.get("packages", {}),
                               dependencies=marker.get("dependencies"))
            self.module.exit_json(**self.result)
        self.result.update(action="build", changed=True)
        if self.module.check_mode:
            self.module.exit_json(**self.result)
        self.build(exe)

    def build(self, exe: str) -> None:
        self.trusted_dir(self.root, 0o755, "the venvs' root")
        for cache in (".pip-cache", ".uv-cache"):  # root's alone: what the indexes served, read by nobody else
            self.trusted_dir(os.path.join(self.root, cache), 0o700, "the venvs' download cache")
            os.chmod(os.path.join(self.root, cache), 0o700)
        if os.path.lexists(self.path):  # an interrupted build of this fingerprint: start over
            shutil.rmtree(self.path)
        rc, out, err = self.module.run_command([exe, "-m", "venv", self.path])
        if rc != 0:
            hint = " (on Debian/Ubuntu: install python3-venv)" if "ensurepip" in out + err else ""
            self.fail_build("venv", f"{exe} -m venv {self.path} said: {(err or out).strip()[-800:]}{hint}")
        record = {"status": "building", "fingerprint": self.fp, "matrix": self.matrix["name"],
                  "last_verified": str(self.matrix["last_verified"]), "started_at": now(), "python": exe,
                  "steps": []}
        write_marker(self.path, record)
        atomic_write(os.path.join(self.path, CONSTRAINTS), "\n".join(pins(self.matrix).values()) + "\n")
        for step_id, entries in (self.lock or {}).get("steps", {}).items():
            atomic_write(hashes_file(self.path, step_id), hashed_requirements(entries))
        vpy = os.path.join(self.path, "bin", "python")
        env = self.pip_environment()
        shown_by_id = {s["id"]: shown for s, shown in zip(self.steps, self.result["steps"], strict=True)}
        uv = next((self.installer(exe, s, shown_by_id[s["id"]], env) for s in self.steps if s["installer"]), None)
        for step, shown in zip(self.steps, self.result["steps"], strict=True):
            if step["installer"]:
                continue
            started = time.monotonic()
            argv, indexes = (([uv, "pip", "install", "--python", vpy], uv_env(step["indexes"])) if step["tool"] == "uv"
                             else ([vpy, "-m", "pip", "install"], index_env(step["indexes"])))
            # subprocess: pip's environment of its own (the host's PIP_* left out), which run_command cannot give.
            proc = subprocess.run([*argv, *step["args"]],  # pylint: disable=ansible-bad-function
                                  env={**env, **indexes, **step["env"]}, capture_output=True, text=True, check=False)
            shown["seconds"] = round(time.monotonic() - started, 1)
            shown["rc"] = proc.returncode
            if proc.returncode != 0:
                error = pip_error(proc.stdout, proc.stderr)
                self.fail_build(step["id"], f"`{shown['command']}` exited {proc.returncode}: {error[-1500:]}",
                                pip_stdout=proc.stdout[-4000:], pip_stderr=proc.stderr[-4000:])
        self.write_activate()
        imports = self.check_imports(vpy)
        bad = [f"{i['module']}: {i['error']}" for i in imports if not i["ok"]]
        if bad:
            self.fail_build("imports", "the built venv cannot import " + "; ".join(bad), imports=imports)
        packages = self.packages(vpy)
        dependencies = self.check_dependencies(vpy)
        record.update(status="built", built_at=now(), imports=imports, packages=packages, dependencies=dependencies,
                      steps=self.result["steps"])
        write_marker(self.path, record)
        self.result.update(imports=imports, packages=packages, dependencies=dependencies)
        self.module.exit_json(**self.result)

    def write_activate(self) -> None:
        path = os.path.join(self.path, "bin", "activate")
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        atomic_write(path, venv_files.with_environment(text, self.matrix.get("environment", {})))

    def check_imports(self, vpy: str) -> list[dict]:
        env = {**os.environ, **{k: str(v) for k, v in self.matrix.get("environment", {}).items()}}
        # subprocess: a timeout, which run_command does not have.
        proc = subprocess.run([vpy, "-c", IMPORT_PROBE, *self.matrix.get("imports", [])], env=env,  # pylint: disable=ansible-bad-function
                              capture_output=True, text=True, check=False, timeout=600)
        try:
            return json.loads(proc.stdout.strip().splitlines()[-1])
        except (ValueError, IndexError):
            self.fail_build("imports", f"the import check did not finish: {proc.stderr.strip()[-800:]}")
            return []

    def check_dependencies(self, vpy: str) -> dict:
        """The venv's own `pip check`: only the matrix's accepted deviations may remain (judged by the caller's
        verification, module_utils/verification/_verification.py)."""
        # subprocess: pip's environment of its own, as for the steps.
        try:
            proc = subprocess.run([vpy, "-m", "pip", "check"], env=self.pip_environment(),  # pylint: disable=ansible-bad-function
                                  capture_output=True, text=True, check=False, timeout=300)
        except subprocess.TimeoutExpired:
            return {"checked": False, "accepted": [], "unaccepted": ["pip check did not finish within 300 s"]}
        if proc.returncode not in (0, 1):
            return {"checked": False, "accepted": [], "unaccepted": [
                f"pip check did not run (exit {proc.returncode}): {(proc.stderr or proc.stdout).strip()[-400:]}"]}
        return closure.pip_check(proc.stdout, self.matrix.get("accepted"))

    def packages(self, vpy: str) -> dict:
        proc = subprocess.run([vpy, "-m", "pip", "list", "--format=json"], env=self.pip_environment(),  # pylint: disable=ansible-bad-function
                              capture_output=True, text=True, check=False)
        try:
            return {p["name"]: p["version"] for p in json.loads(proc.stdout)}
        except (ValueError, KeyError, TypeError):
            return {}

    # ----- state=active / failed -----------------------------------------------
    def built_marker(self) -> dict:
        path = self.module.params["path"] or self.path
        if os.path.realpath(os.path.dirname(path.rstrip("/"))) != os.path.realpath(self.root):
            self.module.fail_json(msg=f"path {path} is not a venv under {self.root}; expected the path state=built "
                                      "returned.")
        marker = read_marker(path)
        if not marker or marker.get("status") not in FINISHED:
            self.module.fail_json(msg=f"{path} holds no finished sparkfleet build (marker {MARKER} says "
                                      f"{(marker or {}).get('status', 'nothing')}); run state=built first.")
        self.path = path
        return marker

    def switch(self) -> None:
        marker = self.built_marker()
        active = self.active()
        self.result.update(active=active, action="none")
        if marker.get("status") != "verified":
            marker.update(status="verified", verified_at=now(), verification=self.module.params["verification"] or {},
                          previous=(active or {}).get("path"))
            self.result["changed"] = True
            if not self.module.check_mode:
                write_marker(self.path, marker)
        if not active or active["path"] != os.path.realpath(self.path):
            self.result.update(changed=True, action="switch", previous=(active or {}).get("path"))
            if not self.module.check_mode:
                venv_files.switch_link(self.link, self.path)
        self.result["removed"] = self.prune((active or {}).get("path"))
        self.result["changed"] = self.result["changed"] or bool(self.result["removed"])
        self.result["active"] = {"path": self.path, "python": os.path.join(self.link, "bin", "python"),
                                 "fingerprint": marker["fingerprint"], "matrix": marker["matrix"],
                                 "last_verified": marker.get("last_verified"), "status": "verified",
                                 "verification": marker.get("verification")}
        self.module.exit_json(**self.result)

    def prune(self, previous: str | None) -> list[str]:
        """Keep the active venv and the `keep` most recent others (the one it replaced first); remove the rest."""
        doomed = venv_files.to_prune(self.root, self.path, previous, self.module.params["keep"])
        if not self.module.check_mode:
            venv_files.remove(doomed)
        return doomed

    def mark_failed(self) -> None:
        marker = self.built_marker()
        self.result.update(action="mark-failed", active=self.active())
        if marker.get("status") != "failed" or marker.get("failure") != self.module.params["reason"]:
            marker.update(status="failed", failure=self.module.params["reason"] or "verification failed",
                          failed_at=now())
            self.result["changed"] = True
            if not self.module.check_mode:
                write_marker(self.path, marker)
        self.module.exit_json(**self.result)


def loopback_strangers(indexes: list[str]) -> list[str]:
    """Each index on this host's loopback (trusted without the hash lock: the owner's own) served now by another
    user than root or the one running this: any user can bind a free loopback port while the owner's mirror is
    down, and serve wheels root would install. One sentence each."""
    found = []
    for url in dict.fromkeys(indexes):
        parts = urllib.parse.urlsplit(url)
        if not loopback(parts.hostname or "") or (parts.port or 0) in (0, 80, 443):
            continue
        uids = [uid for uid in listeners(parts.port) if uid not in (0, os.geteuid())]
        if uids:
            found.append(f"the index {redact_url(url)} on this host's loopback is served by uid {uids[0]}, not by "
                         "root: any user can bind a free loopback port while your mirror is down and serve wheels "
                         "root would install. Stop what listens there, run your mirror as root (or on a port below "
                         "1024), or build from the hash lock (spark_venv_require_hashes: true), which pins every "
                         "wheel's sha256")
    return found

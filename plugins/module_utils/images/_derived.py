# Copyright: sparkfleet contributors
# Apache License 2.0
"""Derived images: a recipe layered FROM a locked image, its content hash, and what it may not do.

The rule (spark-environment-setup.md): rebuild locally, FROM one of the base
images only, when a project needs an extra system package - never to
"upgrade" a component the image already pins. A recipe is refused before
anything is built when it would install or upgrade such a component.
"""

from __future__ import annotations

import fnmatch
import hashlib
import inspect
import json
import re
import shlex

from ansible_collections.sparkfleet.spark.plugins.module_utils.images import _program_installed

# What an NGC/Unsloth image pins: never re-installed or upgraded by a derived image.
PROTECTED_PIP = ("torch", "torchvision", "torchaudio", "triton", "pytorch-triton", "transformers", "xformers",
                 "flash-attn", "flash-attn-*", "nvidia-*", "cuda-*", "cupy-cuda*", "tensorrt*", "apex",
                 "transformer-engine*", "bitsandbytes", "unsloth", "unsloth-zoo")
PROTECTED_APT = ("cuda-*", "libcuda*", "libcudnn*", "libnccl*", "libcublas*", "libcufft*", "libcurand*",
                 "libcusolver*", "libcusparse*", "libnvjitlink*", "libnvrtc*", "libnpp*", "libnvinfer*",
                 "tensorrt*", "nvidia-*", "python3-torch*", "python3-triton*")
UPGRADES_APT = ("upgrade", "dist-upgrade", "full-upgrade")
# pip options that take a value (the value is not a requirement).
PIP_VALUE_OPTIONS = {"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-t", "--target", "--prefix",
                     "--root", "--platform", "--python-version", "--implementation", "--abi", "--src",
                     "--upgrade-strategy", "--progress-bar", "--cache-dir", "--trusted-host", "--log", "--proxy",
                     "--retries", "--timeout", "--exists-action", "--cert", "--client-cert", "--only-binary",
                     "--no-binary", "-C", "--config-settings", "--global-option", "--python", "--report"}
NAME = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)")


def normalize(name: str) -> str:
    """PEP 503: what pip compares names by."""
    return re.sub(r"[-_.]+", "-", name).lower()


def tag_for(name: str, recipe: str) -> str:
    """sparkfleet/<name>:<first 12 hex of the recipe hash>: the tag says which recipe and base it is."""
    return f"sparkfleet/{name}:{recipe.split(':', 1)[1][:12]}"


def recipe_hash(base_digest: str, apt_packages: list[str], dockerfile: str, files: dict[str, bytes]) -> str:
    """The content hash of a derived image: its base's digest, its packages, its fragment, its files.

    Computed the same on the controller (for the lock) and on the host (for the build); the FROM
    line is left out because a host pulls the base through its mirror under another name.
    """
    body = json.dumps({"base": base_digest, "apt": sorted(apt_packages), "dockerfile": dockerfile.strip(),
                       "files": {n: hashlib.sha256(c).hexdigest() for n, c in sorted(files.items())}},
                      sort_keys=True).encode()
    return "sha256:" + hashlib.sha256(body).hexdigest()


def render(base_ref: str, recipe: dict, recipe_sha: str, base_name: str) -> str:
    """The Dockerfile: FROM the locked base by digest, the apt packages, then the fragment."""
    lines = [f"# Rendered by sparkfleet (role spark_images) for derived image {recipe['name']}.",
             f"FROM {base_ref}",
             f'LABEL io.sparkfleet.derived="{recipe["name"]}" io.sparkfleet.base="{base_name}" '
             f'io.sparkfleet.recipe="{recipe_sha}"']
    packages = sorted(recipe.get("apt_packages") or [])
    if packages:
        lines.append("RUN apt-get update \\\n && DEBIAN_FRONTEND=noninteractive apt-get install -y "
                     f"--no-install-recommends {' '.join(shlex.quote(p) for p in packages)} \\\n"
                     " && rm -rf /var/lib/apt/lists/*")
    fragment = (recipe.get("dockerfile") or "").strip()
    if fragment:
        lines.append(fragment)
    return "\n".join(lines) + "\n"


def _commands(fragment: str) -> list[tuple[str, list[str]]]:
    """(instruction, words) for each shell command of each RUN, continuation lines joined."""
    joined = re.sub(r"\\\s*\n", " ", fragment)
    out = []
    for line in joined.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _unused, rest = line.partition(" ")
        if instruction.upper() != "RUN":
            out.append((instruction.upper(), []))
            continue
        for part in re.split(r"&&|\|\||;|\|", rest):
            try:
                words = shlex.split(part)
            except ValueError:
                words = part.split()
            if words:
                out.append(("RUN", words))
    return out


def _pip_requirements(words: list[str]) -> tuple[list[str], bool, list[str]] | None:
    """For a pip install command: (requirement names, --upgrade given, requirement files); else None."""
    for i, word in enumerate(words):
        base = word.rsplit("/", 1)[-1]
        if re.fullmatch(r"pip(3(\.\d+)?)?", base) and i + 1 < len(words) and words[i + 1] == "install":
            rest = words[i + 2:]
            break
    else:
        return None
    names, files, upgrade, skip = [], [], False, False
    for j, word in enumerate(rest):
        if skip:
            skip = False
            continue
        if word in ("-U", "--upgrade", "--force-reinstall"):
            upgrade = True
        elif word in ("-r", "--requirement", "-c", "--constraint"):
            if word in ("-r", "--requirement") and j + 1 < len(rest):
                files.append(rest[j + 1])
            skip = True
        elif word.split("=", 1)[0] in PIP_VALUE_OPTIONS:
            skip = "=" not in word
        elif word in ("-e", "--editable"):
            continue
        elif not word.startswith("-"):
            name = word.rsplit("/", 1)[-1].split("-", 1)[0] if word.endswith(".whl") else word
            match = NAME.match(name)
            if match:
                names.append(match.group(1))
    return names, upgrade, files


def refusals(recipe: dict, installed: dict[str, str] | None, files: dict[str, bytes],
             protected_pip: tuple[str, ...] = PROTECTED_PIP,
             protected_apt: tuple[str, ...] = PROTECTED_APT) -> list[str]:
    """Why a recipe may not be built on its base, each naming what it found; [] when it may.

    installed: the base's Python distributions (normalized name -> version), or None when they
    could not be read (only the fixed lists are applied then).
    """
    name = recipe.get("name")
    found = []
    installed = {normalize(k): v for k, v in (installed or {}).items()}

    def protected(package: str, patterns: tuple[str, ...]) -> bool:
        return any(fnmatch.fnmatch(normalize(package), normalize(p)) for p in patterns)

    for package in recipe.get("apt_packages") or []:
        if protected(package, protected_apt):
            found.append(f"apt package {package} is a CUDA/NVIDIA component the base image pins")
    for instruction, words in _commands(recipe.get("dockerfile") or ""):
        if instruction == "FROM":
            found.append("the fragment has its own FROM; a derived image is built FROM its locked base only")
            continue
        if instruction != "RUN":
            continue
        program = words[0].rsplit("/", 1)[-1]
        if program in ("apt-get", "apt", "aptitude"):
            verbs = [w for w in words[1:] if not w.startswith("-")]
            if verbs and verbs[0] in UPGRADES_APT:
                found.append(f"'{program} {verbs[0]}' upgrades the packages the base image pins")
            if "--only-upgrade" in words:
                found.append(f"'{' '.join(words)}' upgrades packages the base image pins")
            if verbs and verbs[0] == "install":
                for package in verbs[1:]:
                    package = package.split("=", 1)[0]
                    if protected(package, protected_apt):
                        found.append(f"apt package {package} is a CUDA/NVIDIA component the base image pins")
            continue
        pip = _pip_requirements(words)
        if pip is None:
            continue
        names, upgrade, requirement_files = pip
        for path in requirement_files:
            text = files.get(path.rsplit("/", 1)[-1])
            if text is None:
                found.append(f"pip reads {path}, which is not among the recipe's files, so it cannot be checked; "
                             "add it to files or list the requirements in the RUN line")
                continue
            for line in text.decode(errors="replace").splitlines():
                match = NAME.match(line.strip())
                if match:
                    names.append(match.group(1))
        for package in names:
            key = normalize(package)
            if protected(package, protected_pip):
                found.append(f"pip package {package} is a component the base image pins")
            elif key in installed:
                found.append(f"pip package {package} is already in the base image ({key}=={installed[key]}); "
                             f"installing it {'with --upgrade ' if upgrade else ''}would replace the base's version")
    return [f"derived image {name}: {reason}" for reason in dict.fromkeys(found)]


# Run inside the base image by its python3 (the program _program_installed.py): what it has installed.
INSTALLED_PROBE = inspect.getsource(_program_installed)

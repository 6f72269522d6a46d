"""ansible-doc is the manual: every module's documentation renders and matches its options."""

from __future__ import annotations

import ast
import functools
import importlib
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import BIN, COLLECTION, LONGEST_FIRST, REPO, ansible_env, fqcn

MODULES = sorted(p.stem for p in (REPO / "plugins" / "modules").glob("*.py"))


def _documented(module: str) -> dict:
    tree = ast.parse((REPO / "plugins" / "modules" / f"{module}.py").read_text())
    docs = {
        node.targets[0].id: yaml.safe_load(node.value.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)
        and node.targets[0].id in {"DOCUMENTATION", "EXAMPLES", "RETURN"}
    }
    assert set(docs) == {"DOCUMENTATION", "EXAMPLES", "RETURN"}, module
    for fragment in docs["DOCUMENTATION"].get("extends_documentation_fragment") or []:
        namespace, collection, name = fragment.split(".")
        assert f"{namespace}.{collection}" == COLLECTION, f"{module}: fragment {fragment} is not this collection's"
        text = (REPO / "plugins" / "doc_fragments" / f"{name}.py").read_text()
        shared = yaml.safe_load(text.split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])
        for section in ("options", "attributes"):
            docs["DOCUMENTATION"].setdefault(section, {}).update(shared.get(section) or {})
    return docs


def _argument_spec_keys(module: str) -> set[str]:
    tree = ast.parse((REPO / "plugins" / "modules" / f"{module}.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "argument_spec":
            if isinstance(node.value, ast.Name):  # a spec shared with the module's action plugin: the module's own
                import importlib

                spec = importlib.import_module(f"ansible_collections.sparkfleet.spark.plugins.modules.{module}")
                return set(getattr(spec, node.value.id))
            keys = {k.value for k in node.value.keys if k is not None}
            # a spec shared by several modules (module_utils/common/_shared_options.py), unpacked: `**DOCKER`
            shared = [v.id for k, v in zip(node.value.keys, node.value.values, strict=True) if k is None]
            if shared:
                import importlib

                loaded = importlib.import_module(f"ansible_collections.sparkfleet.spark.plugins.modules.{module}")
                keys |= {key for name in shared for key in getattr(loaded, name)}
            return keys
    pytest.fail(f"{module}: no argument_spec= found")


@functools.cache
def ansible_doc(kind: str, *flags: str) -> subprocess.CompletedProcess:
    """ansible-doc asked once for every plugin of a kind (module, filter) of the collection, as a user asks for
    several at once: each plugin's page is its part of the one answer (rendered()); with --json, one document."""
    names = [fqcn(m) for m in MODULES] if kind == "module" else [f"{COLLECTION}.{n}" for n in _filters()]
    return subprocess.run([str(BIN / "ansible-doc"), *flags, "-t", kind, *names], cwd=REPO, env=ansible_env(),
                          capture_output=True, text=True, check=False)


def rendered(kind: str, name: str) -> str:
    """The page ansible-doc rendered for one plugin: from its `> KIND name (path)` line to the next plugin's."""
    proc = ansible_doc(kind)
    assert proc.returncode == 0, proc.stderr
    pages = re.split(r"^(?=> [A-Z]+ )", proc.stdout, flags=re.M)
    [page] = [p for p in pages if p.startswith(f"> {kind.upper()} {name} ")] or [""]
    assert page, f"ansible-doc rendered no page for {name}: {proc.stdout[:300]}"
    return page


@pytest.mark.parametrize("module", MODULES)
def test_ansible_doc_renders(module):
    page = rendered("module", fqcn(module))
    assert "OPTIONS" in page
    assert "RETURN VALUES" in page
    assert "EXAMPLES" in page


@pytest.mark.parametrize("module", MODULES)
def test_each_module_says_its_attributes_through_the_one_fragment(module):
    """check_mode, diff_mode and idempotent: what each means comes from sparkfleet_attributes (no module pastes it),
    each module says its own support."""
    proc = ansible_doc("module", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)[fqcn(module)]["doc"]
    attributes = doc.get("attributes") or {}
    assert sorted(attributes) == ["check_mode", "diff_mode", "idempotent"], sorted(attributes)
    assert all(a.get("description") and a.get("support") in ("full", "partial", "none")
               for a in attributes.values()), attributes
    source = (REPO / "plugins" / "modules" / f"{module}.py").read_text()
    assert "sparkfleet.spark.sparkfleet_attributes" in source
    assert "Can run in check_mode" not in source, "the fragment says what check_mode means"


@pytest.mark.parametrize("module", MODULES)
def test_documented_options_are_the_argument_spec(module):
    docs = _documented(module)
    assert set(docs["DOCUMENTATION"].get("options", {})) == _argument_spec_keys(module)
    assert {"check_mode", "diff_mode"} <= set(docs["DOCUMENTATION"]["attributes"])


def _filters() -> dict:
    """Every filter of every plugins/filter/*.py, by name."""
    import importlib

    modules = [importlib.import_module(f"ansible_collections.sparkfleet.spark.plugins.filter.{path.stem}")
               for path in sorted((REPO / "plugins" / "filter").glob("*.py"))]
    return {name: fn for module in modules for name, fn in module.FilterModule().filters().items()}


FILTERS = sorted(_filters())


@pytest.mark.parametrize("name", FILTERS)
def test_every_filter_has_documentation_that_matches_its_arguments(name):
    import inspect

    docs = yaml.safe_load((REPO / "plugins" / "filter" / f"{name}.yml").read_text())
    params = list(inspect.signature(_filters()[name]).parameters)
    assert docs["DOCUMENTATION"]["name"] == name
    assert list(docs["DOCUMENTATION"]["options"]) == ["_input", *params[1:]]
    assert "_value" in docs["RETURN"]
    assert not ansible_doc("filter").stderr, ansible_doc("filter").stderr
    page = rendered("filter", f"{COLLECTION}.{name}")
    assert "OPTIONS" in page and "RETURN VALUES" in page


def test_no_documentation_file_without_its_filter():
    assert sorted(p.stem for p in (REPO / "plugins" / "filter").glob("*.yml")) == FILTERS


def test_no_two_test_files_share_a_name():
    """pytest imports test files by their base name (no packages here): two of one name fail collection, and only
    a run of both folders finds it."""
    names = [path.name for path in (REPO / "tests").rglob("test_*.py")]
    assert sorted({n for n in names if names.count(n) > 1}) == []


# Modules whose tests live in a file of another name, each with why (issue 61, item 6): keep it short.
TESTED_IN = {
    "spark_cx7_netplan": ("tests/cluster/test_cluster_lab.py", "a netplan applied and rolled back needs the lab "
                          "cluster's nodes"),
}


def test_each_module_has_a_test_file_of_its_name():
    named = {p.stem for p in (REPO / "tests").rglob("test_*.py") if ".cache" not in p.parts}
    missing = [m for m in MODULES if f"test_{m}" not in named and m not in TESTED_IN]
    assert missing == [], (f"no tests/**/test_<module>.py for {missing}: add one (tests/modules/ runs a module "
                           "natively through real Ansible, tests/integration/ against the test bed)")
    for module, (path, _why) in TESTED_IN.items():
        assert module in MODULES and module in (REPO / path).read_text(), f"{path} does not test {module}"
        assert f"test_{module}" not in named, f"{module} has its own test file now: remove it from TESTED_IN"


# The longest a source file of plugins/ or src/ may grow (issue 61): past it, split it by concern, as the GPU probe
# program was (three parts joined, _gpu_probe.PARTS) and spark_venv's builder (module_utils/venv/_builder.py).
MOST_LINES = 500


def test_no_source_file_of_plugins_or_src_is_over_its_most_lines():
    found = {str(path.relative_to(REPO)): len(path.read_text().splitlines())
             for folder in ("plugins", "src") for path in (REPO / folder).rglob("*.py")}
    over = {path: lines for path, lines in sorted(found.items()) if lines > MOST_LINES}
    assert over == {}, f"over {MOST_LINES} lines: {over}: split each by concern (CONTRIBUTING.md, the tree's map)"


def test_the_files_run_longest_first_exist_and_make_test_keeps_their_order():
    """A file renamed out of conftest.LONGEST_FIRST would start wherever xdist puts it: the fleet last, alone."""
    missing = [path for path in LONGEST_FIRST if not (REPO / path).is_file()]
    assert missing == [], "conftest.LONGEST_FIRST names files that are gone"
    assert "--no-loadscope-reorder" in (REPO / "Makefile").read_text(), "xdist would reorder by the count of tests"


def test_the_contributors_map_of_the_tree_names_every_top_level_entry_and_nothing_that_is_gone():
    readme = (REPO / "CONTRIBUTING.md").read_text()
    table = readme.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    named = {path.strip("`").rstrip("/").split("/")[0] for row in table.splitlines() if row.startswith("| `")
             for path in row.split("|")[1].replace(",", " ").split() if path.startswith("`")}
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    top = {path.split("/")[0] for path in tracked if not path.startswith(".")}
    assert sorted(top - named) == [], "top-level entries CONTRIBUTING.md's 'Where things live' does not name"
    assert sorted(named - top) == [], "entries CONTRIBUTING.md's 'Where things live' names that are not in the tree"
    # Every folder under tests/ is described.
    tests_row = next(row for row in table.splitlines() if row.startswith("| `tests/`"))
    folders = {p.split("/")[1] for p in tracked if p.startswith("tests/") and p.count("/") >= 2}
    assert sorted(f for f in folders if f"`{f}/`" not in tests_row and f != "fixtures") == []


# Keys Ansible reads in every module result for its own meaning: a module's data under one of these names is
# taken as the task's outcome ("unreachable": the host was unreachable, and the play stops for it).
RESERVED_RESULT_KEYS = {"failed", "skipped", "unreachable", "skip_reason", "invocation", "exception", "warnings",
                        "deprecations", "results", "item", "ansible_loop_var", "ansible_facts_cacheable"}


@pytest.mark.parametrize("module", MODULES)
def test_no_module_returns_its_own_data_under_a_key_ansible_reserves(module):
    documented = set(_documented(module)["RETURN"] or {})
    tree = ast.parse((REPO / "plugins" / "modules" / f"{module}.py").read_text())
    returned = {k.arg for node in ast.walk(tree) if isinstance(node, ast.Call)
                and getattr(node.func, "attr", None) == "exit_json" for k in node.keywords if k.arg}
    assert not (documented | returned) & RESERVED_RESULT_KEYS, f"{module} returns Ansible's reserved keys"
    assert "changed" not in documented, f"{module}: 'changed' is Ansible's, not a documented return value"
    # A result with a `path` gets that file's facts from Ansible (add_path_info), over the module's own keys.
    file_facts = {"state", "mode", "owner", "group", "uid", "gid", "size", "secontext"}
    if "path" in documented:
        clash = documented & file_facts
        assert not clash, f"{module} returns path, so Ansible overwrites its {clash}"


def test_a_shared_option_is_declared_once_and_documented_by_its_fragment():
    """Issue 39: the Docker CLI option was written out in eight modules, one typing it str where the rest said
    path. Its argument spec lives in module_utils/common/_shared_options.py and its documentation in the fragment."""
    declared = [m for m in MODULES if '"docker": {' in (REPO / "plugins" / "modules" / f"{m}.py").read_text()]
    assert declared == [], "declare it as **DOCKER"
    users = [m for m in MODULES if "docker" in _argument_spec_keys(m)]
    assert len(users) == 8
    for module in users:
        fragments = _documented(module)["DOCUMENTATION"]["extends_documentation_fragment"]
        assert "sparkfleet.spark.sparkfleet_docker" in fragments, module
    # The program's interpreter (python or launcher, exactly one) was written twice (issue 61, item 8).
    declared = [m for m in MODULES if all(f'"{option}": {{' in (REPO / "plugins" / "modules" / f"{m}.py").read_text()
                                          for option in ("python", "launcher"))]
    assert declared == [], "declare python, launcher and environment as **PROGRAM, with **ONE_INTERPRETER"
    for module in (m for m in MODULES if {"python", "launcher"} <= _argument_spec_keys(m)):
        fragments = _documented(module)["DOCUMENTATION"]["extends_documentation_fragment"]
        assert "sparkfleet.spark.sparkfleet_program" in fragments, module


def _anchors(page: Path) -> set[str]:
    """The anchors GitHub gives a Markdown page's headings (lower case, punctuation dropped, spaces as '-')."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_every_link_in_the_pages_users_read_resolves():
    """README.md, CONTRIBUTING.md, SECURITY.md, docs/ and each role's README: every relative link names a file of
    the repository (and, with #anchor, a heading of it); an absolute one is https."""
    pages = [REPO / name for name in ("README.md", "CONTRIBUTING.md", "SECURITY.md")]
    pages += sorted((REPO / "docs").glob("*.md")) + sorted((REPO / "roles").glob("*/README.md"))
    broken, count = [], 0
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            count += 1
            if target.startswith(("http://", "mailto:")):
                broken.append(f"{page.relative_to(REPO)}: {target} (https only)")
                continue
            if target.startswith("https://"):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists() or (REPO not in linked.parents and linked != REPO):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file in the repository)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.relative_to(REPO)}: {target} (no heading #{anchor})")
    assert broken == []
    assert count > 40  # the walk found the pages' links


def test_every_page_of_docs_is_listed_in_its_index_and_links_back():
    index = (REPO / "docs" / "README.md").read_text()
    pages = sorted(p.name for p in (REPO / "docs").glob("*.md") if p.name != "README.md")
    assert [name for name in pages if f"]({name})" not in index] == [], "docs/README.md does not list them"
    assert [name for name in pages if "](README.md)" not in (REPO / "docs" / name).read_text()] == []


def test_the_map_names_every_file_of_the_driver_and_of_module_utils():
    """CONTRIBUTING.md's rows for src/sparkfleet/ and plugins/module_utils/ name each file (a file added without a
    word there fails here); each file opens with a docstring that says its one concern."""
    text = (REPO / "CONTRIBUTING.md").read_text()
    rows = {key: next(line for line in text.splitlines() if line.startswith(f"| `{key}`"))
            for key in ("src/sparkfleet/", "plugins/modules/")}
    driver = [p for p in sorted((REPO / "src" / "sparkfleet").glob("*.py")) if p.name != "__init__.py"]
    shared = [p for p in sorted((REPO / "plugins" / "module_utils").glob("*/*.py"))
              if p.name != "__init__.py" and not p.name.startswith("_program")]
    assert [p.name for p in driver if f"`{p.name}`" not in rows["src/sparkfleet/"]] == []
    assert [str(p.relative_to(REPO)) for p in shared if f"`{p.name}`" not in rows["plugins/modules/"]] == []
    assert [str(p.relative_to(REPO)) for p in driver + shared if not ast.get_docstring(ast.parse(p.read_text()))] == []


def test_the_tests_have_one_fake_http_server():
    """tests/fake_http.py is the tests' only HTTP server of their own (six files each wrote one)."""
    own = [str(p.relative_to(REPO)) for p in sorted((REPO / "tests").rglob("*.py"))
           if p.name != "fake_http.py" and re.search(r"^\s*class \w+\((http\.server\.)?BaseHTTPRequestHandler\)|"
                                                      r"HTTPServer\(\(|UnixStreamServer\)", p.read_text(), re.M)]
    assert own == []


def test_the_glossary_words_keep_their_sense_in_the_code():
    """One word per idea (docs/glossary.md): "override" is a host that is not a Spark, provisioned on purpose, and
    no function of the code is named for another sense (an index's mirror is mirrored(), the CLI's mutex is the run
    lock, never inventory_lock)."""
    glossary = (REPO / "docs" / "glossary.md").read_text()
    for word in ("override", "mirror", "run lock", "fallback tag", "local blessed tag", "lock", "hash lock",
                 "dpkg lock", "pin"):
        assert f"| {word} |" in glossary, word
    names = set()
    for path in list((REPO / "plugins").rglob("*.py")) + list((REPO / "src").rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        names |= {node.name for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        # parameters too: an index's mirrors are never "overrides" (issue 61, item 7)
        names |= {f"{path.name}: parameter {arg.arg}" for node in ast.walk(tree) if isinstance(node, ast.arguments)
                  for arg in (*node.posonlyargs, *node.args, *node.kwonlyargs)
                  if arg.arg in ("overrides", "override") or arg.arg.endswith("_overrides")}
    assert sorted(n for n in names if n in ("override", "inventory_lock") or n.endswith("_override")
                  or " parameter " in n) == []
    # A module option for an index's mirror is index_mirrors (index_overrides only as its deprecated alias).
    # ... nor a fallback for the local blessed tag (a fallback tag is pin's): local_fallback only as an alias.
    options = [f"{path.name}: {key}" for path in sorted((REPO / "plugins" / "modules").glob("*.py"))
               for key in re.findall(r'"(\w+_overrides|local_fallback)": \{', path.read_text())]
    assert options == []


def test_platform_means_an_oci_platform_never_the_host_class():
    """A platform is linux/arm64 (docs/glossary.md); what preflight found a host to be is its class. The old name
    spark_platform is set, and report.json's platform written, only where their deprecation keeps them; nothing
    asks `['platform'] == 'spark'`, no task gathers "platform facts", no table has a platform column."""
    glossary = (REPO / "docs" / "glossary.md").read_text()
    assert "| host class |" in glossary and "| platform | an OCI platform" in glossary
    kept = {"plugins/modules/spark_preflight_facts.py", "roles/spark_preflight/README.md",
            "molecule/default/verify.yml", "docs/glossary.md"}
    found = []
    for folder in ("plugins", "roles", "playbooks", "src", "molecule", "docs"):
        for path in sorted((REPO / folder).rglob("*")):
            if path.suffix not in (".py", ".yml", ".md", ".json", ".j2") or "__pycache__" in path.parts:
                continue
            rel, text = str(path.relative_to(REPO)), path.read_text()
            said = re.findall(r"spark_platform\b", text) if rel not in kept else []
            said += re.findall(r"[Pp]latform facts|\[['\"]platform['\"]\] *[!=]= *"
                               r"['\"](?:spark|not-spark|aarch64-other)['\"]", text)
            found += [f"{rel}: {s}" for s in said]
    assert found == []
    table = importlib.import_module(
        "ansible_collections.sparkfleet.spark.plugins.module_utils.verification._fleet_table")
    assert "platform" not in table.HEADERS and "class" in table.HEADERS
    hosts = json.loads((REPO / "src" / "sparkfleet" / "report-schema.json").read_text())[
        "properties"]["hosts"]["additionalProperties"]["properties"]
    assert hosts["platform"].get("deprecated") is True and "host_class" in hosts


def _generator():
    """tools/docs.py, loaded by its path (`make docs`)."""
    spec = importlib.util.spec_from_file_location("sparkfleet_tools_docs", REPO / "tools" / "docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_generated_part_of_the_docs_is_what_its_table_says():
    """The frameworks the probe exercises and its deadline are written in the module's documentation and the
    verification page from FRAMEWORKS and FRAMEWORK_SECONDS by `make docs`: a table changed without it fails here,
    naming the file and the part."""
    generator = _generator()
    stale = generator.drift()
    assert not stale, f"{', '.join(stale)}: differs from its table; run make docs"
    assert generator.used() == set(generator.PARTS), "a part no page holds, or a page naming a part with no table"


def test_a_framework_added_to_the_table_is_drift_in_every_file_that_lists_them(monkeypatch):
    """The failure a contributor meets who adds a framework and forgets `make docs`: each file and part named; and
    `make docs` writes the new framework with what its probe does, in both files."""
    generator = _generator()
    probe = generator._frameworks()
    warp = probe.Framework(name="warp", pattern=r"^warp-lang$", module="warp", probe=lambda: {},
                           exercise="a `wp.launch` of a kernel on the GPU", fix="install warp-lang")
    monkeypatch.setattr(probe, "FRAMEWORKS", (*probe.FRAMEWORKS, warp))
    assert generator.drift() == ["docs/verification.md: part frameworks",
                                 "plugins/modules/spark_gpu_verify.py: part frameworks"]
    page, changed = generator.rewrite((REPO / "docs" / "verification.md").read_text(), ".md")
    assert changed == ["frameworks"] and "warp (a `wp.launch` of a kernel on the GPU)" in " ".join(page.split())
    module, _ = generator.rewrite((REPO / "plugins" / "modules" / "spark_gpu_verify.py").read_text(), ".py")
    doc = yaml.safe_load(module.split('DOCUMENTATION = r"""')[1].split('"""')[0])
    assert "warp (a C(wp.launch) of a kernel on the GPU)" in " ".join(doc["options"]["frameworks"]["description"])
    with pytest.raises(KeyError, match="no part named 'frameworkz'"):
        generator.rewrite("<!-- make docs: frameworkz -->\n<!-- end make docs -->\n", ".md")


def test_a_doctor_check_or_a_command_added_is_drift_where_it_is_listed(monkeypatch):
    """A check added to CHECKS (its docstring is its phrase) shows in spark_doctor's documentation and the doctor's
    page, in the order it runs; a command added to the command table shows in the reference's table. A check
    without a docstring is refused with what to write."""
    from ansible_collections.sparkfleet.spark.plugins.module_utils.host import _doctor

    from sparkfleet import command_table

    generator = _generator()

    def check_gpu_clock(_report, _preflight, _limits):
        """the GPU slowing down"""
        return []

    monkeypatch.setattr(_doctor, "CHECKS", (check_gpu_clock, *_doctor.CHECKS))
    assert generator.drift() == ["docs/doctor.md: part doctor-checks", "plugins/modules/spark_doctor.py: part "
                                 "doctor-checks"]
    page, _ = generator.rewrite((REPO / "docs" / "doctor.md").read_text(), ".md")
    assert "<!-- make docs: doctor-checks -->\n1. the GPU slowing down\n2. no GPU visible\n" in page
    check_gpu_clock.__doc__ = None
    with pytest.raises(ValueError, match=r"check_gpu_clock in CHECKS of plugins/module_utils/host/_doctor\.py has no"):
        generator.drift()
    monkeypatch.setattr(_doctor, "CHECKS", _doctor.CHECKS[1:])
    images = command_table.Command("images-unused", ("images", "unused"), "playbooks/images_unused.yml",
                                   "list the images no lock pins", "", ())
    monkeypatch.setattr(command_table, "COMMANDS", [*command_table.COMMANDS, images])
    assert generator.drift() == ["docs/reference.md: part commands"]
    page, _ = generator.rewrite((REPO / "docs" / "reference.md").read_text(), ".md")
    assert ("| `sparkfleet images unused` | `playbooks/images_unused.yml` | list the images no lock pins |\n"
            "<!-- end make docs -->") in page

# sparkfleet — the two commands a fresh Debian 12 machine (as root) needs:
#   make lab    build the test bed, start a lab fleet of virtual Sparks and run site.yml on it
#   make test   the whole test suite: lint, unit, integration, Molecule
SHELL := /bin/bash
.DEFAULT_GOAL := help
LAB_HOSTS ?= 2
VENV := .venv
BIN := $(CURDIR)/$(VENV)/bin
export PATH := $(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export ANSIBLE_FORCE_COLOR ?= 0
export PY_COLORS ?= 0
# make test writes where each stage's time went to SPARKFLEET_TIMINGS (testbed/timed.sh, tests/conftest.py), for
# the table bench/suite_timings.py makes; set for make test and what it builds only (a make lab a test runs adds
# nothing to it).
TIMED := testbed/timed.sh

.PHONY: help venv collection testbed registry aptrepo pyindex lab lab-down test test-cold test-quick docs lint unit pytest \
	molecule clean \
	timings-reset

help:
	@echo "make lab        start LAB_HOSTS (default 2) virtual Sparks, provision them through sparkfleet, report"
	@echo "make lab-down   remove the lab"
	@echo "make test       lint + unit + integration + Molecule"
	@echo "make test-cold  make test with an empty test store (what a new machine meets)"
	@echo "make collection dist/sparkfleet-spark.tar.gz, the collection for ansible-galaxy and ansible-builder"
	@echo "make test-quick lint, unit, module and terminal tests: the inner loop, no test bed"
	@echo "make lint | unit | pytest | molecule   one part of the tests"
	@echo "make docs       write the documentation's generated parts from their tables (tools/docs.py)"
	@echo "  unit: pytest without the test bed or network; pytest: all of pytest, test bed started"

venv:
	@$(TIMED) "venv" testbed/venv.sh

# The collection sparkfleet.spark as a tarball for ansible-galaxy / ansible-builder
# (dist/sparkfleet-spark-<version>.tar.gz, and a copy under a name without the version).
collection: venv
	ansible-galaxy collection build --force --output-path dist .
	cp dist/sparkfleet-spark-$$(sed -n 's/^version: *//p' galaxy.yml).tar.gz dist/sparkfleet-spark.tar.gz

testbed: venv
	@$(TIMED) "test bed: tools" testbed/tools.sh
	@$(TIMED) "test bed: docker" testbed/docker.sh
	@$(TIMED) "test bed: binfmt" testbed/binfmt.sh
	@$(TIMED) "test bed: images" testbed/images.sh plain spark amd64 cluster engine

registry:
	@$(TIMED) "test bed: registry" testbed/registry.sh start

aptrepo:
	@$(TIMED) "test bed: apt repository" testbed/aptrepo.sh start

pyindex:
	@$(TIMED) "test bed: package index" testbed/pyindex.sh start

lab: testbed
	sparkfleet lab up --hosts $(LAB_HOSTS)

lab-down:
	@if [ -x $(BIN)/sparkfleet ]; then sparkfleet lab down; else testbed/lab.sh down; testbed/cluster.sh down; fi

lint: venv
	$(TIMED) "lint: ruff" ruff check setup.py src plugins tests collections testbed bench tools
	$(TIMED) "lint: yamllint" yamllint --strict .
	$(TIMED) "lint: ansible-lint" ansible-lint

# -n auto: one worker per core, a test file per worker at a time, the longest first (tests/conftest.py LONGEST_FIRST;
# xdist would order them by their count of tests); tests/conftest.py makes the files that share
# this machine's Docker images take turns.
XDIST := -n auto --dist loadfile --no-loadscope-reorder

unit: venv
	pytest $(XDIST) -m "not testbed and not network" tests

# No test may skip but the GPU suite on a machine without a GPU (tests/conftest.py MAY_SKIP): a skip fails the run.
pytest: testbed registry aptrepo
	SPARKFLEET_NO_SKIP=1 $(TIMED) "pytest" pytest $(XDIST) tests

molecule: testbed aptrepo registry pyindex
	@testbed/standins.sh
	$(TIMED) "molecule: default and venv, at once" testbed/molecule.sh default venv

test: export SPARKFLEET_TIMINGS := $(CURDIR)/.cache/timings

# Each make test's table of where the time went starts empty.
timings-reset:
	@if [ -n "$(SPARKFLEET_TIMINGS)" ]; then rm -rf "$(SPARKFLEET_TIMINGS)"; fi

test: timings-reset lint pytest molecule
	@python bench/suite_timings.py "$(SPARKFLEET_TIMINGS)"

# make test with an empty test store (testbed/store.py: the venvs, sites and tool venvs the tests build, kept
# outside the clone in ~/.cache/sparkfleet/test-store for every clone of this machine): what CI's first run on a
# new machine meets. The test bed's images stay in Docker's engine (docker rmi them too for a machine's first run).
test-cold:
	@cold=$$(mktemp -d); SPARKFLEET_TEST_CACHE=$$cold $(MAKE) test; rc=$$?; rm -rf "$$cold"; exit $$rc

# The inner loop: lint, the pure tests, the modules natively and the CLI at a pty; no test bed, no network.
test-quick: lint
	pytest $(XDIST) -m "not testbed and not network" tests/unit tests/cli tests/modules tests/terminal

# The documentation's generated parts written anew from their tables (tools/docs.py; tests/modules/test_docs.py
# fails while one differs).
docs: venv
	python tools/docs.py

clean: lab-down
	rm -rf .cache .venv dist build
	@# the collections from PyPI (ignored files); the link to this repository is tracked and stays
	git clean -fdXq collections

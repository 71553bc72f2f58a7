# Two commands: `make run` (install, migrate, load the worked example, serve) and `make test`.
PY ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install install-server check-system run test test-engine fuzz lint lock docs dist bench bench-quality mutate mutate-sample schema screenshots clean

# System packages (scripts/check-system): present, installed with apt-get when root, or a stop
# naming the command. `make test` needs redis-server (a private broker per test worker; not with
# CTXENG_TEST_REDIS_URL), chromium (browser tests) and nginx (the production layout's tests);
# every target needs python3-venv.
TEST_NEEDS := venv chromium nginx $(if $(CTXENG_TEST_REDIS_URL),,redis-server)
check-system:
	@PY="$(PY)" sh scripts/check-system $(TEST_NEEDS)

# `make run` installs only what serving needs (the `server` extra); `make test` adds the test
# tools, the framework adapters, the docs generator and the OTLP/gRPC exporter. Every install is
# held to constraints.txt (`-c`): the versions the suite passed with, so a fresh machine resolves
# what CI tested, not whatever is newest that day. `make lock` upgrades them (docs/production.md).
SERVER_STAMP := $(VENV)/.installed-server-stamp
$(SERVER_STAMP): pyproject.toml constraints.txt
	@PY="$(PY)" sh scripts/check-system venv
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[server]'
	@touch $(SERVER_STAMP)

$(STAMP): pyproject.toml constraints.txt
	@PY="$(PY)" sh scripts/check-system venv
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[server,dev,frameworks,otel-grpc,docs]'
	@touch $(STAMP) $(SERVER_STAMP)

install: $(STAMP)
install-server: $(SERVER_STAMP)

# `make run PORT=8123` serves on another port.
PORT ?= 8000
run: install-server
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py load_example
	$(BIN)/python manage.py runserver 127.0.0.1:$(PORT)

# Tests run on every core (pytest-xdist): each worker has its own test database (SQLite file or
# PostgreSQL `test_<name>_gw<N>`) and its own private redis-server. Two workers per core: many
# tests wait (on a Celery worker, a subprocess, a browser), and a second worker keeps the core busy
# meanwhile. `--dist worksteal` lets a worker that runs out take half of the longest queue, and
# tests/conftest.py puts the waiting tests at the head of each worker's run, so none starts near
# the end. Bytecode is written (an environment may set PYTHONDONTWRITEBYTECODE): each worker would
# otherwise compile the project and rewrite the test modules again, ~4 s of CPU apiece.
# TEST_WORKERS=1 runs serially.
TEST_WORKERS ?= $(shell $(PY) -c 'import os; print(2 * (os.cpu_count() or 1))' 2>/dev/null || echo auto)
# The import contracts of pyproject.toml ([tool.importlinter]) first: a layer broken fails at once.
test: check-system install
	$(BIN)/lint-imports --no-cache
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal

# The OpenAPI fuzz at length (tests/service/test_openapi_fuzz.py, which `make test` runs with 15
# cases per operation and mode and 8 stateful chains per role): the same checks over FUZZ_EXAMPLES
# cases, each sent with every role's token, and FUZZ_STATEFUL chains. The operation x role table
# of the statuses answered is written to .fuzz/openapi-fuzz-coverage.md (docs/testing.md).
FUZZ_EXAMPLES ?= 100
FUZZ_STATEFUL ?= 30
fuzz: check-system install
	CTXENG_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) CTXENG_FUZZ_STATEFUL_EXAMPLES=$(FUZZ_STATEFUL) PYTHONDONTWRITEBYTECODE= \
		$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --basetemp=.fuzz tests/service/test_openapi_fuzz.py

test-engine: install
	$(BIN)/python -m pytest -q tests/engine

# Newer pins: every extra the Makefile installs, upgraded to the newest versions pyproject.toml
# allows, written to constraints.txt (the editable ctxeng itself left out). Then `make test`, and
# commit constraints.txt with the CHANGELOG line naming what moved (`git diff constraints.txt`).
LOCK_EXTRAS := server,dev,frameworks,otel-grpc,docs,bench
lock:
	@PY="$(PY)" sh scripts/check-system venv
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --upgrade --upgrade-strategy eager -e '.[$(LOCK_EXTRAS)]'
	{ echo "# Written by \`make lock\` (extras: $(LOCK_EXTRAS)); every Makefile install reads it with -c."; \
	  echo "# Do not edit by hand: docs/production.md, \"Pinned installs\"."; \
	  $(BIN)/python -m pip freeze --exclude-editable; } > constraints.txt
	@touch $(STAMP) $(SERVER_STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-cache

# The documentation site (mkdocs.yml) in site/, strict: a broken link fails. Open site/index.html.
# `make docs` needs only the docs extra (mkdocs, mkdocs-material; the reference hook reads the
# light install's CLI and schemas), not the server or the test tools.
DOCS_STAMP := $(VENV)/.installed-docs-stamp
$(DOCS_STAMP): pyproject.toml constraints.txt
	@PY="$(PY)" sh scripts/check-system venv
	@test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[docs]'
	@touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# A wheel of the distribution in dist/ (the package is not on the index yet:
# the wheel `dist/ctxeng_governor-*.whl` installs the light library with pip).
dist: $(SERVER_STAMP)
	rm -rf dist build
	$(BIN)/python -m pip wheel -q --no-deps -w dist .

bench: install bench-quality
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[server,dev,frameworks,bench]'
	$(BIN)/python -m bench.run

# Context quality (issue 28): three long-horizon runs through ctxeng and three baselines, scored per
# step; writes bench/results/quality.json and quality.png (about a minute on 2 cores).
bench-quality: install
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[server,dev,frameworks,bench]'
	$(BIN)/python -m bench.quality.run

# Mutation testing per module (docs/mutation.md: targets, scores, run times, equivalent mutants).
# TARGET is one of tests/mutation/targets.py's table (every product module is in one; `python -m
# tests.mutation.targets list` shows each one's files and tests); each runs mutmut in its own
# workspace .mutate/TARGET/ (git-ignored), where results stay cached. MUTANTS="ctxeng.engine.budget*"
# limits a run to those names; MUTATE_CHILDREN=1 keeps it to one core on a shared machine.
# `make mutate-sample` judges one stratified random sample of MUTATE_SAMPLE mutants over
# MUTATE_TARGETS (the whole product and its templates; 139 gives ±5 points at 90%), drawn with a
# seed that is new every run unless MUTATE_SEED is given, and writes each drawn mutant's name, diff
# and verdict to tests/mutation/samples/seed-SEED/ (the scores also to .mutate/scores.jsonl); it
# takes hours on a 2-core machine.
MUTATE_CHILDREN ?= 1
MUTANTS ?=
TARGET ?= engine
MUTATE_SAMPLE ?= 139
MUTATE_SEED ?=
MUTATE_TARGETS := engine sdk adapters services selectors dashboard api accounts policies content views server jobs client templates
mutate: check-system install
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[server,dev,frameworks,mutate]'
	$(BIN)/python -m tests.mutation.targets run $(TARGET) $(MUTANTS) --max-children $(MUTATE_CHILDREN)

mutate-sample: check-system install
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[server,dev,frameworks,mutate]'
	$(BIN)/python -m tests.mutation.targets sample --size $(MUTATE_SAMPLE) --max-children $(MUTATE_CHILDREN) \
		$(if $(MUTATE_SEED),--seed $(MUTATE_SEED)) $(MUTATE_TARGETS)

# The README's dashboard screenshots: the browser tests save theirs in a temporary folder, and
# copy them here only when asked (headless Debian chromium, as in `make test`).
screenshots: install
	CTXENG_SCREENSHOTS=docs/screenshots $(BIN)/python -m pytest -q -p no:randomly tests/dashboard/test_browser.py \
		tests/dashboard/test_browser_layouts.py tests/dashboard/test_browser_long_run.py -k "not crawl"

schema: install
	for n in request policy manifest; do $(BIN)/python -m ctxeng schema $$n > docs/schemas/$$n.schema.json; done

clean:
	rm -rf $(VENV) .pytest_cache .mutate

# Every target sets itself up on a fresh machine: a virtual environment in .venv with the
# project installed editable (plus the bundled target's torch/transformers and the test
# tools), and the Debian packages the suite drives for real (nginx, chromium). Idempotent.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
REPORTS := reports
SYSTEM_PACKAGES := nginx-light chromium tcpdump
# CI (and a developer) can pass extra pytest arguments: make test PYTEST_ARGS="-x -k toxic"
PYTEST_ARGS ?=
# make test runs the suite on PYTEST_WORKERS pytest-xdist workers (4: twice a 2-core machine's
# cores, since half of a worker's time is spent waiting on the processes its tests start: a
# target importing torch, nginx, a load's paced streams; on a quiet 2-core machine a fresh
# clone's suite took 420 s on 4 workers and 585 s on 2; on 6, 396 s once, and 439 s with four
# timing tests failing), and the resilience suite on RESILIENCE_WORKERS (2: its timing tests
# share the cores with nothing of the suite's own).
# `auto` takes one per core, 0 runs in one process. pytest keeps the last -n it is given, so
# PYTEST_ARGS="-n 0" on top of the default works as well. --dist loadfile keeps each test file
# on one worker: a module-scoped fixture (a bundled target with torch, the fresh venv of
# tests/install, the Ray cluster, the browser page) starts once, not once per worker.
# (--dist loadgroup would not help: xdist 3.8 marks its groups by rewriting a test's node id,
# which pytest 9 no longer lets it do, so the groups are silently ignored.)
# --no-loadscope-reorder hands the files out in collection order, where tests/conftest.py puts
# the longest first (xdist's own order is by test count).
PYTEST_WORKERS ?= 4
RESILIENCE_WORKERS ?= 2
DIST = --dist loadfile --no-loadscope-reorder
MYPY = $(BIN)/mypy
# Not -q: it hides the warnings --strict counts (a broken link would pass).
MKDOCS_BUILD = env NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

.PHONY: all install system-deps lint docs test demo bench verdict-fuzz clean

all: test

# Python must keep the bytecode it compiles: with PYTHONDONTWRITEBYTECODE set (some shells and
# CI images set it), every process of the suite (the pytester runs, each target) compiled
# torch and transformers again from source: the suite's pytest took 433 s instead of 327 s
# in a fresh clone on a 2-core machine.
unexport PYTHONDONTWRITEBYTECODE

# --no-compile: pip would byte-compile every module of torch, transformers and ray (about a
# minute of CPU, most of the install's time); Python compiles what a run imports on first use
# and keeps it (see the unexport above). tests/precompile.py imports, once, what the suite's
# processes would otherwise compile at once, each its own copy (11 s; 17 s of the first run).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q --no-compile -e '.[target,test,docs,ray]'
	$(BIN)/python tests/precompile.py
	touch $@

# The Debian packages install beside the virtual environment (apt-get waits on its mirror and
# dpkg, pip on PyPI): a fresh CI machine's set-up is as long as the longer of the two.
install:
	@$(MAKE) --no-print-directory -j2 --output-sync=target $(STAMP) system-deps

# nginx backs the ingress fault, chromium renders the HTML report in its test, tcpdump
# captures loopback for the wire check (tests/stream/test_wire_check.py). All are
# real programs the tests start; when missing they are installed here if we can (root with
# apt-get), otherwise the tests that need them fail loudly and say so.
system-deps:
	@missing=""; \
	command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx || missing="$$missing nginx-light"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	command -v tcpdump >/dev/null 2>&1 || test -x /usr/bin/tcpdump || missing="$$missing tcpdump"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing$$missing"; \
	    apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	  else \
	    echo "warning: missing$$missing (install with apt-get as root); tests that need them will fail" >&2; \
	  fi; \
	fi

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MYPY)

# The documentation site under site/ (offline: no plugin fetches anything); --strict turns
# every warning (a broken link, a missing page, an unresolved API name) into a failure.
docs: $(STAMP)
	$(MKDOCS_BUILD)

# The resilience suite against the bundled target through the embedded Toxiproxy, with the
# summary table in the terminal and the reports under reports/. It needs --streamguard (without
# it its tests fail and say so), hence a pytest run of its own.
RESILIENCE = $(BIN)/pytest --streamguard tests/resilience -p no:cacheprovider \
	  --streamguard-json=$(REPORTS)/streamguard.json \
	  --streamguard-html=$(REPORTS)/streamguard.html \
	  --junitxml=$(REPORTS)/junit.xml
# The incident's stack (three services, 30 streams at once) takes both cores while it runs: on
# xdist it ran beside the timing-sensitive tests of another file and made them flake (the naive
# target's probe got one sample in a fresh clone's make test), so `make test` runs it alone,
# after the rest, with reports of its own. `make demo` runs every file in one process anyway.
INCIDENT = tests/resilience/test_incident_stack.py
INCIDENT_RUN = $(BIN)/pytest --streamguard $(INCIDENT) -p no:cacheprovider \
	  --streamguard-json=$(REPORTS)/incident-stack.json \
	  --streamguard-html=$(REPORTS)/incident-stack.html \
	  --junitxml=$(REPORTS)/incident-stack-junit.xml

# pytest's exit code 5 (no tests collected) fails this target like any other non-zero code.
# Everything but the resilience suite, then the resilience suite (its incident stack alone, after
# the rest): CI runs only this target. The lint of `make lint` runs first; mypy and the docs
# build (`make docs`: the slow parts of the checks, 35 s of one core) run beside the tests at the
# lowest priority (nice 19), so they take only the CPU the tests leave idle and barely move a
# timing test; their output is printed at the end, and either failing fails the target (they
# are stopped if the run is interrupted). A failed pytest stops the run there.
test: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	mkdir -p $(REPORTS)
	@mypy_log=$$(mktemp); docs_log=$$(mktemp); \
	nice -n 19 $(MYPY) >$$mypy_log 2>&1 & mypy_pid=$$!; \
	nice -n 19 $(MKDOCS_BUILD) >$$docs_log 2>&1 & docs_pid=$$!; \
	trap 'kill $$mypy_pid $$docs_pid 2>/dev/null; rm -f $$mypy_log $$docs_log; exit 130' INT TERM; \
	echo "$(MYPY) and mkdocs build --strict (at nice 19, beside the tests)"; \
	run() { echo "$$*"; "$$@"; }; \
	run $(BIN)/pytest -n $(PYTEST_WORKERS) $(DIST) --ignore tests/resilience $(PYTEST_ARGS) && \
	run $(RESILIENCE) -n $(RESILIENCE_WORKERS) $(DIST) --ignore $(INCIDENT) $(PYTEST_ARGS) && \
	run $(INCIDENT_RUN) $(PYTEST_ARGS); tests=$$?; \
	wait $$mypy_pid; mypy_rc=$$?; wait $$docs_pid; docs_rc=$$?; cat $$mypy_log $$docs_log; \
	rm -f $$mypy_log $$docs_log; \
	[ $$mypy_rc = 0 ] || echo "mypy failed (exit code $$mypy_rc)" >&2; \
	[ $$docs_rc = 0 ] || echo "the docs build failed (exit code $$docs_rc)" >&2; \
	[ $$tests = 0 ] && [ $$mypy_rc = 0 ] && [ $$docs_rc = 0 ]

demo: install
	mkdir -p $(REPORTS)
	$(RESILIENCE) $(PYTEST_ARGS)

# AIPerf (the peer benchmark of benchmarks/fidelity.py) pins huggingface-hub<2 and other
# versions the project's transformers does not accept, so it gets a virtual environment of its
# own. A real toxiproxy-server to compare with: make bench STREAMGUARD_TOXIPROXY_SERVER=PATH
# (without one the comparison rows say it was skipped).
AIPERF_VENV := .venv-aiperf
AIPERF := $(AIPERF_VENV)/bin/aiperf
BENCH_ARGS ?=

$(AIPERF):
	test -x $(AIPERF_VENV)/bin/python || $(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/python -m pip install -q 'aiperf==0.13.0'

bench: $(STAMP) $(AIPERF)
	$(BIN)/python benchmarks/run.py --aiperf $(AIPERF) $(BENCH_ARGS)

# The differential harness (tests/formats/differential.py): N generated streams per protocol
# from each generator (streamgen.py's hand-written shapes, then typedgen.py's events built from
# the SDKs' own typed models; a line per generator), read by the plugin and by each protocol's
# official client; its last line is streams=<n> disagreements=<k> undocumented=<u> over both,
# and it fails when undocumented > 0.
N ?= 1000
SEED ?= 0
verdict-fuzz: $(STAMP)
	PYTHONPATH=.:tests$${PYTHONPATH:+:$$PYTHONPATH} $(BIN)/python tests/formats/differential.py --n $(N) --seed $(SEED)

clean:
	rm -rf $(VENV) $(AIPERF_VENV) $(REPORTS) site .mypy_cache .ruff_cache .pytest_cache

# The README's whole set-up: `make run` and `make test`, on a fresh machine.
# Each creates .venv when missing and installs what it needs.
# `make test-fast` is the contributors' quicker lane: the same lint, types and import
# contracts, and every test not marked `slow` (it leaves out the end-to-end tests that
# start real daemons for seconds). `make test` still runs everything.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
EXAMPLE := examples/gitops-repo
# the exec shim jobs are started from (cronstable/runtime/exec_shim.py): built by
# `pip install`, and again here whenever its source is newer (not in git)
SHIM    := cronstable/runtime/shim/cronstable-exec

.PHONY: run test test-fast deps lint typecheck imports pytest pytest-fast pytest-slow schema bench clean

# Debian packages the test suite needs: a real etcd server (started by the test
# fixtures on a free loopback port), git (its daemon and http-backend serve
# test remotes), faketime (libfaketime steps the daemon's wall clock) and chromium
# (headless, it drives the dashboard).
DEBIAN_PACKAGES := etcd-server git faketime chromium
deps:
	@missing=""; \
	command -v etcd >/dev/null 2>&1 || missing="$$missing etcd-server"; \
	test -x /usr/lib/git-core/git-http-backend || missing="$$missing git"; \
	command -v faketime >/dev/null 2>&1 || missing="$$missing faketime"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	fi

$(STAMP): pyproject.toml setup.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,speedups,mcp]'
	touch $(STAMP)

$(SHIM): $(SHIM).c setup.py | $(STAMP)
	$(BIN)/python setup.py shim

# the daemon in the foreground on the example repository, until Ctrl-C
run: $(STAMP) $(SHIM)
	$(BIN)/cronstable run $(EXAMPLE)

test: lint typecheck imports pytest

test-fast: lint typecheck imports pytest-fast

lint: $(STAMP)
	$(BIN)/ruff check cronstable tests bench
	$(BIN)/ruff format --check cronstable tests bench

typecheck: $(STAMP)
	$(BIN)/mypy --strict cronstable

imports: $(STAMP)
	$(BIN)/lint-imports

# The tests not marked slow run side by side in TEST_WORKERS processes (pytest-xdist):
# most of their time is spent waiting on real timers (file watches, TTLs, subprocesses),
# not on the CPU, so more workers than cores pay.  The slow end-to-end tests, which
# start real daemons and judge what they do in real time, run after them two at a time
# (SLOW_WORKERS): they too mostly wait, and every timing they judge has a margin meant
# for a loaded machine.  SLOW_WORKERS=0 runs them one at a time, in this process.
TEST_WORKERS ?= 4
SLOW_WORKERS ?= 2
pytest: pytest-fast pytest-slow

pytest-fast: $(STAMP) deps $(SHIM)
	$(BIN)/pytest -m 'not slow' -n $(TEST_WORKERS)

pytest-slow: $(STAMP) deps $(SHIM)
	$(BIN)/pytest -m slow -n $(SLOW_WORKERS)

schema: $(STAMP)
	$(BIN)/cronstable schema > schema/cronstable.schema.json

# on demand, never in `make test`: each prints ratios against yacron 0.19.0 (installed
# from PyPI into bench/.venv-yacron on first use) or against a floor, measured in the same run
bench: $(STAMP) deps $(SHIM)
	$(BIN)/python bench/bench_load.py
	$(BIN)/python bench/bench_schedule.py
	$(BIN)/python bench/bench_cli.py
	$(BIN)/python bench/bench_reconcile.py
	$(BIN)/python bench/bench_source_notice.py
	$(BIN)/python bench/bench_failover.py
	$(BIN)/python bench/bench_state.py
	$(BIN)/python bench/bench_runtime.py
	$(BIN)/python bench/bench_limits.py
	$(BIN)/python bench/bench_webhook.py
	$(BIN)/python bench/bench_scale.py
	$(BIN)/python bench/bench_mcp.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis $(SHIM)

# Two entry points for a fresh machine: `make doctor` (the main job on the bundled engine) and
# `make test` (the test suite). Both create .venv and install what they need from pyproject.toml.
# Python 3.12 where it runs (pip then installs jax 0.11, whose XLA:CPU reads bf16 faster; see README),
# else python3 (3.11+: jax 0.10). `make PY=/path/to/python` picks one.
PY ?= $(shell python3.12 -c 'import venv' >/dev/null 2>&1 && echo python3.12 || echo python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: install doctor test lint clean chromium docs

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	@echo "installing hlo-doctor and its dependencies (jax, xprof, ...) into $(VENV): 1-2 minutes the first time"
	# One line per package, no progress bars: readable in a terminal and in a CI log.
	$(BIN)/python -m pip install --progress-bar off -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Exit 1 is doctor's verdict (a verify check did not pass: the report says which), not a failed run;
# bad input (2) and internal errors (3) still fail make.
doctor: $(STAMP)
	$(BIN)/hlo-doctor doctor --out runs/doctor || test $$? -eq 1

# The HTML report's tests open its pages in Debian's chromium (not a pip package). Installed here where
# missing and apt-get runs as root; elsewhere those tests skip and say why. APT::Sandbox::User=root: apt's
# own user cannot run gpgv on machines whose /dev/null it may not write.
chromium:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif ! command -v apt-get >/dev/null 2>&1 || [ "$$(id -u)" != 0 ]; then \
	  echo "chromium: not installed and no apt-get as root here: the browser tests will skip"; \
	else \
	  echo "installing Debian's chromium for the browser tests (apt-get)"; \
	  { apt-get -o APT::Sandbox::User=root update -qq && \
	    DEBIAN_FRONTEND=noninteractive apt-get -o APT::Sandbox::User=root install -y -qq chromium >/dev/null; } \
	  || echo "chromium: apt-get failed: the browser tests will skip"; \
	fi

# The test files are spread over the cores (pytest-xdist; a file's tests stay in one worker, which
# keeps each file's module fixtures built once). The package's bytecode is compiled first: an editable
# install compiles none, and where PYTHONDONTWRITEBYTECODE is set no process writes it, so each of
# the few hundred processes the suite starts (the CLI, the HLO printer, replays, host readers) would
# compile the package from source again (~0.35 s of CPU each).
test: $(STAMP) chromium
	$(BIN)/python -m compileall -q -j 0 hlo_doctor rules
	$(BIN)/python -m pytest -q -n auto --dist loadfile

# Every command output shown in README.md and docs/*.md, run and rewritten (benchmarks/generate_docs.py;
# tests/cli/test_docs_examples.py fails when a block no longer matches). FAST=1 leaves the examples that
# take minutes (the whole engine profiled, verify, doctor) as they are.
docs: $(STAMP)
	$(BIN)/python benchmarks/generate_docs.py $(if $(FAST),--fast)

lint: $(STAMP)
	$(BIN)/ruff check hlo_doctor rules tests benchmarks
	$(BIN)/mypy

clean:
	rm -rf $(VENV) runs build *.egg-info

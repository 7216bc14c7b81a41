# catcap developer commands. Every target sets up what it needs by itself.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
STAMP   = $(VENV)/.catcap-installed
# test workers: one per CPU this process may use (affinity mask and cgroup quota: catcap/threads.py),
# one intra-op thread each (tests/conftest.py); `make test WORKERS=0` runs the suite in one process
WORKERS ?= $$($(PY) -c "from catcap.threads import available_cpus; print(available_cpus())")

.PHONY: help setup demo test test-slow evaluate-example bench clean clean-runs

help:  ## list the targets
	@grep -E '^[a-z-]+:.*## ' Makefile | sed 's/:.*## /\t/'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first and exactly pinned: this machine's local CPU wheel, never CUDA downloads
	$(PY) -m pip install --quiet "torch==2.13.0"
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

setup: $(STAMP)  ## create .venv and install catcap with its test extras

demo: $(STAMP)  ## the main job: make a world, train the tiny Transformer, evaluate (~3.5 min on 2 cores)
	$(VENV)/bin/catcap demo

test: $(STAMP)  ## run the whole test suite (the README's test command), one worker per CPU
	$(PY) -m pytest -q -n $(WORKERS)

test-slow: $(STAMP)  ## the reliability suite with every fault-injection run (~4 min; docs/reliability.md)
	CATCAP_ALL_FAULTS=1 $(PY) -m pytest -q tests/reliability

evaluate-example: $(STAMP)  ## score the bundled example results with `catcap evaluate`
	$(VENV)/bin/catcap evaluate --example

bench: $(STAMP)  ## run the metric benchmarks and print their tables
	$(PY) benchmarks/metrics_speed.py

clean:  ## remove the virtual environment and caches (keeps runs/, your trained models)
	rm -rf $(VENV) .pytest_cache build src/*.egg-info

clean-runs:  ## DELETE runs/: every trained model, checkpoint and log (asks first)
	@if [ -d runs ]; then \
	  printf 'delete runs/ and every trained model in it? [y/N] '; read answer; \
	  if [ "$$answer" = y ] || [ "$$answer" = yes ]; then rm -rf runs && echo "deleted runs/"; else echo "kept runs/"; fi; \
	else echo "no runs/ folder"; fi

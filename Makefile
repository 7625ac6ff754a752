# Two commands for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
QUICKSTART := --gin_file=gin/quickstart.gin

.PHONY: venv test demo bench clean

venv: $(STAMP)

$(STAMP): setup.py
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q -n 2 tests

# Trains the tiny model on the quickstart mixture, evaluates it offline, prints where the report is.
# Rerunning resumes: a finished run and evaluation are not repeated (rm -rf runs/quickstart to redo).
demo: $(STAMP)
	$(PY) -m scripts.train --gin_file=gin/runs/finetune.gin $(QUICKSTART)
	$(PY) -m scripts.evaluate --gin_file=gin/runs/eval.gin $(QUICKSTART)

# Side-by-side speed (scripts/benchmark.py): scoring, training and generation on the small config.
BENCH_ARGS ?= --model=small --json=runs/bench.jsonl
bench: $(STAMP)
	mkdir -p runs
	$(PY) -m scripts.benchmark $(BENCH_ARGS)

clean:
	rm -rf $(VENV) build *.egg-info

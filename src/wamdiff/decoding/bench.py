"""Side-by-side AR vs block-diffusion decoding speed, in one process, on one model (`wamdiff bench`).

Honesty rules (DESIGN §2.2): same model object, dtype, cache class, compile setting and prompts for both
decoders; a warm-up run before every timed configuration; only generated tokens (up to EOS) are counted;
forwards per sample include the prefill and commits; the thread count is recorded. Absolute tok/s drifts
between sessions on a shared CPU, the paired ratio much less: each diffusion run is timed right after its
own AR run (interleaved), and the ratio is taken within the pair.

Also measured (`step_cost`): the cost of one block forward of B tokens over the cache relative to one AR
step, both inside their real decode loops (one token per forward, no EOS) — the denominator of the speedup:
speedup = TPF / step-cost ratio.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
import re
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from wamdiff.decoding.ar import decode_ar
from wamdiff.decoding.block import decode_block
from wamdiff.decoding.config import ATTENTIONS, DecodeConfig, Generation
from wamdiff.decoding.engine import PROMPT_BUCKET, generate, model_block_settings, token_id
from wamdiff.decoding.runner import StepRunner, collate_prompts
from wamdiff.models.tokens import PAD

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
JOURNAL = "bench.partial.jsonl"  # rows of an unfinished run, in the output folder


@dataclass
class BenchGrid:
    """The configurations timed. `max_steps_per_block`: step caps per block (a cap decides the masks left at
    the last step in parallel); `caches`: "exact" (every denoising step recomputes the block) and/or "delayed"
    (`DecodeConfig.delayed_cache`); `compile`: torch.compile off and/or on (each setting applies to AR and
    diffusion alike; the headline compares the best of each, so a setting that only helps one side counts)."""

    batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    block_sizes: list[int] = field(default_factory=lambda: [4, 8, 16, 32])
    thresholds: list[float] = field(default_factory=lambda: [0.7, 0.8, 0.9, 0.95])
    dtypes: list[str] = field(default_factory=lambda: ["fp32", "bf16"])
    max_new_tokens: int = 160
    max_steps_per_block: list[int] = field(default_factory=lambda: [32])
    repeats: int = 1
    compile: list[bool] = field(default_factory=lambda: [False])
    step_cost: bool = True
    step_cost_tokens: int = 64
    step_cost_repeats: int = 3
    caches: list[str] = field(default_factory=lambda: ["exact", "delayed"])
    device: str = "cpu"
    attention: str = "sdpa"  # DecodeConfig.attention, for AR and diffusion alike

    def __post_init__(self) -> None:
        if isinstance(self.compile, bool):
            self.compile = [self.compile]
        if isinstance(self.max_steps_per_block, int):
            self.max_steps_per_block = [self.max_steps_per_block]
        bad = [c for c in self.caches if c not in ("exact", "delayed")]
        if bad:
            raise ValueError(f"BenchGrid.caches: unknown {bad} (use exact and/or delayed)")
        bad = [d for d in self.dtypes if d not in DTYPES]
        if bad:
            raise ValueError(f"BenchGrid.dtypes: unknown {bad} (use {sorted(DTYPES)})")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"BenchGrid.attention: unknown {self.attention!r} (use one of {ATTENTIONS})")
        if torch.device(self.device).type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"BenchGrid.device {self.device!r}: no CUDA device is visible on this machine")


# ------------------------------------------------------------------------------------------------ prompts
def load_wamdiff2_json(path: Path, tokenizer, *, vision: bool, limit: int | None = None, image_processor=None):
    """Prompts (and expert answers) from a WAM-Diff2 LLaVA-style JSON: a list of records with `conversations`
    ([{from: human, value}, {from: gpt, value}, ...]) and `image` (a path or a list of paths, relative to the
    file's folder). Returns (prompts, expert answer texts or None)."""
    from PIL import Image

    from wamdiff.models import encode_prompt

    path = Path(path)
    try:
        records = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot read WAM-Diff2 JSON ({err})") from err
    if not isinstance(records, list):
        raise ValueError(f"{path}: expected a JSON list of samples, got {type(records).__name__}")
    prompts, answers = [], []
    for i, rec in enumerate(records[:limit] if limit else records):
        conv = rec.get("conversations") if isinstance(rec, dict) else None
        if not conv or conv[0].get("from") != "human":
            raise ValueError(f"{path}: sample {i}: field 'conversations' must start with a 'human' turn")
        imgs = rec.get("image") or rec.get("images") or []
        imgs = [imgs] if isinstance(imgs, str) else list(imgs)
        pil = []
        for p in imgs:
            full = (path.parent / p) if not Path(p).is_absolute() else Path(p)
            try:
                pil.append(Image.open(full).convert("RGB"))
            except OSError as err:
                raise ValueError(f"{path}: sample {i}: field 'image': cannot open {full} ({err})") from err
        prompts.append(encode_prompt(tokenizer, conv[0]["value"], pil if vision else [], vision=vision, image_processor=image_processor))
        gpt = [t["value"] for t in conv[1:] if t.get("from") == "gpt"]
        answers.append(gpt[0] if gpt else None)
    return prompts, (answers if any(a is not None for a in answers) else None)


def synthetic_prompts(tokenizer, n: int, *, vision: bool, seed: int = 0, image_processor=None):
    """Driving-style prompts with random 64x64 images (vision) encoded with the model's image processor."""
    import numpy as np

    from wamdiff.models import encode_prompt

    rng = np.random.default_rng(seed)
    cmds = ["left", "straight", "right", "unknown"]
    out = []
    for i in range(n):
        v, a = rng.normal(8, 3, 2), rng.normal(0, 1, 2)
        text = (
            ("Here is a front-view images from a driving vehicle: <image>\n" if vision else "")
            + f"The navigation information is: {cmds[i % 4]}\nThe current position is (0.00,0.00)\n"
            f"The current velocity is: ({v[0]:.2f},{v[1]:.2f}) and current accelerate is: ({a[0]:.2f},{a[1]:.2f})\n"
            "Instruction: predict the optimal driving action for the next 4 seconds with 8 new waypoints."
        )
        imgs = [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)] if vision else []
        out.append(encode_prompt(tokenizer, text, imgs, vision=vision, image_processor=image_processor))
    return out


# ------------------------------------------------------------------------------------------------ quality
def _parse_xy(text: str, fmt: str | None):
    try:
        from wamdiff.driving.trajectory import parse_trajectory  # noqa: PLC0415  (world area; may be absent)

        if fmt:
            p = parse_trajectory(text, fmt)
            return torch.as_tensor(p.xy, dtype=torch.float32)[:, :2] if p.ok else None
    except ImportError:
        pass
    nums = [float(x) for x in re.findall(r"[-+]?\d+(?:\.\d+)?", text)]
    return torch.tensor(nums[:16]).view(8, 2) if len(nums) >= 16 else None


def quality(gens: list[Generation], ref: list[Generation], expert: list[str] | None, fmt: str | None) -> dict:
    """Exact-match rate vs the AR output, and mean per-waypoint L2 vs AR / expert where answers parse."""
    q = {"exact_match_vs_ar": sum(g.token_ids == r.token_ids for g, r in zip(gens, ref)) / max(1, len(gens))}
    l2_ar, l2_ex, fails = [], [], 0
    for i, (g, r) in enumerate(zip(gens, ref)):
        xy = _parse_xy(g.text, fmt)
        if xy is None:
            fails += 1
            continue
        rxy = _parse_xy(r.text, fmt)
        if rxy is not None:
            l2_ar.append(float((xy - rxy).norm(dim=-1).mean()))
        if expert is not None and expert[i] is not None:
            exy = _parse_xy(expert[i], fmt)
            if exy is not None:
                l2_ex.append(float((xy - exy).norm(dim=-1).mean()))
    q["parse_failures"] = fails
    q["l2_vs_ar"] = statistics.fmean(l2_ar) if l2_ar else None
    q["l2_vs_expert"] = statistics.fmean(l2_ex) if l2_ex else None
    return q


# ------------------------------------------------------------------------------------------------ timing
def timed_generate(model, tokenizer, prompts, cfg: DecodeConfig, repeats: int, warmup: bool = True):
    if warmup:
        generate(model, tokenizer, prompts, cfg)  # warm-up (allocations, compile, caches)
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        gens = generate(model, tokenizer, prompts, cfg)
        walls.append(time.perf_counter() - t0)
    return gens, statistics.median(walls)


def summarize(gens: list[Generation], wall: float) -> dict:
    toks = sum(len(g.token_ids) for g in gens)
    fw = statistics.fmean(g.forwards for g in gens)
    return {
        "tok_s": toks / wall, "ms_per_token": 1e3 * wall / max(1, toks), "wall_s": wall, "tokens": toks,
        "forwards_per_sample": fw, "tokens_per_sample": toks / len(gens), "tpf": (toks / len(gens)) / max(fw, 1e-9),
        "finished": sum(g.finished for g in gens),
    }


@torch.inference_mode()
def step_cost(model, tokenizer, prompt, block_sizes, *, n_tokens: int = 64, repeats: int = 3, batch: int = 1,
              compile: bool = False, attention: str = "sdpa") -> dict:
    """ms per forward inside the real decode loops: AR (1 token/forward) vs block-B with 1 token per forward
    (fixed strategy, B steps per block, EOS disabled). Pairs are interleaved; the minimum over repeats is kept."""
    pad = token_id(tokenizer, PAD)
    mask_id = model_block_settings(model, tokenizer)[1]
    batch_p = collate_prompts([prompt] * batch, pad, next(model.parameters()).device,
                              pad_to_multiple=PROMPT_BUCKET if compile else 1)
    kw = dict(compile=compile, cuda_graphs=attention == "sdpa", attention=attention)  # as `generate` builds it

    def per_forward(t0, forwards) -> float:
        n = int(forwards[0])  # reading the count waits for the device
        return (time.perf_counter() - t0) / n

    def ar():
        r = StepRunner(model, batch_p, 1, n_tokens + 1, **kw)
        t0 = time.perf_counter()
        return per_forward(t0, decode_ar(r, max_new_tokens=n_tokens, eos_id=-1, pad_id=pad)[2])

    def blk(b):
        r = StepRunner(model, batch_p, b, n_tokens, **kw)
        t0 = time.perf_counter()
        out = decode_block(r, max_new_tokens=n_tokens, mask_id=mask_id, eos_id=-1, pad_id=pad, strategy="fixed",
                           max_steps=b, fused_commit=True)
        return per_forward(t0, out[2])

    ar(), [blk(b) for b in block_sizes]  # warm-up
    res = {"ar_ms": math.inf, **{f"B{b}_ms": math.inf for b in block_sizes}}
    for _ in range(repeats):
        res["ar_ms"] = min(res["ar_ms"], 1e3 * ar())
        for b in block_sizes:
            res[f"B{b}_ms"] = min(res[f"B{b}_ms"], 1e3 * blk(b))
    for b in block_sizes:
        res[f"B{b}_ratio"] = res[f"B{b}_ms"] / res["ar_ms"]
    return res


def run_bench(model, tokenizer, prompts, grid: BenchGrid, *, expert=None, fmt=None, progress=None,
              ar_model=None, ar_tokenizer=None, journal: Path | None = None) -> dict:
    """The whole grid. Returns a JSON-able dict with `rows` (one per configuration) and `step_cost`.

    `ar_model`: the AR baseline's own checkpoint (same class and tokenizer); default: `model` decoded AR.
    `journal`: a JSON-lines file each finished row is appended to; a run with the same grid, models and
    prompts reuses the rows found there (an interrupted benchmark resumes where it stopped).
    The caller's models are never modified (each dtype runs on a cast copy)."""
    rows, costs = [], []
    log = Journal(journal, _fingerprint(grid, prompts, model, ar_model)) if journal else None
    if log and log.rows and progress:
        progress(f"resuming: {len(log.rows)} rows and {len(log.costs)} step costs from {journal}")
    base = copy.deepcopy(model).float()
    ar_base = copy.deepcopy(ar_model).float() if ar_model is not None else None
    ar_tok = ar_tokenizer or tokenizer
    # every batch size decodes the same prompts (at least one full batch): batch n runs them in chunks of n
    n_prompts = max(len(prompts), *grid.batch_sizes)
    pool = [prompts[i % len(prompts)] for i in range(n_prompts)]
    expert_pool = [expert[i % len(expert)] for i in range(n_prompts)] if expert else None

    def timed_chunks(model_, tok_, cfg, n, warmup=True):
        # compiled steps: every chunk may have a new prompt width (a new graph), so each chunk warms up
        gens, wall = [], 0.0
        for i in range(0, len(pool) - len(pool) % n, n):
            g, w = timed_generate(model_, tok_, pool[i:i + n], cfg, grid.repeats,
                                  warmup=warmup and (i == 0 or cfg.compile))
            gens, wall = gens + g, wall + w
        return gens, wall

    for comp in grid.compile:
        for dname in grid.dtypes:
            keys = {n: [(comp, dname, n, *k) for k in itertools.product(grid.block_sizes, grid.thresholds,
                                                                       grid.max_steps_per_block, grid.caches)]
                    for n in grid.batch_sizes}
            if log and all(k in log.rows for ks in keys.values() for k in ks) and (
                    not grid.step_cost or (comp, dname) in log.costs):
                costs += [log.costs[(comp, dname)]] if grid.step_cost else []
                rows += [log.rows[k] for ks in keys.values() for k in ks]
                continue
            # fresh copies per (compile, dtype): a compiled step freezes the weights of the model it first saw
            m = copy.deepcopy(base).to(grid.device, DTYPES[dname]).eval()
            ar_m = copy.deepcopy(ar_base).to(grid.device, DTYPES[dname]).eval() if ar_base is not None else m
            if grid.step_cost:
                cost = log.costs.get((comp, dname)) if log else None
                if cost is None:
                    cost = {"dtype": dname, "compile": comp, "threads": torch.get_num_threads(),
                            **step_cost(m, tokenizer, pool[0], grid.block_sizes, compile=comp, attention=grid.attention,
                                        n_tokens=grid.step_cost_tokens, repeats=grid.step_cost_repeats)}
                    if log:
                        log.add("cost", cost)
                costs.append(cost)
                if progress:
                    progress(f"step cost {dname}{' compiled' if comp else ''}: "
                             + ", ".join(f"B{b} {cost[f'B{b}_ratio']:.2f}x" for b in grid.block_sizes))
            for n in grid.batch_sizes:
                used = len(pool) - len(pool) % n
                ar_cfg = DecodeConfig(mode="ar", max_new_tokens=grid.max_new_tokens, compile=comp, attention=grid.attention)
                if not log or any(k not in log.rows for k in keys[n]):
                    timed_chunks(ar_m, ar_tok, ar_cfg, n, warmup=True)  # AR warm-up (every prompt width)
                for key in keys[n]:
                    b, tau, steps, cache = key[3:]
                    if log and key in log.rows:
                        rows.append(log.rows[key])
                        continue
                    # AR is re-timed next to every diffusion run: the ratio is taken within the pair
                    ar_g, ar_wall = timed_chunks(ar_m, ar_tok, ar_cfg, n, warmup=False)
                    ar = summarize(ar_g, ar_wall)
                    cfg = DecodeConfig(mode="block", block_size=b, threshold=tau, compile=comp, max_steps_per_block=steps,
                                       max_new_tokens=grid.max_new_tokens, delayed_cache=cache == "delayed",
                                       attention=grid.attention)
                    g, wall = timed_chunks(m, tokenizer, cfg, n)
                    d = summarize(g, wall)
                    exp = expert_pool[:used] if expert_pool else None
                    row = {"dtype": dname, "compile": comp, "batch": n, "block_size": b, "threshold": tau,
                           "max_steps": steps, "cache": cache, "ar": ar, "diffusion": d,
                           "speedup": d["tok_s"] / ar["tok_s"], "prompts": used, "quality": quality(g, ar_g, exp, fmt),
                           "ar_quality": quality(ar_g, ar_g, exp, fmt)}
                    rows.append(row)
                    if log:
                        log.add("row", row)
                    if progress:
                        progress(row)
    device = torch.cuda.get_device_name(grid.device) if grid.device.startswith("cuda") else "cpu"
    return {"threads": torch.get_num_threads(), "torch": torch.__version__, "device": device, "grid": asdict(grid), "rows": rows,
            "step_cost": costs, "n_params": sum(p.numel() for p in model.parameters()),
            "ar_baseline": "separate AR checkpoint" if ar_model is not None else "same model, AR decoding",
            "best": best_vs_best(rows)}


QUALITY_TOLERANCE = 0.10  # "at AR quality": mean waypoint L2 to the expert within 10 % of AR's on the same prompts


class Journal:
    """Finished rows and step costs of one benchmark, appended as JSON lines after a fingerprint line. A file
    with another fingerprint (other grid, models or prompts) is set aside as `<name>.stale` and started anew."""

    def __init__(self, path: Path, fingerprint: str):
        self.path, self.rows, self.costs = Path(path), {}, {}
        entries = []
        for line in self.path.read_text().splitlines() if self.path.exists() else []:
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by the interruption: keep what parsed before it
                break
        if entries and entries[0].get("fingerprint") == fingerprint:
            for e in entries[1:]:
                if e.get("kind") == "row":
                    r = e["data"]
                    self.rows[(r["compile"], r["dtype"], r["batch"], r["block_size"], r["threshold"], r["max_steps"],
                               r["cache"])] = r
                elif e.get("kind") == "cost":
                    self.costs[(e["data"]["compile"], e["data"]["dtype"])] = e["data"]
            self._rewrite(fingerprint, entries[1:])  # drops a torn last line
        else:
            if self.path.exists():
                self.path.replace(self.path.with_suffix(".stale"))
            self._rewrite(fingerprint, [])

    def _rewrite(self, fingerprint: str, entries: list) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(e) + "\n" for e in [{"fingerprint": fingerprint}, *entries]))
        tmp.replace(self.path)

    def add(self, kind: str, data: dict) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps({"kind": kind, "data": data}) + "\n")


def _fingerprint(grid: BenchGrid, prompts, model, ar_model) -> str:
    """Identity of a benchmark: the grid, the prompts' tokens and both models' weights (sums, float64)."""
    import hashlib

    def weights(m):
        return None if m is None else [round(float(p.detach().double().sum()), 6)
                                       for p in itertools.islice(m.parameters(), 64)]

    ident = {"grid": asdict(grid), "prompts": [p.input_ids.reshape(-1).tolist() for p in prompts],
             "model": weights(model), "ar_model": weights(ar_model), "threads": torch.get_num_threads()}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]


def best_vs_best(rows: list[dict], tolerance: float = QUALITY_TOLERANCE) -> list[dict]:
    """Per batch size: the fastest AR setting (any dtype, compile setting) against the fastest diffusion setting
    (any dtype, compile setting, B, tau, step cap, cache) -- the headline figure, so a setting that only slows
    AR down cannot flatter the ratio. When L2 to the expert is known, `at_quality` repeats the comparison over
    the diffusion settings whose L2 stays within `tolerance` of AR's (None when no setting does)."""
    out = []
    for n in sorted({r["batch"] for r in rows}):
        sel = [r for r in rows if r["batch"] == n]
        ar = max(sel, key=lambda r: r["ar"]["tok_s"])
        entry = _versus(ar, max(sel, key=lambda r: r["diffusion"]["tok_s"]))
        good = [r for r in sel if r["quality"]["l2_vs_expert"] is not None and r["ar_quality"]["l2_vs_expert"] is not None
                and r["quality"]["l2_vs_expert"] <= (1 + tolerance) * r["ar_quality"]["l2_vs_expert"]]
        entry["at_quality"] = _versus(ar, max(good, key=lambda r: r["diffusion"]["tok_s"])) if good else None
        entry["quality_tolerance"] = tolerance
        out.append(entry)
    return out


def _versus(ar: dict, d: dict) -> dict:
    return {"batch": d["batch"], "ar_dtype": ar["dtype"], "ar_compile": ar.get("compile", False), "ar_tok_s": ar["ar"]["tok_s"],
            "diffusion_dtype": d["dtype"], "diffusion_compile": d.get("compile", False), "cache": d.get("cache", "exact"),
            "block_size": d["block_size"], "threshold": d["threshold"], "max_steps": d.get("max_steps"),
            "diffusion_tok_s": d["diffusion"]["tok_s"], "tpf": d["diffusion"]["tpf"],
            "ratio": d["diffusion"]["tok_s"] / ar["ar"]["tok_s"],
            "l2_vs_expert": d["quality"]["l2_vs_expert"], "ar_l2_vs_expert": d["ar_quality"]["l2_vs_expert"]}


def guess_format(answer: str | None) -> str | None:
    """Trajectory format of an expert answer text (for L2 parsing)."""
    if not answer:
        return None
    if "<|bin_" in answer:
        return "bins"
    if re.match(r"^[+-]\d{3}\.\d{2},", answer):
        return "fixed2"
    if re.match(r"^[+-]\d{3}\.\d,", answer):
        return "fixed1"
    return "text2"


def paired_bench(*, ar_checkpoint, diffusion_checkpoint, data=None, out, settings: dict | None = None) -> dict:
    """Pipeline entry: the AR checkpoint (AR decoding) vs the diffusion checkpoint (block decoding) on the same
    prompts (from a WAM-Diff2 JSON, else synthetic). Writes bench.json / bench.png / bench.md under `out`;
    returns the result with `plot` (PNG path) and `markdown` (tables) added."""
    from wamdiff.models import image_processor_for, is_vision_model, load_model

    st = dict(settings or {})
    if st.get("threads"):
        torch.set_num_threads(int(st["threads"]))
    model, tok = load_model(diffusion_checkpoint)
    ar_model, ar_tok = load_model(ar_checkpoint)
    vision = is_vision_model(model)
    n = int(st.get("prompts", 8))
    expert = None
    if data is not None and Path(data).exists():
        prompts, expert = load_wamdiff2_json(Path(data), tok, vision=vision, limit=n, image_processor=image_processor_for(model))
    else:
        prompts = synthetic_prompts(tok, n, vision=vision, image_processor=image_processor_for(model))
    grid = BenchGrid(
        batch_sizes=list(st.get("batch_sizes", [1, 8])), block_sizes=list(st.get("block_sizes", [4, 8, 16, 32])),
        thresholds=list(st.get("thresholds", [0.7, 0.8, 0.9, 0.95])), dtypes=list(st.get("dtypes", ["fp32", "bf16"])),
        max_new_tokens=int(st.get("max_new_tokens", 160)),
        max_steps_per_block=[int(x) for x in _as_list(st.get("max_steps_per_block", 32))],
        repeats=int(st.get("repeats", 1)), compile=[bool(c) for c in _as_list(st.get("compile", False))],
        step_cost=bool(st.get("step_cost", True)), caches=list(st.get("caches", ["exact", "delayed"])),
        device=str(st.get("device", "cpu")), attention=str(st.get("attention", "sdpa")),
    )
    fmt = st.get("format") or guess_format(expert[0] if expert else None)
    journal = Path(out) / JOURNAL
    result = run_bench(model, tok, prompts, grid, expert=expert, fmt=fmt, ar_model=ar_model, ar_tokenizer=ar_tok,
                       journal=journal)
    result.update(ar_checkpoint=str(ar_checkpoint), diffusion_checkpoint=str(diffusion_checkpoint), format=fmt)
    written = write_outputs(result, Path(out))
    journal.unlink(missing_ok=True)  # complete: the next run measures afresh
    return written


def _as_list(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def write_outputs(result: dict, out: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    write_plot(result, out / "bench.png")
    result["plot"] = str(out / "bench.png")
    result["markdown"] = markdown_tables(result)
    (out / "bench.md").write_text(result["markdown"])
    (out / "bench.json").write_text(json.dumps(result, indent=2))
    return result


def markdown_tables(result: dict) -> str:
    lines = [f"Threads: {result['threads']}; AR baseline: {result.get('ar_baseline')}; tok/s counts generated tokens only.",
             "", "| dtype | batch | B | tau | steps | cache | AR tok/s | diffusion tok/s | ratio | ms/tok AR | ms/tok diff "
             "| fwd/sample AR | fwd/sample diff | TPF | exact vs AR | L2 vs expert diff (AR) | parse fail diff (AR) |",
             "|" + "---|" * 17]
    for r in result["rows"]:
        a, d, q = r["ar"], r["diffusion"], r["quality"]
        qa = r.get("ar_quality") or {}
        l2 = "-" if q["l2_vs_expert"] is None else f"{q['l2_vs_expert']:.3f}"
        if qa.get("l2_vs_expert") is not None:
            l2 += f" ({qa['l2_vs_expert']:.3f})"
        fails = f"{q['parse_failures']}" + (f" ({qa['parse_failures']})" if qa else "")
        lines.append(f"| {_setting(r['dtype'], r.get('compile'))} | {r['batch']} | {r['block_size']} | {r['threshold']} | "
                     f"{r.get('max_steps', '-')} | {r.get('cache', 'exact')} | {a['tok_s']:.1f} | "
                     f"{d['tok_s']:.1f} | {r['speedup']:.2f}x | {a['ms_per_token']:.2f} | {d['ms_per_token']:.2f} | "
                     f"{a['forwards_per_sample']:.1f} | {d['forwards_per_sample']:.1f} | {d['tpf']:.2f} | "
                     f"{q['exact_match_vs_ar']:.2f} | {l2} | {fails} |")
    if result.get("best"):
        lines += ["", "Best AR (any dtype, compile setting) vs best diffusion (any dtype, compile setting, B, tau, cache):", ""]
        lines += [f"- {_best_line(b)}" for b in result["best"]]
        lines += [f"- at AR quality (L2 within {100 * b['quality_tolerance']:.0f} % of AR's): "
                  + (_best_line(b["at_quality"]) if b["at_quality"] else f"batch {b['batch']}: no setting")
                  for b in result["best"] if "at_quality" in b]
    if result.get("step_cost"):
        keys = [k for k in result["step_cost"][0] if k.endswith("_ratio")]
        lines += ["", "Cost of one forward in the decode loop relative to one AR step:", "",
                  "| dtype | threads | AR ms | " + " | ".join(k.replace("_ratio", "") for k in keys) + " |",
                  "|" + "---|" * (3 + len(keys))]
        for c in result["step_cost"]:
            lines.append(f"| {_setting(c['dtype'], c.get('compile'))} | {c['threads']} | {c['ar_ms']:.2f} | "
                         + " | ".join(f"{c[k]:.2f}x" for k in keys) + " |")
    return "\n".join(lines) + "\n"


def _setting(dtype: str, compiled) -> str:
    return f"{dtype}+compile" if compiled else dtype


def _best_line(b: dict) -> str:
    l2 = "" if b.get("l2_vs_expert") is None else f", L2 vs expert {b['l2_vs_expert']:.2f} m (AR {b['ar_l2_vs_expert']:.2f})"
    return (f"batch {b['batch']}: AR {b['ar_tok_s']:.1f} tok/s ({_setting(b['ar_dtype'], b.get('ar_compile'))}) vs "
            f"diffusion {b['diffusion_tok_s']:.1f} tok/s ({_setting(b['diffusion_dtype'], b.get('diffusion_compile'))}, "
            f"B{b['block_size']}, tau {b['threshold']}, <= {b.get('max_steps')} steps/block, {b.get('cache', 'exact')} cache, "
            f"TPF {b['tpf']:.2f}{l2}): "
            f"{b['ratio']:.2f}x")


# ------------------------------------------------------------------------------------------------ output
def write_plot(result: dict, path: Path) -> None:
    """One row of panels per batch size: speed vs B (at the tau nearest 0.9), TPF vs tau, speed vs quality."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    batches = sorted({r["batch"] for r in rows})
    fig, axes = plt.subplots(len(batches), 3, figsize=(17, 4.2 * len(batches)), squeeze=False)
    taus = sorted({r["threshold"] for r in rows})
    tau_b = min(taus, key=lambda t: abs(t - 0.9))
    has_l2 = any(r["quality"]["l2_vs_expert"] is not None for r in rows)

    def setting(r):  # dtype + compile, step cap, cache
        return f"{_setting(r['dtype'], r.get('compile'))} <={r.get('max_steps', '-')}st {r.get('cache', 'exact')}"

    for ax_row, n in zip(axes, batches):
        mine = [r for r in rows if r["batch"] == n]
        for name in sorted({setting(r) for r in mine}):
            sel = sorted((r for r in mine if setting(r) == name and r["threshold"] == tau_b), key=lambda r: r["block_size"])
            ax_row[0].plot([r["block_size"] for r in sel], [r["speedup"] for r in sel], marker="o", label=name)
        for b in sorted({r["block_size"] for r in mine}):
            for cap in sorted({r.get("max_steps", 0) for r in mine}):
                sel = [r for r in mine if r["block_size"] == b and r.get("max_steps", 0) == cap]
                xs = sorted({r["threshold"] for r in sel})  # TPF barely depends on dtype / cache: their mean
                ys = [statistics.fmean(r["diffusion"]["tpf"] for r in sel if r["threshold"] == t) for t in xs]
                ax_row[1].plot(xs, ys, marker="o", label=f"B{b} <={cap} steps")
        for cache, color in (("exact", "tab:blue"), ("delayed", "tab:orange")):
            for cap, marker in zip(sorted({r.get("max_steps", 0) for r in mine}), "o^sv"):
                sel = [r for r in mine if r.get("cache", "exact") == cache and r.get("max_steps", 0) == cap]
                if sel:
                    q = [r["quality"]["l2_vs_expert"] if has_l2 else 1 - r["quality"]["exact_match_vs_ar"] for r in sel]
                    ax_row[2].scatter(q, [r["speedup"] for r in sel], s=14, color=color, marker=marker,
                                      label=f"{cache} cache, <={cap} steps")
        if has_l2 and mine[0]["ar_quality"]["l2_vs_expert"] is not None:
            ax_row[2].axvline(mine[0]["ar_quality"]["l2_vs_expert"], color="k", lw=0.8, ls="--", label="AR")
        labels = [("block size B", "diffusion / AR tok/s", f"speed vs B (tau {tau_b}), batch {n}"),
                  ("threshold tau", "tokens per forward", f"TPF vs tau, batch {n}"),
                  ("L2 vs expert (m)" if has_l2 else "1 - exact match vs AR", "diffusion / AR tok/s",
                   f"speed vs quality, batch {n}")]
        for ax, (x, y, t) in zip(ax_row, labels):
            ax.set_xlabel(x), ax.set_ylabel(y), ax.set_title(t), ax.grid(alpha=0.3)
            ax.legend(fontsize=6, loc="best")
        ax_row[0].axhline(1.0, color="k", lw=0.6)
        ax_row[0].set_xscale("log", base=2)
    fig.suptitle(f"wamdiff bench ({result['threads']} threads)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def print_table(result: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title=f"AR vs block diffusion ({result['threads']} threads, {result['n_params'] / 1e6:.1f}M params)")
    for c in ["dtype", "batch", "B", "tau", "steps", "cache", "AR tok/s", "diff tok/s", "ratio", "ms/tok AR", "ms/tok diff",
              "fwd/sample AR", "fwd/sample diff", "TPF", "exact vs AR"]:
        t.add_column(c, justify="right")
    for r in result["rows"]:
        a, d = r["ar"], r["diffusion"]
        t.add_row(_setting(r["dtype"], r.get("compile")), str(r["batch"]), str(r["block_size"]), f"{r['threshold']:.2f}",
                  str(r.get("max_steps", "-")), r.get("cache", "exact"), f"{a['tok_s']:.1f}",
                  f"{d['tok_s']:.1f}", f"{r['speedup']:.2f}x", f"{a['ms_per_token']:.2f}", f"{d['ms_per_token']:.2f}",
                  f"{a['forwards_per_sample']:.1f}", f"{d['forwards_per_sample']:.1f}", f"{d['tpf']:.2f}",
                  f"{r['quality']['exact_match_vs_ar']:.2f}")
    console.print(t)
    for b in result.get("best", []):
        console.print(f"best vs best, {_best_line(b)}")
        if "at_quality" in b:
            console.print(f"  at AR quality (L2 within {100 * b['quality_tolerance']:.0f} % of AR's): "
                          + (_best_line(b["at_quality"]) if b["at_quality"] else "no setting"))
    if result["step_cost"]:
        s = Table(title="cost of one forward inside the decode loop, relative to one AR step (lower = better)")
        keys = [k for k in result["step_cost"][0] if k.endswith("_ratio")]
        for c in ["dtype", "threads", "AR ms", *[k.replace("_ratio", "") for k in keys]]:
            s.add_column(c, justify="right")
        for c in result["step_cost"]:
            s.add_row(_setting(c["dtype"], c.get("compile")), str(c["threads"]), f"{c['ar_ms']:.2f}", *[f"{c[k]:.2f}x" for k in keys])
        console.print(s)

"""The measured cost model of the decode loop on one machine: ms per forward vs query rows, per batch size.

What a decoding setting costs is a sum over the forwards it runs; each forward is a `Forward` shape (a prefill
with e extra rows, or a step of r query rows of which k get logits). Measured once per machine, device, thread
count, dtype, compile setting and model architecture (`machine_key`), inside the real runner (`StepRunner`, the
slot cache and masks the decoders use), and cached as JSON under `cache_dir()/step_costs/` (`WAMDIFF_CACHE`,
default ~/.cache/wamdiff):

- `step_ms[n][r]`: a contiguous step of r rows at batch n, every row with logits and the whole last layer;
- `head_row_ms[n]`, `tail_row_ms[n]`: what one row without logits saves (LM head), and without the last layer's
  MLP (lean "last_layer"), from the r_ref-row step with logits on one row;
- `gather_ms[n]`: the extra cost of a per-sample slot-gathered step (lean and delayed-cache steps);
- `prefill_ms[n][e]`: the prompt prefill (vision tower included) fused with e block rows (e = 0: AR's prefill);
- `setup_ms[n]`, `ar_loop_ms[n]`, `block_loop_ms[n]`: per call (collate + runner tables) and per forward outside
  the forward (selection, bookkeeping), from timed real decode loops minus their forwards.

Nothing here depends on the answer format: the format enters through the forwards a setting runs (the dial's
measured TPF curve). Between measured batch sizes and row counts the costs are interpolated linearly.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from wamdiff.decoding.ar import decode_ar
from wamdiff.decoding.block import decode_block
from wamdiff.decoding.config import DecodeConfig
from wamdiff.decoding.runner import PROMPT_BUCKET, StepRunner, collate_prompts, text_config
from wamdiff.jsonfile import write_json
from wamdiff.models.precision import precision_name

COST_VERSION = 1  # part of the cache key: a change in what is measured invalidates old files
ROWS = (1, 2, 4, 8, 16, 32, 64)  # query rows measured: AR 1, delayed-cache tails, blocks, fused commits of B32
BATCHES = (1, 8, 32)


def cache_dir() -> Path:
    """Where measured cost models and tuned dial curves are kept (`WAMDIFF_CACHE`, default ~/.cache/wamdiff)."""
    return Path(os.environ.get("WAMDIFF_CACHE") or Path.home() / ".cache" / "wamdiff").expanduser()


@dataclass(frozen=True)
class Forward:
    """One forward of a decode loop. kind "prefill": the prompt plus `rows` block rows (0 for AR's prefill) of which
    `logits` rows get logits; kind "step": `rows` query rows after the cache, `logits` of them with logits,
    `gathered` = per-sample slots (lean / delayed-cache steps). `mlp` = rows through the last layer's MLP (None:
    every row)."""

    kind: str
    rows: int
    logits: int
    mlp: int | None = None
    gathered: bool = False


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def arch_signature(model) -> dict:
    """The architecture figures a forward's cost depends on (not the weights)."""
    t = text_config(model)
    sig = {k: getattr(t, k, None) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads",
                                            "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size")}
    vision = getattr(model.config, "vision_config", None)
    if vision is not None:
        sig["vision"] = {k: getattr(vision, k, None) for k in ("depth", "hidden_size", "intermediate_size", "patch_size")}
    return sig


def machine_key(model, config: DecodeConfig) -> dict:
    """What a cost model is valid for: this machine and device, threads, torch, dtype, step settings, architecture."""
    p = next(model.parameters())
    dev = p.device
    return {"version": COST_VERSION, "host": platform.node(), "cpu": _cpu_name(),
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "threads": torch.get_num_threads(), "torch": torch.__version__, "dtype": precision_name(model),
            "compile": bool(config.compile), "static_shapes": config.static_shapes(dev), "attention": config.attention,
            "prefill_cache": bool(config.prefill_cache), "shared_prefix": bool(config.shared_prefix),
            "arch": arch_signature(model)}


def _key_file(key: dict) -> Path:
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_dir() / "step_costs" / f"{digest}.json"


def _interp(xs: list, ys: list, x: float) -> float:
    """Piecewise-linear through (xs, ys), extended linearly beyond both ends."""
    if len(xs) == 1:
        return ys[0]
    i = 1
    while i < len(xs) - 1 and x > xs[i]:
        i += 1
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    return y0 + (y1 - y0) * (x - x0) / (x1 - x0)


def non_decreasing(ys: list[float]) -> list[float]:
    """The closest non-decreasing sequence to `ys` in least squares (isotonic regression): a forward with more rows
    never costs less, so a measured dip is noise (on this shared VM a B32 prefill at batch 8 once timed below the
    B17 one, and the dial picked B32: 29.3 ms per plan measured against B17's 20.2)."""
    from scipy.optimize import isotonic_regression  # noqa: PLC0415  (scipy is slow to import; only pricing needs it)

    return [float(y) for y in isotonic_regression(ys).x]


@dataclass
class StepCosts:
    key: dict
    prompt_len: int
    batches: list[int]
    rows: list[int]
    step_ms: list[list[float]]  # [batch][rows]
    head_row_ms: list[float]
    tail_row_ms: list[float]
    gather_ms: list[float]
    prefill_ms: list[dict]  # [batch] {str(extra rows): ms}
    setup_ms: list[float]
    ar_loop_ms: list[float]
    block_loop_ms: list[float]
    measured_at: str = ""
    notes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        # priced from the measurements made non-decreasing in rows (`non_decreasing`); the fields keep the raw ones
        self._prefill_rows = sorted(int(k) for k in self.prefill_ms[0])
        self._step_fit = [non_decreasing(s) for s in self.step_ms]
        self._prefill_fit = [non_decreasing([p[str(k)] for k in self._prefill_rows]) for p in self.prefill_ms]

    # -------------------------------------------------------------------------------------------- pricing
    def _at(self, values: list[float], n: int) -> float:
        return max(0.0, _interp(self.batches, values, n))

    def step(self, n: int, rows: int) -> float:
        """ms of a contiguous step of `rows` rows at batch n, every row with logits and the whole last layer."""
        return self._at([_interp(self.rows, s, rows) for s in self._step_fit], n)

    def prefill(self, n: int, extra: int) -> float:
        """ms of the prompt prefill fused with `extra` block rows at batch n (between measured block sizes: linear)."""
        return self._at([_interp(self._prefill_rows, p, extra) for p in self._prefill_fit], n)

    def forward(self, n: int, f: Forward) -> float:
        """ms of one forward of shape `f` at batch n (its loop overhead included)."""
        tail = self._at(self.tail_row_ms, n)
        if f.kind == "prefill":
            total = self.prompt_len + f.rows
            mlp = total if f.mlp is None else f.mlp
            return self.prefill(n, f.rows) - (total - mlp) * tail  # measured with every row through the MLP
        mlp = f.rows if f.mlp is None else f.mlp
        ms = (self.step(n, f.rows) - (f.rows - f.logits) * self._at(self.head_row_ms, n) - (f.rows - mlp) * tail
              + (self._at(self.gather_ms, n) if f.gathered else 0.0))
        return max(ms, 0.0)

    def loop(self, n: int, mode: str) -> float:
        return self._at(self.ar_loop_ms if mode == "ar" else self.block_loop_ms, n)

    def call(self, n: int, forwards: list[Forward], mode: str) -> float:
        """ms of one `generate` call at batch n that runs `forwards` (setup and per-forward loop work included)."""
        return self._at(self.setup_ms, n) + sum(self.forward(n, f) + self.loop(n, mode) for f in forwards)

    # ------------------------------------------------------------------------------------------- storage
    def save(self, path: Path | None = None) -> Path:
        path = path or _key_file(self.key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, asdict(self))
        return path

    @classmethod
    def from_dict(cls, d: dict) -> "StepCosts":
        return cls(**d)


def load_step_costs(key: dict) -> StepCosts | None:
    """The cached cost model for `key`, or None (never measured here, or unreadable)."""
    path = _key_file(key)
    try:
        got = StepCosts.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None
    return got if got.key == key else None


# ------------------------------------------------------------------------------------------------ measuring
def _best_ms(fn, repeats: int) -> float:
    """ms of `fn()`: warm-up, then the minimum over `repeats` (the least disturbed run on a shared machine)."""
    fn()
    best = float("inf")
    for _ in range(repeats):
        if torch.cuda.is_available():  # the warm-up's (or last repeat's) queued kernels are not this repeat's
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 1e3 * best


@torch.inference_mode()
def measure_step_costs(model, prompt, config: DecodeConfig, *, pad_id: int, block_sizes=(32,), batches=BATCHES,
                       rows=ROWS, ref_rows: int = 32, repeats: int = 5, progress=None) -> StepCosts:
    """Measure the cost model of `model` as `config` runs it (the model's dtype and device, compile, attention,
    prefill cache) with `prompt` (an `EncodedPrompt`, standing for every prompt) repeated to each batch size."""
    dev = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    static = config.static_shapes(dev)
    rows = list(rows)
    ref = ref_rows if ref_rows in rows else rows[-1]
    blocks = sorted(set(block_sizes) | {ref})
    kw = dict(compile=config.compile, cuda_graphs=config.cuda_graphs and config.attention == "sdpa",
              attention=config.attention, prefill_cache=config.prefill_cache, shared_prefix=config.shared_prefix)
    per_batch = []
    for n in batches:
        def collate():
            b = collate_prompts([prompt] * n, pad_id, dev, pad_to_multiple=PROMPT_BUCKET if static else 1)
            if b.pixel_values is not None:
                b.pixel_values = b.pixel_values.to(dtype)
            return b

        batch = collate()

        def runner(lean: str, block: int, capacity: int, prefill: bool = True) -> StepRunner:
            r = StepRunner(model, batch, block, capacity, lean=lean, **kw)
            if prefill:
                r.prefill(None, keep=1)
            return r

        cap = max(max(rows), 2 * max(blocks))
        off, tail = runner("off", cap, cap), runner("last_layer", cap, cap)

        def ids(r: int) -> torch.Tensor:
            return torch.full((n, r), pad_id, dtype=torch.long, device=dev)

        steps = [_best_ms(lambda r=r: off.forward(ids(r), off.P, keep=r), repeats) for r in rows]
        full = steps[rows.index(ref)]
        one = _best_ms(lambda: off.forward(ids(ref), off.P, keep=1), repeats)
        one_tail = _best_ms(lambda: tail.forward(ids(ref), tail.P, keep=1), repeats)
        slots = (off.P + torch.arange(ref, device=dev)).expand(n, ref)
        gathered = _best_ms(lambda: off.forward_slots(ids(ref), slots, keep=ref), repeats)
        pre = {"0": _best_ms(lambda: off.prefill(None, keep=1), repeats)}
        for b in blocks:
            pre[str(b)] = _best_ms(lambda b=b: off.prefill(ids(b), keep=b), repeats)
        setup = _best_ms(lambda: StepRunner(model, collate(), ref, 2 * ref, lean="off", **kw), repeats)
        one_batch = StepCosts({}, batch.ids.shape[1], [n], rows, [steps], [max(0.0, (full - one) / (ref - 1))],
                              [max(0.0, (one - one_tail) / (ref - 1))], [max(0.0, gathered - full)], [pre],
                              [setup], [0.0], [0.0])

        # per-forward work outside the forward: timed real loops minus the setup and what their forwards cost
        tokens = 32
        ar_ms = _best_ms(lambda: decode_ar(runner("off", 1, tokens + 1, prefill=False), max_new_tokens=tokens,
                                           eos_id=-1, pad_id=pad_id), repeats)
        ar_fw = [Forward("prefill", 0, 1)] + [Forward("step", 1, 1)] * (tokens - 1)
        fixed = DecodeConfig(block_size=ref, max_new_tokens=2 * ref, threshold=1.0, max_steps=4, strategy="fixed",
                             fused_commit=True)
        blk_ms = _best_ms(lambda: decode_block(runner("off", ref, 2 * ref, prefill=False), fixed, mask_id=pad_id,
                                               eos_id=-1, pad_id=pad_id), repeats)
        blk_fw = ([Forward("prefill", ref, ref)] + [Forward("step", ref, ref)] * 3 + [Forward("step", 2 * ref, ref)]
                  + [Forward("step", ref, ref)] * 3)  # fixed strategy, 4 steps per block, 2 blocks, fused commit
        one_batch.ar_loop_ms = [max(0.0, (ar_ms - one_batch.call(n, ar_fw, "ar")) / len(ar_fw))]
        one_batch.block_loop_ms = [max(0.0, (blk_ms - one_batch.call(n, blk_fw, "block")) / len(blk_fw))]
        per_batch.append(one_batch)
        if progress:
            progress(f"step costs at batch {n}: AR step {steps[0]:.2f} ms, {ref}-row step {full:.2f} ms, "
                     f"prefill {pre['0']:.1f} ms")
    merged = {k: [getattr(c, k)[0] for c in per_batch] for k in (
        "step_ms", "head_row_ms", "tail_row_ms", "gather_ms", "prefill_ms", "setup_ms", "ar_loop_ms", "block_loop_ms")}
    return StepCosts(machine_key(model, config), per_batch[0].prompt_len, list(batches), rows,
                     measured_at=time.strftime("%Y-%m-%d %H:%M"),
                     notes={"ref_rows": ref, "repeats": repeats, "prompt_tokens": int(prompt.input_ids.numel())}, **merged)


def step_costs_for(model, prompt, config: DecodeConfig, *, pad_id: int, block_sizes=(32,), remeasure: bool = False,
                   progress=None, **measure_kw) -> StepCosts:
    """The cached cost model of this machine for `model` as `config` runs it; measured (and cached) when there is
    none yet, when it lacks a block size asked for, or when `remeasure`."""
    key = machine_key(model, config)
    got = None if remeasure else load_step_costs(key)
    if got is None or any(str(b) not in got.prefill_ms[0] for b in block_sizes):
        if progress:
            progress("measuring the step-cost model of this machine (once; cached in "
                     f"{_key_file(key).parent})")
        got = measure_step_costs(model, prompt, config, pad_id=pad_id, block_sizes=block_sizes, progress=progress,
                                 **measure_kw)
        got.save()
    return got

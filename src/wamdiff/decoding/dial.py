"""The speed dial: `DecodeConfig(block_size="auto")` picks B, tau, step cap and cache per batch size and device
(and decodes with the read-out its curve was measured with).

Two measurements, kept apart because they depend on different things:

- the model's **TPF / quality curve** (`DialCurve`, the weights and the data): for every candidate setting (B,
  tau, step cap, exact / delayed cache), decoded at batch 1 on prompts with expert answers: per sample and block
  the number of masked positions before each denoising step, the tokens, and the trajectory quality (mean L2 to
  the expert, parse failures) next to AR's on the same prompts. `wamdiff bench --tune` measures it and stores it
  in `cache_dir()/dial/<model fingerprint>.json` (and `OUT/dial_curve.json`, which can ship in the checkpoint
  folder as `dial_curve.json`);
- the machine's **step-cost model** (`cost_model.StepCosts`): ms per forward vs query rows, per batch size.

A batch of n prompts decodes block by block until every sample is done, so its forwards follow from its samples'
batch-1 traces (decoding is batch-invariant): a block takes the most steps any sample needs; a delayed-cache step
queries the most positions any sample needs; logit rows are the most still-masked positions (`batch_forwards`,
checked against the real batched decoder in the tests). The predicted ms per plan at batch n is the mean over
random groups of n samples (`groups`) of the cost-model price of those forwards, divided by n. The dial picks
the fastest setting whose quality meets the bound (`meets_quality`: mean L2 within 10 % of AR's and no more
failed parses than AR; when the bench judged the answers on their scenes, also PDMS within 0.5 points and comfort
within 0.02 of AR's). Nothing is format-specific: a long answer (fixed1, 112 tokens) and a short one (delta,
17) differ only in their traces, i.e. in how much of the time the prefill takes.
"""

from __future__ import annotations

import hashlib
import json
import random
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from wamdiff.decoding.config import DecodeConfig
from wamdiff.decoding.cost_model import Forward, StepCosts, arch_signature, cache_dir, step_costs_for
from wamdiff.jsonfile import write_json

QUALITY_TOLERANCE = 0.10  # "at AR quality": mean waypoint L2 to the expert within 10 % of AR's on the same prompts
# Judged on the prompts' scenes (`quality` carries `pdms` 0-100 and `comfort` 0-1): L2 alone lets a jerkier setting
# through, so PDMS and comfort may fall only this far below AR's.
PDMS_TOLERANCE = 0.5  # PDMS points: a larger drop is one the report's PDMS column (one decimal) shows as a loss
COMFORT_TOLERANCE = 0.02  # comfort C: a per-scene pass (0 or 1), so 0.02 is one scene in fifty turning uncomfortable
CURVE_FILE = "dial_curve.json"  # in a checkpoint folder: the curve ships with the weights
GROUPS = 64  # random groups of n samples averaged for the batch-n prediction


def judged(q: dict | None) -> bool:
    """A quality dict that carries the scene judge's `pdms` and `comfort` (`bench.grid.run_bench(judge=...)`)."""
    return bool(q) and q.get("pdms") is not None and q.get("comfort") is not None


def meets_quality(q: dict | None, ar_q: dict | None, tolerance: float = QUALITY_TOLERANCE) -> bool:
    """At AR quality: mean L2 to the expert within `tolerance` of AR's and no more failed parses than AR's; when
    both were judged on their scenes (`judged`), also PDMS within `PDMS_TOLERANCE` and comfort within
    `COMFORT_TOLERANCE` of AR's."""
    if not q or not ar_q or q.get("l2_vs_expert") is None or ar_q.get("l2_vs_expert") is None:
        return False
    if not (q["l2_vs_expert"] <= (1 + tolerance) * ar_q["l2_vs_expert"]
            and q.get("parse_failures", 0) <= ar_q.get("parse_failures", 0)):
        return False
    if judged(q) and judged(ar_q):
        return q["pdms"] >= ar_q["pdms"] - PDMS_TOLERANCE and q["comfort"] >= ar_q["comfort"] - COMFORT_TOLERANCE
    return True


def quality_bound_text(tolerance: float = QUALITY_TOLERANCE, judged_on_scenes: bool = False) -> str:
    """What `meets_quality` checked, in words (headlines, error messages)."""
    scene = f", PDMS within {PDMS_TOLERANCE:g}, comfort within {COMFORT_TOLERANCE:g}" if judged_on_scenes else ""
    return f"L2 within {100 * tolerance:.0f} % of AR's{scene}, no more failed parses"


# ------------------------------------------------------------------------------------------------ the curve
@dataclass
class CurvePoint:
    """One candidate setting. `masked[i][j]`: sample i, block j: masked positions before each denoising step."""

    block_size: int
    threshold: float
    max_steps: int
    cache: str  # "exact" | "delayed"
    masked: list[list[list[int]]]
    tokens: list[int]
    quality: dict

    @property
    def setting(self) -> dict:
        return {"block_size": self.block_size, "threshold": self.threshold, "max_steps": self.max_steps,
                "cache": self.cache}

    @property
    def tpf(self) -> float:
        forwards = sum(len(block) for sample in self.masked for block in sample)
        return sum(self.tokens) / max(1, forwards)


@dataclass
class DialCurve:
    fingerprint: str
    fmt: str | None
    prompt_tokens: int
    ar_tokens: list[int]
    ar_quality: dict
    points: list[CurvePoint]
    notes: dict = field(default_factory=dict)
    ordinal_window: int = 0  # the read-out every point was decoded with (`DecodeConfig.ordinal_window`)
    smoothness: float = 0.0  # and its joint read-out (`DecodeConfig.smoothness`)

    def block_sizes(self) -> list[int]:
        return sorted({p.block_size for p in self.points})

    def save(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, asdict(self), indent=None)  # compact: one trace per sample, block and setting
        return path

    @classmethod
    def load(cls, path: Path) -> "DialCurve":
        d = json.loads(Path(path).read_text())
        return cls(**{**d, "points": [CurvePoint(**p) for p in d["points"]]})


def model_fingerprint(model) -> str:
    """Identity of a model's weights (dtype-independent: sums in float64) and architecture; memoised on the model
    until a parameter changes in place."""
    params = list(model.parameters())
    version = (sum(p._version for p in params), tuple(p.data_ptr() for p in params[:2]))
    memo = model.__dict__.get("_wamdiff_fingerprint")
    if memo is not None and memo[0] == version:
        return memo[1]
    ident = {"arch": arch_signature(model), "sums": [round(float(p.detach().double().sum()), 5) for p in params]}
    fp = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    model.__dict__["_wamdiff_fingerprint"] = (version, fp)
    return fp


def curve_path(fingerprint: str) -> Path:
    return cache_dir() / "dial" / f"{fingerprint}.json"


def find_curve(model) -> DialCurve:
    """The model's tuned curve: `dial_curve.json` in its checkpoint folder, else the cache. ValueError if none."""
    fp = model_fingerprint(model)
    here = Path(str(getattr(model.config, "_name_or_path", "") or "")) / CURVE_FILE
    for path in (here, curve_path(fp)):
        if path.is_file():
            curve = DialCurve.load(path)
            if curve.fingerprint == fp:
                return curve
    raise ValueError(f"block_size='auto': no tuned speed dial for this model (fingerprint {fp}); run "
                     "`wamdiff bench --tune --checkpoint DIR --data TEST.json` once (it measures the model's TPF/quality "
                     f"curve and stores it in {curve_path(fp).parent}), or set a block size")


# --------------------------------------------------------------------------------------------- prediction
def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def batch_forwards(samples: list[list[list[int]]], block_size: int, cache: str, lean: str,
                   static_shapes: bool) -> list[Forward]:
    """The forwards a batch of these samples runs (fused commit), from each sample's batch-1 trace (per block, the
    masked count before each step): what `block.decode_block` does with the batch."""
    b, lean_on, last = block_size, lean != "off", lean == "last_layer"
    out = []
    for j in range(max(len(s) for s in samples)):
        seqs = [s[j] if j < len(s) else [] for s in samples]
        for t in range(max(len(q) for q in seqs)):
            if t == 0:
                out.append(Forward("prefill", b, b, b if last else None) if j == 0
                           else Forward("step", 2 * b, b, b if last else None))
                continue
            masked = [q[t] if t < len(q) else 0 for q in seqs]
            k = max(masked)
            if cache == "delayed":
                decided_last = [(q[t - 1] - masked[i]) if t - 1 < len(q) else 0 for i, q in enumerate(seqs)]
                q_rows = max(m + d for m, d in zip(masked, decided_last))
                if static_shapes:
                    q_rows = min(b, _pow2(q_rows))
            elif lean_on:
                q_rows = b
            else:
                out.append(Forward("step", b, b))
                continue
            if static_shapes:
                k = min(q_rows, _pow2(k))
            logit_rows = k if lean_on else q_rows
            out.append(Forward("step", q_rows, logit_rows, logit_rows if last else None, gathered=True))
    return out


def ar_forwards(tokens: list[int], lean: str) -> list[Forward]:
    """AR: the prefill gives the first token, one 1-row step per further token, until the longest answer ends."""
    return [Forward("prefill", 0, 1, 1 if lean == "last_layer" else None)] + [Forward("step", 1, 1)] * (max(tokens) - 1)


def groups(n: int, n_samples: int, draws: int = GROUPS, seed: int = 0) -> list[list[int]]:
    """Sample groups for a batch-n prediction: every sample alone at batch 1, else `draws` random groups of n
    (with replacement; the same groups for every setting, so settings are compared on equal draws)."""
    if n == 1:
        return [[i] for i in range(n_samples)]
    rng = random.Random(seed * 1000 + n)
    return [[rng.randrange(n_samples) for _ in range(n)] for _ in range(draws)]


def predict_ms_per_plan(point: CurvePoint, costs: StepCosts, n: int, *, lean: str, static_shapes: bool) -> float:
    gs = groups(n, len(point.masked))
    total = sum(costs.call(n, batch_forwards([point.masked[i] for i in g], point.block_size, point.cache, lean,
                                              static_shapes), "block") for g in gs)
    return total / (len(gs) * n)


def predict_ar_ms_per_plan(tokens: list[int], costs: StepCosts, n: int, *, lean: str) -> float:
    gs = groups(n, len(tokens))
    return sum(costs.call(n, ar_forwards([tokens[i] for i in g], lean), "ar") for g in gs) / (len(gs) * n)


def prefill_share(point: CurvePoint, costs: StepCosts, n: int, *, lean: str, static_shapes: bool) -> float:
    """Share of the predicted time spent in the prompt prefill (fused with block 0's first step) at batch n."""
    gs = groups(n, len(point.masked))
    pre = tot = 0.0
    for g in gs:
        fw = batch_forwards([point.masked[i] for i in g], point.block_size, point.cache, lean, static_shapes)
        pre += costs.forward(n, fw[0])
        tot += costs.call(n, fw, "block")
    return pre / tot if tot else float("nan")


# ------------------------------------------------------------------------------------------------- choice
@dataclass(frozen=True)
class Pick:
    batch: int
    block_size: int
    threshold: float
    max_steps: int
    cache: str
    predicted_ms_per_plan: float
    predicted_ar_ms_per_plan: float
    quality: dict
    tpf: float
    ordinal_window: int = 0
    smoothness: float = 0.0

    def apply(self, config: DecodeConfig) -> DecodeConfig:
        return replace(config, block_size=self.block_size, threshold=self.threshold, max_steps=self.max_steps,
                       delayed_cache=self.cache == "delayed", ordinal_window=self.ordinal_window,
                       smoothness=self.smoothness)


def choose(curve: DialCurve, costs: StepCosts, n: int, *, lean: str, static_shapes: bool,
           tolerance: float = QUALITY_TOLERANCE) -> Pick | None:
    """The fastest predicted setting at batch n among those that meet the quality bound (None when none does)."""
    ok = [p for p in curve.points if meets_quality(p.quality, curve.ar_quality, tolerance)]
    if not ok:
        return None
    preds = [(predict_ms_per_plan(p, costs, n, lean=lean, static_shapes=static_shapes), p) for p in ok]
    ms, best = min(preds, key=lambda t: t[0])
    return Pick(n, best.block_size, best.threshold, best.max_steps, best.cache, ms,
                predict_ar_ms_per_plan(curve.ar_tokens, costs, n, lean=lean), best.quality, best.tpf, curve.ordinal_window,
                curve.smoothness)


_PICKS: dict[tuple, Pick] = {}


def resolve_auto(model, tokenizer, prompts, config: DecodeConfig) -> DecodeConfig:
    """`config` with the dial's setting for this batch size, device and model (see the module docstring)."""
    from wamdiff.models.tokens import PAD, token_id  # noqa: PLC0415  (models is below decoding)

    curve = find_curve(model)
    device = next(model.parameters()).device
    static = config.static_shapes(device)
    costs = step_costs_for(model, prompts[0], config, pad_id=token_id(tokenizer, PAD), block_sizes=curve.block_sizes(),
                           progress=lambda line: print(f"wamdiff: {line}", file=sys.stderr, flush=True))
    key = (curve.fingerprint, curve.ordinal_window, curve.smoothness, json.dumps(costs.key, sort_keys=True),
           costs.measured_at, len(prompts), config.lean, static)  # a re-tuned curve's read-outs: another pick
    pick = _PICKS.get(key)
    if pick is None:
        pick = choose(curve, costs, len(prompts), lean=config.lean, static_shapes=static)
        if pick is None:
            raise ValueError("block_size='auto': no tuned setting of this model keeps AR's quality (mean "
                             f"{quality_bound_text(judged_on_scenes=judged(curve.ar_quality))}); set a block size")
        _PICKS[key] = pick
    return pick.apply(config)

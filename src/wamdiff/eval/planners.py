"""Planners judged by every evaluation: one interface, a factory, and a counted fallback.

`Planner.plan(scenes) -> list[Plan]`; a Plan holds 8 ego-frame waypoints at 0.5 .. 4.0 s. A planner that
cannot produce a usable trajectory (a model whose text does not parse) still returns a Plan with
`parse_ok=False`; `with_fallback` then substitutes the stated fallback (constant velocity by default) and
marks it, so one bad decode neither crashes an evaluation nor dominates a mean, and both the raw failure
count and the fallback count can be reported.

Specs for `make_planner`: "expert", "cv", "reference", "model:PATH[,mode=block,threshold=0.9,block=32,
steps=32,fmt=text2,batch=16,max_new_tokens=160,fallback=cv]".
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Protocol

import numpy as np

FUTURE_STEPS = 8
PLAN_DT = 0.5
MAX_ABS_COORD = 200.0  # sanity bound on a waypoint [m]; beyond it the plan counts as unparseable


@dataclass
class Plan:
    xy: np.ndarray | None  # (8, 2) ego frame, 0.5 .. 4.0 s
    text: str = ""
    parse_ok: bool = True
    reason: str = ""
    forwards: int = 0
    new_tokens: int = 0
    heading: np.ndarray | None = None  # (8,) optional; derived from the waypoints when absent
    fallback: str = ""  # name of the fallback used, "" when the planner's own trajectory is scored
    latency_s: float = 0.0

    @property
    def usable(self) -> bool:
        return self.xy is not None and self.parse_ok


class Planner(Protocol):
    name: str

    def plan(self, scenes: list) -> list[Plan]: ...


def check_xy(xy) -> tuple[np.ndarray | None, str]:
    """Validate a waypoint array; returns (array, "") or (None, reason)."""
    try:
        arr = np.asarray(xy, dtype=float)
    except (TypeError, ValueError) as err:
        return None, f"not numeric: {err}"
    if arr.shape != (FUTURE_STEPS, 2):
        return None, f"expected shape (8, 2), got {arr.shape}"
    if not np.isfinite(arr).all():
        return None, "non-finite waypoint"
    if np.abs(arr).max() > MAX_ABS_COORD:
        return None, f"waypoint beyond {MAX_ABS_COORD} m"
    return arr, ""


# -- simple planners ----------------------------------------------------------------------------------
def constant_velocity_xy(scene) -> np.ndarray:
    """Keep the t=0 velocity vector (ego frame) for 4 s (NAVSIM's constant-velocity baseline)."""
    v = np.asarray(scene.ego_history[-1, 3:5], float)
    t = np.arange(1, FUTURE_STEPS + 1)[:, None] * PLAN_DT
    return t * v[None, :]


class ConstantVelocityPlanner:
    name = "cv"

    def plan(self, scenes: list) -> list[Plan]:
        out = []
        for s in scenes:
            xy = constant_velocity_xy(s)
            v = s.ego_history[-1, 3:5]
            h = np.full(FUTURE_STEPS, np.arctan2(v[1], v[0]) if np.hypot(*v) > 0.1 else 0.0)
            out.append(Plan(xy, heading=h))
        return out


class ExpertPlanner:
    """The logged expert future of the scene (known only for recorded scenes)."""

    name = "expert"

    def plan(self, scenes: list) -> list[Plan]:
        out = []
        for s in scenes:
            fut = np.asarray(s.future, float)
            if fut.shape != (FUTURE_STEPS, 3) or not np.any(fut):
                out.append(Plan(None, parse_ok=False, reason="scene has no logged future"))
            else:
                out.append(Plan(fut[:, :2].copy(), heading=fut[:, 2].copy()))
        return out


class ReferencePlanner:
    """The PDM-Closed-style reference (IDM along the route centreline), sampled at 0.5 s."""

    name = "reference"

    def __init__(self, evaluator=None):
        from .pdms.score import PDMSEvaluator

        self.evaluator = evaluator or PDMSEvaluator()

    def plan(self, scenes: list) -> list[Plan]:
        out = []
        for s in scenes:
            try:
                poses = self.evaluator.reference_poses(s)  # (41, 3) at 0.1 s
                sel = poses[5::5]
                out.append(Plan(sel[:, :2].copy(), heading=sel[:, 2].copy()))
            except Exception as err:  # noqa: BLE001 - a failing scene must not stop the evaluation
                out.append(Plan(None, parse_ok=False, reason=f"reference failed: {type(err).__name__}: {err}"))
        return out


# -- model planner -----------------------------------------------------------------------------------
@dataclass
class ModelSettings:
    mode: str = "block"
    threshold: float = 0.9
    block: int | None = None
    steps: int = 32
    fmt: str = "text2"
    batch: int = 16
    max_new_tokens: int = 160
    fallback: str = "cv"
    strategy: str = "threshold"
    delayed: bool = False  # DecodeConfig.delayed_cache
    extra: dict = field(default_factory=dict)


class ModelPlanner:
    """A checkpoint decoded through `wamdiff.decoding.generate`; text parsed by `driving.trajectory`.

    All wamdiff model/decoding/driving imports are lazy: this module imports without them.
    """

    def __init__(self, checkpoint: str, settings: ModelSettings | None = None):
        from pathlib import Path

        if not (Path(checkpoint) / "config.json").is_file():  # a config error must fail loudly, not fall back
            raise ValueError(f"model planner: {checkpoint} is not a model directory (no config.json)")
        self.checkpoint = checkpoint
        self.settings = settings or ModelSettings()
        self.name = f"model:{checkpoint}"
        self._model = self._tokenizer = self._image_processor = None

    def prepare(self) -> None:
        """Load the checkpoint now (plan_all calls this outside its per-batch error handling)."""
        self._load()

    def _load(self):
        if self._model is None:
            from wamdiff.models import image_processor_for, is_vision_model, load_model

            self._model, self._tokenizer = load_model(self.checkpoint)
            self._model.eval()
            self._vision = bool(is_vision_model(self._model))
            self._image_processor = image_processor_for(self._model)
        return self._model, self._tokenizer

    def decode_config(self):
        from wamdiff.decoding import DecodeConfig

        s = self.settings
        kw = dict(mode=s.mode, threshold=s.threshold, max_steps_per_block=s.steps, strategy=s.strategy,
                  max_new_tokens=s.max_new_tokens, delayed_cache=s.delayed, **s.extra)
        if s.block is not None:
            kw["block_size"] = s.block
        return DecodeConfig(**kw)

    def plan(self, scenes: list) -> list[Plan]:
        from wamdiff.decoding import generate
        from wamdiff.driving.trajectory import parse_trajectory
        from wamdiff.models.processor import encode_prompt

        prompt_fn = _scene_prompt_fn()
        model, tok = self._load()
        vision = self._vision
        config = self.decode_config()
        out: list[Plan] = []
        for i in range(0, len(scenes), max(1, self.settings.batch)):
            chunk = scenes[i: i + self.settings.batch]
            prompts = [encode_prompt(tok, prompt_fn(s), [s.image] if vision else [], vision=vision,
                                     image_processor=self._image_processor) for s in chunk]
            t0 = time.perf_counter()
            gens = generate(model, tok, prompts, config)
            dt = (time.perf_counter() - t0) / max(1, len(chunk))
            for g in gens:
                try:
                    parsed = parse_trajectory(g.text, self.settings.fmt)
                    xy, reason = (check_xy(parsed.xy) if parsed.ok else (None, parsed.reason or "parse failed"))
                except Exception as err:  # noqa: BLE001 - tolerant parsing: count, never crash
                    xy, reason = None, f"parser raised {type(err).__name__}: {err}"
                out.append(Plan(xy, text=g.text, parse_ok=xy is not None, reason=reason, forwards=int(g.forwards),
                                new_tokens=len(g.token_ids), latency_s=dt))
        return out


def _scene_prompt_fn():
    """The world engineer's `scene_prompt(scene)`, wherever it lives."""
    import importlib

    for mod in ("wamdiff.driving.prompts", "wamdiff.driving.prompt", "wamdiff.driving.wamdiff2_json", "wamdiff.driving.qa",
                "wamdiff.driving.scene", "wamdiff.driving.dataset"):
        try:
            fn = getattr(importlib.import_module(mod), "scene_prompt", None)
        except ImportError:
            continue
        if fn is not None:
            return fn
    raise ImportError("scene_prompt(scene) not found in wamdiff.driving")


# -- fallback and factory ----------------------------------------------------------------------------
FALLBACKS = {"cv": constant_velocity_xy}


def with_fallback(scenes: list, plans: list[Plan], fallback: str = "cv") -> list[Plan]:
    """Replace unusable plans by the fallback trajectory, keeping the failure visible (`parse_ok`, `fallback`)."""
    if len(plans) != len(scenes):
        raise ValueError(f"planner returned {len(plans)} plans for {len(scenes)} scenes")
    fn = FALLBACKS[fallback]
    out = []
    for s, p in zip(scenes, plans):
        xy, reason = check_xy(p.xy) if p.xy is not None else (None, p.reason or "no trajectory")
        if xy is not None and p.parse_ok:
            out.append(p)
        else:
            out.append(replace(p, xy=fn(s), heading=None, parse_ok=False, reason=p.reason or reason, fallback=fallback))
    return out


def parse_options(spec: str, items: list[str]) -> dict:
    """`key=value` items of a spec (after its path or stage name) as a dict of strings."""
    opts = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep:
            raise ValueError(f"planner spec {spec!r}: option {item!r} is not key=value")
        opts[k.strip()] = v.strip()
    return opts


def parse_spec(spec: str) -> tuple[str, str, dict]:
    kind, _, rest = spec.partition(":")
    if kind != "model":
        if rest:
            raise ValueError(f"planner spec {spec!r}: only 'model:' takes arguments")
        return kind, "", {}
    path, *items = rest.split(",")
    opts = parse_options(spec, items)
    if not path:
        raise ValueError(f"planner spec {spec!r}: missing checkpoint path")
    return kind, path, opts


def parse_flag(v: str) -> bool:
    w = v.strip().lower()
    if w not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(f"not a yes/no value: {v!r}")
    return w in ("1", "true", "yes", "on")


def make_planner(spec: str, evaluator=None):
    """"expert" | "cv" | "reference" | "model:PATH[,mode=block,threshold=0.9,block=32,delayed=1,...]"."""
    kind, path, opts = parse_spec(spec)
    if kind == "expert":
        return ExpertPlanner()
    if kind == "cv":
        return ConstantVelocityPlanner()
    if kind == "reference":
        return ReferencePlanner(evaluator)
    if kind == "model":
        s = ModelSettings()
        casts = {"mode": str, "threshold": float, "block": int, "steps": int, "fmt": str, "batch": int,
                 "max_new_tokens": int, "fallback": str, "strategy": str, "delayed": parse_flag}
        for k, v in opts.items():
            if k in casts:
                try:
                    setattr(s, k, casts[k](v))
                except ValueError as err:
                    raise ValueError(f"planner spec {spec!r}: bad value for {k}: {v!r}") from err
            else:
                raise ValueError(f"planner spec {spec!r}: unknown option {k!r} (known: {sorted(casts)})")
        if s.fallback not in FALLBACKS:
            raise ValueError(f"planner spec {spec!r}: unknown fallback {s.fallback!r}")
        return ModelPlanner(path, s)
    raise ValueError(f"unknown planner spec {spec!r}: use expert, cv, reference or model:PATH[,key=value...]")


def plan_all(planner, scenes: list, batch: int = 64, fallback: str = "cv", progress=None) -> list[Plan]:
    """Run a planner over scenes in batches and apply the counted fallback."""
    fb = getattr(getattr(planner, "settings", None), "fallback", fallback)
    if hasattr(planner, "prepare"):
        planner.prepare()  # loading errors are configuration errors: raise them
    plans: list[Plan] = []
    for i in range(0, len(scenes), batch):
        chunk = scenes[i: i + batch]
        try:
            raw = planner.plan(chunk)
        except Exception as err:  # noqa: BLE001 - a crashing planner batch falls back, counted
            raw = [Plan(None, parse_ok=False, reason=f"planner raised {type(err).__name__}: {err}") for _ in chunk]
        plans.extend(with_fallback(chunk, raw, fb))
        if progress is not None:
            progress(len(chunk))
    return plans

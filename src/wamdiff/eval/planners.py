"""Planners judged by every evaluation: one interface, a factory, and the one guarded way to call them.

`Planner.plan(scenes) -> list[Plan]`; a Plan holds 8 ego-frame waypoints at 0.5 .. 4.0 s. A plan that cannot
be used (model text that does not parse, a planner that raised, the wrong number or shape of waypoints) is a
failed Plan (`ok=False`, `xy=None`, `reason`): it scores as a failure. Only a spec that opts in (`fallback=cv`)
has its failed plans replaced by the fallback planner's plans, marked (`fallback`) and counted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np

from wamdiff.decoding.config import AUTO
from wamdiff.eval.specs import PlannerSpec
from wamdiff.models.recorded import is_model_dir

FUTURE_STEPS = 8
PLAN_DT = 0.5
MAX_ABS_COORD = 200.0  # sanity bound on a waypoint [m]; beyond it the plan counts as failed


@dataclass
class Plan:
    xy: np.ndarray | None  # (8, 2) ego frame, 0.5 .. 4.0 s; None for a failed plan
    text: str = ""
    ok: bool = True  # the planner's own trajectory is usable
    reason: str = ""  # why it is not
    forwards: int = 0
    new_tokens: int = 0
    heading: np.ndarray | None = None  # (8,) optional; derived from the waypoints when absent
    fallback: str = ""  # the planner whose trajectory replaced a failed one ("" when none did)
    latency_s: float = 0.0

    @property
    def scored(self) -> bool:
        """There is a trajectory to score (the planner's own or, opted in, its fallback's)."""
        return self.xy is not None


def failed(reason: str, **kw) -> Plan:
    return Plan(None, ok=False, reason=reason, **kw)


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
            v = s.ego_history[-1, 3:5]
            h = np.full(FUTURE_STEPS, np.arctan2(v[1], v[0]) if np.hypot(*v) > 0.1 else 0.0)
            out.append(Plan(constant_velocity_xy(s), heading=h))
        return out


class ExpertPlanner:
    """The logged expert future of the scene (known only for recorded scenes)."""

    name = "expert"

    def plan(self, scenes: list) -> list[Plan]:
        out = []
        for s in scenes:
            fut = np.asarray(s.future, float)
            if fut.shape != (FUTURE_STEPS, 3) or not np.any(fut):
                out.append(failed("scene has no logged future"))
            else:
                out.append(Plan(fut[:, :2].copy(), heading=fut[:, 2].copy()))
        return out


class ReferencePlanner:
    """The PDM-Closed-style reference (IDM along the route centreline), sampled at 0.5 s."""

    name = "reference"

    def __init__(self, evaluator=None):
        from wamdiff.eval.pdms.score import PDMSEvaluator

        self.evaluator = evaluator or PDMSEvaluator()

    def plan(self, scenes: list) -> list[Plan]:
        out = []
        for s in scenes:
            try:
                sel = self.evaluator.reference_poses(s)[5::5]  # (41, 3) at 0.1 s -> 0.5 .. 4.0 s
                out.append(Plan(sel[:, :2].copy(), heading=sel[:, 2].copy()))
            except Exception as err:  # noqa: BLE001 - a scene the reference cannot plan is that scene's failed plan
                out.append(failed(f"reference failed: {type(err).__name__}: {err}"))
        return out


# -- model planner -----------------------------------------------------------------------------------
class ModelPlanner:
    """A checkpoint decoded through `wamdiff.decoding.generate`; text parsed by `driving.trajectory`."""

    def __init__(self, spec: PlannerSpec):
        if not is_model_dir(spec.checkpoint):  # found before any planning starts
            raise ValueError(f"planner spec {spec.text!r}: {spec.checkpoint} is not a model directory (no config.json)")
        self.spec = spec
        self.name = spec.text
        self._model = self._tokenizer = self._image_processor = None

    def prepare(self) -> None:
        """Load the checkpoint now (a checkpoint that does not load is a configuration error, not a failed plan), and
        for `block=auto` find its tuned speed dial with a setting at AR quality: without one every plan would fail."""
        self._load()
        if self.spec.decode.mode == "block" and self.spec.decode.block_size == AUTO:
            from wamdiff.decoding.dial import find_curve, judged, meets_quality, quality_bound_text

            try:
                curve = find_curve(self._model)
            except ValueError as err:
                raise ValueError(f"planner spec {self.spec.text!r}: {err}") from None
            if not any(meets_quality(pt.quality, curve.ar_quality) for pt in curve.points):
                bound = quality_bound_text(judged_on_scenes=judged(curve.ar_quality))
                raise ValueError(f"planner spec {self.spec.text!r}: block=auto, but no setting of this model's tuned "
                                 f"speed dial keeps AR's quality ({bound}); set a block size")

    def _load(self):
        if self._model is None:
            from wamdiff.models import image_processor_for, is_vision_model, load_model

            self.prompt_template  # noqa: B018 - a recorded prompt that does not format is found before any planning
            self._model, self._tokenizer = load_model(self.spec.checkpoint)
            self._model.eval()
            self._vision = bool(is_vision_model(self._model))
            self._image_processor = image_processor_for(self._model)
        return self._model, self._tokenizer

    @property
    def model(self):
        """The loaded model (loads the checkpoint on first use)."""
        return self._load()[0]

    @property
    def camera(self):
        """The camera this checkpoint was trained with (`config.wamdiff_camera`), so the closed loop renders the same."""
        from wamdiff.driving.render import CameraConfig

        self._load()
        return CameraConfig.from_dict(getattr(self._model.config, "wamdiff_camera", None))

    def _decode_config(self, tokenizer):
        """The spec's decode settings; fixed-width formats also constrain each answer position to its token class."""
        from dataclasses import replace

        from wamdiff.decoding.grammar import Grammar
        from wamdiff.driving.answer_format import answer_format
        from wamdiff.driving.trajectory import FIXED_WIDTH_FORMATS

        config = self.spec.decode
        if config.grammar is None and self.spec.fmt in FIXED_WIDTH_FORMATS:
            if getattr(self, "_grammar", None) is None:
                self._grammar = Grammar.for_format(tokenizer, answer_format(self.spec.fmt))
            config = replace(config, grammar=self._grammar)
        return config

    @property
    def prompt_template(self) -> str:
        """The prompt a scene or request is planned with: the checkpoint's recorded one (`wamdiff_prompt`), else the
        world's one-camera prompt (`driving.prompts.prompt_template`)."""
        from wamdiff.driving.prompts import prompt_template

        if getattr(self, "_template", None) is None:
            try:
                self._template = prompt_template(self.spec.checkpoint)
            except ValueError as err:
                raise ValueError(f"planner spec {self.spec.text!r}: {self.spec.checkpoint}/{err}") from None
        return self._template

    @property
    def n_images(self) -> int:
        """Camera images one plan takes: the `<image>` placeholders of the prompt, in the model's order."""
        from wamdiff.driving.prompts import image_count

        return image_count(self.prompt_template)

    def encode(self, item):
        """The encoded prompt of a scene, a served request (`eval.wire.PlanInput`, its cameras in `images`) or a
        WAM-Diff2 sample (`eval.json_data.JsonSample`: its own prompt and images, encoded as training encodes them)."""
        from wamdiff.driving.prompts import scene_prompt
        from wamdiff.models.processor import encode_prompt

        model, tok = self._load()
        if getattr(item, "sample", None) is not None:
            from wamdiff.driving.wamdiff2_json import encode_sample_prompt

            return encode_sample_prompt(item.sample, tok, vision=self._vision, image_processor=self._image_processor)
        images = list(getattr(item, "images", None) or [item.image]) if self._vision else []
        return encode_prompt(tok, scene_prompt(item, self.prompt_template), images, vision=self._vision,
                             image_processor=self._image_processor)

    def plan(self, scenes: list, batch: int | None = None) -> list[Plan]:
        """Plans for `scenes`, decoded `batch` at a time (default: the spec's batch)."""
        from wamdiff.decoding import generate

        model, tok = self._load()
        out: list[Plan] = []
        batch = batch or self.spec.batch
        for i in range(0, len(scenes), batch):
            chunk = scenes[i: i + batch]
            prompts = [self.encode(s) for s in chunk]
            t0 = time.perf_counter()
            gens = generate(model, tok, prompts, self._decode_config(tok))
            dt = (time.perf_counter() - t0) / max(1, len(chunk))
            for g in gens:
                out.append(replace(plan_from_text(g.text, self.spec.fmt), forwards=int(g.forwards),
                                   new_tokens=len(g.token_ids), latency_s=dt))
        return out


def plan_from_text(text: str, fmt: str) -> Plan:
    """A model's answer text as a Plan: parsed in the answer format and checked (`check_xy`); text that does not
    parse, or waypoints out of shape or bounds, make a failed Plan (it scores as a failure)."""
    from wamdiff.driving.trajectory import parse_trajectory

    parsed = parse_trajectory(text, fmt)  # tolerant: never raises
    xy, reason = check_xy(parsed.xy) if parsed.ok else (None, parsed.reason or "parse failed")
    return Plan(xy, text=text, ok=xy is not None, reason=reason)


# -- planner server ----------------------------------------------------------------------------------
HTTP_TIMEOUT_S = 300.0  # per request: a loaded server may queue a request behind several batches
HTTP_CONNECT_TIMEOUT_S = 5.0


class HttpPlanner:
    """A planner server (`wamdiff serve`) behind `http://HOST:PORT`: one `POST /plan` per scene, up to `spec.batch`
    in flight at once so the server can batch them; the camera comes from its `GET /info`, so the closed loop
    renders what the served model expects. A refused request (4xx), a model failure (5xx) or a lost connection is
    that scene's failed plan, with the server's one-line reason. A server's bearer token is read from
    `$WAMDIFF_SERVE_TOKEN` (`eval.wire.TOKEN_ENV`)."""

    def __init__(self, spec: PlannerSpec):
        import os

        import httpx

        from wamdiff.eval.wire import TOKEN_ENV

        self.spec = spec
        self.name = spec.text
        token = os.environ.get(TOKEN_ENV)
        self._client = httpx.Client(base_url=spec.url, timeout=httpx.Timeout(HTTP_TIMEOUT_S, connect=HTTP_CONNECT_TIMEOUT_S),
                                    headers={"Authorization": f"Bearer {token}"} if token else None,
                                    limits=httpx.Limits(max_connections=spec.batch, max_keepalive_connections=spec.batch))
        self._info = None
        self.info  # noqa: B018 - a server that does not answer is found now, like a missing checkpoint

    def __getstate__(self):  # sent to executor workers as its spec: each worker opens its own connections
        return {"spec": self.spec}

    def __setstate__(self, state):
        self.__init__(state["spec"])

    @property
    def info(self) -> dict:
        """The server's `GET /info` (fetched once; a ValueError naming the spec when no server answers)."""
        if self._info is None:
            import httpx

            try:
                reply = self._client.get("/info", timeout=HTTP_CONNECT_TIMEOUT_S * 2)
                reply.raise_for_status()
                self._info = reply.json()
            except (httpx.HTTPError, ValueError) as err:
                raise ValueError(f"planner spec {self.spec.text!r}: no planner server answers at {self.spec.url} "
                                 f"({type(err).__name__}: {' '.join(str(err).split())[:120]}); start one with "
                                 "`wamdiff serve --checkpoint DIR --port PORT`") from None
        return self._info

    def prepare(self) -> None:
        """Reach the server now (an unreachable server is a configuration error, not a failed plan)."""
        self.info  # noqa: B018

    @property
    def camera(self):
        from wamdiff.driving.render import CameraConfig

        return CameraConfig.from_dict(self.info.get("camera"))

    def _plan_one(self, scene) -> Plan:
        import httpx

        from wamdiff.eval.wire import scene_request

        try:
            reply = self._client.post("/plan", json=scene_request(scene))
        except httpx.HTTPError as err:
            return failed(f"planner server: {type(err).__name__}: {' '.join(str(err).split())[:160]}")
        try:
            body = reply.json()
        except ValueError:
            body = {}
        if reply.status_code != 200:
            return failed(f"planner server {reply.status_code}: {body.get('error', reply.text[:160])}")
        timing = body.get("timing") or {}
        xy = body.get("waypoints")
        return Plan(None if xy is None else np.asarray(xy, float), text=body.get("text", ""), ok=bool(body.get("ok")),
                    reason=body.get("reason", ""), forwards=int(timing.get("forwards", 0)),
                    new_tokens=int(timing.get("new_tokens", 0)), latency_s=float(timing.get("total_ms", 0.0)) / 1e3)

    def plan(self, scenes: list) -> list[Plan]:
        from concurrent.futures import ThreadPoolExecutor

        if len(scenes) <= 1:
            return [self._plan_one(s) for s in scenes]
        with ThreadPoolExecutor(max_workers=min(self.spec.batch, len(scenes))) as pool:
            return list(pool.map(self._plan_one, scenes))


# -- factory, guarded calls, opt-in fallback ----------------------------------------------------------
def make_planner(spec: PlannerSpec | str, evaluator=None):
    """The planner of a spec (text is parsed first). `evaluator`: a PDMSEvaluator the reference may share."""
    spec = PlannerSpec.parse(spec) if isinstance(spec, str) else spec
    if spec.kind == "model":
        return ModelPlanner(spec)
    if spec.kind == "http":
        return HttpPlanner(spec)
    if spec.kind == "reference":
        return ReferencePlanner(evaluator)
    return {"expert": ExpertPlanner, "cv": ConstantVelocityPlanner}[spec.kind]()


def plan_batch(planner, scenes: list) -> list[Plan]:
    """One guarded `planner.plan(scenes)` call: a raising planner, a wrong number of plans or an unusable
    trajectory gives failed Plans (with the reason); nothing raises."""
    try:
        plans = list(planner.plan(scenes) or [])
    except Exception as err:  # noqa: BLE001 - a planner error at run time is a failed plan for each scene
        return [failed(f"planner raised {type(err).__name__}: {err}") for _ in scenes]
    if len(plans) != len(scenes):
        return [failed(f"planner returned {len(plans)} plans for {len(scenes)} scenes") for _ in scenes]
    out = []
    for p in plans:
        xy, reason = check_xy(p.xy) if p.xy is not None else (None, p.reason or "no trajectory")
        out.append(replace(p, xy=xy) if xy is not None and p.ok else replace(p, xy=None, ok=False, reason=p.reason or reason))
    return out


def with_fallback(scenes: list, plans: list[Plan], fallback) -> list[Plan]:
    """Failed plans replaced by `fallback`'s (a planner) plans for the same scenes, kept visible (`ok`, `fallback`)."""
    todo = [i for i, p in enumerate(plans) if not p.ok]
    if not todo:
        return plans
    stand_in = plan_batch(fallback, [scenes[i] for i in todo])
    out = list(plans)
    for i, sub in zip(todo, stand_in):
        out[i] = replace(plans[i], xy=sub.xy, heading=sub.heading, fallback=fallback.name if sub.scored else "")
    return out


def fallback_planner(spec: PlannerSpec, evaluator=None):
    """The opted-in fallback of a spec, or None (failures score as failures)."""
    return make_planner(PlannerSpec.parse(spec.fallback), evaluator) if spec.fallback else None


def plan_scenes(planner, scenes: list, *, batch: int = 64, fallback=None, progress=None) -> list[Plan]:
    """Every scene planned once, `batch` scenes per guarded call; failed plans stay failed unless a `fallback`
    planner is given. `progress(n)` after each call."""
    if hasattr(planner, "prepare"):
        planner.prepare()  # loading errors are configuration errors: raise them
    plans: list[Plan] = []
    for i in range(0, len(scenes), batch):
        chunk = scenes[i: i + batch]
        raw = plan_batch(planner, chunk)
        plans.extend(with_fallback(chunk, raw, fallback) if fallback is not None else raw)
        if progress is not None:
            progress(len(chunk))
    return plans

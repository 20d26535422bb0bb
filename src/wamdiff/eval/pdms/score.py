"""PDMS over scenes: prepare each scene once, simulate every plan in one batch, score per scene, aggregate.

Per scene NAVSIM scores two proposals together, [cached reference, plan], so EP is normalised by the best
multiplier-weighted progress of the two. Scenes whose scoring raises are kept as rows marked invalid (with
the reason), counted, and left out of every mean.

A failed plan (no trajectory: the planner's text did not parse, it raised, ...) on a valid scene scores as a
failure: PDMS 0 and every term that makes it up 0 (NC, DAC, TTC, EP, C and each comfort part; with EPDMS also
DDC, TLC, LK, HC, EC), progress 0, and `plan_failed` True. It counts in every mean, so a planner cannot look
better by failing; `pdms_own_plans` is the mean over the plans the planner produced itself.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from wamdiff.atomic import write_atomically
from wamdiff.eval.intervals import mean_ci95

from .reference import IDMParams, ReferencePlan, plan_reference
from .scene_data import AgentTracks, SceneMapIndex
from .scorer import ScoreConfig, combine, combine_epdms, score_states
from .tracker import NUM_STATES, headings_from_xy, initial_state, interpolate_plan, simulate
from .vehicle import AX, AY, HEADING, STATE_SIZE, VX, VY, X, Y, VehicleParams, scene_vehicle

PDMS_VERSION = "wamdiff-pdms-navsim-v1.1/0.2"  # 0.2: NAVSIM-exact simulation (initial steering 0, fit regulariser)
METRICS = ("nc", "dac", "ttc", "ep", "c", "pdms")
EPDMS_METRICS = ("ddc", "tlc", "lk", "hc", "ec", "epdms")
COMFORT_PARTS = ("c_lon_acc", "c_lat_acc", "c_jerk", "c_lon_jerk", "c_yaw_acc", "c_yaw_rate")


@dataclass(frozen=True)
class PDMSConfig:
    use_pacifica: bool = False  # NAVSIM's vehicle instead of the scene's ego box
    drivable_tolerance: float = 0.0  # [m] grow the drivable area (0 = NAVSIM); reported with every result
    epdms: bool = False  # add DDC, TLC (=1), LK, HC, EC (=1) and the EPDMS (NAVSIM v2 weights)
    human_filter: bool = True  # EPDMS: a term the expert also fails is not held against the plan (NAVSIM v2)
    reference_cache: str | None = None  # directory for cached reference plans (.npz per scene)

    def describe(self) -> dict:
        return {"version": PDMS_VERSION, "use_pacifica": self.use_pacifica, "drivable_tolerance": self.drivable_tolerance,
                "epdms": self.epdms}


@dataclass
class SceneContext:
    geo: SceneMapIndex
    agents: AgentTracks
    vehicle: VehicleParams
    initial: np.ndarray  # (11,)
    history: np.ndarray | None  # (15, 11) past states at 0.1 s for HC


def _history_states(scene) -> np.ndarray:
    """The past states NAVSIM v2's history comfort prepends: (14, 11) at -1.5 .. -0.2 s.

    NAVSIM interpolates the 2 Hz past ego states (-1.5 .. 0 s) at `arange(start, end, 0.1 s)[:-1]`, which stops
    at -0.2 s, and then lays history + simulation on one contiguous 0.1 s grid; steering and yaw rate are 0 in
    those past states (they are built from ego statuses, as the t0 state is). We reproduce both.
    """
    h = np.asarray(scene.ego_history, float)
    t_src = np.arange(len(h)) * 0.5 - 0.5 * (len(h) - 1)
    t = np.arange(-15, -1) * 0.1
    out = np.zeros((len(t), STATE_SIZE))
    for col, src in ((X, 0), (Y, 1), (VX, 3), (VY, 4), (AX, 5), (AY, 6)):
        out[:, col] = np.interp(t, t_src, h[:, src])
    out[:, HEADING] = np.interp(t, t_src, np.unwrap(h[:, 2]))
    return out


class PDMSEvaluator:
    """Scores plans; keeps per-scene preparation and the reference plan cached by scene id."""

    def __init__(self, config: PDMSConfig = PDMSConfig(), idm: IDMParams = IDMParams()):
        self.config = config
        self.idm = idm
        self._ctx: dict[str, SceneContext] = {}
        self._ref: dict[str, np.ndarray] = {}

    # -- per-scene preparation (cached) ---------------------------------------------------------------
    def context(self, scene) -> SceneContext:
        key = scene.scene_id
        if key not in self._ctx:
            vehicle = scene_vehicle(scene, self.config.use_pacifica)
            self._ctx[key] = SceneContext(
                geo=SceneMapIndex.from_scene(scene, self.config.drivable_tolerance),
                agents=AgentTracks.from_scene(scene),
                vehicle=vehicle,
                initial=initial_state(scene.ego_history),
                history=_history_states(scene) if self.config.epdms else None,
            )
        return self._ctx[key]

    def _cache_path(self, scene) -> Path | None:
        if not self.config.reference_cache:
            return None
        h = hashlib.sha1(f"{PDMS_VERSION}|{self.idm}|{self.config.use_pacifica}|{self.config.drivable_tolerance}".encode())
        for arr in (scene.ego_history, scene.agent_boxes, scene.agent_valid, scene.map.route_centerline):  # content, not just the id
            h.update(np.ascontiguousarray(arr).tobytes())
        tag = h.hexdigest()[:12]
        return Path(self.config.reference_cache) / f"{scene.scene_id}.{tag}.npz"

    def reference_poses(self, scene) -> np.ndarray:
        """The PDM-Closed-style reference (41, 3), computed once per scene (memory + optional disk cache)."""
        poses = self.cached_reference(scene)
        if poses is None:
            poses = self.remember_reference(scene, self.compute_reference(scene))
        return poses

    def cached_reference(self, scene) -> np.ndarray | None:
        """The scene's reference poses if known (memory, then the disk cache), else None."""
        key = scene.scene_id
        if key not in self._ref:
            path = self._cache_path(scene)
            if path is None or not path.exists():
                return None
            self._ref[key] = np.load(path)["poses"]
        return self._ref[key]

    def compute_reference(self, scene) -> ReferencePlan:
        """The reference plan of a scene, computed now (no cache; raises for a scene without a route)."""
        ctx = self.context(scene)
        if ctx.geo.centerline is None:
            raise ValueError(f"scene {scene.scene_id}: no route centreline (needed for progress and the reference planner)")
        return plan_reference(scene, ctx.geo, ctx.vehicle, ctx.initial, self.idm)

    def remember_reference(self, scene, ref: ReferencePlan) -> np.ndarray:
        """Cache a reference plan computed here or by a worker (`eval.fanout`); returns its poses."""
        self._ref[scene.scene_id] = ref.poses
        path = self._cache_path(scene)
        if path is not None:
            write_atomically(path, lambda f: np.savez(f, poses=ref.poses, best=ref.best, proposal_pdms=ref.proposal_pdms))
        return ref.poses

    # -- scoring -------------------------------------------------------------------------------------
    def score(self, scenes: list, plans: list, planner_name: str = "") -> list[dict]:
        """One row per (scene, plan); a plan without a trajectory (`plan.xy is None`) scores as a failure."""
        if len(scenes) != len(plans):
            raise ValueError(f"{len(scenes)} scenes but {len(plans)} plans")
        rows: list[dict] = []
        batch_poses, batch_init = [], []  # simulate everything at once
        prepared: list[tuple[int, SceneContext, int, int]] = []
        for i, (scene, plan) in enumerate(zip(scenes, plans)):
            row = _base_row(scene, plan, planner_name)
            rows.append(row)
            try:
                ctx = self.context(scene)
                ref = self.reference_poses(scene)
                if plan.xy is None:  # a failed plan on a valid scene: every term fails
                    row.update(_failed_terms(self.config.epdms), plan_failed=True)
                    continue
                xy = np.asarray(plan.xy, float)
                if xy.shape != (8, 2) or not np.isfinite(xy).all():
                    raise ValueError(f"plan has shape {xy.shape} or non-finite values")
                heading = np.asarray(plan.heading, float) if plan.heading is not None else headings_from_xy(xy)
                plan_poses = interpolate_plan(np.concatenate([xy, heading[:, None]], 1)[None])[0]
                group = [ref, plan_poses]
                if self.config.epdms and self.config.human_filter and np.any(scene.future):
                    group.append(interpolate_plan(np.asarray(scene.future, float)[None])[0])
                start = len(batch_poses)
                batch_poses.extend(group)
                batch_init.extend([ctx.initial] * len(group))
                prepared.append((i, ctx, start, len(group)))
            except Exception as err:  # noqa: BLE001 - invalid scene, counted
                row.update(valid=False, reason=f"{type(err).__name__}: {err}")
        if not prepared:
            return rows
        # one batched simulation per vehicle (scenes of one world share the ego box)
        states = np.zeros((len(batch_poses), NUM_STATES, STATE_SIZE))
        by_vehicle: dict[VehicleParams, list[int]] = {}
        for i, ctx, start, n in prepared:
            by_vehicle.setdefault(ctx.vehicle, []).extend(range(start, start + n))
        poses_arr, init_arr = np.stack(batch_poses), np.stack(batch_init)
        for vehicle, idx in by_vehicle.items():
            states[idx] = simulate(poses_arr[idx], init_arr[idx], vehicle)
        cfg = ScoreConfig(epdms=self.config.epdms)
        for i, ctx, start, n in prepared:
            row = rows[i]
            try:
                st = states[start: start + n]
                m = score_states(st[:2], ctx.agents, ctx.geo, ctx.vehicle, cfg, ctx.history)  # [reference, plan]
                res = combine(m)  # PDMS v1.1: no human filter
                for k in ("nc", "dac", "ttc", "ep", "c", "pdms", "progress_m", *COMFORT_PARTS):
                    row[k] = float(res[k][1])
                if self.config.epdms:
                    # v2 scores the logged human alone, without its past (HC 1), and filters after scoring
                    human = score_states(st[2:3], ctx.agents, ctx.geo, ctx.vehicle, cfg) if n == 3 else None
                    e = combine_epdms(m, human)
                    for k in ("ddc", "tlc", "lk", "hc", "ec", "epdms"):
                        row[k] = float(e[k][1])
                    row["epdms_ep"] = float(e["ep"][1])
                row["ref_pdms"] = float(res["pdms"][0])
                row["ref_progress_m"] = float(res["progress_m"][0])
                row["collision_time_s"] = float(m["collision_step"][1] * 0.1) if np.isfinite(m["collision_step"][1]) else None
                row["_states"] = st[1]
                row["_ref_states"] = st[0]
            except Exception as err:  # noqa: BLE001
                row.update(valid=False, reason=f"{type(err).__name__}: {err}")
        return rows


def _base_row(scene, plan, planner_name: str) -> dict:
    return {
        "scene_id": scene.scene_id, "family": scene.family, "split": scene.split, "planner": planner_name,
        "valid": True, "reason": "", "plan_ok": bool(plan.ok), "plan_failed": False, "fallback": plan.fallback,
        "plan_reason": plan.reason, "version": PDMS_VERSION,
    }


def _failed_terms(epdms: bool) -> dict:
    """The sub-scores of a failed plan: all 0 (see the module docstring)."""
    keys = [*METRICS, *COMFORT_PARTS, "progress_m", *((*EPDMS_METRICS, "epdms_ep") if epdms else ())]
    return dict.fromkeys(keys, 0.0)


def aggregate(rows: list[dict], epdms: bool = False, config: PDMSConfig | None = None) -> dict:
    """Means over valid rows (overall and per family) plus counts; invalid scenes are counted, not averaged."""
    keys = list(METRICS) + (list(EPDMS_METRICS) if epdms else []) + list(COMFORT_PARTS) + ["progress_m"]

    def summary(rs: list[dict]) -> dict:
        valid = [r for r in rs if r["valid"]]
        out = {"n": len(rs), "n_valid": len(valid), "n_invalid": len(rs) - len(valid),
               "n_failed": sum(not r["plan_ok"] for r in rs), "n_fallback": sum(bool(r["fallback"]) for r in rs)}
        for k in keys:
            vals = [r[k] for r in valid if r.get(k) is not None]
            out[k] = float(np.mean(vals)) if vals else None
        own = [r["pdms"] for r in valid if r["plan_ok"] and r.get("pdms") is not None]
        out["pdms_own_plans"] = float(np.mean(own)) if own else None  # over the planner's own plans only
        out["pdms_ci95"] = mean_ci95([r.get("pdms") for r in valid])
        out["c_ci95"] = mean_ci95([r.get("c") for r in valid])
        return out

    families = sorted({r["family"] for r in rows})
    result = {"version": PDMS_VERSION, "overall": summary(rows),
              "per_family": {f: summary([r for r in rows if r["family"] == f]) for f in families}}
    if config is not None:
        result["config"] = config.describe()
    invalid = [r for r in rows if not r["valid"]]
    result["invalid_examples"] = [{"scene_id": r["scene_id"], "reason": r["reason"]} for r in invalid[:10]]
    return result

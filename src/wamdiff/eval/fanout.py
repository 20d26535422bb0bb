"""Evaluation work fanned out over an executor (`wamdiff.executors`: process pool or Ray), the way NAVSIM's scorer
fans out over Ray. `eval.run` opens the executor once per evaluation and calls these when it is not the inline one.

- PDMS reference plans: the scenes not in the reference cache, `batch` scenes per job; the main process caches the
  results (memory + disk) exactly as if it had computed them.
- PDMS scoring: the same `batch`-scene chunks the inline path scores one after the other, one job each (the
  reference plans travel with the chunk), so every row equals the inline row.
- Closed loop: routes in contiguous shards, one `run_routes` per shard with the planner built in the worker
  (a model planner loads its checkpoint there; an `http://` planner talks to the same server). A route only
  sees its own world, so its result does not depend on the shard it ran in (deterministic planners).
Job functions are module-level and take plain picklable values. Workers keep no disk cache: the main process
writes it (a cluster node may not see this machine's folders).
"""

from __future__ import annotations

import math
from dataclasses import replace

from wamdiff.executors import Executor

_EVALUATORS: dict = {}  # PDMSConfig -> PDMSEvaluator, one per worker process


def _evaluator(config):
    from wamdiff.eval.pdms import PDMSEvaluator

    if config not in _EVALUATORS:
        _EVALUATORS[config] = PDMSEvaluator(config)
    return _EVALUATORS[config]


def _reference_job(job):
    config, scenes = job
    ev = _evaluator(config)
    out = []
    for s in scenes:
        try:
            out.append(ev.compute_reference(s))
        except Exception:  # noqa: BLE001 - the scene becomes invalid at scoring, with the reason (as inline)
            out.append(None)
    return out


def _score_job(job):
    config, scenes, plans, name, refs = job
    ev = _evaluator(config)
    for s, ref in zip(scenes, refs):
        if ref is not None:
            ev.remember_reference(s, ref)
    return ev.score(scenes, plans, name)


def _chunks(items: list, size: int) -> list[list]:
    return [items[i: i + size] for i in range(0, len(items), size)]


def reference_plans(ev, scenes: list, ex: Executor, batch: int, progress=None) -> None:
    """Compute the reference plan of every scene `ev` does not know yet on `ex` and cache it in `ev`."""
    todo = [s for s in scenes if ev.cached_reference(s) is None]
    if progress is not None and len(todo) < len(scenes):
        progress(len(scenes) - len(todo))
    config = replace(ev.config, reference_cache=None)
    chunks = _chunks(todo, batch)
    for i, refs in ex.as_completed(_reference_job, [(config, c) for c in chunks]):
        for s, ref in zip(chunks[i], refs):
            if ref is not None:
                ev.remember_reference(s, ref)
        if progress is not None:
            progress(len(chunks[i]))


def score_plans(ev, scenes: list, plans: list, name: str, ex: Executor, batch: int, progress=None) -> list[dict]:
    """`ev.score` over `batch`-scene chunks on `ex`; the rows in scene order."""
    from wamdiff.eval.pdms.reference import ReferencePlan

    config = replace(ev.config, reference_cache=None)
    jobs = []
    for i in range(0, len(scenes), batch):
        chunk = scenes[i: i + batch]
        known = [ev.cached_reference(s) for s in chunk]  # poses only: `best` and the proposal scores stay here
        refs = [None if p is None else ReferencePlan(p, -1, None) for p in known]
        jobs.append((config, chunk, plans[i: i + batch], name, refs))
    parts: list = [None] * len(jobs)
    for i, rows in ex.as_completed(_score_job, jobs):
        parts[i] = rows
        if progress is not None:
            progress(len(jobs[i][1]))
    return [row for part in parts for row in part]


def _routes_job(job):
    from wamdiff.eval.closedloop import run_routes
    from wamdiff.eval.planners import fallback_planner, make_planner

    spec, routes, record_frames, batch = job
    return run_routes(make_planner(spec), routes, record_frames=record_frames, batch=batch, fallback=fallback_planner(spec))


def drive_routes(spec, routes: list, ex: Executor, workers: int, *, record_frames: int = 0, batch: int | None = None,
                 progress=None) -> list:
    """`run_routes` for `spec` over `workers` contiguous route shards on `ex`; results in route order. The first
    `record_frames` routes of the whole set keep frame strips, as inline."""
    size = max(1, math.ceil(len(routes) / max(1, workers)))
    jobs = [(spec, routes[i: i + size], max(0, record_frames - i), batch) for i in range(0, len(routes), size)]
    parts: list = [None] * len(jobs)
    for i, results in ex.as_completed(_routes_job, jobs):
        parts[i] = results
        if progress is not None:
            for _ in results:
                progress()
    return [r for part in parts for r in part]

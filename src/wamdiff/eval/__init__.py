"""Judging planners: NAVSIM v1.1 PDMS (+ v2 EPDMS terms), open-loop L2, Bench2Drive-style closed loop.

API (all planners share one interface, `planners.Planner.plan(scenes) -> list[Plan]`):
- `run`: the one entry every caller uses (CLI, pipeline stages, demo): `evaluate_open(planners, scenes, out)`
  (each planner plans once; PDMS + open-loop metrics from the same plans; CSV/JSON/plots) and
  `evaluate_closed(planners, routes, out)`.
- `specs`: `PlannerSpec.parse("expert" | "cv" | "reference" | "model:PATH[,mode=block,block=32,steps=32,fmt=text2,
  batch=16,max_new_tokens=160,fallback=cv]")`, checked once, before any planning.
- `planners`: `Plan`, `make_planner(spec)`, `plan_batch` (the guarded call: errors become failed plans),
  `plan_scenes`, `with_fallback` (opt-in only). A failed plan scores as a failure.
- `pdms`: `PDMSEvaluator(PDMSConfig(...)).score(scenes, plans, name) -> rows`, `aggregate(rows)`,
  `PDMS_VERSION`; sub-modules `tracker` (LQR + bicycle), `scorer`, `comfort`, `reference` (PDM-Closed-style).
- `openloop`: `openloop_row(scene, plan)`, `aggregate_openloop(rows, reference=None)`.
- `closedloop`: `route_set("dev" | "full")`, `run_route(planner, route)`, `run_routes`, `aggregate_routes`.
- `report`: CSV writer and plots; `synthetic`: hand-made scenes with known answers; `cli`: `wamdiff eval`.
"""

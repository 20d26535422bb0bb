"""Judging planners: NAVSIM v1.1 PDMS (+ v2 EPDMS terms), open-loop L2, Bench2Drive-style closed loop.

API (all planners share one interface, `planners.Planner.plan(scenes) -> list[Plan]`):
- `planners`: `Plan`, `make_planner(spec)` ("expert" | "cv" | "reference" |
  "model:PATH[,mode=block,threshold=0.9,block=32,steps=32,fmt=text2,batch=16,max_new_tokens=160,fallback=cv]"),
  `plan_all(planner, scenes)` (batches + counted fallback), `with_fallback(scenes, plans)`.
- `pdms`: `PDMSEvaluator(PDMSConfig(...)).score(scenes, plans, name) -> rows`, `aggregate(rows)`,
  `PDMS_VERSION`; sub-modules `tracker` (LQR + bicycle), `scorer`, `comfort`, `reference` (PDM-Closed-style).
- `openloop`: `openloop_row(scene, plan)`, `aggregate_openloop(rows, reference=None)`.
- `closedloop`: `route_set("dev" | "full")`, `run_route(planner, route)`, `run_routes`, `aggregate_routes`.
- `report`: CSV / JSON writers and plots; `synthetic`: hand-made scenes with known answers; `cli`: `wamdiff eval`.
"""

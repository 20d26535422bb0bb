"""On-policy data aggregation (DAgger): label the states a model drives into with the expert's plan.

A model trained only on the expert's states never sees its own drift, so in closed loop small errors carry it
where it has no data (covariate shift). One round here:
1. drive `routes_per_family` training routes per family with the model in closed loop (`run_routes`, the
   same loop as the evaluation, on seeds of their own: `AGGREGATE_SEED_BASE`, far from the evaluation routes);
2. every `label_every` replans, copy the live world, hand the copy's ego back to the expert from exactly that
   state (`World.autopilot`) and capture the scene with the expert's next 5 s as its label (`capture_scene`,
   the same drops as data generation: crash, comfort, off the drivable area); states where the ego already
   left its route are not labelled (the expert's route no longer applies there), unless `recover_m` > 0:
   then every state within that distance of the route centreline is, on whatever road the ego drifted to,
   and the expert steers back to the route's lane (recovery labels, the states a model that drifts needs);
3. write the scenes next to the dataset's and the planning / QA files `agg_r<round>.json`, plus the union
   of all rounds so far, `agg.json`, which training mixes in beside `train.json`.

Resumable: a round whose files exist is skipped (`force` redoes it). The manifest records per round and family
the routes driven, states visited, labelled and dropped (by reason) and how the routes ended.
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from wamdiff.driving.world import FAMILIES
from wamdiff.jsonfile import write_json

AGGREGATE_SEED_BASE = 30_000_000  # beyond the data splits (0.., 10 M.., 20 M..) and the closed-loop routes (7 M..)
AGGREGATE_SPLIT = "agg"


@dataclass(frozen=True)
class AggregationRound:
    round: int
    routes_per_family: int = 25
    label_every: int = 2  # replans (0.5 s each) between labelled states
    recover_m: float = 0.0  # > 0: also label states this far off the route (the expert rejoins it); 0: on-route only
    families: tuple[str, ...] = FAMILIES

    def routes(self):
        from wamdiff.eval.closedloop import Route

        if self.routes_per_family <= 0 or self.label_every <= 0 or self.round < 0 or self.recover_m < 0:
            raise ValueError(f"aggregation round {self.round}: routes_per_family and label_every must be > 0, "
                             "recover_m >= 0")
        return [Route(f"{f}_agg{self.round}_{i:03d}", f,
                      AGGREGATE_SEED_BASE + 100_000 * self.round + 1000 * FAMILIES.index(f) + i)
                for f in self.families for i in range(self.routes_per_family)]


def round_files(out: Path, round_index: int) -> tuple[Path, Path]:
    return out / f"{AGGREGATE_SPLIT}_r{round_index}.json", out / f"{AGGREGATE_SPLIT}_r{round_index}_qa.json"


def aggregate_round(spec, out: str | Path, settings: AggregationRound, fmt: str, force: bool = False,
                    progress=None) -> dict:
    """Run one round with the planner of `spec` (a PlannerSpec); returns the round's manifest entry."""
    from wamdiff.driving.capture import Drop, capture_scene
    from wamdiff.driving.prompts import answer_text, scene_prompt
    from wamdiff.driving.qa import qa_samples
    from wamdiff.driving.wamdiff2_json import ConversationSample, write_samples
    from wamdiff.eval.closedloop import planner_camera, run_routes
    from wamdiff.eval.pdms.vehicle import AX, STEER
    from wamdiff.eval.planners import make_planner

    out = Path(out)
    plan_file, qa_file = round_files(out, settings.round)
    manifest_path = out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    done = manifest.get("aggregation", {}).get(str(settings.round))
    if done and plan_file.exists() and not force:
        return done
    planner = make_planner(spec)
    camera = planner_camera(planner)
    (out / "scenes").mkdir(parents=True, exist_ok=True)
    counts = {f: Counter() for f in settings.families}
    plan_samples, qa = [], []
    seen: dict[str, int] = {}

    def label(route, world, state) -> None:
        k = seen.get(route.name, 0)
        seen[route.name] = k + 1
        c = counts[route.family]
        c["visited"] += 1
        if k % settings.label_every:
            return
        recovery = not world.is_on_route()
        if recovery and abs(world.route_offset()) > settings.recover_m:
            c["off_route"] += 1
            return
        twin = copy.deepcopy(world)
        twin.autopilot(accel=float(state[AX]), steer=float(state[STEER]))
        name = f"{route.name}_t{int(round(world.time * 10)):04d}"
        scene = capture_scene(twin, name, AGGREGATE_SPLIT, camera)
        if isinstance(scene, Drop):
            c[f"drop_{scene.reason}"] += 1
            return
        c["labelled"] += 1
        c["labelled_recovery"] += recovery
        scene.meta["aggregation"] = {"round": settings.round, "route": route.name, "planner": spec.text,
                                     "recovery": recovery}
        scene.save(out / "scenes" / name)
        png = str((out / "scenes" / f"{name}.png").resolve())
        plan_samples.append(ConversationSample(
            id=name, image_paths=[png], human=scene_prompt(scene), answer=answer_text(scene, fmt),
            meta={"family": route.family, "seed": route.seed, "command": scene.command, "fmt": fmt,
                  "scene": f"scenes/{name}.npz", "round": settings.round}))
        qa.extend(qa_samples(scene, png))

    results = run_routes(planner, settings.routes(), on_replan=label, progress=progress)
    for r in results:
        counts[r.route.family][f"route_{r.status}"] += 1
    write_samples(plan_samples, plan_file)
    write_samples(qa, qa_file)
    entry = {"planner": spec.text, "routes_per_family": settings.routes_per_family, "label_every": settings.label_every,
             "recover_m": settings.recover_m,
             "labelled": len(plan_samples), "camera": camera.to_dict(), "answer_format": fmt,
             "families": {f: dict(c) for f, c in counts.items()}}
    _merge_rounds(out, manifest, settings.round, entry)
    return entry


def _merge_rounds(out: Path, manifest: dict, round_index: int, entry: dict) -> None:
    """`agg.json` / `agg_qa.json` = every round so far; the manifest gets the round's entry."""
    from wamdiff.driving.wamdiff2_json import read_samples, write_samples

    manifest.setdefault("aggregation", {})[str(round_index)] = entry
    rounds = sorted(int(r) for r in manifest["aggregation"])
    plan, qa = [], []
    for r in rounds:
        p, q = round_files(out, r)
        if p.exists():
            plan += read_samples(p)
            qa += read_samples(q)
    write_samples(plan, out / f"{AGGREGATE_SPLIT}.json")
    write_samples(qa, out / f"{AGGREGATE_SPLIT}_qa.json")
    manifest["aggregation_total"] = len(plan)
    write_json(out / "manifest.json", manifest)


__all__ = ["AGGREGATE_SEED_BASE", "AggregationRound", "aggregate_round", "round_files"]

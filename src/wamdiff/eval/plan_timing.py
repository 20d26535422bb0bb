"""Plan timings for the evaluation tables: every model planner decodes the same scenes at batch 1, 8 and 32, the
planners interleaved (round robin, order rotated per repeat), the median repeat kept.

The figures follow the one speed definition (`wamdiff.decoding.speed`): time = the planner's `generate` calls
(prompt encoding and answer parsing excluded, as in `wamdiff bench`), latency = wall time of one batch (ms per
trajectory at batch 1), plans/s, tok/s and TPF; so the tables' "× AR" -- plans/s ratio to the AR planner at the
same batch size -- means what the bench's headline means.
"""

from __future__ import annotations

from dataclasses import dataclass

from wamdiff.decoding.speed import Speed, median_speed


@dataclass(frozen=True)
class SpeedProbe:
    """batches: the batch sizes timed; plans: scenes timed per batch size (the first ones, repeated to fill a batch
    larger than that); repeats: interleaved repeats (the median is kept)."""

    batches: tuple[int, ...] = (1, 8, 32)
    plans: int = 16
    repeats: int = 1

    @classmethod
    def from_dict(cls, d: dict | None) -> "SpeedProbe | None":
        """From a pipeline YAML's `evaluate.speed` (None / false: no probe)."""
        if d is None or d is False:
            return None
        d = dict(d or {})
        unknown = sorted(set(d) - {"batches", "plans", "repeats"})
        if unknown:
            raise ValueError(f"evaluate.speed: unknown key(s) {unknown} (known: batches, plans, repeats)")
        probe = cls(tuple(int(b) for b in d.get("batches", cls.batches)), int(d.get("plans", cls.plans)),
                    int(d.get("repeats", cls.repeats)))
        if min(probe.batches, default=0) < 1 or probe.plans < 1 or probe.repeats < 1:
            raise ValueError(f"evaluate.speed: batches, plans and repeats must be >= 1, got {d}")
        return probe


def plans_speed(plans, batch: int) -> Speed:
    """Speed of model plans (`Plan.latency_s` = its share of the `generate` call) decoded at `batch`."""
    return Speed(batch, len(plans), sum(p.new_tokens for p in plans), sum(p.forwards for p in plans),
                 sum(p.latency_s for p in plans))


def time_planners(planners: dict, scenes: list, probe: SpeedProbe, progress=None) -> dict[str, dict[str, dict]]:
    """{planner name: {str(batch): Speed.as_dict()}} for the model planners in `planners` ({name: planner with
    `plan(scenes, batch=)`}), all timed on the same scenes."""
    names = list(planners)
    out: dict[str, dict[str, dict]] = {n: {} for n in names}
    for batch in probe.batches:
        count = max(batch, probe.plans)
        pool = [scenes[i % len(scenes)] for i in range(count - count % batch)]
        runs: dict[str, list[Speed]] = {n: [] for n in names}
        for r in range(probe.repeats):
            for name in names[r % len(names):] + names[:r % len(names)]:
                runs[name].append(plans_speed(planners[name].plan(pool, batch=batch), batch))
                if progress:
                    progress()
        for name in names:
            out[name][str(batch)] = median_speed(runs[name]).as_dict()
    return out

"""Plan timings and the tables' speed columns: one speed definition (`decoding.speed`) from the planner's own
`generate` timings, planners interleaved on the same scenes, × AR = plans/s ratio to the AR row at batch 1."""

from __future__ import annotations

from pathlib import Path

import pytest

from wamdiff.decoding.config import Generation
from wamdiff.decoding.speed import Speed, speed_of, times_ar
from wamdiff.eval.plan_timing import SpeedProbe, time_planners
from wamdiff.eval.planners import Plan
from wamdiff.eval.specs import PlannerSpec


class FakePlanner:
    """Each `generate` call of a batch takes `base + per_plan * batch` seconds; answers of `tokens` tokens."""

    def __init__(self, name, base, per_plan, tokens, forwards, log):
        self.name, self.base, self.per_plan, self.tokens, self.forwards, self.log = name, base, per_plan, tokens, forwards, log

    def plan(self, scenes, batch=None):
        self.log.append((self.name, len(scenes), batch))
        out = []
        for i in range(0, len(scenes), batch):
            chunk = scenes[i:i + batch]
            dt = (self.base + self.per_plan * len(chunk)) / len(chunk)
            out += [Plan(None, ok=False, forwards=self.forwards, new_tokens=self.tokens, latency_s=dt) for _ in chunk]
        return out


def test_planners_are_timed_on_the_same_scenes_interleaved_at_each_batch():
    log = []
    planners = {"AR": FakePlanner("AR", 0.0, 0.2, 112, 112, log), "diff": FakePlanner("diff", 0.03, 0.02, 112, 14, log)}
    got = time_planners(planners, list(range(5)), SpeedProbe(batches=(1, 8), plans=4, repeats=2))
    # batch 1: 4 scenes (the first ones); batch 8: one batch of 8 (scenes repeated); repeats alternate the order
    assert log == [("AR", 4, 1), ("diff", 4, 1), ("diff", 4, 1), ("AR", 4, 1),
                   ("AR", 8, 8), ("diff", 8, 8), ("diff", 8, 8), ("AR", 8, 8)]
    ar1, d1, d8 = got["AR"]["1"], got["diff"]["1"], got["diff"]["8"]
    assert ar1["latency_ms"] == pytest.approx(200) and d1["latency_ms"] == pytest.approx(50)  # ms per trajectory
    assert d8["latency_ms"] == pytest.approx(1e3 * (0.03 + 0.16)) and d8["plans_per_s"] == pytest.approx(8 / 0.19)
    assert d1["tpf"] == pytest.approx(8.0) and ar1["tpf"] == 1.0
    assert times_ar(d1, ar1) == pytest.approx(4.0)
    with pytest.raises(ValueError, match="same batch"):
        times_ar(d8, ar1)


def test_speed_of_generations_is_the_one_definition():
    gens = [Generation([1] * 10, "", 2, True), Generation([1] * 20, "", 4, True), Generation([1] * 30, "", 6, True)]
    s = speed_of(gens, 1.5, batch=2)  # 3 plans in batches of 2 -> 2 batches
    assert (s.plans, s.tokens, s.forwards, s.batches) == (3, 60, 12, 2)
    assert s.latency_ms == pytest.approx(750) and s.plans_per_s == pytest.approx(2.0) and s.tok_s == pytest.approx(40)
    assert s.tpf == pytest.approx(5.0)
    assert Speed(1, 1, 0, 0, 0.0).as_dict()["tpf"] != Speed(1, 1, 0, 0, 0.0).as_dict()["tpf"]  # nan, not an error


def test_report_speed_columns_use_the_plan_timings_at_batch_1():
    from wamdiff.orchestration.summary import table_rows

    from wamdiff.orchestration.sections import BenchSection

    class P:  # two AR rows: "× AR" divides by the one the bench compares (`bench.ar`), not by the first
        cfg = {"bench": {"ar": "ar_vla", "diffusion": "b"}}
        bench = BenchSection(**cfg["bench"])
        out = Path("/nonexistent/run")  # no per-scene files: no paired column
        checkpoints: dict = {}

        @staticmethod
        def planners():
            return {"cv": PlannerSpec.parse("cv"), "AR before": PlannerSpec.parse("model:ar_sft,mode=ar"),
                    "AR VLA": PlannerSpec.parse("model:ar_vla,mode=ar"), "diff": PlannerSpec.parse("model:b,block=32")}

        @staticmethod
        def checkpoint(stage):
            return Path(stage)

    def speed(latency_ms, b8):
        return {"1": Speed(1, 4, 448, 448 // 7, 4 * latency_ms / 1e3).as_dict(), "8": Speed(8, 8, 896, 100, b8).as_dict()}

    results = {"open": {"planners": {"cv": {}, "AR before": {"speed": speed(100, 1.0)}, "AR VLA": {"speed": speed(200, 1.0)},
                                     "diff": {"speed": speed(50, 2.0)}}}}
    rows = {r["planner"]: r for r in table_rows(P, results)}
    assert rows["AR before"]["x_ar_b1"] == pytest.approx(2.0)
    assert rows["diff"]["ms_plan_b1"] == pytest.approx(50) and rows["diff"]["x_ar_b1"] == pytest.approx(4.0)
    assert rows["AR VLA"]["x_ar_b1"] == pytest.approx(1.0) and rows["diff"]["plans_s_b8"] == pytest.approx(4.0)
    assert rows["diff"]["plans_s_b32"] is None and rows["cv"]["x_ar_b1"] is None and rows["cv"]["tok_s_b1"] is None


def test_speed_probe_from_a_pipeline_yaml():
    assert SpeedProbe.from_dict({}) == SpeedProbe()
    assert SpeedProbe.from_dict({"batches": [1, 2], "plans": 3}) == SpeedProbe((1, 2), 3, 1)
    assert SpeedProbe.from_dict(None) is None and SpeedProbe.from_dict(False) is None
    with pytest.raises(ValueError, match="unknown key"):
        SpeedProbe.from_dict({"batch": [1]})
    with pytest.raises(ValueError, match=">= 1"):
        SpeedProbe.from_dict({"batches": [0]})

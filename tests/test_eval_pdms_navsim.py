"""Golden values from NAVSIM's own code: the simulation, comfort and EPDMS rules reproduce NAVSIM, quirks included.

The numbers in GOLDEN come from NAVSIM's unmodified files (autonomousvision/navsim, tag v1.1 for
`pdm_planner/simulation/` and the v1.1 comfort metrics; main for the v2 comfort metrics), with minimal stand-ins for
the nuPlan types they import, run on the inputs the `*_inputs` functions below build. `python tools/navsim_golden.py
--navsim PATH` (PATH: a git clone of NAVSIM) recomputes them and prints any that differ
(docs/development/testing.md).
"""

import numpy as np
import pytest

from wamdiff.eval.pdms import PDMSConfig, PDMSEvaluator
from wamdiff.eval.pdms.comfort import comfort_checks, comfort_checks_v2, comfort_signals, comfort_signals_v2
from wamdiff.eval.pdms.score import _history_states
from wamdiff.eval.pdms.scorer import combine, combine_epdms
from wamdiff.eval.pdms.tracker import initial_state, interpolate_plan, navsim_banded_difference, simulate
from wamdiff.eval.pdms.vehicle import PACIFICA, AX, VX
from wamdiff.eval.planners import Plan
from wamdiff.eval.synthetic import AgentSpec, plan_from_speed_profile, straight_road_scene

CHECK_ORDER = ("lon_acc", "lat_acc", "jerk", "lon_jerk", "yaw_acc", "yaw_rate")  # NAVSIM's ego_is_comfortable order
DECELERATIONS = [(12.0, -3.9), (15.0, -3.58)]  # (v0 m/s, constant deceleration m/s^2)
HISTORIES = [[0.0, 0.0, -6.0, 0.0], [0.0, -1.0, -1.0, 0.0]]  # the last 4 logged longitudinal accelerations

# NAVSIM's results on those inputs (transcribed from tools/navsim_golden.py's output)
GOLDEN = {
    "banded_difference_3": [[-1, 0, 0, 0], [0, -1, 0, 0], [0, 0, -1, 1]],  # v1.1 `_make_banded_difference_matrix(3)`
    "curve_xyh_at_1_2_3_4_s": [[7.943273442357, 0.631869772555, 0.284647841353],
                               [14.628011967752, 4.761955427045, 0.885441925694],
                               [18.186865737724, 11.823151953179, 1.32335736412],
                               [19.167283878243, 19.713894935725, 1.588916592233]],
    "curve_max_abs_yaw_acc": 0.69639748,  # 0.026 from an estimated steer
    "curve_max_abs_yaw_rate": 0.62191552,
    "curve_comfortable": [True, True, True, True, True, True],
    "deceleration_lon_acc_min": [-4.04830914, -4.04869448],
    "deceleration_comfortable": [[True, True, True, True, True, True], [True, True, True, True, True, True]],
    "history_v2_comfortable": [[False, True, False, False, True, True], [True, True, True, True, True, True]],
    "history_v2_lon_acc_min": [-5.2125, -1.0375],
}


def _arc_plan(radius: float, speed: float) -> np.ndarray:
    ang = speed * np.arange(1, 9) * 0.5 / radius
    return np.stack([radius * np.sin(ang), radius * (1 - np.cos(ang)), ang], -1)


def _history_on_arc(radius: float, speed: float) -> np.ndarray:
    """(4, 7) ego-frame history of a car that has been on the same circle for 1.5 s (yaw rate speed / radius)."""
    ang = speed * np.arange(-3, 1) * 0.5 / radius
    x, y = radius * np.sin(ang), radius * (1 - np.cos(ang))
    return np.stack([x, y, ang, np.full(4, speed), np.zeros(4), np.zeros(4), np.zeros(4)], 1)


def curve_inputs() -> tuple[np.ndarray, np.ndarray]:
    """20 m radius at 8 m/s: (1, 41, 3) reference poses at 0.1 s, (1, 11) initial state."""
    return interpolate_plan(_arc_plan(20.0, 8.0)[None]), initial_state(_history_on_arc(20.0, 8.0))[None]


def deceleration_inputs(v0: float, decel: float) -> tuple[np.ndarray, np.ndarray]:
    t = np.minimum(np.arange(1, 9) * 0.5, v0 / -decel)
    plan = np.stack([v0 * t + 0.5 * decel * t**2, np.zeros(8), np.zeros(8)], -1)
    init = np.zeros((1, 11))
    init[0, VX] = v0
    return interpolate_plan(plan[None]), init


def history_inputs(hist_ax: list[float]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Straight at 10 m/s after the given accelerations: poses, initial state, and the 14 past states."""
    scene = straight_road_scene(speed=10.0)
    scene.ego_history[:, AX] = hist_ax
    plan = np.concatenate([plan_from_speed_profile(np.full(8, 10.0)), np.zeros((8, 1))], 1)
    return interpolate_plan(plan[None]), initial_state(scene.ego_history)[None], _history_states(scene)


def test_banded_matrix_is_navsims():
    # NAVSIM v1.1 `_make_banded_difference_matrix(3)`: -eye written over +eye
    assert np.array_equal(navsim_banded_difference(3), GOLDEN["banded_difference_3"])


def test_curve_starts_with_zero_steering_as_navsim():
    """NAVSIM starts from steering 0 / yaw rate 0 however curved the history is."""
    poses, init = curve_inputs()
    assert init[0, VX] == 8.0 and not np.any(init[0, 7:])  # steering, steering rate, yaw rate, yaw acceleration
    states = simulate(poses, init, PACIFICA)
    np.testing.assert_allclose(states[0, [10, 20, 30, 40], :3], GOLDEN["curve_xyh_at_1_2_3_4_s"], atol=1e-9)
    sig = comfort_signals(states)
    assert np.abs(sig["yaw_acc"]).max() == pytest.approx(GOLDEN["curve_max_abs_yaw_acc"], abs=1e-8)
    assert np.abs(sig["yaw_rate"]).max() == pytest.approx(GOLDEN["curve_max_abs_yaw_rate"], abs=1e-8)
    assert [bool(comfort_checks(states)[k][0]) for k in CHECK_ORDER] == GOLDEN["curve_comfortable"]


@pytest.mark.parametrize("case", range(len(DECELERATIONS)))
def test_constant_deceleration_at_the_comfort_bound(case):
    """NAVSIM's velocity fit (acceleration-magnitude penalty) keeps these plans inside -4.05 m/s^2; the intended
    jerk penalty would put them outside (-4.06), so this flips the comfort verdict."""
    states = simulate(*deceleration_inputs(*DECELERATIONS[case]), PACIFICA)
    assert comfort_signals(states)["lon_acc"].min() == pytest.approx(GOLDEN["deceleration_lon_acc_min"][case], abs=1e-8)
    assert [bool(comfort_checks(states)[k][0]) for k in CHECK_ORDER] == GOLDEN["deceleration_comfortable"][case]


@pytest.mark.parametrize("case", range(len(HISTORIES)))
def test_history_comfort_uses_v2_windows(case):
    """v2 history comfort: 14 past states (-1.5 .. -0.2 s) + the simulation, centre accelerations, windows 8 / 15."""
    poses, init, hist = history_inputs(HISTORIES[case])
    assert len(hist) == 14
    padded = np.concatenate([hist[None], simulate(poses, init, PACIFICA)], 1)
    checks = comfort_checks_v2(padded)
    assert [bool(checks[k][0]) for k in CHECK_ORDER] == GOLDEN["history_v2_comfortable"][case]
    assert comfort_signals_v2(padded)["lon_acc"].min() == pytest.approx(GOLDEN["history_v2_lon_acc_min"][case], abs=1e-8)


def _terms(**kw):
    base = {"nc": [1.0, 1.0], "dac": [1.0, 1.0], "ddc": [1.0, 1.0], "tlc": [1.0, 1.0], "ttc": [1.0, 1.0],
            "lk": [1.0, 1.0], "hc": [1.0, 1.0], "ec": [1.0, 1.0], "c": [1.0, 1.0], "progress_m": [20.0, 20.0]}
    base.update(kw)
    return {k: np.asarray(v, float) for k, v in base.items()}


def test_epdms_progress_is_not_zeroed_by_a_cone():
    """A plan that touches a cone (NC 0.5) with the reference's progress: v1.1 EP 0.5, v2 EP stays 1.0."""
    m = _terms(nc=[1.0, 0.5])
    assert combine(m)["ep"][1] == pytest.approx(0.5)
    e = combine_epdms(m)
    assert e["ep"][1] == 1.0
    assert e["epdms"][1] == pytest.approx(0.5)  # 0.5 * (5 + 5 + 2 + 2 + 2) / 16


def test_human_filter_applies_after_scoring():
    """EP is normalised with the unfiltered multipliers; then a term the human fails is set to 1 for the plan."""
    m = _terms(dac=[1.0, 0.0], progress_m=[10.0, 30.0])  # the plan leaves the road but drives further
    human = {k: v[1:] for k, v in _terms(dac=[0.0, 0.0], hc=[0.0, 0.0]).items()}
    e = combine_epdms(m, human)
    assert e["dac"][1] == 1.0 and e["ep"][1] == 1.0  # 30 / max(10, 30 * 0) clipped
    assert e["epdms"][1] == 1.0


def test_scene_with_a_cone_scores_v2_ep_one():
    """End to end: the plan clips a cone on its lane and drives further than the reference (which swerves)."""
    cone = AgentSpec(x=30.0, y=-1.0, length=0.5, width=0.5, is_vehicle=False)
    scene = straight_road_scene(speed=10.0, agents=[cone])
    plan = Plan(plan_from_speed_profile(np.linspace(11.0, 14.0, 8)))
    row = PDMSEvaluator(PDMSConfig(epdms=True)).score([scene], [plan])[0]
    assert row["valid"], row["reason"]
    assert row["nc"] == 0.5 and row["progress_m"] > row["ref_progress_m"] > 0.5 * row["progress_m"]
    assert row["epdms_ep"] == 1.0  # v2: clip(progress / max(ref, 0.5 * progress), 0, 1)
    assert row["ep"] == pytest.approx(0.5 * row["progress_m"] / row["ref_progress_m"])  # v1.1


def test_human_history_does_not_filter_history_comfort():
    """NAVSIM v2 scores the human without its past, so a bad history still costs the plan its HC."""
    scene = straight_road_scene(speed=10.0)
    scene.ego_history[:, AX] = [0.0, 0.0, -6.0, 0.0]
    row = PDMSEvaluator(PDMSConfig(epdms=True)).score([scene], [Plan(plan_from_speed_profile(np.full(8, 10.0)))])[0]
    assert row["valid"], row["reason"]
    assert row["hc"] == 0.0

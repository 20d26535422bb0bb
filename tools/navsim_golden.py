"""Recompute the NAVSIM golden values of tests/test_eval_pdms_navsim.py (its GOLDEN) with NAVSIM's own code.

    git clone https://github.com/autonomousvision/navsim ~/navsim
    PYTHONPATH=src python tools/navsim_golden.py --navsim ~/navsim

NAVSIM's files are taken unmodified from the clone's history (`git archive`): `pdm_planner/simulation/` and the
comfort metrics at tag v1.1 (--v1), the comfort metrics of main (--v2: history comfort). They run on the inputs the
test builds (its `*_inputs` functions: the same reference poses and initial states). The nuPlan types they import are
replaced by minimal stand-ins unless nuplan-devkit is installed. Prints every value; exit 1 if one differs from the
test's GOLDEN (then paste the printed dict there, after checking why), 2 on bad input. Not run in CI: NAVSIM is not a
dependency of wamdiff. docs/development/testing.md has the details.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import io
import json
import math
import subprocess
import sys
import tarfile
import tempfile
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PDM = "navsim/planning/simulation/planner/pdm_planner"
# the packages above pdm_planner (empty __init__ files at v1.1 and on main) and the folders used
NEEDED = ["navsim/__init__.py", "navsim/planning/__init__.py", "navsim/planning/simulation/__init__.py",
          "navsim/planning/simulation/planner/__init__.py", f"{PDM}/__init__.py", f"{PDM}/simulation", f"{PDM}/scoring",
          f"{PDM}/utils"]


def fail(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


# -- nuPlan stand-ins: only what NAVSIM's simulation and comfort files touch ------------------------------------------
@dataclass(frozen=True)
class TimePoint:
    time_us: int

    @property
    def time_s(self) -> float:
        return self.time_us * 1e-6

    def __add__(self, other: "TimeDuration") -> "TimePoint":
        return TimePoint(self.time_us + other.time_us)

    def __sub__(self, other: "TimePoint") -> "TimeDuration":
        return TimeDuration(self.time_us - other.time_us)


@dataclass(frozen=True)
class TimeDuration:
    time_us: int

    @classmethod
    def from_s(cls, s: float) -> "TimeDuration":
        return cls(int(s * 1e6))

    @property
    def time_s(self) -> float:
        return self.time_us * 1e-6


@dataclass(frozen=True)
class SimulationIteration:
    time_point: TimePoint
    index: int


@dataclass(frozen=True)
class TrajectorySampling:
    num_poses: int
    interval_length: float


class VehicleParameters:
    """nuPlan's VehicleParameters: lengths from the rear axle; the box centre lies rear_axle_to_center ahead of it."""

    def __init__(self, width, front_length, rear_length, cog_position_from_rear_axle, wheel_base, vehicle_name,
                 vehicle_type, height=None):
        self.width, self.front_length, self.rear_length = width, front_length, rear_length
        self.cog_position_from_rear_axle, self.wheel_base, self.height = cog_position_from_rear_axle, wheel_base, height
        self.vehicle_name, self.vehicle_type = vehicle_name, vehicle_type
        self.length = front_length + rear_length
        self.half_width, self.half_length = width / 2.0, self.length / 2.0
        self.rear_axle_to_center = abs(self.half_length - rear_length)


def get_pacifica_parameters() -> VehicleParameters:
    return VehicleParameters(width=1.1485 * 2.0, front_length=4.049, rear_length=1.127, cog_position_from_rear_axle=1.67,
                             wheel_base=3.089, vehicle_name="pacifica", vehicle_type="gen1", height=1.777)


def principal_value(angle, min_=-math.pi):
    return (angle - min_) % (2 * math.pi) + min_


def install_nuplan_stand_ins() -> None:
    if importlib.util.find_spec("nuplan") is not None:
        return  # the real nuplan-devkit
    placeholder = type("Placeholder", (), {})  # only named in annotations or unused conversions
    modules = {
        "nuplan.common.actor_state.ego_state": {"EgoState": placeholder},
        "nuplan.common.actor_state.state_representation": {"TimePoint": TimePoint, "TimeDuration": TimeDuration,
                                                           "StateSE2": placeholder, "StateVector2D": placeholder},
        "nuplan.common.actor_state.vehicle_parameters": {"VehicleParameters": VehicleParameters,
                                                         "get_pacifica_parameters": get_pacifica_parameters},
        "nuplan.common.geometry.compute": {"principal_value": principal_value},
        "nuplan.planning.simulation.simulation_time_controller.simulation_iteration": {
            "SimulationIteration": SimulationIteration},
        "nuplan.planning.simulation.trajectory.trajectory_sampling": {"TrajectorySampling": TrajectorySampling},
    }
    for name, attrs in modules.items():
        parts = name.split(".")
        for i in range(1, len(parts) + 1):
            sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
        vars(sys.modules[name]).update(attrs)


# -- NAVSIM at a revision ---------------------------------------------------------------------------------------------
def extract(navsim: Path, rev: str, into: Path) -> Path:
    """NAVSIM's files at `rev` under `into` (a folder to put on sys.path)."""
    res = subprocess.run(["git", "-C", str(navsim), "archive", "--format=tar", rev, "--", *NEEDED], capture_output=True)
    if res.returncode != 0:
        line = res.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["git archive failed"]
        fail(f"--navsim {navsim}: cannot read {rev!r} from it ({line[0]}); it must be a git clone of "
             "https://github.com/autonomousvision/navsim with its tags")
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(res.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def load(root: Path, *modules: str) -> list[types.ModuleType]:
    """Import NAVSIM modules from `root` (imported lazily, and afresh: another revision may have been loaded)."""
    for name in [m for m in sys.modules if m == "navsim" or m.startswith("navsim.")]:
        del sys.modules[name]
    sys.path.insert(0, str(root))
    try:
        return [importlib.import_module(f"{PDM.replace('/', '.')}.{m}") for m in modules]
    except ImportError as err:
        fail(f"NAVSIM's files under {root} do not import ({err}); a package they need is missing (pip install scipy shapely)")
    finally:
        sys.path.remove(str(root))


def simulate(sim_module, poses: np.ndarray, init: np.ndarray) -> np.ndarray:
    """NAVSIM's PDMSimulator on (1, T, 3) reference poses from a (1, 11) initial state (nuPlan's EgoState stand-in
    carries exactly that state)."""
    rear_axle = types.SimpleNamespace(serialize=lambda: list(init[0, 0:3]))
    vec = lambda a: types.SimpleNamespace(array=np.asarray(a, float))  # noqa: E731
    ego = types.SimpleNamespace(
        rear_axle=rear_axle, tire_steering_angle=init[0, 7], time_point=TimePoint(0),
        car_footprint=types.SimpleNamespace(vehicle_parameters=get_pacifica_parameters()),
        dynamic_car_state=types.SimpleNamespace(rear_axle_velocity_2d=vec(init[0, 3:5]),
                                                rear_axle_acceleration_2d=vec(init[0, 5:7]), tire_steering_rate=init[0, 8],
                                                angular_velocity=init[0, 9], angular_acceleration=init[0, 10]))
    proposal = np.zeros((1, poses.shape[1], 11))
    proposal[..., :3] = poses
    sampling = TrajectorySampling(num_poses=poses.shape[1] - 1, interval_length=0.1)
    return sim_module.PDMSimulator(sampling).simulate_proposals(proposal, ego)


def golden(navsim: Path, v1: str, v2: str) -> dict:
    sys.path.insert(0, str(ROOT / "tests"))
    import test_eval_pdms_navsim as t  # the inputs and the values the test carries

    install_nuplan_stand_ins()
    out: dict = {}
    with tempfile.TemporaryDirectory(prefix="navsim-golden-") as tmp:
        sim, lqr_utils, comfort = load(extract(navsim, v1, Path(tmp) / "v1"), "simulation.pdm_simulator",
                                       "simulation.batch_lqr_utils", "scoring.pdm_comfort_metrics")
        out["banded_difference_3"] = lqr_utils._make_banded_difference_matrix(3).astype(int).tolist()

        def signals(states):
            tp = np.arange(states.shape[1]) * 0.1
            n = states.shape[1]
            return {"yaw_acc": comfort._extract_ego_yaw_rate(states, tp, deriv_order=2, poly_order=3, window_length=n),
                    "yaw_rate": comfort._extract_ego_yaw_rate(states, tp, window_length=n),
                    "lon_acc": comfort._extract_ego_acceleration(states, acceleration_coordinate="x", window_length=n),
                    "checks": comfort.ego_is_comfortable(states, tp)[0].tolist()}

        states = simulate(sim, *t.curve_inputs())
        sig = signals(states)
        out["curve_xyh_at_1_2_3_4_s"] = [[round(float(v), 12) for v in row] for row in states[0, [10, 20, 30, 40], :3]]
        out["curve_max_abs_yaw_acc"] = round(float(np.abs(sig["yaw_acc"]).max()), 8)
        out["curve_max_abs_yaw_rate"] = round(float(np.abs(sig["yaw_rate"]).max()), 8)
        out["curve_comfortable"] = sig["checks"]
        decel = [signals(simulate(sim, *t.deceleration_inputs(*case))) for case in t.DECELERATIONS]
        out["deceleration_lon_acc_min"] = [round(float(s["lon_acc"].min()), 8) for s in decel]
        out["deceleration_comfortable"] = [s["checks"] for s in decel]
        padded = []
        for hist_ax in t.HISTORIES:
            poses, init, hist = t.history_inputs(hist_ax)
            padded.append(np.concatenate([hist[None], simulate(sim, poses, init)], 1))

        (comfort2,) = load(extract(navsim, v2, Path(tmp) / "v2"), "scoring.pdm_comfort_metrics")
        out["history_v2_comfortable"], out["history_v2_lon_acc_min"] = [], []
        for states in padded:
            tp = np.arange(states.shape[1]) * 0.1
            out["history_v2_comfortable"].append(comfort2.ego_is_comfortable(states, tp)[0].tolist())
            lon = comfort2._extract_ego_acceleration(states, acceleration_coordinate="x",
                                                     vehicle_parameters=get_pacifica_parameters())
            out["history_v2_lon_acc_min"].append(round(float(lon.min()), 8))
    return {"computed": out, "carried": t.GOLDEN}


def differences(computed: dict, carried: dict, atol: float = 1e-8) -> list[str]:
    bad = []
    for key in sorted(set(computed) | set(carried)):
        a, b = computed.get(key), carried.get(key)
        if a is None or b is None:
            bad.append(f"{key}: only in {'the test' if a is None else 'NAVSIM'}")
        elif np.asarray(a).dtype == bool or np.asarray(b).dtype == bool:
            if np.asarray(a).tolist() != np.asarray(b).tolist():
                bad.append(f"{key}: NAVSIM {a}, the test {b}")
        elif np.shape(a) != np.shape(b) or not np.allclose(a, b, rtol=0, atol=atol):
            bad.append(f"{key}: NAVSIM {a}, the test {b}")
    return bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--navsim", type=Path, required=True, help="a git clone of https://github.com/autonomousvision/navsim")
    ap.add_argument("--v1", default="v1.1", help="the revision of the simulation and v1.1 comfort (default: v1.1)")
    ap.add_argument("--v2", default="main", help="the revision of the v2 (history) comfort metrics (default: main)")
    args = ap.parse_args(argv)
    if subprocess.run(["git", "-C", str(args.navsim), "rev-parse", "--git-dir"], capture_output=True).returncode != 0:
        fail(f"--navsim {args.navsim}: not a git clone (git clone https://github.com/autonomousvision/navsim {args.navsim})")
    got = golden(args.navsim, args.v1, args.v2)
    print("GOLDEN = {\n" + "".join(f"    {json.dumps(k)}: {json.dumps(v)},\n" for k, v in got["computed"].items()) + "}")
    bad = differences(got["computed"], got["carried"])
    for line in bad:
        print(f"differs: {line}", file=sys.stderr)
    print(f"{len(got['computed']) - len(bad)} of {len(got['computed'])} values equal the test's GOLDEN", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())

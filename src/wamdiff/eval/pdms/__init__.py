"""NAVSIM v1.1 PDM Score (and the v2 EPDMS terms as an option), vectorised with numpy and shapely 2.

Modules: `vehicle` (ego box, state layout), `geometry` (SAT box tests), `tracker` (plan interpolation, LQR,
bicycle), `comfort`, `scene_data` (map layers, agent tracks), `scorer` (sub-scores), `reference`
(PDM-Closed-style planner), `score` (the evaluator and aggregation).

The simulation reproduces NAVSIM exactly, quirks included (tests/test_eval_pdms_navsim.py holds values from
NAVSIM's own code): the velocity fit's regulariser as NAVSIM builds it (`tracker.navsim_banded_difference`), the
simulation starting with steering angle and yaw rate 0 (`tracker.initial_state`); EPDMS as v2 computes it: EP
clipped and not zeroed by the multipliers, history comfort with v2's filters over 14 past states, the human
filter applied after scoring.

Where this differs from NAVSIM v1.1, on purpose (every output carries `PDMS_VERSION`):
- ego box: the scene's own box (5 x 2 m in the highway-env world), rear axle 1.461 m behind its centre
  (NAVSIM's value, also used by the world), wheel base 3.089 m; `PDMSConfig(use_pacifica=True)` for NAVSIM's car;
- plan headings, when a planner gives only (x, y), come from central differences of the waypoints;
- map: drivable area = union of drivable, intersection and lane polygons (optional tolerance, default 0);
  "on-route" lanes for DDC = lanes running the route's way; lane keeping uses the route centreline;
- reference: IDM along the route centreline with a curvature speed cap (see `reference`), no emergency brake;
- EPDMS: TLC = 1 (no traffic lights), EC = 1 (needs consecutive frames); the human filter uses the scene's
  logged expert;
- agent-relative angles use the true angle in [0, pi] (nuPlan compares unwrapped headings).
"""

from .score import COMFORT_PARTS, EPDMS_METRICS, METRICS, PDMS_VERSION, PDMSConfig, PDMSEvaluator, aggregate
from .vehicle import PACIFICA, VehicleParams

__all__ = ["PDMS_VERSION", "PDMSConfig", "PDMSEvaluator", "aggregate", "METRICS", "EPDMS_METRICS", "COMFORT_PARTS",
           "PACIFICA", "VehicleParams"]

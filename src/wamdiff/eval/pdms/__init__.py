"""NAVSIM v1.1 PDM Score (and the v2 EPDMS terms as an option), vectorised with numpy and shapely 2.

Modules: `vehicle` (ego box, state layout), `geometry` (SAT box tests), `tracker` (plan interpolation, LQR,
bicycle), `comfort`, `scene_data` (map layers, agent tracks), `scorer` (sub-scores), `reference`
(PDM-Closed-style planner), `score` (the evaluator and aggregation).
"""

from .score import COMFORT_PARTS, EPDMS_METRICS, METRICS, PDMS_VERSION, PDMSConfig, PDMSEvaluator, aggregate
from .vehicle import PACIFICA, VehicleParams

__all__ = ["PDMS_VERSION", "PDMSConfig", "PDMSEvaluator", "aggregate", "METRICS", "EPDMS_METRICS", "COMFORT_PARTS",
           "PACIFICA", "VehicleParams"]

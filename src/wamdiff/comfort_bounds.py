"""nuPlan / NAVSIM v1.1 comfort bounds (PDMS's C term: docs/concepts/pdms.md, "Comfort bounds"), strict inequalities
over the 41 states of 0..4 s.

One home for both users: the expert's comfort check that drops uncomfortable runs from the data
(`driving.expert`) and PDMS's comfort term (`eval.pdms.comfort`)."""

COMFORT_BOUNDS = {  # name: (min, max), strict; values from NAVSIM's pdm_comfort_metrics.py
    "lon_acc": (-4.05, 2.40),  # m/s^2
    "lat_acc": (-4.89, 4.89),  # m/s^2
    "jerk": (-8.37, 8.37),  # m/s^3 (magnitude)
    "lon_jerk": (-4.13, 4.13),  # m/s^3
    "yaw_acc": (-1.93, 1.93),  # rad/s^2
    "yaw_rate": (-0.95, 0.95),  # rad/s
}

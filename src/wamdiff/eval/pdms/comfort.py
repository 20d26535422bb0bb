"""NAVSIM v1.1 comfort (`pdm_comfort_metrics.py`): six bounds over the simulated states, vectorised.

Derivatives use Savitzky-Golay filters exactly as NAVSIM calls them (including its quirks, kept on purpose
so numbers are comparable):
- longitudinal / lateral acceleration: the states' acceleration columns smoothed with poly 2, window = all
  states (41). The bicycle model writes lateral acceleration 0 after t=0, so only the initial state's a_y
  can fail the lateral bound;
- jerk (magnitude and longitudinal): acceleration smoothed with poly 2, window 8, then first derivative
  with poly 2, window = all states;
- yaw rate: first derivative of the unwrapped heading with poly 2, window 5; yaw acceleration: second
  derivative, poly 3, window 5 (NAVSIM passes a window argument that never reaches the filter, so 5 it is).
Bounds are strict inequalities; values are rounded to 8 decimals first.

NAVSIM v2 changed the filters (its history comfort HC uses them, `comfort_checks_v2`): accelerations are taken
at the box centre (`state_array_to_center_state_array`, whose shift adds d*w^2 + d*alpha to a_x and nothing to
a_y, as NAVSIM writes it) and smoothed with window 8 instead of all states; jerk differentiates with window 15.
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.signal import savgol_filter

from wamdiff.comfort_bounds import COMFORT_BOUNDS

from .vehicle import AX, AY, HEADING, PACIFICA, YAW_ACC, YAW_RATE

PACIFICA_REAR_AXLE_TO_CENTER = PACIFICA.rear_axle_to_center

BOUNDS = COMFORT_BOUNDS  # name: (min, max), strict


@functools.lru_cache(maxsize=64)
def _savgol_matrix(n: int, window: int, poly: int, deriv: int, delta: float) -> np.ndarray:
    """scipy's savgol_filter (mode 'interp') is linear in the signal: cache it as an (n, n) matrix."""
    return savgol_filter(np.eye(n), window_length=window, polyorder=poly, deriv=deriv, delta=delta, axis=0)


def _smooth(y: np.ndarray, window: int, poly: int = 2, deriv: int = 0, delta: float = 1.0) -> np.ndarray:
    n = y.shape[-1]
    return y @ _savgol_matrix(n, min(window, n), poly, deriv, float(delta)).T


def comfort_signals(states: np.ndarray, dt: float = 0.1) -> dict[str, np.ndarray]:
    """(N, T, 11) states -> dict of (N, T) signals named as in BOUNDS."""
    n_time = states.shape[1]
    ax, ay = states[..., AX], states[..., AY]
    r = lambda v: np.round(v, 8)  # noqa: E731
    out = {
        "lon_acc": r(_smooth(ax, n_time)),
        "lat_acc": r(_smooth(ay, n_time)),
    }
    acc_mag = r(_smooth(np.hypot(ax, ay), 8))
    acc_lon = r(_smooth(ax, 8))
    out["jerk"] = r(_smooth(acc_mag, n_time, deriv=1, delta=dt))
    out["lon_jerk"] = r(_smooth(acc_lon, n_time, deriv=1, delta=dt))
    heading = np.unwrap(states[..., HEADING], axis=-1)
    out["yaw_rate"] = r(_smooth(heading, 5, poly=2, deriv=1, delta=dt))
    out["yaw_acc"] = r(_smooth(heading, 5, poly=3, deriv=2, delta=dt))
    return out


def comfort_signals_v2(states: np.ndarray, dt: float = 0.1, rear_axle_to_center: float = PACIFICA_REAR_AXLE_TO_CENTER
                       ) -> dict[str, np.ndarray]:
    """NAVSIM v2's signals (`pdm_comfort_metrics.py` on main): centre-point accelerations, window 8, jerk window 15.

    NAVSIM's history comfort calls it with the default vehicle (the Pacifica), hence the default offset.
    """
    ax, ay = states[..., AX], states[..., AY]
    d = rear_axle_to_center
    ax_centre = ax + d * states[..., YAW_RATE] ** 2 + d * states[..., YAW_ACC]  # NAVSIM's `get_acceleration_shifted`
    r = lambda v: np.round(v, 8)  # noqa: E731
    acc_mag = r(_smooth(np.hypot(ax, ay), 8))  # magnitude at the rear axle, as NAVSIM computes it
    acc_lon = r(_smooth(ax_centre, 8))
    heading = np.unwrap(states[..., HEADING], axis=-1)
    return {
        "lon_acc": acc_lon,
        "lat_acc": r(_smooth(ay, 8)),
        "jerk": r(_smooth(acc_mag, 15, deriv=1, delta=dt)),
        "lon_jerk": r(_smooth(acc_lon, 15, deriv=1, delta=dt)),
        "yaw_rate": r(_smooth(heading, 5, poly=2, deriv=1, delta=dt)),
        "yaw_acc": r(_smooth(heading, 5, poly=3, deriv=2, delta=dt)),
    }


def _within(sig: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k: ((sig[k] > lo) & (sig[k] < hi)).all(-1) for k, (lo, hi) in BOUNDS.items()}


def comfort_checks(states: np.ndarray, dt: float = 0.1) -> dict[str, np.ndarray]:
    """Per-metric (N,) booleans, NAVSIM v1.1 rules: True = every state within the bound."""
    return _within(comfort_signals(states, dt))


def comfort_checks_v2(states: np.ndarray, dt: float = 0.1) -> dict[str, np.ndarray]:
    """Per-metric (N,) booleans, NAVSIM v2 rules (history comfort)."""
    return _within(comfort_signals_v2(states, dt))


def is_comfortable(states: np.ndarray, dt: float = 0.1, checks: dict | None = None) -> np.ndarray:
    checks = comfort_checks(states, dt) if checks is None else checks
    return np.logical_and.reduce(list(checks.values()))

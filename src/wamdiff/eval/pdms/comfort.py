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
"""

from __future__ import annotations

import functools

import numpy as np
from scipy.signal import savgol_filter

from wamdiff.comfort_bounds import COMFORT_BOUNDS

from .vehicle import AX, AY, HEADING

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


def comfort_checks(states: np.ndarray, dt: float = 0.1) -> dict[str, np.ndarray]:
    """Per-metric (N,) booleans: True = every state within the bound."""
    sig = comfort_signals(states, dt)
    return {k: ((sig[k] > lo) & (sig[k] < hi)).all(-1) for k, (lo, hi) in BOUNDS.items()}


def is_comfortable(states: np.ndarray, dt: float = 0.1, checks: dict | None = None) -> np.ndarray:
    checks = comfort_checks(states, dt) if checks is None else checks
    return np.logical_and.reduce(list(checks.values()))

"""95 % confidence intervals for the headline figures, so a table says when two rows are not separated.

- `mean_ci95`: a mean over scenes or routes (PDMS, a sub-score, L2, driving score), normal approximation
  (1.96 standard errors; the samples are per-scene scores of one planner, n >= 40 in every report);
- `wilson_ci95`: a success rate k / n (Wilson score interval: honest at 0 %, 100 % and small n, where the normal
  approximation gives impossible bounds);
- `paired_ci95`: the mean difference of two planners' scores on the same scenes (scene by scene: the scenes' own
  difficulty cancels, so a paired interval separates rows that overlapping per-row intervals cannot).
Both return [low, high] (a list: it survives a JSON round trip unchanged), or None when there is nothing to average.
"""

from __future__ import annotations

import math

import numpy as np

Z95 = 1.959964


def mean_ci95(values) -> list[float] | None:
    v = np.asarray([x for x in values if x is not None], float)
    if not len(v):
        return None
    half = Z95 * float(v.std(ddof=1)) / math.sqrt(len(v)) if len(v) > 1 else float("inf")
    m = float(v.mean())
    return [m - half, m + half]


def wilson_ci95(k: int, n: int) -> list[float] | None:
    if n <= 0:
        return None
    p = k / n
    denom = 1 + Z95**2 / n
    centre = (p + Z95**2 / (2 * n)) / denom
    half = Z95 * math.sqrt(p * (1 - p) / n + Z95**2 / (4 * n * n)) / denom
    return [max(0.0, centre - half), min(1.0, centre + half)]


def paired_ci95(a: dict, b: dict) -> tuple[float, list[float]] | None:
    """(mean of a[k] - b[k], its 95 % interval) over the keys both have (scene ids); None when they share none."""
    keys = [k for k in a if k in b and a[k] is not None and b[k] is not None]
    if not keys:
        return None
    ci = mean_ci95([a[k] - b[k] for k in keys])
    return (ci[0] + ci[1]) / 2, ci

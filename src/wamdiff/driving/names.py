"""The names of the driving registries, free of highway-env: road families, dataset splits, closed-loop route sets.

`driving.world.FAMILY_REGISTRY`, `driving.dataset.SPLIT_SEED_BASE` and `eval.closedloop.route_set` hold what each
name means and check at import that their names are these; the command line offers them (`wamdiff.cli_choices`)
without importing the simulator, so `wamdiff --help` stays fast.
"""

from __future__ import annotations

FAMILIES = ("highway", "merge", "roundabout", "intersection")  # in registry order: it fixes route seeds and report order
SPLITS = ("train", "val", "test")  # disjoint seed ranges
ROUTE_SETS = ("dev", "full")  # closed loop: each family's dev routes (10 in all), or 25 per family

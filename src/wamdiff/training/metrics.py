"""Training metrics: a long-format CSV (step, name, value), TensorBoard scalars and the final JSON.

Long format keeps one file for every recipe kind (train loss, lr, grad norm, tok/s, val accuracy, top-5
overlap, QA exact match) and survives resume: rows after the resumed step (written by the killed run) are
dropped when the logger reopens the file.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path


class MetricsLogger:
    def __init__(self, output_dir: str | Path, *, tensorboard: bool = True, enabled: bool = True, resume_step: int | None = None):
        self.enabled = enabled
        self.path = Path(output_dir) / "metrics.csv"
        self.last: dict[str, float] = {}
        self._tb = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        rows = []
        if resume_step is not None and self.path.exists():
            with self.path.open() as f:
                rows = [r for r in csv.DictReader(f) if int(r["step"]) <= resume_step]
        with self.path.open("w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["step", "name", "value"])
            w.writerows([r["step"], r["name"], r["value"]] for r in rows)
        self._file = self.path.open("a", newline="")
        self._csv = csv.writer(self._file)
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(Path(output_dir) / "tensorboard"), purge_step=resume_step)
            except ImportError:  # tensorboard is pinned, but a missing optional writer must not stop training
                self._tb = None

    def log(self, step: int, values: dict[str, float]) -> None:
        if not self.enabled:
            return
        for name, value in values.items():
            value = float(value)
            self.last[name] = value
            self._csv.writerow([step, name, repr(value) if math.isfinite(value) else str(value)])
            if self._tb is not None:
                self._tb.add_scalar(name, value, step)
        self._file.flush()

    def close(self) -> None:
        if not self.enabled:
            return
        self._file.close()
        if self._tb is not None:
            self._tb.close()


def read_metrics_csv(path: str | Path) -> dict[str, list[tuple[int, float]]]:
    """{name: [(step, value), ...]} from a metrics.csv."""
    out: dict[str, list[tuple[int, float]]] = {}
    with Path(path).open() as f:
        for r in csv.DictReader(f):
            out.setdefault(r["name"], []).append((int(r["step"]), float(r["value"])))
    return out

"""The benchmark's journal: finished rows and step costs as JSON lines, so an interrupted run resumes."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path

from wamdiff.atomic import write_atomically
from wamdiff.decoding.dial import model_fingerprint

JOURNAL = "bench.partial.jsonl"  # rows of an unfinished run, in the output folder


def row_key(r: dict) -> tuple:
    """A row's grid point: (threads, compile, dtype, batch, B, tau, step cap, cache)."""
    return r.get("threads"), r["compile"], r["dtype"], r["batch"], r["block_size"], r["threshold"], r["max_steps"], r["cache"]


class Journal:
    """Finished rows and step costs of one benchmark, appended as JSON lines after a fingerprint line. A file
    with another fingerprint (other grid, models or prompts) is set aside as `<name>.stale` and started anew."""

    def __init__(self, path: Path, fingerprint: str):
        self.path, self.rows, self.costs = Path(path), {}, {}
        entries = []
        for line in self.path.read_text().splitlines() if self.path.exists() else []:
            try:
                entries.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut by the interruption: keep what parsed before it
                break
        if entries and entries[0].get("fingerprint") == fingerprint:
            for e in entries[1:]:
                if e.get("kind") == "row":
                    self.rows[row_key(e["data"])] = e["data"]
                elif e.get("kind") == "cost":
                    self.costs[(e["data"]["compile"], e["data"]["dtype"], e["data"].get("threads"))] = e["data"]
            self._rewrite(fingerprint, entries[1:])  # drops a torn last line
        else:
            if self.path.exists():
                self.path.replace(self.path.with_suffix(".stale"))
            self._rewrite(fingerprint, [])

    def _rewrite(self, fingerprint: str, entries: list) -> None:
        text = "".join(json.dumps(e) + "\n" for e in [{"fingerprint": fingerprint}, *entries])
        write_atomically(self.path, lambda f: f.write(text), text=True)

    def add(self, kind: str, data: dict) -> None:
        with open(self.path, "a") as fh:
            fh.write(json.dumps({"kind": kind, "data": data}) + "\n")


def fingerprint(grid, prompts, model, ar_model, fmt: str | None = None, judged: bool = False) -> str:
    """Identity of a benchmark: the grid, the prompts' tokens, the answer format's name, both models' weights and whether
    the answers are judged on their scenes (rows without PDMS and comfort must not resume a judged run)."""
    grid = asdict(grid)
    # hashed under the step cap's name before `BenchGrid.max_steps` was renamed (`max_steps_per_block`; old names are
    # read only here and in `paired.grid_from_settings`): a journal an older version left resumes
    grid = {("max_steps_per_block" if k == "max_steps" else k): v for k, v in grid.items()}
    if grid.get("cuda_graphs") is True:  # the default is hashed as before the setting was a grid field
        del grid["cuda_graphs"]
    if grid.get("smoothness") == 0.0:  # likewise the joint read-out's default
        del grid["smoothness"]
    ident = {"grid": grid, "prompts": [p.input_ids.reshape(-1).tolist() for p in prompts], "format": fmt,
             "model": model_fingerprint(model), "ar_model": None if ar_model is None else model_fingerprint(ar_model)}
    if judged:  # only then: an unjudged run keeps the fingerprint it had before judging existed
        ident["judged"] = True
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]

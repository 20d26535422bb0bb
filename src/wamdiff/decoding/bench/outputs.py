"""Files of a finished benchmark under one folder: bench.json (everything), bench.md (tables), bench.png."""

from __future__ import annotations

from pathlib import Path

from wamdiff.decoding.bench.plot import write_plot
from wamdiff.decoding.bench.tables import markdown_tables
from wamdiff.jsonfile import write_json


def write_outputs(result: dict, out: Path) -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_plot(result, out / "bench.png")
    result["plot"] = str(out / "bench.png")
    result["markdown"] = markdown_tables(result)
    (out / "bench.md").write_text(result["markdown"])
    write_json(out / "bench.json", result)
    return result

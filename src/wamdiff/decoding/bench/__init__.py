"""`wamdiff bench`: AR vs block-diffusion decoding speed, side by side, one concept per module.

Measuring: `prompts` (WAM-Diff2 JSON or synthetic), `timing` (timed decode, step cost), `quality` (exact match,
L2), `judge` (PDMS and comfort on the prompts' scenes, from a judge the caller passes), `grid` (`BenchGrid`, `run_bench`), `journal` (resume an interrupted run), `paired` (the pipeline's entry).
Reporting: `headline` (best vs best), `tables` (Markdown, console), `plot` (PNG), `outputs` (the files).
"""

from wamdiff.decoding.bench.grid import DTYPES, BenchGrid, run_bench
from wamdiff.decoding.bench.headline import QUALITY_TOLERANCE, best_vs_best
from wamdiff.decoding.bench.journal import JOURNAL, Journal
from wamdiff.decoding.bench.outputs import write_outputs
from wamdiff.decoding.bench.paired import paired_bench
from wamdiff.decoding.bench.prompts import load_wamdiff2_json, synthetic_prompts
from wamdiff.decoding.bench.quality import guess_format, quality
from wamdiff.decoding.bench.tables import markdown_tables, print_table

__all__ = ["DTYPES", "JOURNAL", "QUALITY_TOLERANCE", "BenchGrid", "Journal", "best_vs_best", "guess_format",
           "load_wamdiff2_json", "markdown_tables", "paired_bench", "print_table", "quality", "run_bench",
           "synthetic_prompts", "write_outputs"]

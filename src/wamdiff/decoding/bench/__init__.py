"""AR vs block-diffusion decoding speed, side by side, one concept per module (`wamdiff bench` runs it:
`wamdiff.eval.bench_cli`).

Measuring: `prompts` (`BenchInputs`: the prompts, expert answers, answer format and trajectory parser the caller
hands over, built from driving data by `wamdiff.driving.bench_inputs`; batches), `timing` (timed decode, step
cost), `quality` (exact match, L2), `judge` (PDMS and comfort on the prompts' scenes, from a judge the caller
passes), `grid` (`BenchGrid`, `run_bench`), `journal` (resume an interrupted run), `paired` (the pipeline's entry).
Reporting: `headline` (best vs best), `tables` (Markdown, console), `plot` (PNG), `outputs` (the files).
"""

from wamdiff.decoding.bench.grid import DTYPES, BenchGrid, run_bench
from wamdiff.decoding.bench.headline import QUALITY_TOLERANCE, best_vs_best
from wamdiff.decoding.bench.journal import JOURNAL, Journal
from wamdiff.decoding.bench.outputs import write_outputs
from wamdiff.decoding.bench.paired import paired_bench
from wamdiff.decoding.bench.prompts import BenchInputs
from wamdiff.decoding.bench.quality import parser_for, quality
from wamdiff.decoding.bench.tables import markdown_tables, print_table

__all__ = ["DTYPES", "JOURNAL", "QUALITY_TOLERANCE", "BenchGrid", "BenchInputs", "Journal", "best_vs_best",
           "markdown_tables", "paired_bench", "parser_for", "print_table", "quality", "run_bench", "write_outputs"]

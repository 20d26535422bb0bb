"""The report's interval plot: a closed-loop success of 100 % has a Wilson upper bound a rounding error below 1, which
made `make demo` fail (matplotlib refuses negative error bars)."""

from wamdiff.eval.intervals import wilson_ci95
from wamdiff.report import plot_quality_rows


def test_interval_plot_takes_a_full_success_rate(tmp_path):
    ci = wilson_ci95(10, 10)
    rows = [{"planner": "expert", "pdms": 95.0, "l2_4s": 0.0, "c": 1.0, "cl_success": 100.0}]
    results = {"open": {"planners": {"expert": {"pdms": {"overall": {"pdms_ci95": [0.94, 0.96]}}}}},
               "closed": {"planners": {"expert": {"overall": {"success_rate": 1.0, "success_rate_ci95": list(ci)}}}}}
    path = plot_quality_rows(rows, results, tmp_path / "q.png")
    assert path is not None and path.stat().st_size > 0

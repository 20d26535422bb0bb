"""The report's interval plot: a closed-loop success of 100 % has a Wilson upper bound a rounding error below 1, which
made `make demo` fail (matplotlib refuses negative error bars)."""

from wamdiff.eval.intervals import wilson_ci95
from wamdiff.orchestration.summary import plot_quality_rows


def test_interval_plot_takes_a_full_success_rate(tmp_path):
    ci = wilson_ci95(10, 10)
    rows = [{"planner": "expert", "pdms": 95.0, "l2_4s": 0.0, "c": 1.0, "cl_success": 100.0}]
    results = {"open": {"planners": {"expert": {"pdms": {"overall": {"pdms_ci95": [0.94, 0.96]}}}}},
               "closed": {"planners": {"expert": {"overall": {"success_rate": 1.0, "success_rate_ci95": list(ci)}}}}}
    path = plot_quality_rows(rows, results, tmp_path / "q.png")
    assert path is not None and path.stat().st_size > 0


def test_paired_difference_column_and_steps_after_the_ar_vla(tmp_path):
    """ΔPDMS vs AR is the mean over shared scenes of the per-scene difference (hand-computed here), and the steps
    column sums a stage's init chain from the given AR VLA."""
    import json

    import yaml

    from wamdiff.eval.intervals import mean_ci95, paired_ci95
    from wamdiff.eval.report import planner_files
    from wamdiff.orchestration.pipeline import Pipeline
    from wamdiff.orchestration.summary import plot_compute, table_rows

    ar = tmp_path / "ar"
    ar.mkdir()
    (ar / "config.json").write_text("{}")
    cfg = {"out": str(tmp_path / "run"), "data": {"fmt": "delta"}, "checkpoints": {"ar_vla": str(ar)},
           "train": [{"name": "b1", "recipe": "configs/recipes/block1.yaml", "init": "ar_vla"},
                     {"name": "b32", "recipe": "configs/recipes/block32.yaml", "init": "b1"}],
           "evaluate": {"decode": {"mode": "block", "block": 17},
                        "planners": {"AR": "stage:ar_vla", "B32": "stage:b32", "cv": "cv"}},
           "bench": {"ar": "ar_vla", "diffusion": "b32"}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    p = Pipeline.load(tmp_path / "p.yaml")
    for stage, steps in (("b1", 200), ("b32", 800)):
        p.stage_file(stage).parent.mkdir(parents=True, exist_ok=True)
        p.stage_file(stage).write_text(json.dumps({"steps": steps}))
    files = planner_files(list(p.planners()))  # result files are named by row
    scores = {"AR": [0.9, 0.8, 1.0, 0.7], "B32": [0.95, 0.7, 1.0, 0.9]}
    (p.out / "eval").mkdir(parents=True)
    for name, vals in scores.items():
        lines = [f"s{i},True,{v}" for i, v in enumerate(vals)] + (["only_ar,True,0.0"] if name == "AR" else [])
        (p.out / "eval" / f"pdms_{files[name]}.csv").write_text(
            "scene_id,valid,pdms\n" + "\n".join(lines) + "\n")  # the AR-only scene is left out of the pairs
    # L2@4s per scene: B32's failed plan on s3 has no distance (empty cell) and drops out of the pairs
    l2 = {"AR": ["2.0", "1.5", "3.0", "1.0"], "B32": ["1.8", "1.6", "2.5", ""]}
    for name, vals in l2.items():
        (p.out / "eval" / f"openloop_{files[name]}.csv").write_text(
            "scene_id,valid,plan_ok,l2_4.0s\n" + "".join(f"s{i},True,{bool(v)},{v}\n" for i, v in enumerate(vals)))
    results = {"open": {"planners": {n: {"pdms": {"overall": {"pdms": sum(v) / 4, "pdms_ci95": [0.7, 0.95]}},
                                         "openloop": {"per_condition": {"hard_braking": {"l2_4.0s": 2.5 + len(n)}}}}
                                     for n, v in scores.items()}}}
    got = {r["planner"]: r for r in table_rows(p, results)}
    assert got["AR"]["l2_4s_braking"] == 4.5 and got["B32"]["l2_4s_braking"] == 5.5 and got["cv"]["l2_4s_braking"] is None
    l2_diffs = [1.8 - 2.0, 1.6 - 1.5, 2.5 - 3.0]
    lo2, hi2 = mean_ci95(l2_diffs)
    assert got["B32"]["d_l2_4s"] == "{:+.2f} ({:+.2f}…{:+.2f})".format(sum(l2_diffs) / 3, lo2, hi2)
    assert got["AR"]["d_l2_4s"] is None and got["cv"]["d_l2_4s"] is None
    diffs = [b - a for a, b in zip(scores["AR"], scores["B32"])]
    lo, hi = mean_ci95(diffs)
    assert got["B32"]["d_pdms"] == "{:+.1f} ({:+.1f}…{:+.1f})".format(100 * sum(diffs) / 4, 100 * lo, 100 * hi)
    assert got["AR"]["d_pdms"] is None and got["cv"]["d_pdms"] is None
    assert paired_ci95({"a": 1.0}, {"b": 1.0}) is None
    assert got["B32"]["train_steps"] == 1000 and got["AR"]["train_steps"] == 0 and got["cv"]["train_steps"] is None
    rows = [{**r, "l2_4s": 2.0} for r in got.values()]
    assert plot_compute(rows, results, tmp_path / "c.png").stat().st_size > 0


def test_family_table_lists_every_family_of_every_planner():
    from wamdiff.orchestration.summary import family_table

    fam = lambda x: {"pdms": x, "c": 1.0, "dac": 0.9}  # noqa: E731
    results = {"open": {"planners": {"AR": {"pdms": {"per_family": {"merge": fam(0.9), "highway": fam(0.95)}}},
                                     "B32": {"pdms": {"per_family": {"merge": fam(0.8)}}}}}}
    lines = family_table(results)
    assert lines[2] == "| planner | highway | merge |"
    assert lines[4] == "| AR | 95.0 / 1.00 / 0.90 | 90.0 / 1.00 / 0.90 |"
    assert lines[5] == "| B32 | – | 80.0 / 1.00 / 0.90 |"


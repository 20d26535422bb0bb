"""The size / quality / speed front (`eval front`): quality from `eval paired`'s pooled rows, speed and x AR from the
plan timings, parameters and FLOPs from the checkpoint."""

import json

import pytest
from PIL import Image
from typer.testing import CliRunner

from wamdiff.cli import app as root
from wamdiff.eval.front import front_rows, plot_front
from wamdiff.eval.report import safe_name
from wamdiff.models import build_model, build_tokenizer, count_parameters, save_model
from wamdiff.models.flops import plan_flops


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("front")
    tok = build_tokenizer()
    model = build_model("tiny", tok, seed=0)
    save_model(model, tok, tmp / "m")
    ar, block = f"model:{tmp / 'm'},mode=ar,batch=16", f"model:{tmp / 'm'},mode=block,block=4,steps=2,batch=16"
    speed = lambda b1, b8: {"1": {"batch": 1, "plans_per_s": b1}, "8": {"batch": 8, "plans_per_s": b8}}  # noqa: E731
    (tmp / "timed").mkdir()
    (tmp / "timed" / "open_summary.json").write_text(json.dumps(
        {"expert": {"openloop": {}}, ar: {"speed": speed(10.0, 40.0)}, block: {"speed": speed(35.0, 60.0)}}))
    rows = [{"split": "pooled", "planner": safe_name(ar), "metric": m, "n": 800, "mean": v}
            for m, v in (("PDMS", 93.0), ("C", 0.99), ("L2@4s", 1.70))]
    rows += [{"split": "pooled", "planner": safe_name(block), "metric": m, "n": 800, "mean": v, "delta": d, "low": lo,
              "high": hi} for m, v, d, lo, hi in (("PDMS", 93.4, 0.4, -0.1, 0.9), ("C", 0.98, -0.01, -0.02, 0.0),
                                                   ("L2@4s", 1.60, -0.1, -0.2, 0.0))]
    rows += [{"split": "test", "planner": safe_name(block), "metric": "PDMS", "n": 200, "mean": 50.0}]  # not pooled
    (tmp / "paired.json").write_text(json.dumps(rows))
    return tmp, model, tok, ar, block


def test_rows_take_pooled_quality_timed_speed_and_counted_cost(folders):
    tmp, model, tok, ar, block = folders
    rows = {r["spec"]: r for r in front_rows(tmp / "timed", tmp / "paired.json", "mode=ar")}
    assert set(rows) == {ar, block}  # the expert has no timings: not on the front
    b, a = rows[block], rows[ar]
    assert (b["pdms"], b["d_pdms"], b["pdms_ci"]) == (93.4, 0.4, pytest.approx(0.5))
    assert (b["c"], b["l2_4s"], a["pdms"], a["pdms_ci"]) == (0.98, 1.60, 93.0, None)
    assert (b["x_ar_b1"], b["x_ar_b8"], a["x_ar_b1"]) == (3.5, 1.5, 1.0)
    flops = plan_flops(model, tok, block_size=4, steps=2)
    assert b["gflop_plan"] == pytest.approx(flops["plan_block_B4_2steps"] / 1e9)
    assert a["gflop_plan"] == pytest.approx(flops["plan_ar"] / 1e9)
    assert a["params"] == count_parameters(model)["total"] and a["ar"] and not b["ar"]
    path = plot_front(list(rows.values()), tmp / "front.png")
    assert path is not None and Image.open(path).size == (1320, 880)
    assert plot_front([b], tmp / "one.png") is None and not (tmp / "one.png").exists()  # one row is no front


def test_cli_writes_the_table_and_refuses_a_folder_without_timings(folders, tmp_path):
    tmp, *_ = folders
    out = CliRunner().invoke(root, ["eval", "front", str(tmp / "timed"), "--paired", str(tmp / "paired.json"),
                                    "--ar", "mode=ar", "--out", str(tmp_path / "f")])
    assert out.exit_code == 0, out.output
    assert {p.name for p in (tmp_path / "f").iterdir()} >= {"front.csv", "front.json", "front.png"}
    (tmp_path / "untimed").mkdir()
    (tmp_path / "untimed" / "open_summary.json").write_text(json.dumps({"expert": {"openloop": {}}}))
    bad = CliRunner().invoke(root, ["eval", "front", str(tmp_path / "untimed"), "--paired", str(tmp / "paired.json")])
    assert bad.exit_code == 2 and "no plan timings" in bad.output and "Traceback" not in bad.output

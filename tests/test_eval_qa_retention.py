"""QA retention (`eval.qa_retention`, `wamdiff eval qa`): Wilson intervals against scipy, the paired difference and
McNemar's p against hand computations, and the command end to end on a tiny model."""

from __future__ import annotations

import csv
import json
import math

import numpy as np
import pytest
from scipy.stats import binomtest

from wamdiff.eval.qa_retention import accuracy, mcnemar_p, paired_difference, qa_summary, read_questions


@pytest.mark.parametrize("k, n", [(0, 10), (7, 64), (48, 64), (600, 890), (890, 890)])
def test_accuracy_interval_is_wilsons(k, n):
    got = accuracy([{"hit": 1}] * k + [{"hit": 0}] * (n - k))
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert got["accuracy"] == pytest.approx(k / n)
    assert got["ci95"] == pytest.approx([ci.low, ci.high], abs=1e-6)


def test_paired_difference_and_mcnemar_by_hand():
    # 10 questions: both right on 3, only the model on 1, only the reference on 6
    model = [1, 1, 1, 1, 0, 0, 0, 0, 0, 0]
    ref = [1, 1, 1, 0, 1, 1, 1, 1, 1, 1]
    rows = [{"id": str(i), "hit": h, "kind": "k", "family": "f"} for i, h in enumerate(model)]
    ref_rows = [{"id": str(i), "hit": h, "kind": "k", "family": "f"} for i, h in enumerate(ref)]
    d = paired_difference(rows, ref_rows)
    diffs = np.array(model) - np.array(ref)
    half = 1.959964 * diffs.std(ddof=1) / math.sqrt(10)
    assert d["delta"] == pytest.approx(-0.5) and d["ci95"] == pytest.approx([-0.5 - half, -0.5 + half])
    assert (d["only_this_right"], d["only_ref_right"]) == (1, 6)
    assert d["mcnemar_p"] == pytest.approx(2 * (1 + 7) / 2**7)  # exact binomial, 1 of 7 discordant pairs
    assert mcnemar_p(0, 0) == 1.0
    s = qa_summary({"m": rows, "r": ref_rows}, ref="r")
    assert "vs_ref" in s["m"] and "vs_ref" not in s["r"] and s["m"]["per_kind"]["k"]["n"] == 10


def test_unreadable_qa_file_is_named(tmp_path):
    with pytest.raises(ValueError, match="QA file not found"):
        read_questions(tmp_path / "test_qa.json")
    (tmp_path / "bad.json").write_text("{\"a\": 1}")
    with pytest.raises(ValueError, match="bad.json"):
        read_questions(tmp_path / "bad.json")


def test_qa_command_end_to_end(tmp_path):
    from typer.testing import CliRunner

    models = pytest.importorskip("wamdiff.models")
    from wamdiff.eval.cli import app
    from wamdiff.training.synthetic import write_dataset

    tok = models.build_tokenizer()
    models.save_model(models.build_model("tiny", tok, vision=True, seed=0), tok, tmp_path / "ckpt")
    paths = write_dataset(tmp_path / "data", n_train=1, n_val=1, n_qa=3)
    (tmp_path / "data" / "test_qa.json").write_text(paths["val_qa"].read_text())
    spec = f"model:{tmp_path / 'ckpt'},mode=ar"
    # a planner's grid read-outs (ordinal window, joint read-out) have no grid to read in free text: dropped for QA
    block = f"model:{tmp_path / 'ckpt'},mode=block,block=4,steps=4"
    res = CliRunner().invoke(app, ["qa", "-p", spec, "-p", spec + ",batch=2", "-p", block,
                                   "-p", block + ",ordinal=2,smoothness=0.5", "--data", str(tmp_path / "data"),
                                   "--out", str(tmp_path / "qa")])
    assert res.exit_code == 0, res.output
    s = json.loads((tmp_path / "qa" / "qa_summary.json").read_text())
    assert s["n_questions"] == 3
    other = s["models"][spec + ",batch=2"]["vs_ref"]  # the same greedy model: the same answers
    assert other["n"] == 3 and other["delta"] == 0 and other["mcnemar_p"] == 1.0
    answers = {f.stem.split("mode-block_")[-1]: [r["answer"] for r in csv.DictReader(f.open())]
               for f in (tmp_path / "qa").glob("qa_*mode-block*.csv")}
    assert answers["block-4_steps-4_ordinal-2_smoothness-0.5"] == answers["block-4_steps-4"]
    assert (tmp_path / "qa" / "qa.md").exists()

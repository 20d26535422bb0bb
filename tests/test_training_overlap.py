"""Teacher-student top-5 overlap (the model-level distillation ablation): golden cases."""

from __future__ import annotations

import pytest
import torch

from test_training_fixtures import make_data, one_thread


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    from wamdiff.models import build_model, build_tokenizer, save_model, to_diffusion

    root = tmp_path_factory.mktemp("overlap")
    paths = make_data(root / "data")
    tok = build_tokenizer()
    out = {}
    for name, seed in (("a", 0), ("b", 1)):
        model = to_diffusion(build_model("tiny", tok, seed=seed), 4)
        save_model(model, tok, root / name)
        out[name] = root / name
    return paths, out


def test_identical_teacher_overlaps_fully_and_other_teachers_less(checkpoints):
    from wamdiff.training.evaluation import teacher_student_overlap

    paths, ck = checkpoints
    with one_thread():
        same = teacher_student_overlap(ck["a"], ck["a"], teacher_kind="diffusion", data=paths["val"], samples=4)
        other = teacher_student_overlap(ck["a"], ck["b"], teacher_kind="diffusion", data=paths["val"], samples=4)
        ar = teacher_student_overlap(ck["a"], ck["b"], teacher_kind="ar", data=paths["val"], samples=4)
    assert same["top5_overlap"] == pytest.approx(1.0)
    assert same["student_masked_acc"] == pytest.approx(same["teacher_masked_acc"])
    for r in (other, ar):
        assert 0.0 <= r["top5_overlap"] < 1.0
    # same student, data and noise: only the teacher changes between the two kinds
    assert other["student_masked_acc"] == pytest.approx(ar["student_masked_acc"])
    assert torch.isfinite(torch.tensor(ar["top5_overlap"]))

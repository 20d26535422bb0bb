"""`wamdiff train --resume` through the real CLI: checkpoint files are never unpickled (a crafted file is refused
and does not run), a corrupt newest checkpoint falls back to the previous one, leftovers of a killed save are
cleared, fewer optim.steps than already trained and a fresh run over an earlier one are refused, and a run
that holds the output folder locks out a second one."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
import torch
import yaml
from test_reliability_errors import assert_user_error, cli
from test_training_fixtures import make_data, one_thread, state_dict_of, tiny_recipe

from wamdiff.training import train


class _RunsCode:
    """Unpickling this calls os.system: what a planted checkpoint file would do under weights_only=False."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _digest(folder: Path) -> str:
    """Every file's name and bytes (the run lock's own files aside)."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.name.startswith(".wamdiff.lock"):
            h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """A complete 4-step run with checkpoints at steps 2 and 4, and the recipe YAML that made it."""
    root = tmp_path_factory.mktemp("run")
    data = make_data(root / "data", n_train=4)
    recipe = tiny_recipe(data, root / "run", "block", optim={"steps": 4}, checkpoint={"every": 2, "keep_last": 2},
                         eval={"at_start": False, "at_end": False})
    with one_thread():
        train(recipe)
    return root / "run", recipe


@pytest.fixture
def run_copy(finished_run, tmp_path):
    """A private copy of the finished run and a recipe YAML pointing at it."""
    src, recipe = finished_run
    run = tmp_path / "run"
    shutil.copytree(src, run, ignore=shutil.ignore_patterns(".wamdiff.lock*"))
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({**recipe, "output_dir": str(run)}))
    return run, path


@pytest.mark.parametrize("name", ["rng-rank0.pt", "optimizer.pt", "scheduler.pt"])
def test_a_planted_pickle_is_refused_and_never_runs(run_copy, tmp_path, name):
    run, recipe = run_copy
    marker = tmp_path / "code-ran"
    for step in ("step-000002", "step-000004"):  # both checkpoints: nothing to fall back to
        torch.save({"state": _RunsCode(marker)}, run / "checkpoints" / step / name)
    final = _digest(run / "final")
    with one_thread(), pytest.warns(UserWarning, match="skipping checkpoint"):
        res = cli("train", "--recipe", recipe, "--resume")
    assert_user_error(res, str(run / "checkpoints" / "step-000004" / name), "refused")
    assert not marker.exists()
    assert _digest(run / "final") == final
    # the file really is malicious: the old loading (weights_only=False) runs it
    torch.load(run / "checkpoints" / "step-000004" / name, weights_only=False)
    assert marker.exists()


def test_corrupt_newest_checkpoint_falls_back_and_ends_identical(finished_run, run_copy):
    run, recipe = run_copy
    weights = run / "checkpoints" / "step-000004" / "model" / "model.safetensors"
    with open(weights, "r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    leftovers = [run / "checkpoints" / "step-000006.tmp-4242", run / "final.tmp-4242"]
    for p in leftovers:  # what a save killed half-way leaves
        p.mkdir()
        (p / "half").write_text("x")
    with one_thread(), pytest.warns(UserWarning) as warned:
        res = cli("train", "--recipe", recipe, "--resume")
    assert res.exit_code == 0, res.stderr
    text = " ".join(str(w.message) for w in warned)
    assert str(weights) in text and "falling back to the older checkpoint" in text and "step-000002" in text
    assert "from " + str(run / "checkpoints" / "step-000002") in res.stdout
    assert not any(p.exists() for p in leftovers)
    a, b = state_dict_of(finished_run[0] / "final"), state_dict_of(run / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)  # bit-identical to the uninterrupted run


def test_newest_checkpoint_with_other_weight_bytes_falls_back_and_ends_identical(finished_run, run_copy):
    """Weight bytes changed under an intact header (its SHA256SUMS no longer matches): skipped like a truncated one."""
    import numpy as np

    run, recipe = run_copy
    weights = run / "checkpoints" / "step-000004" / "model" / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    start = 8 + int.from_bytes(raw[:8], "little")  # the tensors, after the JSON header
    raw[start:] = np.random.default_rng(0).integers(0, 256, len(raw) - start, dtype=np.uint8).tobytes()
    weights.write_bytes(bytes(raw))
    with one_thread(), pytest.warns(UserWarning) as warned:
        res = cli("train", "--recipe", recipe, "--resume")
    assert res.exit_code == 0, res.stderr
    text = " ".join(str(w.message) for w in warned)
    assert str(weights) in text and "does not match" in text and "falling back to the older checkpoint" in text
    a, b = state_dict_of(finished_run[0] / "final"), state_dict_of(run / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_moved_aside_by_a_killed_save_is_put_back(run_copy):
    run, recipe = run_copy
    ckpts = run / "checkpoints"
    os.replace(ckpts / "step-000004", ckpts / "step-000004.old-77")  # killed between atomic_dir's two renames
    shutil.copytree(ckpts / "step-000002", ckpts / "step-000004.tmp-77")
    with one_thread():
        res = cli("train", "--recipe", recipe, "--resume")
    assert res.exit_code == 0, res.stderr
    assert "from " + str(ckpts / "step-000004") in res.stdout
    assert sorted(p.name for p in ckpts.iterdir()) == ["step-000002", "step-000004"]


def test_resume_with_fewer_steps_than_done_refuses(run_copy):
    run, recipe = run_copy
    final = _digest(run / "final")
    res = cli("train", "--recipe", recipe, "--resume", "--set", "optim.steps=3")
    assert_user_error(res, "already trained 4 steps", "optim.steps=3", "raise optim.steps")
    assert _digest(run / "final") == final


def test_fresh_run_over_an_earlier_run_refuses(run_copy):
    run, recipe = run_copy
    before = _digest(run)
    assert_user_error(cli("train", "--recipe", recipe), str(run), "--resume")
    assert _digest(run) == before


def test_second_run_on_the_same_output_dir_is_locked_out(run_copy):
    from wamdiff.outdir import claim_output_dir

    run, recipe = run_copy
    with claim_output_dir(run):  # what a running `wamdiff train` holds
        res = cli("train", "--recipe", recipe, "--resume")
    assert_user_error(res, str(run), "in use by another wamdiff run", f"pid {os.getpid()}")


def test_unwritable_output_dir_fails_before_loading(finished_run, tmp_path):
    _, recipe = finished_run
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    path = tmp_path / "recipe.yaml"
    path.write_text(yaml.safe_dump({**recipe, "output_dir": str(blocker / "run")}))
    res = cli("train", "--recipe", path)
    assert_user_error(res, str(blocker / "run"), "cannot be written", "output_dir")
    assert res.stdout == ""

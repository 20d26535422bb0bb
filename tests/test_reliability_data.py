"""`wamdiff data generate` loses nothing: re-runs with other families or a smaller --n merge into the split
files and the manifest, other world settings are refused, and truncated scenes, orphaned scenes and
temporaries of a killed run are repaired by the next run (the seeds are simulated again, deterministically)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_reliability_errors import assert_user_error, cli

from wamdiff.driving.scene import Scene
from wamdiff.driving.wamdiff2_json import read_samples
from wamdiff.eval.data import find_scene_files


def _generate(out, family: str, n: int, *extra):
    return cli("data", "generate", "--family", family, "--n", n, "--split", "test", "--workers", "1", "--out", out, *extra)


def _ids(out) -> list[str]:
    return [s.id for s in read_samples(out / "test.json")]


@pytest.fixture
def dataset(tmp_path):
    out = tmp_path / "ds"
    res = _generate(out, "highway", 2)
    assert res.exit_code == 0, res.stderr
    return out


def test_other_family_and_smaller_n_merge_instead_of_rewriting(dataset):
    highway = _ids(dataset)
    assert len(highway) == 2
    res = _generate(dataset, "merge", 1)
    assert res.exit_code == 0, res.stderr
    assert "merged with what" in res.stdout and "highway n=2" in res.stdout
    both = _ids(dataset)
    assert both[:2] == highway and [i.split("_")[0] for i in both] == ["highway", "highway", "merge"]
    assert len(read_samples(dataset / "test.jsonl")) == 3
    assert {s.meta["qa_kind"] for s in read_samples(dataset / "test_qa.json")}  # QA of every scene kept too
    manifest = json.loads((dataset / "manifest.json").read_text())["splits"]["test"]
    assert {f: d["requested"] for f, d in manifest["families"].items()} == {"highway": 2, "merge": 1}
    assert manifest["total"] == 3

    res = _generate(dataset, "highway", 1)  # smaller n: keeps the 2 it has
    assert res.exit_code == 0, res.stderr
    assert _ids(dataset) == both and "this run: 0 new" in res.stdout


def test_other_world_settings_are_refused(dataset):
    before = (dataset / "test.json").read_bytes(), (dataset / "manifest.json").read_bytes()
    assert_user_error(_generate(dataset, "highway", 3, "--density", "2"), str(dataset / "manifest.json"), "density", "another --out")
    assert_user_error(_generate(dataset, "merge", 1, "--image-size", "32"), "camera")
    assert ((dataset / "test.json").read_bytes(), (dataset / "manifest.json").read_bytes()) == before
    assert len(list((dataset / "scenes").glob("*.npz"))) == 2  # nothing simulated


def test_truncated_orphaned_and_half_written_scenes_are_repaired(dataset):
    scenes = dataset / "scenes"
    first, second = sorted(scenes.glob("*.npz"))
    original = {p.name: Scene.load(p) for p in (first, second)}
    with open(first, "r+b") as f:  # a truncated scene (disk full, a copy cut short)
        f.truncate(first.stat().st_size // 2)
    second.with_suffix(".png").unlink()  # a scene whose image is missing
    (scenes / "highway_test_20000007.npz.partial").write_bytes(b"half")  # temporaries of a killed run
    (scenes / "highway_test_20000007.png.partial").write_bytes(b"half")
    (scenes / "highway_test_20000008.tmp.npz").write_bytes(b"half")  # and those of an older version
    (scenes / "highway_test_20000008.tmp.png").write_bytes(b"half")
    assert find_scene_files(dataset) == [first, second]  # a temporary is never taken for a scene
    with pytest.warns(UserWarning, match=f"{first.name}: not a readable wamdiff scene.*set aside"):
        res = _generate(dataset, "highway", 2)
    assert res.exit_code == 0, res.stderr
    assert (scenes / f"{first.name}.unreadable").exists()  # kept for inspection, out of every *.npz glob
    assert not list(scenes.glob("*.tmp.*")) and not list(scenes.glob("*.partial")) and second.with_suffix(".png").exists()
    for name, before in original.items():  # simulated again: the same scenes
        after = Scene.load(scenes / name)
        assert np.array_equal(before.image, after.image) and np.array_equal(before.future, after.future)
    assert len(_ids(dataset)) == 2

"""`wamdiff.atomic`: a write either lands whole under its name or leaves nothing a reader's glob can match."""

from __future__ import annotations

import numpy as np
import pytest

from wamdiff.atomic import write_atomically
from wamdiff.driving.scene import is_scene_file


def test_a_write_cut_short_leaves_neither_the_file_nor_a_temporary(tmp_path):
    def half_then_fail(f):
        f.write(b"PK\x03\x04 half a zip")
        raise KeyboardInterrupt  # Ctrl-C mid-write

    with pytest.raises(KeyboardInterrupt):
        write_atomically(tmp_path / "a.npz", half_then_fail)
    assert list(tmp_path.iterdir()) == []


def test_the_temporary_of_a_killed_writer_matches_no_glob_of_the_real_files(tmp_path):
    seen = []

    def look_mid_write(f):
        f.write(b"x")
        f.flush()
        seen.extend(p.name for p in tmp_path.iterdir())  # what a reader (or a resumed run) sees meanwhile

    write_atomically(tmp_path / "highway_val_00000004.npz", look_mid_write)
    assert len(seen) == 1 and not list(tmp_path.glob("*.partial"))
    assert not is_scene_file(seen[0]) and not seen[0].endswith((".npz", ".png", ".json"))


def test_numpy_writes_through_the_file_without_renaming_it(tmp_path):
    # np.savez given a path appends ".npz" to a name without it; given the open file it writes where it is told
    path = write_atomically(tmp_path / "r.npz", lambda f: np.savez(f, poses=np.arange(3.0)))
    assert [p.name for p in tmp_path.iterdir()] == ["r.npz"]
    with np.load(path) as z:
        assert z["poses"].tolist() == [0.0, 1.0, 2.0]

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


def test_an_os_error_that_names_no_file_is_raised_naming_the_file_being_written(tmp_path):
    """A full disk (ENOSPC) names no file; the one-line error must say which file could not be written."""
    import errno

    from wamdiff.errors import describe

    def disk_full(f):
        f.write(b"x")
        raise OSError(errno.ENOSPC, "No space left on device")

    target = tmp_path / "summary.json"
    with pytest.raises(OSError) as err:
        write_atomically(target, disk_full)
    assert err.value.errno == errno.ENOSPC and err.value.filename == str(target)
    assert describe(err.value) == f"{target}: No space left on device"
    assert list(tmp_path.iterdir()) == []


def test_the_full_device_itself_is_named(tmp_path):
    """The same through a real device that is always full (Linux /dev/full), written by a plain `open`."""
    import os

    from wamdiff.errors import describe

    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")

    def to_dev_full(f):
        with open("/dev/full", "wb", buffering=0) as full:
            full.write(b"x")

    with pytest.raises(OSError) as err:
        write_atomically(tmp_path / "x.json", to_dev_full)
    assert str(tmp_path / "x.json") in describe(err.value) and "No space left" in describe(err.value)

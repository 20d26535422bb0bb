"""Ctrl-C during a real `wamdiff data generate --workers 2` (a subprocess): everything stops (no respawned
workers, no wait on the pool), the exit code is 130 with one line, and the next run completes the set with
nothing lost. A second run on the folder while the first one works is locked out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from test_reliability_errors import assert_user_error, cli

from wamdiff.driving.dataset import generate_dataset
from wamdiff.driving.scene import Scene
from wamdiff.driving.wamdiff2_json import read_samples

HANG = 90  # s: only detects a hang (the fix stops within a second or two)


def _wait_for(cond, what: str, timeout: float = HANG) -> None:
    t0 = time.monotonic()
    while not cond():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_stops_workers_and_the_rerun_completes_the_set(tmp_path):
    out = tmp_path / "ds"
    args = ["data", "generate", "--family", "highway", "--split", "val", "--workers", "2", "--out", str(out)]
    src = str(Path(__file__).parents[1] / "src")  # this checkout's code, as the in-process runs use
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [src, os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1", "SDL_VIDEODRIVER": "offscreen"}
    # its own process group, like a shell job: Ctrl-C is SIGINT to every process of the group; far more scenes than
    # it can make before the interrupt even on a loaded machine (400 were all made once, with two trainings beside)
    # SIGINT back to its default in the child: a test run started in the background (`make test &`) ignores SIGINT and
    # the child would inherit that, finishing all its scenes instead of stopping (what a shell job does too)
    proc = subprocess.Popen([sys.executable, "-m", "wamdiff.cli", *args, "--n", "20000"], env=env, start_new_session=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        _wait_for(lambda: len(list((out / "scenes").glob("*.npz"))) >= 3 if (out / "scenes").is_dir() else False,
                  "the first scenes")
        busy = cli(*args, "--n", "3")  # a second run on the same folder meanwhile
        assert_user_error(busy, str(out), "in use by another wamdiff run", f"pid {proc.pid}")
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=HANG)  # hangs (TimeoutExpired) if the pool waits for respawned workers
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-2000:]
    lines = [ln for ln in err.replace("\r", "\n").splitlines() if ln.strip() and "scene" not in ln]
    assert len(lines) == 1 and lines[0].startswith("error: interrupted") and "Traceback" not in err, err[-2000:]
    _wait_for(lambda: not _group_alive(proc.pid), "the workers to be gone", timeout=10)

    on_disk = {p.name: Scene.load(p) for p in (out / "scenes").glob("*.npz")}
    assert len(on_disk) >= 3
    res = cli(*args, "--n", "4")
    assert res.exit_code == 0, res.stderr
    assert not list((out / "scenes").glob("*.tmp.*")) and not list((out / "scenes").glob("*.partial"))

    # the same set as an uninterrupted one-worker run, and every scene made before Ctrl-C kept as it was
    ref = generate_dataset(tmp_path / "ref", ["highway"], "val", n=4, workers=1, progress=False)
    assert ref["generated"] == 4
    got, want = read_samples(out / "val.json"), read_samples(tmp_path / "ref" / "val.json")
    assert [s.id for s in got] == [s.id for s in want] and [s.answer for s in got] == [s.answer for s in want]
    for name, before in on_disk.items():
        after = Scene.load(out / "scenes" / name)
        assert np.array_equal(before.agent_boxes, after.agent_boxes) and np.array_equal(before.image, after.image)

"""Executors (`wamdiff.executors`): the process pool and Ray run the same jobs to the same results; data generation
under Ray writes the same files as the pool, byte for byte; a Ray worker killed mid-generation loses no scene; a
forked worker loads a checkpoint whatever threads its parent used."""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import zipfile
from pathlib import Path

import pytest

from wamdiff.driving.dataset import _init_worker, generate_dataset, job_out
from wamdiff.errors import UserError
from wamdiff.executors import ExecutorConfig, WorkerLost, open_executor


def square(x: int) -> int:
    return x * x


def fails_on_three(x: int) -> int:
    if x == 3:
        raise ValueError("job 3 is bad input")
    return x


def test_config_is_checked():
    with pytest.raises(UserError, match="--executor 'dask'"):
        ExecutorConfig("dask")
    with pytest.raises(UserError, match="needs --executor ray"):
        ExecutorConfig("process", 2, "auto")
    with pytest.raises(UserError, match="--workers 0"):
        ExecutorConfig("process", 0)
    assert ExecutorConfig("process", 1).inline and not ExecutorConfig("process", 2).inline


@pytest.mark.parametrize("workers", [1, 2])
def test_process_executor_maps_in_order_with_initializer_and_errors(workers):
    with open_executor(ExecutorConfig("process", workers), _init_worker, ("/tmp/pool",)) as ex:
        assert ex.map(square, range(7)) == [i * i for i in range(7)]
        assert list(ex.imap_unordered(job_out, [1, 2])) == [Path("/tmp/pool")] * 2  # the initializer ran in each worker
    with pytest.raises(ValueError, match="job 3 is bad input"):
        with open_executor(ExecutorConfig("process", workers)) as ex:
            ex.map(fails_on_three, range(6))


_FORKED_LOAD = """
import torch
from pathlib import Path
from wamdiff.executors import ExecutorConfig, open_executor

def load(path):
    from wamdiff.models import load_model
    return type(load_model(path)[0]).__name__

if __name__ == "__main__":
    torch.set_num_threads(2)  # the parent ran ops on two threads (a bench, a 2-thread config), then went back to one
    a = torch.randn(512, 512)
    (a @ a).sum()
    torch.set_num_threads(1)
    for _ in range(8):  # a fresh worker's load hits it often, not always: 16 fresh workers do
        with open_executor(ExecutorConfig(kind="process", workers=2)) as ex:
            print(sorted(ex.imap_unordered(load, [Path(%r)] * 2)))
"""


def test_a_forked_worker_loads_a_checkpoint_after_the_parent_used_two_threads(tmp_path):
    """torch's thread pool does not survive fork: a forked worker that loads weights on transformers' loading
    threads aborted ("Invalid thread pool!", seen in a pipeline's closed-loop stage); workers load on their main
    thread. In a fresh interpreter, so this test's own threads do not matter."""
    import subprocess

    ckpt = Path(__file__).resolve().parents[1] / "checkpoints" / "ar_vla"
    script = tmp_path / "forked_load.py"
    script.write_text(_FORKED_LOAD % str(ckpt))
    env = {k: v for k, v in os.environ.items() if k != "HF_DEACTIVATE_ASYNC_LOAD"}
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr[-2000:]
    assert "ForConditionalGeneration" in res.stdout


_FORKED_PARALLEL_OP = """
import torch
from wamdiff.executors import ExecutorConfig, open_executor

def matmul(i):
    b = torch.randn(1500, 1500)
    return i + float((b @ b).sum() * 0)

if __name__ == "__main__":
    torch.set_num_threads(2)  # the parent stays at two threads (a pipeline with `threads: 2`) when the pool forks
    a = torch.randn(1500, 1500)
    (a @ a).sum()
    with open_executor(ExecutorConfig(kind="process", workers=2)) as ex:
        print(sorted(ex.imap_unordered(matmul, range(4))))
"""


def test_a_forked_worker_runs_parallel_ops_while_the_parent_uses_two_threads(tmp_path):
    """GNU OpenMP is not fork-safe: a worker forked from a parent that ran ops on two threads waited for ever in its
    first parallel op (a pipeline with `threads: 2` hung in its closed-loop stage, loading the planner's weights).
    Workers run torch on one thread. A hang fails as a timeout."""
    import subprocess

    script = tmp_path / "forked_parallel_op.py"
    script.write_text(_FORKED_PARALLEL_OP)
    res = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split() == ["[0.0,", "1.0,", "2.0,", "3.0]"]


# -- Ray ----------------------------------------------------------------------------------------------------------
def test_ray_executor_equals_process_pool(local_ray):
    # the jobs above live in this test module, which Ray workers cannot import: send them by value
    local_ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray_cfg = ExecutorConfig("ray", 2)
    with open_executor(ray_cfg, _init_worker, ("/tmp/ray",)) as ex:
        assert ex.map(square, range(9)) == [i * i for i in range(9)]
        assert list(ex.imap_unordered(job_out, [5, 6, 7])) == [Path("/tmp/ray")] * 3
    with pytest.raises(ValueError, match="job 3 is bad input"):  # the job's own exception, as under the pool
        with open_executor(ray_cfg) as ex:
            ex.map(fails_on_three, range(6))
    assert local_ray.is_initialized()  # not ours to shut down


def _npz_members(path: Path) -> dict[str, bytes]:
    """The arrays of an .npz, byte for byte (the zip container itself records the time it was written)."""
    with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as z:
        return {name: z.read(name) for name in z.namelist()}


def assert_same_dataset(a: Path, b: Path, split: str) -> None:
    names = sorted(p.name for p in (a / "scenes").iterdir())
    assert names == sorted(p.name for p in (b / "scenes").iterdir()) and names
    for name in names:
        pa, pb = a / "scenes" / name, b / "scenes" / name
        if name.endswith(".npz"):
            assert _npz_members(pa) == _npz_members(pb), name
        else:
            assert pa.read_bytes() == pb.read_bytes(), name
    for name in (f"{split}.json", f"{split}.jsonl", f"{split}_qa.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert _drops(a / f"drops_{split}.jsonl") == _drops(b / f"drops_{split}.jsonl")  # lines carry timings, in finishing order


def _drops(path: Path) -> set:
    lines = path.read_text().splitlines() if path.exists() else []
    return {(d["family"], d["seed"], d["reason"], d["detail"]) for d in map(json.loads, filter(str.strip, lines))}


def test_ray_generation_writes_the_pools_files_byte_for_byte(local_ray, tmp_path):
    kw = dict(families=["highway", "roundabout"], split="val", n=2, progress=False)
    pool = generate_dataset(tmp_path / "pool", workers=2, **kw)
    ray = generate_dataset(tmp_path / "ray", executor=ExecutorConfig("ray", 2), **kw)
    assert pool["generated"] == ray["generated"] == 4 and ray["executor"]["kind"] == "ray"
    assert_same_dataset(tmp_path / "pool", tmp_path / "ray", "val")


class DiesOnce:
    """`driving.dataset._work` whose Ray worker is SIGKILLed while it runs one chosen scene, the first time that scene
    runs (a marker file remembers it): the kill lands on a busy worker at a known job, whatever the timing."""

    def __init__(self, seed: int, marker: Path):
        self.seed, self.marker = seed, marker

    def __call__(self, job):
        from wamdiff.driving import dataset  # in the Ray worker: the real module (the stand-in is the driver's only)

        if job[2] == self.seed and not self.marker.exists():
            self.marker.write_text(str(os.getpid()))
            os.kill(os.getpid(), signal.SIGKILL)
        return dataset._work(job)


def _complete_scenes(out: Path) -> set[str]:
    return {p.name for p in (out / "scenes").glob("*.npz") if p.with_suffix(".png").exists()}


def test_a_worker_killed_mid_generation_loses_no_scene(local_ray, tmp_path, monkeypatch):
    from wamdiff.driving import dataset

    n = 8
    ref = tmp_path / "ref"
    generate_dataset(ref, ["highway"], "val", n=n, workers=2, progress=False)
    victim = dataset.split_seed("val", 2)  # the third scene
    # the stand-in job lives in this test module, which Ray workers cannot import: send it by value
    local_ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    # no retries: the run stops with one line, keeps what finished, and a re-run completes the set
    out = tmp_path / "no_retry"
    monkeypatch.setattr(dataset, "_work", DiesOnce(victim, tmp_path / "killed_no_retry"))
    with pytest.raises(WorkerLost, match="a Ray worker died running .* re-run the same command"):
        generate_dataset(out, ["highway"], "val", n=n, executor=ExecutorConfig("ray", 2, retries=0), progress=False)
    assert (tmp_path / "killed_no_retry").exists()
    kept = _complete_scenes(out)
    assert dataset.scene_name("highway", "val", victim) + ".npz" not in kept and len(kept) < n
    again = generate_dataset(out, ["highway"], "val", n=n, executor=ExecutorConfig("ray", 2), progress=False)
    assert again["generated"] == n - len(kept)  # only what was missing: every scene that finished was kept
    assert_same_dataset(ref, out, "val")

    # Ray's retries (the default): the killed worker's scene is simulated again within the same run
    out = tmp_path / "retry"
    monkeypatch.setattr(dataset, "_work", DiesOnce(victim, tmp_path / "killed_retry"))
    stats = generate_dataset(out, ["highway"], "val", n=n, executor=ExecutorConfig("ray", 2), progress=False)
    assert (tmp_path / "killed_retry").exists() and stats["generated"] == n
    assert_same_dataset(ref, out, "val")


@pytest.mark.parametrize("args, words", [
    (["data", "generate", "--n", "1", "--executor", "dask"], "'--executor': Value error, 'dask' is not one of 'process', 'ray'"),
    (["data", "generate", "--n", "1", "--ray-address", "auto"], "--ray-address 'auto' needs --executor ray"),
    (["eval", "closedloop", "--planner", "cv", "--executor", "dask"], "'--executor': Value error, 'dask' is not one of 'process', 'ray'"),
    (["eval", "pdms", "--planner", "cv", "--data", "nowhere", "--ray-address", "auto"], "needs --executor ray"),
])
def test_executor_options_are_checked_in_one_line(tmp_path, args, words):
    from test_reliability_errors import assert_user_error, cli

    assert_user_error(cli(*args, "--out", tmp_path / "out"), words)
    assert not (tmp_path / "out").exists()  # refused before anything was claimed or written

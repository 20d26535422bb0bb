"""Data parallelism: 2 CPU processes (gloo) give the same weights as 1 process with the same global batch."""

from __future__ import annotations

import os

import torch
import torch.multiprocessing as mp
from test_training_fixtures import make_data, one_thread, state_dict_of, tiny_recipe

from wamdiff.training import train
from wamdiff.training.metrics import read_metrics_csv


def _worker(rank: int, world: int, rendezvous: str, recipe: dict) -> None:
    # torchrun's variables tell accelerate it is one of `world` processes; the process group meets through a file of
    # this test's tmp folder instead of a TCP port (a "free" port picked in advance can be taken before rank 0 binds it)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world), LOCAL_WORLD_SIZE=str(world))
    torch.distributed.init_process_group("gloo", init_method=rendezvous, rank=rank, world_size=world)
    result = train(recipe)  # accelerate takes the process group that exists
    assert result.metrics["processes"] == world
    torch.distributed.destroy_process_group()


def _recipe(data, out, **kw):
    # fp32 so the comparison is tight; 2 samples per process, gradient averaged over processes. Adam's eps is
    # raised: with eps=1e-8 a near-zero gradient's update is ~sign(g), which turns float summation-order noise
    # (1e-10 absolute) into lr-sized differences that say nothing about the data-parallel logic (measured: worst
    # 4e-5 at eps 1e-8, 1e-7 at eps 1e-4).
    return tiny_recipe(data, out, "block", threads=1,
                       optim={"steps": 4, "batch_size": 4, "mixed_precision": "no", "eps": 1e-4},
                       data={"train": [str(data["train"]), {"path": str(data["train_qa"]), "weight": 0.5}]},
                       eval={"at_start": False, "at_end": True}, checkpoint={"every": 2}, **kw)


def test_two_processes_match_one_with_the_same_global_batch(tmp_path):
    data = make_data(tmp_path / "data", n_train=4)
    rendezvous = (tmp_path / "rendezvous").as_uri()
    mp.start_processes(_worker, args=(2, rendezvous, _recipe(data, tmp_path / "two")), nprocs=2, join=True,
                       start_method="spawn")
    with one_thread():
        one = train(_recipe(data, tmp_path / "one"))
    a, b = state_dict_of(one.final_model), state_dict_of(tmp_path / "two" / "final")
    start = state_dict_of(tmp_path / "two" / "checkpoints" / "step-000002" / "model")
    worst = max(float((a[k] - b[k]).abs().max()) for k in a)
    moved = max(float((a[k] - start[k]).abs().max()) for k in a)
    assert worst <= 1e-6 < moved, (worst, moved)
    losses = [read_metrics_csv(d / "metrics.csv")["loss"] for d in (tmp_path / "one", tmp_path / "two")]
    assert len(losses[0]) == 4 and all(abs(x[1] - y[1]) < 1e-5 for x, y in zip(*losses)), losses
    assert (tmp_path / "two" / "checkpoints" / "step-000004" / "rng-rank1.pt").exists()

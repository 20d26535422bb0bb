"""The pool that keeps a released runner's cache and CUDA graphs for the next runner of the same shape
(`decoding.cuda_graphs.take` / `give_back`): its bookkeeping, on any machine (the graphs themselves: test_decoding_cuda)."""

from __future__ import annotations

import gc

import torch

from wamdiff.decoding import cuda_graphs


def test_an_entry_is_taken_by_one_runner_alone_and_given_back():
    model = torch.nn.Linear(1, 1)
    assert cuda_graphs.take(model, ("a",)) is None
    cuda_graphs.give_back(model, ("a",), "cache", "step")
    assert cuda_graphs.take(model, ("b",)) is None  # another shape
    assert cuda_graphs.take(model, ("a",)) == ("cache", "step")
    assert cuda_graphs.take(model, ("a",)) is None  # taken: a second decode at once gets its own cache
    assert cuda_graphs.take(torch.nn.Linear(1, 1), ("a",)) is None  # another model


def test_the_least_recently_given_back_shape_goes_first():
    model = torch.nn.Linear(1, 1)
    for i in range(cuda_graphs.POOL_SIZE + 2):
        cuda_graphs.give_back(model, (i,), f"cache{i}", f"step{i}")
    assert cuda_graphs.take(model, (0,)) is None and cuda_graphs.take(model, (1,)) is None
    assert cuda_graphs.take(model, (2,)) == ("cache2", "step2")
    assert cuda_graphs.take(model, (cuda_graphs.POOL_SIZE + 1,)) is not None


def test_a_model_that_is_gone_takes_its_entries_with_it():
    model = torch.nn.Linear(1, 1)
    cuda_graphs.give_back(model, ("a",), "cache", "step")
    before = len(cuda_graphs._POOL)
    del model
    gc.collect()
    assert len(cuda_graphs._POOL) == before - 1


def test_a_cpu_runner_pools_nothing():
    from wamdiff.decoding import DecodeConfig, generate
    from wamdiff.decoding.testing import synthetic_prompt, tiny_qwen3, tiny_tokenizer

    tok = tiny_tokenizer()
    model = tiny_qwen3(tok, seed=3)
    generate(model, tok, [synthetic_prompt(tok, 4, seed=4)], DecodeConfig(mode="block", block_size=4, max_new_tokens=8))
    assert model not in cuda_graphs._POOL

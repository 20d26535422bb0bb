"""CUDA Graphs for the fixed-shape decode steps (CUDA only; never imported on a CPU path).

Every step shape of a `StepRunner` is fixed per query length (AR: 1, block: B, fused commit: 2B, delayed-cache
steps: a power of two <= B) and every
input lives in a tensor (ids, mask rows, position ids, cache write index), so each shape is captured once
and replayed: inputs are copied into static buffers, the graph replays the whole text-model forward
(K/V writes into the static cache included), the static logits are returned (clone before keeping them).
Capture happens at the first call of a shape, mid-decode, with that call's real inputs; the warm-up run
on a side stream performs exactly the writes the step would, so the cache stays correct.

Graphs outlive a decode: a finished runner hands its cache and captured steps back (`StepRunner.release`, called by
`generate`) to a pool per model, and the next runner of the same shape (batch, slots, dtype) takes them instead of
capturing anew (`take`). A decode of one block runs about two forwards, too few to pay for a capture each time
(measured on an H200: with a capture per call, graphs made a small student's plans slower than eager ones). A
runner takes an entry for itself alone, so two decodes at once never share a cache; a runner that is never released
just leaves nothing to reuse. Slots a decode has not written hold an earlier decode's K/V, which its mask hides, as
it hides the zeros of a fresh cache.

Python's garbage collector is off during a capture: a collection there can free an earlier runner's graphs, and
destroying a graph while another is being captured invalidates the capture (seen on an H200: "operation not
permitted when stream is capturing", then cudaErrorStreamCaptureInvalidated, in a benchmark that builds a runner
per decode). `tests/test_decoding_cuda.py` compares graphs with the eager path (skipped without CUDA; run with
`make test-gpu` or tools/gpu_check.sh).
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections import OrderedDict

import torch

POOL_SIZE = 8  # shapes kept per model (each holds a cache and its graphs); the least recently used goes first
_POOL: "weakref.WeakKeyDictionary[torch.nn.Module, OrderedDict]" = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def take(model, key: tuple):
    """(cache, step) a released runner of `model` left for this shape `key`, removed from the pool (this runner's
    alone until it is released); None when there is none."""
    with _LOCK:
        entries = _POOL.get(model)
        return entries.pop(key, None) if entries else None


def give_back(model, key: tuple, cache, step) -> None:
    """Keep a finished runner's cache and captured steps for the next runner of the same shape."""
    with _LOCK:
        entries = _POOL.setdefault(model, OrderedDict())
        entries[key] = (cache, step)
        entries.move_to_end(key)
        while len(entries) > POOL_SIZE:
            entries.popitem(last=False)


class CudaGraphStep:
    """The captured steps of one cache. `eager` runs a step without a graph (the runner's, rebound when a new runner
    takes the pooled entry); a capture records it once per shape."""

    def __init__(self, cache, eager_step):
        self.cache = cache
        self.eager = eager_step
        self.graphs: dict[tuple, tuple] = {}

    def __call__(self, ids, mask, pos, keep: int):
        cache = self.cache
        # write_index: [Q] (contiguous slots) or [N, Q] (per-sample slots, delayed-cache steps): part of the shape
        key = (tuple(ids.shape), tuple(mask.shape), tuple(pos.shape), tuple(cache.write_index.shape), keep)
        entry = self.graphs.get(key)
        if entry is None:
            s_ids, s_mask, s_pos = ids.clone(), mask.clone(), pos.clone()
            s_idx = cache.write_index.clone()
            cache.write_index = s_idx
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):
                    self.eager(s_ids, s_mask, s_pos, keep)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            collecting = gc.isenabled()
            gc.disable()
            try:
                with torch.cuda.graph(graph):
                    out = self.eager(s_ids, s_mask, s_pos, keep)
            finally:
                if collecting:
                    gc.enable()
            entry = self.graphs[key] = (graph, s_ids, s_mask, s_pos, s_idx, out)
        graph, s_ids, s_mask, s_pos, s_idx, out = entry
        s_ids.copy_(ids)
        s_mask.copy_(mask)
        s_pos.copy_(pos)
        s_idx.copy_(cache.write_index)
        cache.write_index = s_idx
        graph.replay()
        return out

"""Block-causal masked-diffusion decoding (docs/concepts/decoding.md) on a `StepRunner`.

Per block of B answer slots: start all-mask; every forward predicts all B positions (bidirectional inside
the block, over the cached prompt and committed blocks); unmask by confidence (threshold: every masked
position with top probability >= tau plus at least the most confident one; fixed: a fixed count per step,
most confident first); at the step cap the remaining masks take the last argmax. Denoising steps write the
block's K/V into the block's own slots, so the cache never grows and the next step overwrites them. The
finished block is then committed (its clean K/V written to the same slots): in a separate forward, or fused
into the next block's first step as B extra queries in front of the B masks (and the prompt prefill fused
with block 0's first step), which saves exactly one forward per block.

Delayed cache (optional, after dKV-Cache's delayed caching): a denoising step after a block's first one
queries only the positions still masked plus those decoded at the previous step (whose K/V still hold the
mask embedding); positions decoded earlier keep the K/V written when they were last queried, one step after
their decision. The tail steps of a block, which decide a handful of uncertain digits, then cost a
few-query forward instead of a B-query one. It approximates the exact rule (those K/V are one step stale);
the commit still recomputes the finished block exactly, so later blocks see exact K/V.

Lean steps (`runner.lean` != "off", exact, `wamdiff.decoding.lean`): a denoising step after a block's first one
still queries every position it queries anyway (exact: the whole block; delayed: as above), ordered so that the
still-masked positions come last, and only those last rows get logits (and, with "last_layer", the last
layer's MLP). The tokens are those of the full step.

Shifted models (`models.convert.DiffusionSettings.prediction`): the logits of the query before a position predict
it. Inside a block that is the block's own previous row; for the block's first position it is the last token before
the block, whose logits come out of the forward that wrote its final K/V (the prefill, or the commit of the block
before: one more kept row, no extra forward) and hold for every step of the block (`carry`).

Batches: every sample runs every forward (fixed shapes); per-sample `active` flags decide what counts.
A sample is finished once a block containing EOS (or a PAD, read as EOS) is complete; its tail after EOS is PAD
(the training convention). All selection is vectorised over the batch: no per-sample Python in the hot path.
"""

from __future__ import annotations

import torch

from wamdiff.decoding.config import DecodeConfig
from wamdiff.decoding.readout import grid_probs, read_out, smooth_path, window_mean
from wamdiff.decoding.runner import StepRunner

# The joint read-out's search runs through each position's few most likely grid values (`readout.smooth_path`).
# Measured on the main student with 8: 393 of 400 plans as with the search over the whole grid, the rest 12 tokens
# apart, at no measurable latency (the whole grid: +14 % at batch 1; docs/development/results-notes.md).
JOINT_CANDIDATES = 8


def fixed_schedule(block_size: int, max_steps: int) -> list[int]:
    """Tokens to unmask at each step of the fixed strategy: min(block_size, max_steps) steps, counts as even as possible."""
    n = min(block_size, max_steps)
    base, extra = divmod(block_size, n)
    return [base + (1 if i < extra else 0) for i in range(n)]


def select_threshold(conf: torch.Tensor, masked: torch.Tensor, threshold: float) -> torch.Tensor:
    """Positions to unmask: masked & (conf >= threshold), plus the most confident masked one per row."""
    conf = conf.masked_fill(~masked, -1.0)
    sel = conf >= threshold
    sel.scatter_(1, conf.argmax(1, keepdim=True), True)
    return sel & masked


def select_topk(conf: torch.Tensor, masked: torch.Tensor, k: int) -> torch.Tensor:
    """The k most confident masked positions per row (fewer if fewer are masked)."""
    conf = conf.masked_fill(~masked, -1.0)
    sel = torch.zeros_like(masked)
    sel.scatter_(1, conf.topk(k, dim=1).indices, True)
    return sel & masked


def order_queries(first: torch.Tensor, last: torch.Tensor, static_shapes: bool) -> tuple[torch.Tensor, int]:
    """Block positions [N, Q] to query in a partial step, and the count K of trailing query rows whose logits are
    read. Per row: its `first` positions (queried for their K/V only), then its `last` positions (the still-masked
    ones) at the end, so the last K rows hold every row's `last` positions; a row with fewer positions is padded at
    the front with repeats of its final entry (a repeated query recomputes identical K/V, so padding changes no
    result). Q = the largest per-row count, K the largest `last` count; both rounded up to powers of two for
    compiled / graph-captured steps."""
    b = first.shape[1]
    need = first | last
    q, k = torch.stack([need.sum(1).max(), last.sum(1).max()]).tolist()  # one device sync
    if static_shapes:
        q = min(b, _pow2(q))
        k = min(q, _pow2(k))
    rank = need.to(torch.int8) + last.to(torch.int8)  # 0 not queried, 1 first, 2 last
    order = torch.argsort(rank, dim=1, stable=True)[:, b - q:]
    count = need.sum(1, keepdim=True)
    cols = torch.arange(q, device=need.device)[None]
    return torch.where(cols >= q - count, order, order[:, -1:]), k


def _pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


@torch.inference_mode()
def decode_block(
    runner: StepRunner,
    config: DecodeConfig,
    *,
    mask_id: int,
    eos_id: int,
    pad_id: int,
    grammar_table=None,
    trace=None,
    readout=None,
    shifted: bool = False,
):
    """Decode with `config`'s block settings (block_size, as `generate` resolved it and the runner's layout holds it;
    threshold, max_steps, strategy, fused_commit, delayed_cache, max_new_tokens). Returns (tokens [N, A] (PAD after
    EOS), lengths [N], forwards [N], finished [N]).

    `trace(block_index, step, block_tokens_before, logits)` is called after every denoising forward (tests);
    in delayed-cache steps the rows of positions that were not queried are NaN. `readout`: keyword arguments of
    `decoding.readout.read_out` (window, table); None = the most likely token and its probability. `shifted`: the
    model predicts each position from the query before it (module docstring).
    """
    n, p, block_size = runner.n, runner.P, runner.block_size
    if config.block_size != block_size:
        raise ValueError(f"decode_block: config.block_size {config.block_size!r} is not the runner's {block_size}")
    max_new_tokens, fused_commit, delayed_cache = config.max_new_tokens, config.fused_commit, config.delayed_cache
    dev = runner.device
    lean = runner.lean != "off"  # denoising steps give logits only to the still-masked positions
    n_blocks = -(-max_new_tokens // block_size)
    out = torch.full((n, n_blocks * block_size), pad_id, dtype=torch.long, device=dev)
    forwards = torch.zeros(n, dtype=torch.long, device=dev)
    finished = torch.zeros(n, dtype=torch.bool, device=dev)
    lengths = torch.zeros(n, dtype=torch.long, device=dev)
    cols = torch.arange(block_size, device=dev)
    all_mask = torch.full((n, block_size), mask_id, dtype=torch.long, device=dev)
    table = (readout or {}).get("table")
    joint = config.smoothness > 0 and table is not None  # keep each decided position's grid probabilities
    schedule = fixed_schedule(block_size, config.max_steps) if config.strategy == "fixed" else None
    n_steps_cap = len(schedule) if schedule is not None else config.max_steps
    shift = int(shifted)  # the extra logit row a block's first forward keeps: the token before the block
    carry = None  # shifted: logits [N, V] of the token before the block, predicting the block's first position

    if not fused_commit:  # plain prefill: one forward for everyone
        logits = runner.prefill(None, keep=1)
        carry = logits[:, -1].clone() if shifted else None  # (a captured graph's output is overwritten next step)
        forwards += 1
    pending = None  # clean tokens of the previous block awaiting commit (fused mode)

    for blk in range(n_blocks):
        s0 = p + blk * block_size
        active = ~finished
        x = all_mask.clone()
        masked = active[:, None].expand(n, block_size).clone()
        allowed = None if grammar_table is None else grammar_table[blk * block_size:(blk + 1) * block_size]
        decided_last = torch.zeros_like(masked)  # delayed cache: decided at the previous step, K/V not yet written
        grid_p = torch.zeros(n, block_size, table.grids.ids.shape[1], device=dev) if joint else None
        step = 0
        while True:
            idx = None
            first_fused = False  # this forward also ran the token before the block (prefill or commit)
            if step == 0 and fused_commit and blk == 0:
                logits, first_fused = runner.prefill(x, keep=block_size + shift), True
            elif step == 0 and pending is not None:
                logits = runner.forward(torch.cat([pending, x], dim=1), s0 - block_size, keep=block_size + shift)
                first_fused = True
            elif step > 0 and (delayed_cache or lean):  # K/V-only rows first, the rows whose logits are read last
                read = torch.nn.functional.pad(masked[:, 1:], (0, 1)) if shifted else masked
                queried = (decided_last | masked) if delayed_cache else torch.ones_like(masked)
                order, keep = order_queries(queried & ~read, read, runner.static_shapes)
                keep = keep if lean else order.shape[1]
                logits = runner.forward_slots(x.gather(1, order), s0 + order, keep)
                idx = order[:, order.shape[1] - keep:]  # the block positions of the logit rows
            else:
                logits = runner.forward(x, s0, keep=block_size)
            if shifted:
                logits, idx, carry = _shift_logits(logits, idx, carry, first_fused, block_size)
            if allowed is not None:
                logits = logits.masked_fill(~(allowed[idx] if idx is not None else allowed), float("-inf"))
            if trace is not None:
                full = logits if idx is None else torch.full((n, block_size, logits.shape[-1]), float("nan"), device=dev).scatter(
                    1, idx[..., None].expand_as(logits), logits.float())
                trace(blk, step, x.clone(), full)
            conf, pred = read_out(logits, blk * block_size + (cols if idx is None else idx), **(readout or {}))
            if idx is not None:  # back to block positions; positions without logits are never masked
                conf = torch.full(x.shape, -1.0, device=dev).scatter(1, idx, conf)
                pred = x.scatter(1, idx, pred)
            forwards += masked.any(1)
            step += 1
            if step >= n_steps_cap:
                sel = masked
            elif schedule is not None:
                sel = select_topk(conf, masked, schedule[step - 1])
            else:
                sel = select_threshold(conf, masked, config.threshold)
            x = torch.where(sel, pred, x)
            if joint:  # the decided positions' grid probabilities, as they were when decided
                rows = cols[None].expand(n, -1) if idx is None else idx
                probs = grid_probs(logits, blk * block_size + rows, table)[1]
                if idx is not None:
                    probs = torch.zeros_like(grid_p).scatter(1, idx[..., None].expand_as(probs), probs)
                grid_p = torch.where(sel[..., None], probs, grid_p)
            masked = masked & ~sel
            decided_last = sel
            if not bool(masked.any()):
                break
        pending = None
        if joint:
            x = _read_jointly(x, grid_p, blk * block_size + cols, table, config.smoothness, config.ordinal_window)

        # EOS: keep tokens up to the first EOS, PAD after it (as trained); the sample is finished. A PAD ends the
        # answer too (training puts PAD only after EOS; a free-text answer can skip the EOS): it is written as EOS.
        is_eos = (x == eos_id) | (x == pad_id)
        has_eos = is_eos.any(1)
        first = torch.where(has_eos, is_eos.int().argmax(1), torch.full_like(lengths, block_size))
        x = torch.where(cols[None] > first[:, None], pad_id, torch.where(cols[None] == first[:, None], eos_id, x))
        out[:, blk * block_size:(blk + 1) * block_size] = torch.where(active[:, None], x, pad_id)
        lengths += torch.where(active, torch.clamp(first + 1, max=block_size), 0)
        finished |= active & has_eos
        active = ~finished
        if blk + 1 == n_blocks or not bool(active.any()):
            break
        if fused_commit:
            pending = x
        else:
            logits = runner.forward(x, s0, keep=shift)  # K/V (and, shifted, the next block's first logits)
            carry = logits[:, -1].clone() if shifted else None
            forwards += active

    # the budget: cut at max_new_tokens (an EOS beyond it does not count)
    finished &= lengths <= max_new_tokens
    lengths = torch.clamp(lengths, max=max_new_tokens)
    return out[:, :max_new_tokens], lengths, forwards, finished


def _shift_logits(logits, idx, carry, first_fused: bool, block_size: int):
    """A shifted model's step logits moved onto the block positions they predict: (logits, idx, carry) as the rest of
    the step reads them (idx None: one row per block position). The first forward of a fused block kept one more row
    in front, the token before the block: it becomes the carry. A partial step's row r predicts r + 1; the carry
    is prepended for position 0, and a row that would predict past the block (the last position, queried only for
    its K/V) is read as the carry too, so every index stays in the block and duplicates agree."""
    if first_fused:
        return logits[:, :block_size], None, logits[:, 0].clone()
    before = carry[:, None].to(logits.dtype)
    if idx is None:
        return torch.cat([before, logits[:, :-1]], dim=1), None, carry
    idx = idx + 1
    past = (idx == block_size)[..., None]
    logits = torch.cat([before, torch.where(past, before, logits)], dim=1)
    first = torch.zeros(idx.shape[0], 1, dtype=idx.dtype, device=idx.device)  # (idx may have no column: no rows read)
    idx = torch.cat([first, idx.masked_fill(past[..., 0], 0)], dim=1)
    return logits, idx, carry


def _read_jointly(x, grid_p, positions, table, weight: float, window: int):
    """A finished block with each axis's grid values re-read as one path (`DecodeConfig.smoothness`); the axes with
    as many positions in the block as each other (a delta answer's x and y) share one search."""
    axis = table.position_axis[positions.clamp_max(len(table.position_axis) - 1)]
    wheres = [w for w in ((axis == a).nonzero().squeeze(1) for a in range(len(table.grids.ids))) if len(w) >= 2]
    x = x.clone()
    for length in sorted({len(w) for w in wheres}):
        group = [w for w in wheres if len(w) == length]
        p = torch.cat([grid_p[:, w] for w in group])  # [axes * N, L, K]
        _, index = window_mean(p, smooth_path(p, weight, JOINT_CANDIDATES)[..., None], window)
        for w, rows in zip(group, index.split(x.shape[0])):
            x[:, w] = table.grids.ids[int(axis[w[0]])][rows]
    return x

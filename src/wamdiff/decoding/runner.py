"""Everything a decode loop needs, built ONCE per `generate` call, and the one-step forward.

Slot layout (per sample, all samples share columns): ``[left pad | prompt]`` in slots ``[0, P)`` then the
answer in slots ``[P, P + A)``, A = capacity rounded up to whole blocks. Every slot has a block id: prompt
slot j -> j (token-causal prompt, independent of B), answer slot P + a -> P + a // B. The single rule

    query slot q may attend key slot k  <=>  bid[k] <= bid[q]  and  k is not padding   (plus k == q)

gives every mask the decoders ever need as a *row slice* of one precomputed [N, 1, S, S] matrix:
prefill (rows [0, P)), a denoising step of block b (its B rows: sees prompt + clean blocks < b + itself),
a commit of block b (same rows: the clean block is bidirectional inside itself, as x0 in training), the fused
commit + next step (2B rows: the clean block b cannot see block b + 1, the noisy block b + 1 sees clean b),
and the AR step (B = 1: causal). Slots that are not written yet have larger block ids, so they are hidden
by the same rule. Position ids are precomputed for all slots too; a step only slices views. A step may also
query an arbitrary slot list per sample (`forward_slots`: delayed-cache and lean denoising steps): its mask rows
and positions are gathered from the same tables. Every forward returns the logits of its last `keep` query rows
only (with lean "last_layer", those rows alone also run the last layer's MLP: `decoding.lean`).

This is the training mask (docs/concepts/masks.md) restricted to decode time, made by
`wamdiff.diffusion.masks.decode_slot_mask_dense`; `tests/test_decoding_layout.py` checks its row slices against
`decode_block_mask_dense` and `prefill_mask_dense`.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

import torch

from wamdiff.decoding.cache import SlotCache
from wamdiff.decoding.lean import LEAN_MODES, install_tail, tail_rows
from wamdiff.decoding.paged_attention import make_backend, paged_step, step_hook
from wamdiff.decoding.prefill_cache import image_features
from wamdiff.decoding.shared_prefix import head_kv, head_length
from wamdiff.diffusion.attention import install_attention, step_attention
from wamdiff.diffusion.masks import (
    decode_position_ids, decode_slot_mask_dense, encode_mask, prefix_position_ids, uses_mrope,
)
from wamdiff.models.precision import compute_dtype


PROMPT_BUCKET = 32  # compiled / CUDA-graph steps: prompt widths rounded up to this (bounded number of shapes)


def text_config(model):
    return getattr(model.config, "text_config", model.config)


def _is_vl(model) -> bool:
    return uses_mrope(model)


@dataclass
class PromptBatch:
    """Left-padded prompts. ids/valid: [N, P]; pixel_values, image_grid_thw concatenated in sample order."""

    ids: torch.LongTensor
    valid: torch.BoolTensor
    pixel_values: torch.Tensor | None
    image_grid_thw: torch.LongTensor | None
    mm_token_type_ids: torch.LongTensor | None


def collate_prompts(prompts, pad_id: int, device=None, pad_to_multiple: int = 1) -> PromptBatch:
    """Left-pad a list of `EncodedPrompt`-like objects (fields input_ids, pixel_values, image_grid_thw, mm_token_type_ids).

    `pad_to_multiple` rounds the padded width up (compiled / graph-captured steps: a few prompt-width buckets
    instead of one compiled graph per distinct prompt length)."""
    if not prompts:
        raise ValueError("generate: prompts is empty")
    lens = [int(p.input_ids.numel()) for p in prompts]
    if min(lens) == 0:
        raise ValueError(f"generate: prompt {lens.index(0)} has no tokens")
    n, width = len(prompts), -(-max(lens) // pad_to_multiple) * pad_to_multiple
    ids = torch.full((n, width), pad_id, dtype=torch.long)
    valid = torch.zeros((n, width), dtype=torch.bool)
    mm = torch.zeros((n, width), dtype=torch.long)
    pixels, grids, any_mm = [], [], False
    for i, p in enumerate(prompts):
        ids[i, width - lens[i]:] = p.input_ids.reshape(-1)
        valid[i, width - lens[i]:] = True
        if getattr(p, "mm_token_type_ids", None) is not None:
            mm[i, width - lens[i]:] = p.mm_token_type_ids.reshape(-1)
            any_mm = True
        if getattr(p, "pixel_values", None) is not None:
            pixels.append(p.pixel_values)
            grids.append(p.image_grid_thw.reshape(-1, 3))
    pv = torch.cat(pixels).to(device) if pixels else None
    grid = torch.cat(grids).to(device) if grids else None
    return PromptBatch(ids.to(device), valid.to(device), pv, grid, mm.to(device) if any_mm or pixels else None)


class StepRunner:
    """Owns the cache, the slot mask matrix, the positions and the one-step forward for one batch.

    `lean` (`wamdiff.decoding.lean`): "off", "head" (the decoders give logits only to the rows they read) or
    "last_layer" (also the last layer's MLP only there); `prefill_cache`: the vision tower's grid tables cached
    (`wamdiff.decoding.prefill_cache`). Both are exact."""

    def __init__(self, model, batch: PromptBatch, block_size: int, answer_capacity: int, *, compile: bool = False,
                 cuda_graphs: bool = False, attention: str = "sdpa", lean: str = "off", prefill_cache: bool = False,
                 shared_prefix: bool = False):
        if lean not in LEAN_MODES:
            raise ValueError(f"StepRunner: lean must be one of {LEAN_MODES}, got {lean!r}")
        self.model = model
        self.lean = lean
        self.prefill_cache = prefill_cache
        self.shared_prefix = shared_prefix
        self._init_args = dict(compile=compile, cuda_graphs=cuda_graphs, attention=attention, lean=lean,
                               prefill_cache=prefill_cache)
        self._tail = install_tail(model) if lean == "last_layer" else None
        self.batch = batch
        self.vl = _is_vl(model)
        cfg = text_config(model)
        dev = batch.ids.device
        self.device = dev
        self.dtype = compute_dtype(model)  # activations and the KV cache (fp32 for upcast bf16 weights)
        n, p = batch.ids.shape
        self.n, self.P, self.block_size = n, p, block_size
        self.A = -(-answer_capacity // block_size) * block_size
        self.S = s = p + self.A

        # the [N, 1, S, S] "may attend" matrix (see module docstring), bool and in the model's encoding
        allow = decode_slot_mask_dense(batch.valid, block_size, self.A)
        self._allow_bool = allow[:, None]  # paged attention reads bool rows whatever the model's mask encoding
        impl = getattr(cfg, "_attn_implementation", "sdpa")
        if impl not in ("sdpa", "eager", "wamdiff_mask_dispatch", None):
            raise ValueError(f"decoding supports sdpa/eager attention, the model uses {impl!r}")
        self.allow = encode_mask(allow, "eager" if impl == "eager" else "sdpa", self.dtype)  # eager ADDS the mask
        self._mask_cache: dict[tuple[int, int], tuple] = {}

        # position ids for every slot
        pos, next_pos = prefix_position_ids(
            model, batch.ids, batch.valid, image_grid_thw=batch.image_grid_thw, mm_token_type_ids=batch.mm_token_type_ids
        )
        ans = decode_position_ids(next_pos.to(dev), 0, self.A, mrope=self.vl)
        self.pos = torch.cat([pos.to(dev), ans], dim=-1).contiguous()
        self.slots = torch.arange(s, device=dev)

        graphs = cuda_graphs and dev.type == "cuda" and attention == "sdpa" and not compile
        self._pool_key = (n, s, str(self.dtype), str(dev), lean) if graphs else None  # what a captured step bakes in
        pooled = cuda_graph_pool().take(model, self._pool_key) if graphs else None
        self.cache = pooled[0] if pooled else SlotCache(cfg, n, s, self.dtype, dev)
        # compiled steps and CUDA graphs specialise on shapes: callers that choose a query count round it up
        self.static_shapes = compile or (cuda_graphs and dev.type == "cuda")
        self._rows = torch.arange(n, device=dev)[:, None]
        if self.vl:
            self._text_model = model.model.language_model
            self._embed = model.model.language_model.embed_tokens
        else:
            self._text_model = model.model
            self._embed = None
        self._lm_head = model.lm_head
        self._step = self._step_eager
        self._paged = None
        if attention != "sdpa":  # a paged kernel per step (FlashInfer); eager steps only
            if compile:
                raise ValueError(f"attention={attention!r} runs eager steps; use compile=False")
            install_attention(model)
            self._paged = make_backend(attention, dev, self.dtype)
        elif compile:
            self._step = _compiled_step(model)
            self._step.runner = self
        elif graphs:
            self._step = pooled[1] if pooled else cuda_graph_pool().CudaGraphStep(self.cache, self._step_eager)
            self._step.eager = self._step_eager  # captures of new shapes run this runner's step

    def release(self) -> None:
        """Done decoding: the cache and its captured CUDA graphs go back to the pool for the next runner of this
        shape (`decoding.cuda_graphs`); this runner must not step again. Nothing to do without graphs."""
        if self._pool_key is not None:
            cuda_graph_pool().give_back(self.model, self._pool_key, self.cache, self._step)
            self._pool_key = None

    # ------------------------------------------------------------------------------------------ forwards
    def slot_inputs(self, q0: int, q1: int):
        """(mask, position ids, cache write index) for queries at slots [q0, q1): contiguous tensors made once per
        slot range and reused (a denoising loop asks for the same range every step)."""
        got = self._mask_cache.get((q0, q1))
        if got is None:
            got = self._mask_cache[(q0, q1)] = (
                self.allow[:, :, q0:q1, :].contiguous(), self.pos[..., q0:q1].contiguous(), self.slots[q0:q1].clone()
            )
        return got

    def _step_eager(self, ids, mask, pos, keep: int):
        if self.vl:
            hidden = self._text_model(
                inputs_embeds=self._embed(ids), attention_mask=mask, position_ids=pos, cache=self.cache, use_cache=True
            ).last_hidden_state
        else:
            hidden = self._text_model(
                input_ids=ids, attention_mask={"full_attention": mask}, position_ids=pos, cache=self.cache, use_cache=True
            ).last_hidden_state
        return self._lm_head(hidden[:, hidden.shape[1] - keep:])

    def _attention(self, rows_bool: torch.Tensor, last_slot: int):
        """The paged-attention context of a step whose queries have mask rows `rows_bool` and reach `last_slot`:
        keys are read up to the end of that slot's block (later slots are hidden anyway)."""
        if self._paged is None:
            return nullcontext()
        p, b = self.P, self.block_size
        kv_len = last_slot + 1 if last_slot < p else p + ((last_slot - p) // b + 1) * b
        return step_attention(step_hook(self._paged, paged_step(rows_bool, kv_len)))

    def forward(self, ids: torch.LongTensor, q0: int, keep: int) -> torch.Tensor:
        """Run queries `ids` [N, Q] at slots [q0, q0+Q): their K/V are written there; logits of the last `keep`."""
        q1 = q0 + ids.shape[1]
        mask, pos, index = self.slot_inputs(q0, q1)
        self.cache.write_index = index
        with self._attention(self._allow_bool[:, :, q0:q1], q1 - 1), tail_rows(self._tail, keep):
            return self._step(ids, mask, pos, keep)

    def forward_slots(self, ids: torch.LongTensor, slots: torch.LongTensor, keep: int | None = None) -> torch.Tensor:
        """Run queries `ids` [N, Q] at per-sample slots `slots` [N, Q] (any order; a slot repeated within a row
        must carry the same token): K/V written there, logits of the last `keep` queries (default all Q)."""
        keep = ids.shape[1] if keep is None else keep
        mask = self.allow[self._rows, 0, slots][:, None]  # [N, 1, Q, S]
        pos = self.pos.gather(-1, slots.expand(*self.pos.shape[:-1], slots.shape[-1]))  # [N, Q] or [3, N, Q]
        self.cache.write_index = slots
        paged = self._paged is not None
        with self._attention(self._allow_bool[self._rows, 0, slots][:, None] if paged else None,
                             int(slots.max()) if paged else 0), tail_rows(self._tail, keep):
            return self._step(ids, mask, pos, keep)

    def prefill(self, extra: torch.LongTensor | None, keep: int) -> torch.Tensor:
        """The prompt forward (pixels only here), optionally with `extra` query tokens appended at slot P (the
        first denoising step of block 0 when commits are fused). Returns logits of the last `keep` queries. With
        `shared_prefix`, the head every prompt shares comes from `decoding.shared_prefix` and only the rest runs."""
        ids = self.batch.ids if extra is None else torch.cat([self.batch.ids, extra], dim=1)
        c0 = self._write_shared_head() if self.shared_prefix else 0
        mask, pos, self.cache.write_index = self.slot_inputs(c0, ids.shape[1])
        with self._attention(self._allow_bool[:, :, c0:ids.shape[1]], ids.shape[1] - 1), tail_rows(self._tail, keep):
            return self._prefill(ids[:, c0:], mask, pos, keep, c0)

    def _write_shared_head(self) -> int:
        """Write the shared prompt head's K/V into every row's slots; returns the first column still to prefill (rows
        with shorter prompts recompute a few head tokens there: the same K/V)."""
        b = self.batch
        h = head_length(b.ids, b.valid, b.mm_token_type_ids)
        if not h:
            return 0
        starts = self.P - b.valid.sum(1)  # [N] each row's first prompt slot (left padding)
        first = b.ids[int(starts.argmin()), int(starts.min()):][:h].tolist()
        kv = head_kv(self.model, first, self.dtype, self.device, lambda ids: StepRunner(
            self.model, PromptBatch(ids, torch.ones_like(ids, dtype=torch.bool), None, None, None), 1, 0,
            **self._init_args))
        slots = (starts[:, None] + torch.arange(h, device=self.device))[:, None, :, None]  # [N, 1, h, 1]
        for layer, (k, v) in zip(self.cache.layers, kv):
            idx = slots.expand(self.n, k.shape[1], h, k.shape[3])
            layer.keys.scatter_(2, idx, k.expand(self.n, -1, -1, -1))
            layer.values.scatter_(2, idx, v.expand(self.n, -1, -1, -1))
        return int(starts.min()) + h

    def _prefill(self, ids, mask, pos, keep: int, c0: int = 0) -> torch.Tensor:
        """The prefill forward of prompt columns [c0, ...) (and any extra query tokens after them)."""
        if not self.vl:
            return self._step_eager(ids, mask, pos, keep)
        b = self.batch
        self.model.model.rope_deltas = None
        cached = self.prefill_cache and b.pixel_values is not None
        mm = None if b.mm_token_type_ids is None else torch.cat(
            [b.mm_token_type_ids, torch.zeros_like(ids[:, : c0 + ids.shape[1] - b.ids.shape[1]])], dim=1)[:, c0:]
        hidden = self.model.model(
            input_ids=ids, attention_mask=mask, position_ids=pos, cache=self.cache, use_cache=True,
            pixel_values=None if cached else b.pixel_values, image_grid_thw=b.image_grid_thw,
            mm_encoder_outputs=image_features(self.model, b.pixel_values, b.image_grid_thw) if cached else None,
            mm_token_type_ids=mm,
        ).last_hidden_state
        return self._lm_head(hidden[:, hidden.shape[1] - keep:])


def cuda_graph_pool():
    """`decoding.cuda_graphs`, imported on the CUDA path only."""
    from wamdiff.decoding import cuda_graphs  # noqa: PLC0415

    return cuda_graphs


def _compiled_step(model):
    """One compiled step function per model (cached on the model), shared by the AR and block decoders."""
    fn = getattr(model, "_wamdiff_compiled_step", None)
    if fn is None:
        vl = _is_vl(model)

        def step(runner_ids, mask, pos, keep, text_model, embed, lm_head, cache):
            if vl:
                h = text_model(inputs_embeds=embed(runner_ids), attention_mask=mask, position_ids=pos, cache=cache,
                               use_cache=True).last_hidden_state
            else:
                h = text_model(input_ids=runner_ids, attention_mask={"full_attention": mask}, position_ids=pos,
                               cache=cache, use_cache=True).last_hidden_state
            return lm_head(h[:, h.shape[1] - keep:])

        # CPU: inductor "freezing" folds the (inference-only) weights into the graph and prepacks them for
        # oneDNN (AMX for bf16) -- measured 1.1-2x on the student preset. The weights are then constants of
        # the compiled step: decoding a model whose weights change later needs compile=False.
        on_cpu = next(model.parameters()).device.type == "cpu"
        # one graph per step shape: (AR 1 | block B | fused 2B queries) x batch x cache width; allow many
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        compiled = torch.compile(step, dynamic=False, options={"freezing": True} if on_cpu else None)
        fn = model._wamdiff_compiled_step = compiled
    return _BoundCompiled(fn)


class _BoundCompiled:
    """Late-binds the runner's modules/cache into the shared compiled function."""

    def __init__(self, fn):
        self.fn = fn
        self.runner = None

    def __call__(self, ids, mask, pos, keep):
        r = self.runner
        return self.fn(ids, mask, pos, keep, r._text_model, r._embed, r._lm_head, r.cache)

"""A static KV cache written at caller-chosen slots.

transformers' `StaticCache` appends at a running counter. Block diffusion needs to overwrite the same slots
at every denoising step of a block (the cache must not grow) and to write a committed block back into its
slot, so each layer here copies the new K/V to `cache.write_index` (a LongTensor of slot ids set by the
caller before each forward: one slot list for the whole batch, or [N, Q] slots per sample) and returns the
whole preallocated buffer. Attention then runs over all slots;
the caller's mask hides the slots a query may not see (unwritten, padding, later blocks). The AR baseline
uses the very same class, so both decoders pay identical cache costs.
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, StaticLayer


class _SlotLayer(StaticLayer):
    def __init__(self, owner: "SlotCache", max_cache_len: int):
        super().__init__(max_cache_len=max_cache_len)
        self._owner = owner

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        idx = self._owner.write_index
        if idx.ndim == 1:  # the same slots for every sample
            self.keys.index_copy_(2, idx, key_states)
            self.values.index_copy_(2, idx, value_states)
        else:  # [N, Q]: each sample writes its own slots
            idx = idx[:, None, :, None].expand_as(key_states)
            self.keys.scatter_(2, idx, key_states)
            self.values.scatter_(2, idx, value_states)
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.max_cache_len


class SlotCache(Cache):
    """Preallocated [batch, kv_heads, max_cache_len, head_dim] K/V per layer, written in place at `write_index`."""

    def __init__(self, text_config, batch_size: int, max_cache_len: int, dtype: torch.dtype, device):
        self.write_index = torch.zeros(0, dtype=torch.long, device=device)
        layers = [_SlotLayer(self, max_cache_len) for _ in range(text_config.num_hidden_layers)]
        super().__init__(layers=layers)
        heads = getattr(text_config, "num_key_value_heads", None) or text_config.num_attention_heads
        head_dim = getattr(text_config, "head_dim", None) or text_config.hidden_size // text_config.num_attention_heads
        # Allocate eagerly so no allocation happens inside a compiled / graph-captured step.
        k = torch.zeros(batch_size, heads, 1, head_dim, dtype=dtype, device=device)
        for layer in self.layers:
            layer.lazy_initialization(k, k)

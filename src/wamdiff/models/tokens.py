"""Special-token strings shared by every area (Qwen chat conventions + what masked diffusion needs), and the one
look-up of a token's id (`token_id`)."""

MASK = "<|mask|>"  # the absorbing state of masked diffusion
PAD = "<|endoftext|>"  # pads prompts (left) and fills the answer tail after IM_END (right)
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"  # end of an answer turn = EOS of generation
VISION_START = "<|vision_start|>"
VISION_END = "<|vision_end|>"
IMAGE_PAD = "<|image_pad|>"  # one per merged image patch
VIDEO_PAD = "<|video_pad|>"  # unused by the world, but Qwen3-VL's config needs a video token id
IMAGE_PLACEHOLDER = "<image>"  # in human text (LLaVA / WAM-Diff2 JSON), expanded by the processor
N_BINS = 256


def bin_token(i: int) -> str:
    """Token of trajectory bin i (binned trajectory format)."""
    if not 0 <= i < N_BINS:
        raise ValueError(f"bin index {i} outside [0, {N_BINS})")
    return f"<|bin_{i}|>"


BIN_TOKENS = [bin_token(i) for i in range(N_BINS)]

# The `delta` trajectory format: one token per coordinate of each 0.5 s displacement, on a 0.1 m grid
# (dx in [-8, 22) m: up to 44 m/s forward and backing turns; dy in [-8, 8) m).
DELTA_STEP = 0.1
DELTA_X_RANGE = (-8.0, 22.0)
DELTA_Y_RANGE = (-8.0, 8.0)
N_DELTA_X = round((DELTA_X_RANGE[1] - DELTA_X_RANGE[0]) / DELTA_STEP)
N_DELTA_Y = round((DELTA_Y_RANGE[1] - DELTA_Y_RANGE[0]) / DELTA_STEP)
DELTA_X_TOKENS = [f"<|dx_{i}|>" for i in range(N_DELTA_X)]
DELTA_Y_TOKENS = [f"<|dy_{i}|>" for i in range(N_DELTA_Y)]
CHAT_TOKENS = [PAD, IM_START, IM_END, MASK, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD]
SPECIAL_TOKENS = [*CHAT_TOKENS, *BIN_TOKENS, *DELTA_X_TOKENS, *DELTA_Y_TOKENS]


def token_id(tokenizer, token: str) -> int:
    """Id of a special token; ValueError if the vocabulary lacks it (an unknown token maps to unk, not None)."""
    i = tokenizer.convert_tokens_to_ids(token)
    unk = getattr(tokenizer, "unk_token_id", None)
    if i is None or (unk is not None and i == unk and token != getattr(tokenizer, "unk_token", None)):
        raise ValueError(f"token {token!r} is absent from the tokenizer's vocabulary")
    return int(i)

"""Special-token strings shared by every area (Qwen chat conventions + what masked diffusion needs)."""

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
SPECIAL_TOKENS = [PAD, IM_START, IM_END, MASK, VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD, *BIN_TOKENS]

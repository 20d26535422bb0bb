"""The default world's tokenizer: a small byte-level BPE trained at build time on the prompt templates.

Byte-level means any text (ASCII or not) round-trips losslessly; digits and punctuation marks are split one
per token before BPE (digits as Qwen does), so numbers never merge and waypoint text has one token per
character; merges are learned from a fixed corpus so the vocabulary (~700 entries including the 256 bin tokens
and the specials) is identical on every run. `build_qwen2_style_tokenizer` trains a stand-in for a real Qwen
tokenizer instead (Qwen2's rules: punctuation may merge, so fixed-width positions are not guaranteed).
"""

from __future__ import annotations

import itertools
import json

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from wamdiff.models import tokens as T

N_MERGES = 320  # small: tiny models stay cheap; enough to make the fixed prompt text short

PROMPT_TEMPLATE = (
    "Here is a front-view images from a driving vehicle: <image>\nThe navigation information is: {cmd}\n"
    "The current position is (0.00,0.00)\nThe current velocity is: ({vx},{vy}) and current accelerate is: "
    "({ax},{ay})\nInstruction: Based on the above information, predict the optimal driving action for the "
    "next 4 seconds with 8 new waypoints."
)
QUESTIONS = [
    "How many vehicles are ahead within 30 m?",
    "Which lane is the ego vehicle in?",
    "Is the lead vehicle braking?",
    "What meta-action does the ego take?",
    "What is the distance to the lead vehicle?",
    "Is there a vehicle in the left lane?",
    "Is there a vehicle in the right lane?",
    "What is the speed of the ego vehicle?",
]
ANSWERS = ["yes", "no", "none", "keep lane", "change lane left", "change lane right", "accelerate", "decelerate",
           "stop", "turn left", "turn right", "go straight", "lane 1 of 3", "lane 2 of 3", "lane 3 of 3", "2", "0"]
COMMANDS = ["left", "straight", "right", "unknown"]


def training_corpus() -> list[str]:
    """Fixed text the merges are learned from: prompts, questions, answers, waypoint strings, chat roles."""
    nums = ["0.00", "-1.25", "12.50", "3.7", "-0.4", "25.03", "8.91"]
    prompts = [
        PROMPT_TEMPLATE.format(cmd=c, vx=vx, vy=vy, ax=ax, ay=ay)
        for c, (vx, vy, ax, ay) in zip(itertools.cycle(COMMANDS), itertools.permutations(nums, 4))
    ][:64]
    waypoints = [",".join(itertools.islice(itertools.cycle(nums), i, i + 16)) for i in range(7)]
    chat = ["user\n", "assistant\n", "system\nYou are a driving assistant."]
    return prompts + [q + " " for q in QUESTIONS] * 8 + [a + " " for a in ANSWERS] * 8 + waypoints + chat


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Build the default world's tokenizer (deterministic; no download)."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        # every punctuation mark its own token: ",+" and ",-" must have the same width, or the token positions
        # of fixed-width waypoint text would shift with the sign (fatal for parallel decoding)
        pre_tokenizers.Punctuation(behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=len(alphabet) + N_MERGES, min_frequency=2, initial_alphabet=alphabet, show_progress=False,
        special_tokens=[],
    )
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    tok.add_special_tokens(T.SPECIAL_TOKENS)
    return wrap_tokenizer(tok)


# Qwen's own chat / vision specials (a real Qwen3-VL tokenizer has these, but not wamdiff's mask and bin tokens)
QWEN_SPECIAL_TOKENS = [T.PAD, T.IM_START, T.IM_END, T.VISION_START, T.VISION_END, T.IMAGE_PAD, T.VIDEO_PAD]


def build_qwen2_style_tokenizer(corpus, vocab_size: int = 1024):
    """A stand-in for a real Qwen tokenizer, trained here (no download): byte-level BPE with Qwen2's own
    normalizer and pre-tokenizer rules (transformers' `Qwen2Tokenizer`: digits one by one, but runs of
    punctuation stay together, so merges like ',-' can exist), returned as a `Qwen2Tokenizer` with Qwen's
    chat / vision special tokens and none of wamdiff's (`load_model` adds those, as for a real checkpoint)."""
    from transformers import Qwen2Tokenizer
    from transformers.models.qwen2.tokenization_qwen2 import PRETOKENIZE_REGEX

    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=QWEN_SPECIAL_TOKENS, show_progress=False)
    tok.train_from_iterator(list(corpus), trainer=trainer)
    bpe = json.loads(tok.to_str())["model"]
    qwen = Qwen2Tokenizer(vocab=bpe["vocab"], merges=[tuple(m) for m in bpe["merges"]], eos_token=T.IM_END, pad_token=T.PAD)
    qwen.add_tokens([AddedToken(t, special=True) for t in QWEN_SPECIAL_TOKENS])
    return qwen


def wrap_tokenizer(tok: Tokenizer) -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token=T.PAD, eos_token=T.IM_END, mask_token=T.MASK, padding_side="left",
        clean_up_tokenization_spaces=False, model_max_length=4096,
    )


def add_special_tokens(tokenizer) -> int:
    """Add any of our special tokens a (foreign, e.g. Qwen) tokenizer lacks; returns how many were added."""
    missing = [t for t in T.SPECIAL_TOKENS if tokenizer.convert_tokens_to_ids(t) in (None, tokenizer.unk_token_id)]
    added = tokenizer.add_special_tokens({"additional_special_tokens": missing}, replace_extra_special_tokens=False) if missing else 0
    for attr, value in (("pad_token", T.PAD), ("eos_token", T.IM_END), ("mask_token", T.MASK)):
        if getattr(tokenizer, attr) is None:
            setattr(tokenizer, attr, value)
    return added

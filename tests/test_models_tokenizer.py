"""The default world's tokenizer: lossless, digits one per token, small, deterministic, all specials present."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wamdiff.models import tokens as T
from wamdiff.models.tokenizer import PROMPT_TEMPLATE, build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


ASCII = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=127), max_size=200)


@settings(max_examples=200, deadline=None)
@given(ASCII)
def test_ascii_round_trip(tok, text):
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=40))
def test_any_unicode_round_trips(tok, text):
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


@settings(max_examples=50, deadline=None)
@given(st.text(alphabet="0123456789", min_size=1, max_size=30), st.sampled_from(["", " ", "(", ",-", "x = "]))
def test_digits_one_per_token(tok, digits, prefix):
    pieces = tok.convert_ids_to_tokens(tok.encode(prefix + digits, add_special_tokens=False))
    assert pieces[-len(digits):] == list(digits)


def test_specials_small_vocab_and_determinism(tok):
    assert len(tok) < 1000 + len(T.DELTA_X_TOKENS) + len(T.DELTA_Y_TOKENS)  # small: text, chat, bins, delta steps
    for t in T.SPECIAL_TOKENS:
        ids = tok.encode(t, add_special_tokens=False)
        assert len(ids) == 1 and tok.convert_ids_to_tokens(ids[0]) == t
    assert tok.pad_token == T.PAD and tok.eos_token == T.IM_END and tok.mask_token == T.MASK
    assert build_tokenizer().backend_tokenizer.to_str() == tok.backend_tokenizer.to_str()
    prompt = PROMPT_TEMPLATE.format(cmd="right", vx="12.34", vy="-0.05", ax="0.10", ay="0.00")
    assert len(tok.encode(prompt, add_special_tokens=False)) < 110  # the trained merges make the prompt short
    with pytest.raises(ValueError, match="bin index"):
        T.bin_token(256)


def test_fixed_width_waypoints_have_one_token_per_character():
    """Parallel decoding relies on it: the sign of a number must not change where later tokens sit."""
    import numpy as np

    from wamdiff.driving.trajectory import format_trajectory

    tok = build_tokenizer()
    rng = np.random.default_rng(0)
    for _ in range(50):
        xy = np.stack([np.sort(rng.uniform(-4, 110, 8)), rng.uniform(-25, 25, 8)], 1)
        text = format_trajectory(xy, "fixed1")
        ids = tok(text)["input_ids"]
        assert len(ids) == len(text) == 111
        assert tok.decode(ids) == text

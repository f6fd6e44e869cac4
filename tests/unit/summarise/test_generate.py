"""The abstractive engine against `model.generate` run on one text at a time.

Tiny random T5, BART and GPT-2 models are built once per session (about 3 s).
Each equality test runs the engine with a small token budget and window (several
windows, batches mixing lengths, rows finishing at different steps) and compares
every row, token for token, with a solo `model.generate` on the same model, given
the overrides as keyword arguments: that checks the batching and the settings
merge at once.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from shardflow.core import controller
from shardflow.core.parts import resume_key
from shardflow.corpus.chunks import ChunkRecord, write_record
from shardflow.summarise.generate import (
    GenerateParams,
    SamplingError,
    TooLargeError,
    load_generator,
    params_from_dict,
    summarise_chunk,
)
from shardflow.summarise.generate_params import base_generation_config
from shardflow.summarise.records import iter_summaries
from shardflow.summarise.rouge import sentence_lines
from tests.support import tiny_generators, tiny_models

# --------------------------------------------------------------------------- fixtures and helpers


@pytest.fixture(scope="session")
def tiny(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny_generators")
    return {
        "t5": tiny_generators.build_t5(root),
        "bart": tiny_generators.build_bart(root),
        "gpt2": tiny_generators.build_gpt2(root),
        "gpt2_plain": tiny_generators.build_gpt2(root, chat=False),
        "pegasus": tiny_generators.build_pegasus(root),
    }


@pytest.fixture(scope="session")
def texts() -> list[str]:
    return tiny_models.sample_texts(20)


def params(model: Path, **kw) -> GenerateParams:
    kw.setdefault("device", "cpu")
    return GenerateParams(model=str(model), **kw)


def with_generation_config(src: Path, dst: Path, **changes) -> Path:
    """A copy of a model folder whose generation_config.json has `changes` (None removes a key)."""
    shutil.copytree(src, dst)
    cfg = tiny_generators.read_generation_config(dst)
    for key, value in changes.items():
        if value is None:
            cfg.pop(key, None)
        else:
            cfg[key] = value
    (dst / "generation_config.json").write_text(json.dumps(cfg))
    return dst


def reference_inputs(gen, text: str) -> dict:
    """What a user would hand to `model.generate` for one text."""
    tok = gen.tokenizer
    if gen.decoder_only:
        message = {"role": "user", "content": f"{gen.prompt}\n\n{text}"}
        enc = tok.apply_chat_template([message], add_generation_prompt=True, return_dict=True, return_tensors="pt")
    else:
        kw = {"truncation": True, "max_length": gen.input_limit} if gen.input_limit else {}
        enc = tok(gen.prefix + text, return_tensors="pt", **kw)
    return {"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"]}


def solo(gen, inputs: list[dict], **kwargs) -> list[list[int]]:
    """New tokens of `model.generate` run on each input alone."""
    out = []
    for enc in inputs:
        seq = gen.model.generate(**enc, **kwargs)[0]
        out.append((seq[enc["input_ids"].shape[1] :] if gen.decoder_only else seq[1:]).tolist())
    return out


def solo_from_ids(gen, ids: list[list[int]], **kwargs) -> list[list[int]]:
    return solo(
        gen,
        [{"input_ids": torch.tensor([x]), "attention_mask": torch.ones(1, len(x), dtype=torch.long)} for x in ids],
        **kwargs,
    )


def assert_informative(records: list[dict], gen) -> None:
    """A match proves little if every row says the same, or ends at the same step, or nothing was padded."""
    assert len({r["summary"] for r in records}) >= len(records) // 2
    assert len({r["output_tokens"] for r in records}) >= 3
    stats = gen.last_stats
    assert stats.batches > 2 and stats.padded_input_tokens > stats.input_tokens


def write_chunk(path: Path, texts: list[str]) -> Path:
    with open(path, "w", encoding="utf-8") as fh:
        for i, text in enumerate(texts):
            write_record(fh, ChunkRecord(f"doc-{i:05d}", text))
    return path


def oom_above(limit: int):
    def hook(input_ids):
        if input_ids.numel() > limit:
            raise torch.OutOfMemoryError(f"injected: {tuple(input_ids.shape)} > {limit} tokens")

    return hook


# --------------------------------------------------------------------------- equality with model.generate alone


@pytest.mark.parametrize(
    "name,overrides",
    [
        ("t5", {"num_beams": 1}),
        ("t5", {"num_beams": 3}),
        ("bart", {"num_beams": 1, "max_new_tokens": 12}),
        ("bart", {"num_beams": 3, "length_penalty": 2.0, "early_stopping": True}),
        ("gpt2", {"num_beams": 1}),
        ("gpt2", {"num_beams": 3, "no_repeat_ngram_size": 2}),
    ],
)
def test_matches_generate_alone(tiny, texts, name, overrides):
    gen = load_generator(params(tiny[name], token_budget=400, window=8, **overrides))
    records = gen.summarise(texts)
    inputs = [reference_inputs(gen, t) for t in texts]
    ids, truncated = gen.encode(texts)
    for i, (enc, x) in enumerate(zip(inputs, ids, strict=True)):
        if not (gen.decoder_only and truncated[i]):  # the chat template cannot truncate the text alone
            assert enc["input_ids"][0].tolist() == x, f"text {i}: input ids differ"
    want = solo_from_ids(gen, ids, **overrides)
    got = gen.generate_ids(ids)
    bad = [i for i in range(len(texts)) if got[i] != want[i]]
    assert not bad, f"rows {bad} differ from generate alone"
    summaries = [gen.tokenizer.decode(w, skip_special_tokens=True).strip() for w in want]
    assert [r["summary"] for r in records] == summaries
    assert [r["output_tokens"] for r in records] == [len(w) for w in want]
    assert [r["input_tokens"] for r in records] == [len(x) for x in ids]
    assert_informative(records, gen)


def test_model_settings_are_the_default(tiny, texts):
    # BART's generation_config.json: num_beams 2, max_length 20, no_repeat_ngram_size 3, forced BOS/EOS.
    gen = load_generator(params(tiny["bart"], token_budget=400))
    assert gen.generation_config.num_beams == 2 and gen.generation_config.max_length == 20
    records = gen.summarise(texts)
    ids, _ = gen.encode(texts)
    want = solo_from_ids(gen, ids)  # no kwargs: generate's own defaults
    assert gen.generate_ids(ids) == want
    assert max(r["output_tokens"] for r in records) == 19  # max_length 20, minus the decoder start token
    assert_informative(records, gen)
    # The base config is the one from_pretrained gives the model.
    assert base_generation_config(tiny["bart"]).to_dict() == gen.model.generation_config.to_dict()


def test_overrides_replace_model_settings(tiny, texts):
    gen = load_generator(params(tiny["bart"], num_beams=1, max_new_tokens=5, no_repeat_ngram_size=0))
    gc = gen.generation_config
    assert (gc.num_beams, gc.max_new_tokens, gc.no_repeat_ngram_size, gc.forced_bos_token_id) == (1, 5, 0, 0)
    records = gen.summarise(texts)
    assert max(r["output_tokens"] for r in records) == 5
    ids, _ = gen.encode(texts)
    assert gen.generate_ids(ids) == solo_from_ids(gen, ids, num_beams=1, max_new_tokens=5, no_repeat_ngram_size=0)


@pytest.mark.filterwarnings("ignore:Using the model-agnostic default")
def test_generation_settings_from_config_json(tiny, texts, tmp_path):
    # Without generation_config.json, the generation fields of config.json decide (as from_pretrained does).
    model = with_generation_config(tiny["t5"], tmp_path / "t5")
    (model / "generation_config.json").unlink()
    gen = load_generator(params(model))
    # from_model_config also copies config.json's output_attentions / output_hidden_states
    # (False), which from_pretrained leaves None: no effect on generate (both falsy).
    ours, model_own = gen.generation_config.to_diff_dict(), gen.model.generation_config.to_diff_dict()
    for d in (ours, model_own):
        d.pop("output_attentions", None), d.pop("output_hidden_states", None)
    assert ours == model_own
    assert gen.generation_config.max_length is None  # 20 new tokens: transformers' default
    ids, _ = gen.encode(texts[:8])
    assert gen.generate_ids(ids) == solo_from_ids(gen, ids)


# t5-small's config.json, its maximum length cut to what the tiny model's tests can afford.
T5_SUMMARIZATION = {
    "early_stopping": True,
    "length_penalty": 2.0,
    "max_length": 40,
    "min_length": 10,
    "no_repeat_ngram_size": 3,
    "num_beams": 4,
    "prefix": "summarize: ",
}


def test_seq2seq_models_take_their_summarization_task_settings(tiny, texts, tmp_path, caplog):
    # Transformers 4's summarization pipeline put config.json's task_specific_params.summarization
    # over the generation config (t5-small: beam search, 30 to 200 tokens, not greedy 20 tokens).
    model = shutil.copytree(tiny["t5"], tmp_path / "t5")
    cfg = json.loads((model / "config.json").read_text())
    cfg["task_specific_params"] = {"summarization": {**T5_SUMMARIZATION, "max_position_embeddings": 512}}
    (model / "config.json").write_text(json.dumps(cfg))
    with caplog.at_level(logging.INFO, logger="shardflow.summarise.generate"):
        gen = load_generator(params(model, token_budget=400, window=8))
    gc = gen.generation_config
    got = (gc.num_beams, gc.max_length, gc.min_length, gc.no_repeat_ngram_size, gc.length_penalty, gc.early_stopping)
    assert got == (4, 40, 10, 3, 2.0, True)
    assert gen.prefix == "summarize: " and gc.eos_token_id == 1  # the model's own settings stay under them
    records = gen.summarise(texts)
    ids, _ = gen.encode(texts)
    task = {k: v for k, v in T5_SUMMARIZATION.items() if k != "prefix"}
    assert gen.generate_ids(ids) == solo_from_ids(gen, ids, **task)  # as the pipeline called generate
    assert min(r["output_tokens"] for r in records) >= 9  # min_length 10, the decoder start token included
    assert max(r["output_tokens"] for r in records) > 23  # past the model's own max_length 24
    # The job's log names the resolved settings and each layer; a key that is no generation setting is named.
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "'num_beams': 4" in logged and "task_specific_params.summarization {" in logged
    assert "no generation setting, not used: {'max_position_embeddings': 512}" in logged
    # summarise.generation goes over both.
    gc = load_generator(params(model, num_beams=1, min_length=0)).generation_config
    assert (gc.num_beams, gc.min_length, gc.max_length, gc.no_repeat_ngram_size) == (1, 0, 40, 3)
    # Decoder-only models take none (the pipeline refused them).
    gpt2 = shutil.copytree(tiny["gpt2"], tmp_path / "gpt2")
    cfg = json.loads((gpt2 / "config.json").read_text())
    cfg["task_specific_params"] = {"summarization": {"num_beams": 4}}
    (gpt2 / "config.json").write_text(json.dumps(cfg))
    assert load_generator(params(gpt2)).generation_config.num_beams is None
    # A task entry that is no mapping is named, with its file.
    cfg = json.loads((model / "config.json").read_text())
    cfg["task_specific_params"] = {"summarization": "beams"}
    (model / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=r"t5/config.json: task_specific_params.summarization is str, not a mapping"):
        load_generator(params(model))


@pytest.mark.parametrize(
    "changes",
    [
        {"max_new_tokens": None, "max_length": 70},  # counts the prompt, padding included
        {"min_length": 80},  # the same, for the floor (prompts here are 25 to 240 tokens)
    ],
    ids=["max_length", "min_length"],
)
@pytest.mark.filterwarnings("ignore:Unfeasible length constraints")
def test_decoder_only_limits_that_count_padding(tiny, texts, tmp_path, changes, caplog):
    model = with_generation_config(tiny["gpt2"], tmp_path / "gpt2", **changes)
    with caplog.at_level(logging.WARNING):
        gen = load_generator(params(model, token_budget=2000))
    assert any("count the padding" in r.getMessage() for r in caplog.records)
    ids, _ = gen.encode(texts)
    want = solo_from_ids(gen, ids)  # no kwargs: the model's generation_config.json decides
    assert gen.generate_ids(ids) == want
    assert len({len(w) for w in want}) >= 3
    # The grouping by allowed/required new tokens is what makes it exact: batching freely breaks rows.
    gen._batch_keys = lambda lengths: None
    assert gen.generate_ids(ids) != want


def test_decoder_only_repetition_penalty_batches_freely(tiny, texts, tmp_path, caplog):
    # transformers 5 skips left padding (by the attention mask) when penalising prompt tokens.
    model = with_generation_config(tiny["gpt2"], tmp_path / "gpt2", repetition_penalty=1.8)
    with caplog.at_level(logging.WARNING):
        gen = load_generator(params(model, token_budget=1000))
    assert not any("count the padding" in r.getMessage() for r in caplog.records)
    ids, _ = gen.encode(texts)
    assert gen.generate_ids(ids) == solo_from_ids(gen, ids)
    assert gen._batch_keys(np.array([len(x) for x in ids])) is None


# --------------------------------------------------------------------------- prompts, prefixes, truncation


def test_prefix_and_prompt(tiny, texts):
    t5, bart = load_generator(params(tiny["t5"])), load_generator(params(tiny["bart"]))
    assert t5.prefix == "summarize: " and bart.prefix == ""
    assert load_generator(params(tiny["t5"], prefix="")).encode(["ab"])[0] == [[100, 101, 1]]  # bytes + 3, EOS
    chat = load_generator(params(tiny["gpt2"], prompt="Be brief."))
    ids, _ = chat.encode(texts[:3])
    tok = chat.tokenizer
    for text, x in zip(texts[:3], ids, strict=True):
        message = [{"role": "user", "content": f"Be brief.\n\n{text}"}]
        assert x == tok.apply_chat_template(message, add_generation_prompt=True, tokenize=True)["input_ids"]
    plain = load_generator(params(tiny["gpt2_plain"]))
    assert not plain.chat
    ids, _ = plain.encode(["Some text."])
    assert tok.decode(ids[0]) == f"{plain.prompt}\n\nSome text.\n\nSummary:"
    with pytest.raises(ValueError, match="prefix is for seq2seq"):
        load_generator(params(tiny["gpt2"], prefix="summarize: "))


def test_pegasus_newline_token_becomes_a_newline(tiny, texts):
    # PEGASUS writes "<n>" between sentences; its own decoder turns it into a newline, which
    # ROUGE-Lsum (and the sentence splitter) reads as a sentence break.
    gen = load_generator(params(tiny["pegasus"], token_budget=400, window=8))
    records = gen.summarise(texts)
    ids, _ = gen.encode(texts)
    decoded = [gen.tokenizer.decode(x, skip_special_tokens=True).strip() for x in gen.generate_ids(ids)]
    inside = [i for i, d in enumerate(decoded) if "<n>" in d.strip("<n>")]
    assert len(inside) >= 2  # the model writes it between other tokens
    assert [r["summary"] for r in records] == [d.replace("<n>", "\n").strip() for d in decoded]
    for i in inside:
        assert len(sentence_lines(records[i]["summary"]).split("\n")) > 1
    assert gen.identity["newline_symbol"] == "<n>"  # parts decoded the old way are not resumed
    # Other models' summaries and resume keys are as they were.
    bart = load_generator(params(tiny["bart"]))
    assert bart.newline_symbol is None and "newline_symbol" not in bart.identity


def test_truncation_is_counted(tiny, texts):
    # ByT5: one token per byte, plus EOS. "summarize: " is 11 bytes, so 28 text bytes make 40 tokens.
    gen = load_generator(params(tiny["t5"], max_input_length=40))
    batch = ["a" * 28, "a" * 29, "short", *texts]
    records = gen.summarise(batch)
    want = [len(("summarize: " + t).encode()) + 1 > 40 for t in batch]
    assert [r["truncated"] for r in records] == want
    assert records[0]["input_tokens"] == 40 and not records[0]["truncated"]
    assert records[1]["input_tokens"] == 40 and records[1]["truncated"]
    assert gen.last_stats.truncated == sum(want) > 2
    ids, _ = gen.encode(batch)
    assert gen.generate_ids(ids) == solo_from_ids(gen, ids)
    # The model's own limit applies without max_input_length: BART's 128 positions.
    bart = load_generator(params(tiny["bart"]))
    assert bart.input_limit == 128
    long_record = bart.summarise([texts[4]])[0]
    assert long_record["truncated"] and long_record["input_tokens"] == 128


def test_decoder_only_truncation_keeps_the_template(tiny, texts):
    gen = load_generator(params(tiny["gpt2"], max_input_length=60))
    long_text = texts[4]
    ids, truncated = gen.encode([long_text, "short"])
    assert truncated == [True, False] and 50 < len(ids[0]) <= 60
    rendered = gen.tokenizer.decode(ids[0])
    assert rendered.startswith(f"<|user|>\n{gen.prompt}\n\n{long_text[:20]}")
    assert rendered.endswith("\n<|assistant|>\n")  # the generation prompt survives the cut
    # Room for the generated tokens: GPT-2 has 256 positions, 16 new tokens.
    assert load_generator(params(tiny["gpt2"])).input_limit == 240


def test_seq2seq_truncation_keeps_the_start_whatever_side_the_tokenizer_cuts(tiny, texts, tmp_path):
    """A tokenizer_config.json saying truncation_side: left made `tokenizer(..., truncation=True)`
    keep the end of an over-long article (a T5 prefix at its start cut away with the rest),
    silently: the summary was of the article's last tokens. The start is kept, as for
    every other seq2seq model."""
    model = shutil.copytree(tiny["bart"], tmp_path / "bart")
    config = json.loads((model / "tokenizer_config.json").read_text())
    (model / "tokenizer_config.json").write_text(json.dumps({**config, "truncation_side": "left"}))
    gen = load_generator(params(model, max_input_length=40))
    right = load_generator(params(tiny["bart"], max_input_length=40))
    ids, truncated = gen.encode([texts[4], "short"])
    assert truncated == [True, False] and len(ids[0]) == 40
    assert gen.tokenizer.decode(ids[0], skip_special_tokens=True).startswith(texts[4][:30])
    assert ids == right.encode([texts[4], "short"])[0]
    # Parts a job cut the old way are not resumed; other models keep their resume keys.
    assert gen.identity["truncation_side"] == "right" and "truncation_side" not in right.identity


@pytest.mark.parametrize("name", ["gpt2", "gpt2_plain"])
def test_decoder_only_truncation_cuts_between_characters(tiny, name):
    """A byte-level BPE token can hold part of a character (a CJK character, an accented
    letter): a cut there decoded the part as U+FFFD, and the model read, at the end of the
    article, a character the article does not hold. The cut keeps whole characters."""
    gen = load_generator(params(tiny[name]))
    text = "Café naïve — 日本語のテキストを要約する。 " * 20
    opening, closing = (f"<|user|>\n{gen.prompt}\n\n", "\n<|assistant|>\n") if gen.chat else (f"{gen.prompt}\n\n", "\n\nSummary:")
    heads = []
    for limit in range(40, 80):  # cuts at many places in the text, some inside a character
        gen.input_limit = limit
        ids, truncated = gen.encode([text])
        rendered = gen.tokenizer.decode(ids[0])
        assert truncated == [True] and len(ids[0]) <= limit
        assert rendered.startswith(opening) and rendered.endswith(closing), rendered
        heads.append(rendered[len(opening) : -len(closing)])
    assert [h for h in heads if not text.startswith(h)] == []
    assert len(set(heads)) > 10 and min(map(len, heads)) > 0
    assert gen.identity["prompt_cut"] == "whole characters"  # parts a job cut the old way are not resumed


# --------------------------------------------------------------------------- parameters


def test_params_validation(tiny, tmp_path):
    with pytest.raises(ValueError, match="needs a seed"):
        GenerateParams(model="m", do_sample=True)
    with pytest.raises(TypeError):
        GenerateParams(model="m", temp=0.7)
    with pytest.raises(TypeError, match="beams"):
        params_from_dict({"model": "m", "beams": 2})
    assert params_from_dict({"model": "m", "num_beams": 2}).overrides() == {"num_beams": 2}
    with pytest.raises(ValueError, match="early_stopping"):
        GenerateParams(model="m", early_stopping="sometimes")
    with pytest.raises(FileNotFoundError, match="no such folder"):
        load_generator(params(tmp_path / "missing"))
    # Sampling switched on by the model's own config is refused too, until seeded.
    sampling = with_generation_config(tiny["t5"], tmp_path / "t5", do_sample=True, top_k=5)
    with pytest.raises(ValueError, match="samples"):
        load_generator(params(sampling))
    assert load_generator(params(sampling, do_sample=False)).effective.do_sample is False
    # More input than the model has positions: named, not an index error inside the model.
    positions = load_generator(params(tiny["bart"])).max_positions
    with pytest.raises(ValueError, match=rf"summarise.max_input_length {positions + 1} is more than the {positions} positions"):
        load_generator(params(tiny["bart"], max_input_length=positions + 1))
    # A decoder-only model's input is cut to the room its positions leave (as before).
    gpt2 = load_generator(params(tiny["gpt2"], max_input_length=10_000))
    assert gpt2.input_limit < gpt2.max_positions


def test_seeded_sampling_is_reproducible(tiny, texts, tmp_path):
    p = params(tiny["gpt2"], do_sample=True, seed=3, window=7)
    a = load_generator(p).summarise(texts)
    b = load_generator(p).summarise(texts)
    assert a == b
    c = load_generator(replace(p, seed=4)).summarise(texts)
    assert [r["summary"] for r in a] != [r["summary"] for r in c]
    # Resumed windows draw what an uninterrupted run draws.
    gen = load_generator(p)
    gen.summarise(texts, resume_dir=tmp_path / "r")
    (tmp_path / "r" / "part-000001.jsonl").unlink()
    assert gen.summarise(texts, resume_dir=tmp_path / "r") == a


# --------------------------------------------------------------------------- out-of-memory, resume, chunks


def test_oom_backoff_splits_and_matches(tiny, texts, caplog):
    want = load_generator(params(tiny["t5"], num_beams=2)).summarise(texts)
    shapes = []

    def hook(input_ids):
        shapes.append(tuple(input_ids.shape))
        oom_above(600)(input_ids)

    gen = load_generator(params(tiny["t5"], num_beams=2, token_budget=8000), before_generate=hook)
    with caplog.at_level(logging.WARNING):
        got = gen.summarise(texts)
    assert got == want
    assert gen.last_stats.oom_backoffs > 0 and gen.backoff.token_budget <= 600
    assert any("out of memory" in r.getMessage() for r in caplog.records)
    shapes.clear()
    assert gen.summarise(texts) == want  # the lowered budget sticks: no more back-offs
    assert gen.last_stats.oom_backoffs == 0 and all(r * w <= 600 or r == 1 for r, w in shapes)


def test_text_too_large_alone_is_named(tiny, texts, tmp_path):
    gen = load_generator(params(tiny["t5"]), before_generate=oom_above(100))
    with pytest.raises(TooLargeError, match=r"text 2 \(256 tokens\) does not fit"):
        gen.summarise(["short", "also short", texts[4]])
    chunk = write_chunk(tmp_path / "c.jsonl", ["short", texts[4]])
    with pytest.raises(TooLargeError, match=r"id 'doc-00001'.*256 tokens"):
        summarise_chunk(chunk, tmp_path / "o.jsonl", gen.params, tmp_path / "resume", generator=gen)


def test_a_text_too_large_alone_names_the_summarise_keys_that_shrink_it(tiny, texts):
    """The message named max_length, the embedding key: summarise has none. What a
    summarise job can lower is its input limit, its beams and its new tokens."""
    gen = load_generator(params(tiny["t5"]), before_generate=oom_above(100))
    with pytest.raises(TooLargeError) as raised:
        gen.summarise([texts[4]])
    message = str(raised.value)
    assert "summarise.max_input_length" in message and "summarise.generation.num_beams" in message
    assert "lower max_length" not in message


def test_resume_reuses_finished_parts(tiny, texts, tmp_path):
    rows = []
    gen = load_generator(params(tiny["bart"], window=6), before_generate=lambda ids: rows.append(len(ids)))
    folder = tmp_path / "resume"
    full = gen.summarise(texts, resume_dir=folder)
    assert sorted(p.name for p in folder.glob("part-*.jsonl")) == [f"part-{i:06d}.jsonl" for i in range(4)]
    (folder / "part-000002.jsonl").unlink()
    rows.clear()
    again = gen.summarise(texts, resume_dir=folder)
    assert again == full
    assert sum(rows) == 6 and gen.last_stats.resumed_parts == 3 and gen.last_stats.items_generated == 6
    with pytest.raises(ValueError, match="belongs to another job"):
        gen.summarise(texts[:-1], resume_dir=folder)
    other = load_generator(params(tiny["bart"], window=6, num_beams=1))
    with pytest.raises(ValueError, match="belongs to another job"):
        other.summarise(texts, resume_dir=folder)
    # Another window resumes from a folder of its own, not from this one (whose parts it
    # could not use: the job would stop on every retry until the folder was removed).
    chunk = write_chunk(tmp_path / "c.jsonl", texts)
    regrouped = load_generator(params(tiny["bart"], window=4))
    assert resume_key(chunk, regrouped.identity) != resume_key(chunk, gen.identity)
    # So does a retry on another node type, whose kernels give other last bits (greedy
    # decoding may then pick other tokens): a chunk never holds parts of two machines.
    elsewhere = {**gen.identity, "hardware": "NVIDIA L4, sm_89, 58 SMs, CUDA 12.8, cuDNN 91000"}
    assert gen.identity["hardware"] and resume_key(chunk, elsewhere) != resume_key(chunk, gen.identity)


def test_an_orphaned_summarise_chunk_writes_nothing_and_its_rerun_resumes(tiny, texts, tmp_path, monkeypatch):
    """The abstractive chunk job checks its Snakemake before writing, as select_chunk
    and embed do (shardflow.core.controller): an orphan keeps its parts, writes nothing."""
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", texts)
    p = params(tiny["t5"], window=8, max_input_length=64)
    gen = load_generator(p)
    out = tmp_path / "summaries.jsonl"
    monkeypatch.setattr(controller, "find", lambda: controller.Controller(os.getpid(), "another start"))
    with pytest.raises(controller.OrphanedJobError, match="the finished parts are kept in"):
        summarise_chunk(chunk, out, p, tmp_path / "resume", generator=gen)
    assert not out.exists()
    (record,) = (tmp_path / "resume").glob("*/attempt-*.json")  # which job, how far (make status)
    assert {k: json.loads(record.read_text())[k] for k in ("job", "items_saved")} == {"job": str(out), "items_saved": len(texts)}
    monkeypatch.setattr(controller, "find", lambda: None)
    stats = summarise_chunk(chunk, out, p, tmp_path / "resume", generator=gen)
    assert stats["items_generated"] == 0 and stats["resumed_parts"] > 0
    assert stats["earlier_attempts"] == 1 and stats["earlier_attempt_seconds"] > 0  # the orphan's generating time
    assert list(stats["earlier_attempt_devices"]) == ["cpu"]
    assert [r["id"] for r in iter_summaries(out)] == [f"doc-{i:05d}" for i in range(len(texts))]


def test_summarise_chunk_writes_jsonl_in_order(tiny, texts, tmp_path):
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", texts)
    p = params(tiny["t5"], window=8, max_input_length=64)
    gen = load_generator(p)
    out = tmp_path / "out" / "summaries.jsonl"
    stats = summarise_chunk(chunk, out, p, tmp_path / "resume", generator=gen)
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in rows] == [f"doc-{i:05d}" for i in range(len(texts))]
    assert all(list(r) == ["id", "summary", "input_tokens", "output_tokens", "truncated"] for r in rows)
    assert [{k: v for k, v in r.items() if k != "id"} for r in rows] == gen.summarise(texts)
    assert not (tmp_path / "resume" / resume_key(chunk, gen.identity)).exists()
    assert not (tmp_path / "resume").exists()  # the root the parts left empty goes too
    assert not list(out.parent.glob("*.tmp-*"))
    for key in (
        "items",
        "input_tokens",
        "output_tokens",
        "seconds",
        "items_per_s",
        "truncated",
        "oom_backoffs",
        "resumed_parts",
        "device",
        "dtype",
    ):
        assert key in stats, key
    assert stats["items"] == len(texts) and stats["truncated"] == sum(r["truncated"] for r in rows) > 0
    assert (stats["device"], stats["dtype"]) == ("cpu", "float32")
    assert np.isclose(stats["items_per_s"], len(texts) / stats["seconds"])
    # On the CPU the job has no peak GPU memory: null, not 0 (core.devices.peak_memory).
    assert stats["peak_gpu_mem_mib"] is None and stats["peak_gpu_mem_reserved_mib"] is None


def test_summarise_chunk_records_the_peak_gpu_memory_of_the_generators_device(tiny, texts, tmp_path, monkeypatch):
    """Counted from the job's start, read after the last batch, on the generator's device.
    No GPU here: the core.devices calls are replaced and what they are asked recorded."""
    from shardflow.summarise import generate
    from tests.support.peak_memory import record_peak_memory_calls

    events = record_peak_memory_calls(monkeypatch, generate, 700.0, 900.0)
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", texts[:2])
    gen = load_generator(params(tiny["t5"], max_input_length=64), before_generate=lambda ids: events.append("generate"))
    stats = summarise_chunk(chunk, tmp_path / "s.jsonl", gen.params, tmp_path / "resume", generator=gen)
    assert (stats["peak_gpu_mem_mib"], stats["peak_gpu_mem_reserved_mib"]) == (700.0, 900.0)
    assert events[0] == ("reset", str(gen.device)) and events[-1] == ("peak", str(gen.device))
    assert "generate" in events[1:-1]


@pytest.mark.parametrize("native, dtype", [(False, torch.float32), (True, torch.bfloat16)])
def test_auto_summarises_in_fp32_on_a_gpu_without_native_bf16(tiny, monkeypatch, native, dtype):
    """A V100 or T4 (no native bf16): fp16 overflows T5-family models (inf and NaN
    activations), so auto summarises in fp32 there, bf16 where the GPU runs it natively.
    No GPU here: the CUDA queries are faked and the model is never loaded."""
    from shardflow.summarise import generate

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda including_emulation=True: including_emulation or native)
    loaded = []

    class Unloaded(Exception):
        """The model stays unloaded: there is no GPU to put it on."""

    def load_model(folder, config, dtype, device, logger):
        loaded.append((dtype, device))
        raise Unloaded

    monkeypatch.setattr(generate, "_load_model", load_model)
    with pytest.raises(Unloaded):
        load_generator(params(tiny["t5"], device="auto"))
    assert loaded == [(dtype, torch.device("cuda", 0))]


def test_a_summarise_model_that_is_not_there_is_a_missing_file_not_a_config_error(tmp_path, monkeypatch):
    """A folder that has gone (or that this node's local disk lacks), or a hub name not
    in this node's cache, is an OSError, which a retry may cure on another node
    (shardflow.core.failures does not record it); a file where the folder should be is a
    config error."""
    from huggingface_hub import constants

    from shardflow.core.failures import deterministic

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    with pytest.raises(FileNotFoundError, match=r"model './models/flan': no such folder") as gone:
        load_generator(params("./models/flan"))
    assert not deterministic(gone.value)
    with pytest.raises(FileNotFoundError, match=r"'models/flan' is neither a local folder nor in the local") as gone:
        load_generator(params("models/flan"))
    assert not deterministic(gone.value)
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="is a file; give the model folder") as a_file:
        load_generator(params(tmp_path / "weights.bin"))
    assert deterministic(a_file.value)


def test_a_cached_hub_name_summarises_as_its_snapshot_folder(tiny, texts, tmp_path, monkeypatch):
    """summarise.model may be a hub name found in the local Hugging Face cache, as
    embedding.model may (core.models.model_folder; nothing downloads): it loads that
    snapshot, writes its summaries, and has its identity (resume keys, settings), which
    names the model by its files, not by how the config spells it."""
    from huggingface_hub import constants

    from tests.support.hub_cache import hub_cache_of

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = hub_cache_of(tiny["bart"], tmp_path / "hub", "facebook/bart-large-cnn")
    by_name = load_generator(params("facebook/bart-large-cnn"))
    by_folder = load_generator(params(snapshot))
    assert by_name.folder == snapshot
    assert by_name.identity == by_folder.identity and by_name.settings == by_folder.settings
    assert by_name.identity["model"] == load_generator(params(tiny["bart"])).identity["model"]
    assert by_name.summarise(texts[:4]) == by_folder.summarise(texts[:4])


def test_a_text_whose_sampling_probabilities_are_nan_is_named(tiny, texts, tmp_path):
    """Sampling refuses a probability row with nan (as torch.multinomial does): the error
    named no text, so a job stopped without saying which document's scores broke. It
    names the text's position (a later window's too) and, from a chunk, the file and id."""
    chunk_texts = texts[:5]
    gen = load_generator(params(tiny["gpt2"], do_sample=True, seed=3, window=2))
    target = gen.encode([chunk_texts[3]])[0][0]
    broken: set[int] = set()

    def find_rows(module, args, kwargs):  # the prompt pass: which rows hold text 3
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        if ids.shape[1] == mask.shape[1]:
            broken.clear()
            broken.update(r for r in range(len(ids)) if ids[r][mask[r].bool()].tolist() == target)

    def nan_scores(module, args, out):
        out[sorted(broken)] = float("nan")
        return out

    hooks = [
        gen.model.register_forward_pre_hook(find_rows, with_kwargs=True),
        gen.model.get_output_embeddings().register_forward_hook(nan_scores),
    ]
    try:
        with pytest.raises(SamplingError, match=r"^text 3: at sampling step 1 its probability tensor contains"):
            gen.summarise(chunk_texts)
        chunk = write_chunk(tmp_path / "c.jsonl", chunk_texts)
        with pytest.raises(SamplingError, match=r"c\.jsonl: id 'doc-00003': text 3: .* `nan`"):
            summarise_chunk(chunk, tmp_path / "o.jsonl", gen.params, tmp_path / "resume", generator=gen)
    finally:
        for hook in hooks:
            hook.remove()
    assert broken  # the hooks found the text's row

"""Tokenizers: char, byte-level bpe and the bundled MiniLM, behind one interface."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from shardflow.core.models import resolve_model
from shardflow.train.tokenizer import (
    CharTokenizer,
    UnknownCharacterError,
    load_pretrained,
    load_tokenizer,
    pretrained_files,
    pretrained_unavailable,
    train_bpe,
    vocabulary_file,
)

TEXTS = ["First Citizen:\nBefore we proceed any further, hear me speak.", "All:\nSpeak, speak. Ünïcödé 🎉 ok"] * 20


def test_char_vocab_round_trip_and_save(tmp_path):
    tok = CharTokenizer.train(TEXTS)
    chars = sorted(set("".join(TEXTS)))
    assert tok.chars == chars and tok.vocab_size == len(chars) + 1 and tok.eot_id == len(chars)
    ids = tok.encode(TEXTS[1])
    assert ids == [chars.index(c) for c in TEXTS[1]]
    assert tok.decode(ids) == TEXTS[1]
    assert tok.decode([tok.eot_id]) == "<|endoftext|>"
    ident = tok.save(tmp_path)
    back = load_tokenizer(tmp_path)
    assert back.identity() == ident
    assert ident["sha256"] == hashlib.sha256((tmp_path / "char_tokenizer.json").read_bytes()).hexdigest()
    assert back.encode(TEXTS[1]) == ids


def test_char_refuses_unknown_characters():
    tok = CharTokenizer.train(["abc"])
    with pytest.raises(
        UnknownCharacterError, match=r"character 'z' \(U\+007A\) at offset 2 is not in the char vocabulary"
    ):
        tok.encode("abz")
    with pytest.raises(ValueError, match="training text is empty"):
        CharTokenizer.train([])


def test_bpe_round_trip_save_and_determinism(tmp_path):
    tok = train_bpe(iter(TEXTS), vocab_size=300, min_frequency=1)
    assert tok.kind == "bpe" and tok.vocab_size <= 300
    assert tok.eot_id == tok._tk.token_to_id("<|endoftext|>")
    for text in TEXTS[:2] + ["never seen: ∑ 日本語 \t\n  spaces"]:  # byte-level: everything encodes exactly
        assert tok.decode(tok.encode(text)) == text
    ident = tok.save(tmp_path)
    assert ident == load_tokenizer(tmp_path).identity()
    assert ident["sha256"] == hashlib.sha256((tmp_path / "tokenizer.json").read_bytes()).hexdigest()
    assert train_bpe(iter(TEXTS), vocab_size=300, min_frequency=1).identity() == ident
    json.loads((tmp_path / "tokenizer.json").read_text())  # a plain Hugging Face tokenizer.json


def test_minilm_from_the_bundled_folder(tmp_path):
    folder = resolve_model("default")
    tok = load_pretrained("default")
    assert tok.kind == "pretrained" and tok.vocab_size == 30522
    assert (tok.eot_token, tok.eot_id) == ("[SEP]", 102)  # BERT has no EOS: SEP ends documents
    long_text = "the " * 300
    ids = tok.encode(long_text)
    assert len(ids) == 300 and 101 not in ids and 102 not in ids  # no truncation, no [CLS]/[SEP] template
    assert tok.decode(tok.encode("Hello World")) == "hello world"  # lower-cases: not an exact inverse
    ident = tok.save(tmp_path)
    assert ident["sha256"] == hashlib.sha256(Path(folder, "tokenizer.json").read_bytes()).hexdigest()
    assert load_tokenizer(tmp_path).identity() == ident
    assert load_pretrained(f"{folder}/tokenizer.json").eot_id == 102


def test_a_vocabulary_with_holes_in_its_ids_is_sized_by_its_largest_id(tmp_path):
    """A pretrained vocabulary whose ids are not contiguous (here 0, 1, 2 and [SEP] at 9):
    vocab_size, from which the model's embedding table and the shard dtype are sized, is
    the largest id + 1, not the number of tokens (4), so end-of-text and every encoded id
    have a row; a model of the counted size fails on them with an IndexError."""
    import torch
    from tokenizers import Tokenizer as HFTk
    from tokenizers import models, pre_tokenizers

    from shardflow.train.model import GPT, GPTConfig

    tk = HFTk(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2, "[SEP]": 9}, unk_token="[UNK]"))
    tk.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tk.save(str(tmp_path / "tokenizer.json"))
    tok = load_pretrained(tmp_path)
    assert (tok.eot_token, tok.eot_id) == ("[SEP]", 9)
    ids = tok.encode("a b [SEP] c") + [tok.eot_id]
    assert ids == [0, 1, 9, 2, 9]
    assert tok.vocab_size == 10 and max(ids) < tok.vocab_size
    ident = tok.save(tmp_path / "saved")
    assert ident["vocab_size"] == 10 and load_tokenizer(tmp_path / "saved").vocab_size == 10
    meta = tmp_path / "saved/shardflow_tokenizer.json"  # as saved when vocab_size was the count
    meta.write_text(meta.read_text().replace('"vocab_size": 10', '"vocab_size": 4'))
    with pytest.raises(ValueError, match=r"identity recorded .* \(vocab_size: recorded 4, now 10\); make the"):
        load_tokenizer(tmp_path / "saved")
    model = GPT(GPTConfig(vocab_size=tok.vocab_size, block_size=8, n_layer=1, n_head=1, n_embd=8))
    logits, _ = model(torch.tensor([ids]))
    assert logits.shape[-1] == 10
    # Contiguous ids keep the size they had: the count.
    assert load_pretrained("default").vocab_size == 30522
    bpe = train_bpe(iter(TEXTS), vocab_size=300, min_frequency=1)
    assert bpe.vocab_size == bpe._tk.get_vocab_size(with_added_tokens=True) == 300


@pytest.mark.parametrize("kind", ["char", "bpe", "pretrained"])
def test_transformers_loads_the_saved_tokenizer_and_encodes_as_ours(tmp_path, kind):
    """What the train job writes beside the exported weights: AutoTokenizer encodes a text
    to our ids (no [CLS]/[SEP] template for a pretrained one), decodes them to our
    decoding, and has end-of-text as eos."""
    from transformers import AutoTokenizer

    tok = {"char": lambda: CharTokenizer.train(TEXTS), "bpe": lambda: train_bpe(TEXTS, 300, 1),
           "pretrained": lambda: load_pretrained("default")}[kind]()
    tok.save_for_transformers(tmp_path, 64)
    auto = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    for text in TEXTS[:2] + ["\n\n  " + TEXTS[1]]:
        ids = auto(text, add_special_tokens=False)["input_ids"]
        assert ids == tok.encode(text), text
        assert auto.decode(ids) == tok.decode(ids)
    assert auto.eos_token_id == auto.bos_token_id == tok.eot_id and auto.model_max_length == 64
    if kind == "char":
        assert auto.decode(tok.encode(TEXTS[1])) == TEXTS[1]  # exact: every character its own token


def test_missing_tokenizer_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="expected 'char', 'bpe', a tokenizer.json"):
        load_pretrained(tmp_path / "nope")


def test_what_parse_time_finds_missing_is_what_loading_refuses(tmp_path):
    """pretrained_unavailable (the workflow's parse-time check) and load_pretrained agree."""
    (tmp_path / "empty").mkdir()
    load_pretrained("default").save_for_transformers(tmp_path / "model", 64)
    for spec in ("default", tmp_path / "model", tmp_path / "model" / "tokenizer.json"):
        assert pretrained_unavailable(str(spec)) is None
        load_pretrained(spec)
    for spec in (tmp_path / "empty", tmp_path / "empty" / "tokenizer.json", tmp_path / "nope.json"):
        why = pretrained_unavailable(str(spec))
        assert why.startswith(f"no {spec if spec.suffix else spec / 'tokenizer.json'} ")
        with pytest.raises(FileNotFoundError, match=re.escape(why)):
            load_pretrained(spec)


def test_the_files_a_pretrained_tokenizer_is_read_from_are_listed_for_its_job(tmp_path):
    """pretrained_files (train_tokenizer's declared inputs) names what load_pretrained
    reads: the tokenizer.json, given or in the folder given, and the end-of-text configs
    beside it that exist; the tokenizer.json even where it is missing."""
    load_pretrained("default").save_for_transformers(tmp_path / "model", 64)
    tok, config = str(tmp_path / "model" / "tokenizer.json"), str(tmp_path / "model" / "tokenizer_config.json")
    assert pretrained_files(str(tmp_path / "model")) == pretrained_files(tok) == [tok, config]
    (tmp_path / "model" / "special_tokens_map.json").write_text("{}")
    assert pretrained_files(tok) == [tok, config, str(tmp_path / "model" / "special_tokens_map.json")]
    assert pretrained_files(str(tmp_path / "gone.json")) == [str(tmp_path / "gone.json")]


def test_editing_a_pretrained_tokenizer_in_place_reruns_its_copy(tmp_path):
    """shards.tokenizer names a tokenizer.json that train_tokenizer copies; it was no
    declared input, so a tokenizer edited in place (a token added, another eos_token)
    reran nothing and training went on with the old copy. Declared, the edit reruns
    train_tokenizer, and every job after it through the copy it rewrites."""
    import subprocess

    import yaml

    from tests.helpers import REPO, SNAKEMAKE, job_counts, offline_env

    source = tmp_path / "tok"
    load_pretrained("default").save_for_transformers(source, 64)
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text(yaml.safe_dump({"tasks": ["training"], "shards": {"tokenizer": str(source)}}))
    copy = run / "results" / "demo" / "tokenizer"

    def snakemake(*args):
        cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(run), "--cores", "1",
               "--configfile", str(run / "config.yaml"), *args, "results/demo/tokenizer/shardflow_tokenizer.json"]
        proc = subprocess.run(cmd, cwd=run, env=offline_env(), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
        return proc.stdout + proc.stderr

    snakemake("--touch")  # records the job as a finished run has it
    copy.mkdir(parents=True)
    for name in ("shardflow_tokenizer.json", vocabulary_file(str(source))):
        (copy / name).write_text("{}")
    assert "Nothing to be done" in snakemake("-n")
    # Edited in place after the copy was made (Snakemake compares a small input's checksum
    # too: a new time alone reruns nothing).
    settings = json.loads((source / "tokenizer_config.json").read_text())
    (source / "tokenizer_config.json").write_text(json.dumps({**settings, "eos_token": "[CLS]"}))
    out = snakemake("-n")
    assert "Job stats:" in out and job_counts(out) == {"train_tokenizer": 1, "total": 1}


def test_a_saved_folder_is_the_two_files_the_workflow_declares(tmp_path):
    """rules/train.smk declares the meta file and vocabulary_file(kind) as the
    tokenizer's outputs (a job with no shared filesystem gets only declared files): each
    kind's save writes exactly those two."""
    for kind, tok in [("char", CharTokenizer.train(TEXTS)), ("bpe", train_bpe(iter(TEXTS), 300, 1)),
                      ("default", load_pretrained("default"))]:
        folder = tmp_path / kind
        tok.save(folder)
        assert sorted(p.name for p in folder.iterdir()) == sorted([vocabulary_file(kind), "shardflow_tokenizer.json"])


@pytest.mark.parametrize("kind", ["char", "bpe", "pretrained"])
def test_a_special_token_written_in_a_document_is_text_in_the_shards_and_the_export(tmp_path, kind):
    """Only prepare puts end-of-text ids, one after each document: a literal
    '<|endoftext|>' (bpe) or '[SEP]' (MiniLM) in a text cut it in two, and the exported
    char tokenizer read it as end-of-text where the shards held its characters."""
    from transformers import AutoTokenizer

    text = "before <|endoftext|> after [SEP] end"
    tok = {"char": lambda: CharTokenizer.train([*TEXTS, text]), "bpe": lambda: train_bpe([*TEXTS, text], 300, 1),
           "pretrained": lambda: load_pretrained("default")}[kind]()
    ids = tok.encode(text)
    assert tok.eot_id not in ids
    tok.save_for_transformers(tmp_path, 64)
    auto = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    assert auto(text, add_special_tokens=False)["input_ids"] == ids

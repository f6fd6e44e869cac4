"""nanoGPT's Shakespeare split through the workflow's wiring: one text file, first 90% of
its characters train, last 10% val (data/shakespeare_char/prepare.py: data[:int(n*0.9)])."""

import json
import struct

import numpy as np
import pytest

from shardflow.train.prepare import (
    TextFileParams,
    TokenizerParams,
    position_split,
    prepare_text_file,
    train_tokenizer,
)
from shardflow.train.shards import open_shard
from shardflow.train.tokenizer import CharTokenizer, load_tokenizer
from shardflow.workflow import plan


@pytest.mark.parametrize("n", [1234, 1115, 1000, 17])
def test_position_split_matches_nanogpt_counts_and_text(tmp_path, n):
    rng = np.random.default_rng(n)
    lines = ["".join(rng.choice(list("abc DEF,.'"), size=rng.integers(0, 30))) for _ in range(400)]
    text = "\n".join(lines)[:n]  # empty lines included: the file is one text
    assert len(text) == n
    src = tmp_path / "input.txt"
    src.write_text(text, encoding="utf-8")
    tok_dir = tmp_path / "tokenizer"
    train_tokenizer([src], TokenizerParams(kind="char"), tok_dir)  # the rule reads the file too
    tok = load_tokenizer(tok_dir)
    meta = prepare_text_file(src, tok, tmp_path / "shards", TextFileParams(val_fraction=0.1), tok_dir)
    n_train = int(n * 0.9)  # nanoGPT
    assert meta["totals"]["train"]["tokens"] == n_train
    assert meta["totals"]["val"]["tokens"] == n - n_train
    splits = {s["split"]: open_shard(tmp_path / "shards" / s["file"]).tokens for s in meta["shards"]}
    assert tok.decode(splits["train"]) == text[:n_train] and tok.decode(splits["val"]) == text[n_train:]
    assert json.loads((tmp_path / "shards" / "metadata.json").read_text())["split"]["method"] == "position"


def test_tinyshakespeare_size_gives_nanogpts_counts():
    from shardflow.train.prepare import position_split

    assert position_split(1_115_394, 0.1) == 1_003_854  # and 111,540 val


def _ds(sources, fmt="auto"):
    reader = {"format": fmt, "id_field": "id", "text_field": "text", "group_field": None,
              "text_mode": "files", "on_bad_record": "error"}
    return plan.DataSet(name="d", role="main", tasks=("training",), n_chunks=1, sources=tuple(sources),
                        reader=reader, by="records", rate_items_per_s=1.0)


def test_position_split_needs_one_local_plain_text_file():
    assert plan.position_source(_ds(["data/input.txt"])) == "data/input.txt"
    assert plan.position_source(_ds(["data/shakespeare"], fmt="text")) == "data/shakespeare"
    for bad in (["a.jsonl"], ["a.txt", "b.txt"], ["a.txt.gz"], ["s3://bucket/a.txt"], ["noext"]):
        with pytest.raises(ValueError, match="shards.split: position reads one local"):
            plan.position_source(_ds(bad))


def test_train_gpus_follow_train_section():
    cfg = {"train": {"gpus": 4}, "resources": {"train": {"gpu": 1}}}
    assert plan.train_gpus(cfg) == 4
    cfg["resources"]["train"]["gpu"] = 2
    with pytest.raises(ValueError, match="resources.train.gpu is 2 but train.gpus is 4"):
        plan.train_gpus(cfg)


@pytest.mark.parametrize("change, message", [
    ({"n_embd": 30, "n_head": 4}, r"train: n_embd \(30\) must be a multiple of n_head \(4\)"),
    ({"min_lr": 0.01, "lr": 0.001}, r"train: min_lr \(0.01\) must be <= lr \(0.001\)"),
    ({"warmup_iters": 100, "lr_decay_iters": 50}, r"train: lr_decay_iters \(50\) must be above warmup_iters \(100\)"),
    ({"warmup_iters": -1}, "train: warmup_iters must be >= 0, got -1"),
    ({"eval_windows": "some"}, "train: eval_windows must be a positive int or 'all'"),
])
def test_training_settings_the_trainer_refuses_stop_the_parse(config, change, message):
    """Checked when the workflow is parsed, not in the train job after the data preparation."""
    plan.train_settings(config["train"])  # the shipped section passes
    with pytest.raises(ValueError, match=message):
        plan.train_settings({**config["train"], **change})
    with pytest.raises(ValueError, match=r"sweep 's', point n_head=3: n_embd"):
        plan.train_settings({**config["train"], "n_head": 3}, "sweep 's', point n_head=3")


def test_shard_settings_without_a_validation_split_or_with_a_misspelt_tokenizer_stop_the_parse(config):
    plan.shards_settings(config)
    with pytest.raises(ValueError, match="shards.val_fraction is 0: training evaluates on the validation split"):
        plan.shards_settings({**config, "shards": {**config["shards"], "val_fraction": 0.0}})
    with pytest.raises(ValueError, match=r"shards.tokenizer 'BPE': did you mean 'bpe'\?"):
        plan.shards_settings({**config, "shards": {**config["shards"], "tokenizer": "BPE"}})
    plan.shards_settings({**config, "shards": {**config["shards"], "tokenizer": "/models/gpt2"}})  # a path: its job checks
    with pytest.raises(ValueError, match="shards.tokenizer 'chr' is neither char, bpe, default, nor a tokenizer.json"):
        plan.shards_settings({**config, "shards": {**config["shards"], "tokenizer": "chr"}})
    with pytest.raises(ValueError, match="shards.tokens_per_shard and shards.shard_mb are both set"):
        plan.shards_settings({**config, "shards": {**config["shards"], "tokens_per_shard": 100, "shard_mb": 1}})


def _bpe(text):
    from shardflow.train.tokenizer import train_bpe

    return train_bpe(iter([text] * 3), vocab_size=400, min_frequency=1)  # GPT-2's byte-level scheme, offline


def _metaspace(text):
    """A SentencePiece-style BPE: encoded in one piece, "▁" before each text it encodes."""
    from tokenizers import Tokenizer as HFTk
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from shardflow.train.tokenizer import HFTokenizer

    tk = HFTk(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer, tk.decoder = pre_tokenizers.Metaspace(), decoders.Metaspace()
    tk.train_from_iterator(text.splitlines(), trainers.BpeTrainer(vocab_size=400, special_tokens=["</s>", "<unk>"]))
    return HFTokenizer(tk, "pretrained", "</s>")


@pytest.mark.parametrize("make_tokenizer", [_bpe, _metaspace])
def test_position_split_cuts_the_characters_then_encodes_each_part_as_nanogpt(tmp_path, monkeypatch, make_tokenizer):
    """nanoGPT's data/shakespeare/prepare.py cuts the text at int(n * 0.9) characters and
    encodes each part (GPT-2 BPE: 301,966 / 36,059 tokens). The split cut the file's tokens
    instead: with the byte-level BPE here 234 / 26, not 235 / 26, the cut at the token "The"
    where the characters are cut after its "T"."""
    import shardflow.train.prepare as prepare

    monkeypatch.setattr(prepare, "PIECE_CHARS", 64)  # streamed in pieces, the cut inside one
    text = "".join(f"The quick brown fox jumps over the lazy dog number {i}.\n" for i in range(20))
    cut = int(len(text) * 0.9)  # nanoGPT
    assert (cut, text[cut - 1 : cut + 2]) == (981, "The")
    src = tmp_path / "input.txt"
    src.write_text(text, encoding="utf-8")
    tok = make_tokenizer(text)
    train_ids, val_ids = tok.encode(text[:cut]), tok.encode(text[cut:])  # nanoGPT's train.bin, val.bin
    assert len(train_ids) != prepare.position_split(len(tok.encode(text)), 0.1)  # a token cut differs here
    meta = prepare_text_file(src, tok, tmp_path / "shards", TextFileParams(val_fraction=0.1, tokens_per_shard=50))
    splits = {
        split: np.concatenate([open_shard(tmp_path / "shards" / s["file"]).tokens
                               for s in meta["shards"] if s["split"] == split]).tolist()
        for split in ("train", "val")
    }
    assert splits == {"train": train_ids, "val": val_ids}
    assert (meta["totals"]["train"]["tokens"], meta["totals"]["val"]["tokens"]) == (len(train_ids), len(val_ids))
    assert meta["split"]["characters"] == {"train": 981, "val": 109}


def test_position_split_of_char_tokens_is_the_token_cut_byte_for_byte(tmp_path, monkeypatch):
    """For the char tokenizer a character is a token, so cutting characters gives the bytes
    the token cut gave, multi-byte characters (2, 3, 4 bytes in UTF-8) and a leading BOM
    (dropped, as ever) included; the cut falls inside a streamed piece."""
    import shardflow.train.prepare as prepare

    monkeypatch.setattr(prepare, "PIECE_CHARS", 40)
    text = "".join(f"Ça {i}: naïve 漢字 fish 🐟 end\r\n" if i % 3 else f"line {i}\n" for i in range(37))
    src = tmp_path / "input.txt"
    src.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    tok = CharTokenizer.train([text])
    meta = prepare_text_file(src, tok, tmp_path / "shards", TextFileParams(val_fraction=0.1, tokens_per_shard=300))
    ids = np.asarray(tok.encode(text), dtype="<u2")  # the whole file's tokens, cut by position as before
    n_train = position_split(len(ids), 0.1)
    assert len(ids) == len(text) and n_train == int(len(text) * 0.9)
    expected = {}
    for split, part in (("train", ids[:n_train]), ("val", ids[n_train:])):
        for i, lo in enumerate(range(0, len(part), 300)):
            chunk = part[lo : lo + 300]
            expected[f"{split}_{i:06d}.bin"] = struct.pack("<3i", 20240520, 1, len(chunk)) + bytes(1012) + chunk.tobytes()
    assert len(expected) > 2
    assert {s["file"]: (tmp_path / "shards" / s["file"]).read_bytes() for s in meta["shards"]} == expected

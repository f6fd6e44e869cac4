"""Preparation: tokenizer step, per-chunk tokenizing, gathering into shards, position split."""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from shardflow.corpus.chunks import ChunkRecord, dump_record
from shardflow.train.prepare import (
    ShardParams,
    TextFileParams,
    TokenizeParams,
    TokenizerParams,
    _text_pieces,
    assign_split,
    docs_path,
    gather_shards,
    iter_docs,
    position_split,
    prepare_text_file,
    tokenize_chunk,
    train_tokenizer,
)
from shardflow.train.shards import ShardFormatError, open_shard
from shardflow.train.tokenizer import CharTokenizer, load_tokenizer, train_bpe


def reference_tokens(path) -> np.ndarray:
    """From the spec alone: 256 LE int32 header (magic, version, count), then the tokens."""
    with open(path, "rb") as fh:
        magic, version, n = struct.unpack("<3i", fh.read(12))
    tokens = np.fromfile(path, dtype={(20240520, 1): "<u2", (20240801, 7): "<u4"}[(magic, version)], offset=1024)
    assert len(tokens) == n
    return tokens


def write_chunk(path: Path, docs: list[tuple]) -> Path:
    path.write_text("".join(dump_record(ChunkRecord(*d)) for d in docs), encoding="utf-8")
    return path


def words(i: int) -> str:
    return " ".join(f"w{(i * 7 + k) % 31}" for k in range(5 + i % 9))


def run(tmp_path, chunks, tokenizer, tparams=None, sparams=None):
    """tokenize_chunk each chunk, then gather_shards into tmp_path/shards."""
    tparams = tparams or TokenizeParams()
    sparams = sparams or ShardParams(tokens_per_shard=200)
    outs = []
    for i, chunk in enumerate(chunks):
        out = tmp_path / f"tok_{i}.bin"
        tokenize_chunk(chunk, tokenizer, out, tparams)
        outs.append(out)
    return outs, gather_shards(outs, tmp_path / "shards", sparams)


def test_hash_split_is_deterministic_and_close_to_the_fraction():
    ids = [f"doc-{i}" for i in range(20000)]
    splits = [assign_split(i, 0.1) for i in ids]
    assert splits == [assign_split(i, 0.1) for i in ids]
    assert abs(splits.count("val") / len(ids) - 0.1) < 0.01
    assert splits != [assign_split(i, 0.1, salt="other") for i in ids]
    assert {assign_split(i, 0.0) for i in ids[:100]} == {"train"}


def test_tokenize_chunk_writes_tokens_then_eot_per_document(tmp_path):
    docs = [(f"d{i}", words(i)) for i in range(40)]
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", docs)
    tok = CharTokenizer.train(t for _, t in docs)
    summary = tokenize_chunk(chunk, tok, tmp_path / "t.bin", TokenizeParams(val_fraction=0.3))
    tokens = open_shard(tmp_path / "t.bin").tokens
    lines = list(iter_docs(tmp_path / "t.bin"))
    assert [d["id"] for d in lines] == [d[0] for d in docs]
    for (doc_id, text), d in zip(docs, lines, strict=True):
        span = tokens[d["offset"] : d["offset"] + d["tokens"]]
        assert tok.decode(span[:-1]) == text and span[-1] == tok.eot_id
        assert d["split"] == assign_split(doc_id, 0.3)
        assert d["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert summary["tokens"] == len(tokens) == summary["train_tokens"] + summary["val_tokens"]
    assert summary["chunk_sha256"] == hashlib.sha256(chunk.read_bytes()).hexdigest()


def test_a_tokenize_job_keeps_the_tokenizer_pool_to_its_threads(tmp_path, monkeypatch):
    """The tokenizers library's pool was as wide as the machine in every one-thread
    tokenize job (RAYON_NUM_THREADS unset): the job's OMP_NUM_THREADS, which Snakemake
    sets from `threads`, now sizes it; a value the user set stands."""
    import os

    chunk = write_chunk(tmp_path / "chunk_0.jsonl", [("d0", "some text"), ("d1", "more text")])
    tok = CharTokenizer.train(["some text more"])
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("RAYON_NUM_THREADS", "placeholder")  # so that monkeypatch restores the original
    monkeypatch.delenv("RAYON_NUM_THREADS")
    tokenize_chunk(chunk, tok, tmp_path / "t.bin", TokenizeParams())
    assert os.environ["RAYON_NUM_THREADS"] == "1"
    monkeypatch.setenv("RAYON_NUM_THREADS", "3")
    tokenize_chunk(chunk, tok, tmp_path / "u.bin", TokenizeParams())
    assert os.environ["RAYON_NUM_THREADS"] == "3"


def test_bpe_training_keeps_the_tokenizer_pool_to_the_jobs_threads(tmp_path, monkeypatch):
    """train_tokenizer's BPE training counts words and pairs on the tokenizers library's
    pool, as wide as the machine unless RAYON_NUM_THREADS says otherwise: a job of 2
    threads took every core of a shared node. The job's OMP_NUM_THREADS, which Snakemake
    sets from `threads`, now sizes it before training starts, as in a tokenize job; a
    value the user set stands. The pool's width changes no byte of the tokenizer."""
    import os

    import shardflow.train.prepare as prepare

    seen = []

    def recording_train_bpe(*args, **kwargs):
        seen.append(os.environ.get("RAYON_NUM_THREADS"))
        return train_bpe(*args, **kwargs)

    monkeypatch.setattr(prepare, "train_bpe", recording_train_bpe)
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", [(f"d{i}", words(i)) for i in range(40)])
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    monkeypatch.setenv("RAYON_NUM_THREADS", "placeholder")  # so that monkeypatch restores the original
    monkeypatch.delenv("RAYON_NUM_THREADS")
    ident = train_tokenizer([chunk], TokenizerParams(kind="bpe", vocab_size=300), tmp_path / "a")
    monkeypatch.setenv("RAYON_NUM_THREADS", "3")
    again = train_tokenizer([chunk], TokenizerParams(kind="bpe", vocab_size=300), tmp_path / "b")
    assert seen == ["2", "3"]
    assert again["sha256"] == ident["sha256"]


def test_gather_end_to_end_metadata_matches_files(tmp_path):
    chunks = [
        write_chunk(tmp_path / f"chunk_{c}.jsonl", [(f"d{c}_{i}", words(c * 50 + i)) for i in range(50)])
        for c in range(3)
    ]
    train_tokenizer(chunks, TokenizerParams(kind="bpe", vocab_size=300), tmp_path / "tk")
    tok = load_tokenizer(tmp_path / "tk")
    outs, _ = run(tmp_path, chunks, tok)
    meta = gather_shards(outs, tmp_path / "shards", ShardParams(tokens_per_shard=200), tokenizer_folder=tmp_path / "tk")
    on_disk = json.loads((tmp_path / "shards" / "metadata.json").read_text())
    assert on_disk == json.loads(json.dumps(meta))
    assert meta["tokenizer"] == tok.identity() and meta["dtype"] == "uint16" and meta["magic"] == 20240520
    assert [s["sha256"] for s in meta["sources"]] == [hashlib.sha256(c.read_bytes()).hexdigest() for c in chunks]
    total = 0
    for s in meta["shards"]:
        path = tmp_path / "shards" / s["file"]
        assert s["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        tokens = reference_tokens(path)
        assert len(tokens) == s["tokens"] <= 200 and (tokens == tok.eot_id).sum() == s["documents"]
        total += s["tokens"]
    assert total == meta["totals"]["tokens"] == sum(s["tokens"] for s in meta["sources"])
    assert meta["totals"]["documents"] == 150 and meta["totals"]["val"]["documents"] > 0
    assert load_tokenizer(tmp_path / "shards").identity() == tok.identity()  # tokenizer beside the shards
    # every document lands in its hashed split, whole
    texts = {
        tok.decode(list(d))
        for s in meta["shards"]
        if s["split"] == "val"
        for d in np.split(
            reference_tokens(tmp_path / "shards" / s["file"]),
            np.flatnonzero(reference_tokens(tmp_path / "shards" / s["file"]) == tok.eot_id) + 1,
        )
        if len(d)
    }
    expected = {
        words(c * 50 + i) + "<|endoftext|>"
        for c in range(3)
        for i in range(50)
        if assign_split(f"d{c}_{i}", 0.1) == "val"
    }
    assert texts == expected


def test_dedup_within_and_across_chunks(tmp_path):
    a = write_chunk(tmp_path / "chunk_0.jsonl", [("a1", "same text"), ("a2", "other"), ("a3", "same text")])
    b = write_chunk(tmp_path / "chunk_1.jsonl", [("b1", "same text"), ("b2", "fresh")])
    tok = CharTokenizer.train(["same text other fresh"])
    _, meta = run(tmp_path, [a, b], tok, TokenizeParams(val_fraction=0.0))
    assert meta["dedup"]["duplicates_within_chunks"] == 1 and meta["dedup"]["duplicates_across_chunks"] == 1
    assert meta["totals"]["documents"] == 3
    _, meta = run(tmp_path, [a, b], tok, TokenizeParams(val_fraction=0.0, dedup=False), ShardParams(dedup=False))
    assert meta["totals"]["documents"] == 5


def test_groups_stay_in_one_shard_and_one_split(tmp_path):
    docs = [(f"d{i}", words(i), f"g{i % 6}") for i in range(60)]
    docs.append(("big", "w1 " * 150, "huge"))  # 451 tokens: larger than a shard
    chunks = [
        write_chunk(
            tmp_path / f"chunk_{c}.jsonl", [d for d in docs if c == (0 if d[2] == "huge" else int(d[2][1:]) % 2)]
        )
        for c in range(2)
    ]
    tok = CharTokenizer.train(d[1] for d in docs)
    outs, meta = run(
        tmp_path, chunks, tok, TokenizeParams(val_fraction=0.4), ShardParams(tokens_per_shard=300, group_field="g")
    )
    where = {}
    for path in outs:
        for d in iter_docs(path):
            assert d["split"] == assign_split(d["group"], 0.4)  # split by group key
    sizes = {}
    for s in meta["shards"]:
        tokens = reference_tokens(tmp_path / "shards" / s["file"])
        for piece in np.split(tokens, np.flatnonzero(tokens == tok.eot_id) + 1)[:-1]:
            text = tok.decode(piece[:-1])
            group = next(g for _, t, g in docs if t == text)
            where.setdefault(group, set()).add(s["file"])
        sizes[s["file"]] = s["tokens"]
    assert all(len(files) == 1 for files in where.values())  # each group in exactly one shard
    (huge_file,) = where["huge"]
    assert sizes[huge_file] == 451 and meta["grouped"] and meta["group_field"] == "g"


def test_group_split_across_chunks_is_an_error(tmp_path):
    a = write_chunk(tmp_path / "chunk_0.jsonl", [("a", "xy", "g")])
    b = write_chunk(tmp_path / "chunk_1.jsonl", [("b", "yx", "g")])
    with pytest.raises(ValueError, match="group 'g' appears in .*tok_0.bin and again in .*tok_1.bin"):
        run(tmp_path, [a, b], CharTokenizer.train(["xy"]))
    assert not list((tmp_path / "shards").glob("*.bin"))  # nothing half-written left behind


def test_position_split_takes_floor_of_the_fraction(tmp_path):
    text = "".join(f"line {i}: the quick brown fox\n" for i in range(40)) + "end"
    path = tmp_path / "input.txt"
    path.write_text(text)
    train_tokenizer([path], TokenizerParams(kind="char"), tmp_path / "tk")
    tok = load_tokenizer(tmp_path / "tk")
    n = len(text)  # char tokens, no end-of-text added
    meta = prepare_text_file(path, tok, tmp_path / "out", TextFileParams(val_fraction=0.1, tokens_per_shard=256))
    assert meta["totals"]["train"]["tokens"] == n * 9 // 10 == position_split(n, 0.1)
    assert meta["totals"]["val"]["tokens"] == n - n * 9 // 10
    assert position_split(10, 0.1) == 9 and position_split(1003, 0.1) == 902
    joined = {
        split: np.concatenate(
            [reference_tokens(tmp_path / "out" / s["file"]) for s in meta["shards"] if s["split"] == split]
        )
        for split in ("train", "val")
    }
    assert tok.decode(joined["train"]) + tok.decode(joined["val"]) == text
    assert max(s["tokens"] for s in meta["shards"]) == 256


def test_a_position_split_of_more_tokens_than_a_header_counts_cuts_into_shards_that_fit(tmp_path, monkeypatch):
    """The file's tokens went to one scratch shard, whose int32 header stopped the split past
    2**31 - 1 tokens ("<out>/.position-split-<pid>.bin: more than ... tokens"), though every
    shard cut from it held far fewer. The limit is patched down to 100 here."""
    import shardflow.train.prepare as prepare
    import shardflow.train.shards as shards

    monkeypatch.setattr(shards, "MAX_TOKENS", 100)
    monkeypatch.setattr(prepare, "MAX_TOKENS", 100)
    text = "abcdefghi\n" * 15  # 150 char tokens
    path = tmp_path / "input.txt"
    path.write_text(text)
    tok = CharTokenizer.train([text])
    meta = prepare_text_file(path, tok, tmp_path / "out", TextFileParams(val_fraction=0.1, tokens_per_shard=50))
    assert [(s["file"], s["tokens"]) for s in meta["shards"]] == [
        ("train_000000.bin", 50), ("train_000001.bin", 50), ("train_000002.bin", 35), ("val_000000.bin", 15)
    ]
    assert tok.decode(np.concatenate([reference_tokens(tmp_path / "out" / s["file"]) for s in meta["shards"]])) == text
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "metadata.json", "train_000000.bin", "train_000001.bin", "train_000002.bin", "val_000000.bin"
    ]  # no scratch left


def test_text_pieces_encode_like_the_whole_file(tmp_path):
    text = "".join(f"Speaker {i}:\n  Well,   said {i}!  \n\n" if i % 3 else f"word{i}\n" for i in range(200))
    path = tmp_path / "t.txt"
    path.write_text(text)
    pieces = list(_text_pieces(path, piece_chars=64))
    assert len(pieces) > 5 and "".join(p for _, p in pieces) == text
    tok = train_bpe(iter([text]), vocab_size=300, min_frequency=1)
    streamed = [i for _, p in pieces for i in tok.encode(p)]
    assert streamed == tok.encode(text)


def test_text_pieces_name_invalid_utf8_after_a_byte_order_mark_as_the_splits_reader_does(tmp_path):
    """The position split reads the text file itself: its line 1 was decoded with
    "utf-8-sig", which counts an error's byte from after the mark, 3 short of the byte
    the split's reader names for the same file."""
    from shardflow.corpus.readers import ReaderOptions, open_reader

    path = tmp_path / "t.txt"
    path.write_bytes(b"\xef\xbb\xbfcaf\xe9\n")
    (bad,) = open_reader(str(path), ReaderOptions(on_bad_record="skip"))
    assert bad.reason == "invalid UTF-8 at byte 6"
    with pytest.raises(ValueError, match=r"t\.txt:1: invalid UTF-8 at byte 6 of the line$"):
        list(_text_pieces(path))
    path.write_bytes(b"\xef\xbb\xbfcaf\xc3\xa9\n")
    assert [p for _, p in _text_pieces(path)] == ["caf\u00e9\n"]  # the mark is still dropped


def _crlf_bpe(text: str):
    """A byte-level BPE whose vocabulary holds "\\r\\n" as one token, as GPT-2's does: the
    whole file's "...!\\r\\nSpeaker" encodes as "!", "\\r", "\\n", "Speaker", but a text that
    ends in "\\r\\n" ends in that one token."""
    tok = train_bpe(iter(["para\r\n\r\n" * 50, text]), vocab_size=300, min_frequency=1)
    assert len(tok.encode("!\r\n")) == 2 and len(tok.encode("!\r\nS")) == 4
    return tok


def test_text_pieces_of_a_crlf_file_end_near_the_piece_size_and_encode_like_the_whole_file(tmp_path):
    """Pieces were cut only after a line feed between two non-space characters: in a CRLF
    file the CR before every LF is a space, so pieces ran to the hard limit (16 pieces'
    length) and were cut there, after a "\\r\\n" that byte-level BPE then encoded as one
    token where the whole file has two."""
    text = "".join(f"Speaker {i}: well said {i}!\r\n" for i in range(400))
    path = tmp_path / "t.txt"
    path.write_bytes(text.encode("utf-8"))
    pieces = [p for _, p in _text_pieces(path, piece_chars=64)]
    assert "".join(pieces) == text
    assert max(map(len, pieces)) < 64 + 30  # near the piece size (a line is under 30), not 16 x 64
    pairs = zip(pieces[:-1], pieces[1:], strict=True)
    assert not any(a.endswith("\r") and b.startswith("\n") for a, b in pairs)  # a CR/LF pair kept whole
    tok = _crlf_bpe(text)
    assert [i for p in pieces for i in tok.encode(p)] == tok.encode(text)


def test_a_file_without_a_line_feed_is_read_and_cut_in_bounded_pieces(tmp_path, monkeypatch):
    """A file was read a line at a time, and a line whole: a file without a line feed (one
    line: a text dump, or old Mac CR line ends) was held in memory at once, as bytes and
    again as text, whatever its size. It is read READ_BYTES at a time now, never inside a
    UTF-8 character, and cut as any text, where the tokens are the whole file's; a stretch
    without such a place is cut at the hard limit (16 pieces' length and one read)."""
    import shardflow.train.prepare as prepare

    monkeypatch.setattr(prepare, "READ_BYTES", 7)  # reads end inside 2-, 3- and 4-byte characters
    text = "".join(f"Ça {i}: naïve 漢字\tfish 🐟 end.\r" for i in range(60))
    path = tmp_path / "t.txt"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))  # the byte-order mark is still dropped
    pieces = [p for _, p in _text_pieces(path, piece_chars=64)]
    assert "".join(pieces) == text
    assert len(pieces) > 20 and max(map(len, pieces)) < 64 + 10
    tok = train_bpe(iter([text]), vocab_size=300, min_frequency=1)
    assert [i for p in pieces for i in tok.encode(p)] == tok.encode(text)
    # No place to cut where the tokens are the whole file's: cut at the hard limit all the same.
    path.write_text("漢字" * 1000, encoding="utf-8")
    pieces = [p for _, p in _text_pieces(path, piece_chars=64)]
    assert "".join(pieces) == "漢字" * 1000 and max(map(len, pieces)) <= 16 * 64 + 7
    # An error past a line's first read names its byte counted from the line's first byte.
    path.write_bytes(b"ok\nabcdefghijkl\xe9mn\n")
    with pytest.raises(ValueError, match=r"t\.txt:2: invalid UTF-8 at byte 12 of the line$"):
        list(_text_pieces(path))
    path.write_bytes(b"ok\nabcdefgh\xe2\x82")  # a character cut short by the end of the file
    with pytest.raises(ValueError, match=r"t\.txt:2: invalid UTF-8 at byte 8 of the line$"):
        list(_text_pieces(path))
    path.write_bytes(b"ok\nabcdefghij\x00k\n")
    with pytest.raises(ValueError, match=r"t\.txt:2: NUL byte at byte 10 \(binary data, not text\)"):
        list(_text_pieces(path))


@pytest.mark.parametrize("line_end", ["\r\n", "\r"])
def test_a_position_split_streamed_in_pieces_gives_the_whole_files_tokens(tmp_path, monkeypatch, line_end):
    """With small pieces and reads, a CRLF file and a file without a line feed give the
    shards of encoding the text's two parts whole (nanoGPT's train.bin, val.bin), and
    `split.characters` counts every character once."""
    import shardflow.train.prepare as prepare

    monkeypatch.setattr(prepare, "PIECE_CHARS", 64)
    monkeypatch.setattr(prepare, "READ_BYTES", 7)
    text = "".join(f"Speaker {i}: naïve 漢字 said {i}!{line_end}" for i in range(200))
    path = tmp_path / "t.txt"
    path.write_bytes(text.encode("utf-8"))
    tok = _crlf_bpe(text)
    meta = prepare_text_file(path, tok, tmp_path / "out", TextFileParams(val_fraction=0.1))
    cut = position_split(len(text), 0.1)
    assert meta["split"]["characters"] == {"train": cut, "val": len(text) - cut}
    tokens = {s["split"]: reference_tokens(tmp_path / "out" / s["file"]).tolist() for s in meta["shards"]}
    assert tokens == {"train": tok.encode(text[:cut]), "val": tok.encode(text[cut:])}


def test_a_nul_byte_in_a_position_splits_file_is_an_error_naming_the_line(tmp_path):
    """A raw NUL marks binary data (docs/bad-input.md), and the split's reader refuses it,
    but the position split reads the file itself: UTF-16 text without a byte-order mark
    (valid UTF-8, every other byte NUL) or a file padded with NULs after a crash became
    characters of the vocabulary and tokens, silently."""
    path = tmp_path / "t.txt"
    path.write_bytes(b"hello\nwor\x00ld\n")
    message = r"t\.txt:2: NUL byte at byte 3 \(binary data, not text\)"
    with pytest.raises(ValueError, match=message):
        train_tokenizer([path], TokenizerParams(kind="char"), tmp_path / "tok")
    with pytest.raises(ValueError, match=message):
        prepare_text_file(path, CharTokenizer("hellowrd\n\0"), tmp_path / "out", TextFileParams())
    assert not (tmp_path / "out" / "metadata.json").exists()


def _metaspace_file(tmp_path):
    """A SentencePiece-style (Metaspace) BPE and a text file of more than one piece (1 MiB)."""
    from tokenizers import Tokenizer as HFTk
    from tokenizers import decoders, models, pre_tokenizers, trainers

    from shardflow.train.tokenizer import HFTokenizer

    lines = [" ".join(("the", "cat", "sat", "on", "a", "mat")[: 2 + i % 5]) + f" {i % 97}" for i in range(90_000)]
    text = "\n".join(lines) + "\n"
    assert len(text) > 1 << 20  # more than one piece
    tk = HFTk(models.BPE(unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Metaspace()
    tk.decoder = decoders.Metaspace()
    tk.train_from_iterator(lines[:2000], trainers.BpeTrainer(vocab_size=300, special_tokens=["</s>", "<unk>"]))
    tok = HFTokenizer(tk, "pretrained", "</s>")
    path = tmp_path / "input.txt"
    path.write_text(text, encoding="utf-8")
    return lines, text, tok, path


def _position_split_tokens(tmp_path, path, tok) -> list[int]:
    meta = prepare_text_file(path, tok, tmp_path / "out", TextFileParams(val_fraction=0.1))
    return np.concatenate([reference_tokens(tmp_path / "out" / s["file"]) for s in meta["shards"]]).tolist()


def test_position_split_with_a_sentencepiece_style_tokenizer_encodes_like_the_whole_file(tmp_path):
    """A Metaspace (SentencePiece-style) tokenizer prefixes each text it encodes with "▁" and
    keeps a word across newlines: a file past one piece (1 MiB) got other tokens at each
    cut than encoding the whole file gives. Such a tokenizer encodes the file at once."""
    lines, text, tok, path = _metaspace_file(tmp_path)
    assert _position_split_tokens(tmp_path, path, tok) == tok.encode(text)
    assert not tok.splits_at_line_breaks
    assert train_bpe(iter(lines[:200]), vocab_size=300).splits_at_line_breaks  # GPT-2's byte-level: in pieces


def test_position_split_of_a_file_too_large_for_one_piece_goes_in_pieces_and_says_so(tmp_path, monkeypatch, caplog):
    """Past ONE_PIECE_MAX_BYTES such a tokenizer still encodes in pieces (one piece of a
    multi-GB file would hold it all in the tokenizer), with a warning naming the file."""
    import shardflow.train.prepare as prepare

    _, text, tok, path = _metaspace_file(tmp_path)
    monkeypatch.setattr(prepare, "ONE_PIECE_MAX_BYTES", 1 << 19)
    encoded, encode_batch = [], tok.encode_batch
    monkeypatch.setattr(tok, "encode_batch", lambda texts: encoded.extend(map(len, texts)) or encode_batch(texts))
    with caplog.at_level("WARNING", logger=prepare.log.name):
        _position_split_tokens(tmp_path, path, tok)
    # The pieces were encoded apart. (Their tokens may equal the whole file's: a piece ends
    # before a space, where this tokenizer's words end too, but nothing promises it that.)
    assert len(encoded) >= 3 and max(encoded) <= prepare.PIECE_CHARS + 100 < len(text)
    assert any(str(path) in r.getMessage() and "may differ" in r.getMessage() for r in caplog.records)


def test_char_tokenizer_names_the_document_it_cannot_encode(tmp_path):
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", [("ok", "abc"), ("bad-doc", "abZ")])
    with pytest.raises(ValueError, match=r"chunk_0.jsonl: document 'bad-doc' cannot be encoded .* character 'Z'"):
        tokenize_chunk(chunk, CharTokenizer.train(["abc"]), tmp_path / "t.bin", TokenizeParams())
    assert not (tmp_path / "t.bin").exists() and not docs_path(tmp_path / "t.bin").exists()


def test_empty_corpus_is_an_error(tmp_path):
    empty = write_chunk(tmp_path / "chunk_0.jsonl", [])
    with pytest.raises(ValueError, match="training text is empty"):
        train_tokenizer([empty], TokenizerParams(kind="char"), tmp_path / "tk")
    with pytest.raises(ValueError, match="no text"):
        train_tokenizer([empty], TokenizerParams(kind="bpe", vocab_size=300), tmp_path / "tk")
    with pytest.raises(ValueError, match="empty corpus: the 1 tokenized chunks hold no document"):
        run(tmp_path, [empty], CharTokenizer.train(["a"]))
    (tmp_path / "e.txt").write_text("")
    with pytest.raises(ValueError, match="empty corpus"):
        prepare_text_file(tmp_path / "e.txt", CharTokenizer.train(["a"]), tmp_path / "out", TextFileParams())


def test_a_split_without_a_token_to_predict_stops_the_gathering(tmp_path):
    """Found here, not by the train job after its retries (3 documents, val_fraction 0.1:
    no document draws val)."""
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", [(f"d{i}", words(i)) for i in range(3)])
    tok = CharTokenizer.train(words(i) for i in range(3))
    with pytest.raises(ValueError, match=r"the val split holds 0 tokens \(0 documents\) of \d+: .* raise shards.val_fraction \(0.1\)"):
        run(tmp_path, [chunk], tok, TokenizeParams(val_fraction=0.1))
    assert not (tmp_path / "shards" / "metadata.json").exists()
    run(tmp_path, [chunk], tok, TokenizeParams(val_fraction=0.0))  # no val split asked for: shards to train elsewhere
    (tmp_path / "t.txt").write_text("abcdefghij")  # a position split: 9 train tokens, 1 val
    with pytest.raises(ValueError, match=r"the val split holds 1 tokens of 10"):
        prepare_text_file(tmp_path / "t.txt", CharTokenizer.train(["abcdefghij"]), tmp_path / "p", TextFileParams())


def test_large_vocab_needs_uint32(tmp_path):
    tok = CharTokenizer(chr(0x10000 + i) for i in range(70000))  # vocab 70001 > 65536
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", [("d", chr(0x10000 + 69999) + chr(0x10000))])
    with pytest.raises(ValueError, match="uint16 holds ids below 65536, but the tokenizer's vocab_size is 70001"):
        tokenize_chunk(chunk, tok, tmp_path / "t.bin", TokenizeParams(dtype="uint16"))
    _, meta = run(tmp_path, [chunk], tok, TokenizeParams(val_fraction=0.0))
    assert meta["dtype"] == "uint32" and meta["magic"] == 20240801 and meta["version"] == 7
    tokens = reference_tokens(tmp_path / "shards" / meta["shards"][0]["file"])
    assert tokens.tolist() == [69999, 0, 70000]


def test_a_chunk_of_more_tokens_than_its_file_counts_names_the_chunk_and_the_remedy(tmp_path, monkeypatch):
    """A chunk past 2**31 - 1 tokens stopped naming its tokenized .bin (an output) and the
    int32 header, not the chunk, the document, or what to change. Patched down to 10."""
    import shardflow.train.prepare as prepare
    import shardflow.train.shards as shards

    monkeypatch.setattr(shards, "MAX_TOKENS", 10)
    monkeypatch.setattr(prepare, "MAX_TOKENS", 10)
    chunk = write_chunk(tmp_path / "chunk_3.jsonl", [("a", "abcd"), ("b", "dcba"), ("c", "ab")])
    with pytest.raises(ValueError, match=r"chunk_3\.jsonl: document 'c' takes the chunk past 10 tokens.*n_chunks"):
        tokenize_chunk(chunk, CharTokenizer.train(["abcd"]), tmp_path / "t.bin", TokenizeParams())
    assert not (tmp_path / "t.bin").exists() and not docs_path(tmp_path / "t.bin").exists()


def test_truncated_tokenized_chunk_is_refused(tmp_path):
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", [("d", "abc")])
    tokenize_chunk(chunk, CharTokenizer.train(["abc"]), tmp_path / "t.bin", TokenizeParams())
    data = (tmp_path / "t.bin").read_bytes()
    (tmp_path / "t.bin").write_bytes(data[:-1])
    with pytest.raises(ShardFormatError, match=r"t\.bin: truncated"):
        gather_shards([tmp_path / "t.bin"], tmp_path / "shards", ShardParams())


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda line: line[:20], r":2: malformed JSON"),  # overwritten in place, cut short
        (lambda line: line.replace(b'"d1"', b'"d\xe91"'), r":2: invalid UTF-8 at byte 8 of the line"),
        (lambda line: b"[1]\n", r":2: JSON value is list, not an object"),
    ],
)
def test_a_damaged_sidecar_line_names_the_sidecar_and_line(tmp_path, damage, reason):
    # A bare JSONDecodeError, UnicodeDecodeError or TypeError named neither the sidecar
    # nor its line; the summary line at the end is whole, so read_summary passes.
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", [("d0", "a"), ("d1", "ab"), ("d2", "abc")])
    tokenize_chunk(chunk, CharTokenizer.train(["abc"]), tmp_path / "t.bin", TokenizeParams())
    side = docs_path(tmp_path / "t.bin")
    lines = side.read_bytes().splitlines(keepends=True)
    side.write_bytes(b"".join([lines[0], damage(lines[1]), *lines[2:]]))
    with pytest.raises(ValueError, match=r"t\.bin\.docs\.jsonl" + reason):
        gather_shards([tmp_path / "t.bin"], tmp_path / "shards", ShardParams())


def test_a_summary_line_that_is_not_utf8_names_the_sidecar(tmp_path):
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", [("d0", "a")])
    tokenize_chunk(chunk, CharTokenizer.train(["a"]), tmp_path / "t.bin", TokenizeParams())
    side = docs_path(tmp_path / "t.bin")
    side.write_bytes(side.read_bytes().replace(b'"summary"', b'"summary\xe9"'))
    with pytest.raises(ValueError, match=r"t\.bin\.docs\.jsonl: no summary line at the end"):
        gather_shards([tmp_path / "t.bin"], tmp_path / "shards", ShardParams())


def test_shard_mb_sets_the_target(tmp_path):
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", [(f"d{i}", words(i)) for i in range(30)])
    _, meta = run(
        tmp_path,
        [chunk],
        CharTokenizer.train(words(i) for i in range(30)),
        TokenizeParams(val_fraction=0.0),
        ShardParams(shard_mb=0.001),
    )
    assert meta["tokens_per_shard"] == (1048 - 1024) // 2  # 0.001 MiB = 1048 bytes, header included
    with pytest.raises(ValueError, match="not both"):
        ShardParams(tokens_per_shard=10, shard_mb=1.0)


@pytest.mark.parametrize(
    ("params", "kw", "message"),
    [  # one case a field; each raised Python's bare TypeError (in a bound, or in the job) or was kept
        (TokenizerParams, {"kind": "bpe", "vocab_size": "300"}, "vocab_size '300': expected an integer"),
        (TokenizerParams, {"min_frequency": "2"}, "min_frequency '2': expected an integer"),
        (TokenizerParams, {"kind": 5}, "kind 5: expected a string"),
        (TokenizeParams, {"val_fraction": "0.1"}, "val_fraction '0.1': expected a number"),
        (TokenizeParams, {"split_salt": 5}, "split_salt 5: expected a string"),  # an AttributeError in the job
        (TokenizeParams, {"dedup": "false"}, "dedup 'false': expected a bool"),  # a true string: dedup on
        (TokenizeParams, {"batch_docs": None}, "batch_docs None: expected an integer"),
        (ShardParams, {"tokens_per_shard": "100"}, "tokens_per_shard '100': expected an integer or None"),
        (ShardParams, {"shard_mb": "1"}, "shard_mb '1': expected a number or None"),
        (ShardParams, {"dedup": "no"}, "dedup 'no': expected a bool"),
        (ShardParams, {"group_field": 3}, "group_field 3: expected a string or None"),
        (TextFileParams, {"val_fraction": None}, "val_fraction None: expected a number"),
        (TextFileParams, {"tokens_per_shard": "50"}, "tokens_per_shard '50': expected an integer or None"),
        (TextFileParams, {"shard_mb": True}, "shard_mb True: expected a number or None"),
        (TextFileParams, {"dtype": 16}, "dtype 16: expected a string"),
    ],
)
def test_a_wrong_python_type_is_one_error_naming_the_field(params, kw, message):
    with pytest.raises(TypeError) as info:
        params(**kw)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("kind", "error", "message"),
    [  # None, 0 and False were all "tokenizer kind is empty"
        (None, TypeError, "kind None: expected a string"),
        (0, TypeError, "kind 0: expected a string"),
        (False, TypeError, "kind False: expected a string"),
        ("", ValueError, "tokenizer kind is empty: expected char, bpe, default, or a tokenizer.json or model folder to copy"),
    ],
)
def test_a_tokenizer_kind_that_is_not_a_word_says_what_it_is(kind, error, message):
    with pytest.raises(error) as info:
        TokenizerParams(kind=kind)
    assert str(info.value) == message


@pytest.mark.parametrize("dtype", ["uint8", "int32", "UINT16", ""])
def test_a_text_files_token_dtype_is_one_of_the_shard_formats(dtype):
    """As TokenizeParams and ShardParams: another word was refused only by choose_dtype,
    in the job, after the tokenizer was read."""
    with pytest.raises(ValueError) as info:
        TextFileParams(dtype=dtype)
    assert str(info.value) == f"token dtype {dtype!r}: expected auto, uint16 or uint32"
    assert [TextFileParams(dtype=d).dtype for d in ("auto", "uint16", "uint32")] == ["auto", "uint16", "uint32"]


def test_whole_floats_are_ints(tmp_path):
    """The schema's "integer" takes 200.0: the BPE trainer and a position split's range()
    stopped on it ('float' object cannot be interpreted as an integer); a gather went on
    and wrote tokens_per_shard 200.0 into metadata.json."""
    tk = TokenizerParams(kind="bpe", vocab_size=300.0, min_frequency=2.0)
    values = [tk.vocab_size, tk.min_frequency, TokenizeParams(batch_docs=8.0).batch_docs]
    values += [cls(tokens_per_shard=200.0).tokens_per_shard for cls in (ShardParams, TextFileParams)]
    assert [(type(v), v) for v in values] == [(int, 300), (int, 2), (int, 8), (int, 200), (int, 200)]
    assert type(TextFileParams(val_fraction=0).val_fraction) is int  # a float field keeps what it is given
    chunk = write_chunk(tmp_path / "chunk_0.jsonl", [(f"d{i}", words(i)) for i in range(40)])
    tok = CharTokenizer.train(words(i) for i in range(40))
    run(tmp_path, [chunk], tok, sparams=ShardParams(tokens_per_shard=200.0))
    assert type(json.loads((tmp_path / "shards" / "metadata.json").read_text())["tokens_per_shard"]) is int


def test_keys_only_bpe_reads_hold_their_defaults_in_another_tokenizers_params():
    """vocab_size and min_frequency change no byte of a char or pretrained tokenizer: at
    their defaults there, whatever the config says, a change reruns nothing. The schema
    fills in the same defaults, and the record keeps its order (Snakemake compares params
    by repr), so a run made before, at the shipped values, is not rerun by the upgrade."""
    from shardflow.core.config import load_schema
    from shardflow.train.prepare import BPE_ONLY_KEYS, tokenizer_params
    from tests.helpers import REPO

    shards = {"tokenizer": "char", "vocab_size": 300, "min_frequency": 5}
    assert repr(tokenizer_params(shards)) == "{'vocab_size': 8192, 'min_frequency': 2, 'kind': 'char'}"
    assert tokenizer_params({**shards, "tokenizer": "default"})["vocab_size"] == 8192
    assert tokenizer_params({**shards, "tokenizer": "bpe"}) == {"vocab_size": 300, "min_frequency": 5, "kind": "bpe"}
    schema = load_schema(REPO / "config" / "config.schema.yaml")["properties"]["shards"]["properties"]
    assert {k: schema[k]["default"] for k in BPE_ONLY_KEYS} == {k: getattr(TokenizerParams(), k) for k in BPE_ONLY_KEYS}
    TokenizerParams(**tokenizer_params(shards))


def test_a_pretrained_tokenizer_that_has_gone_stops_train_tokenizer_naming_its_key(tmp_path):
    """The parse only warns about a missing shards.tokenizer where the tokenizer folder
    exists (rules/common.smk check_models); a train_tokenizer job that reruns names it."""
    with pytest.raises(FileNotFoundError, match=r"^shards.tokenizer: tokenizer '.*moved/tokenizer.json': no "):
        train_tokenizer([], TokenizerParams(kind=str(tmp_path / "moved" / "tokenizer.json")), tmp_path / "tk")

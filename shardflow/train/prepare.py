"""Token shards from a chunked corpus: the data half of GPT training.

One workflow job per step, streaming throughout: no step holds the corpus's
tokens, only one batch of documents or one copy run (at most `COPY_RUN` tokens).

1. `train_tokenizer(chunk_paths, TokenizerParams, out_folder)`: builds the char
   or bpe vocabulary from the chunks' texts (or copies a pretrained tokenizer)
   into `out_folder`.
2. `tokenize_chunk(chunk_path, tokenizer, out_path, TokenizeParams)`, one job per
   chunk, writes
     - `out_path`: the chunk's kept documents, each one's tokens followed by the
       end-of-text id, in chunk order, in the shard format (`shards.py`);
     - `docs_path(out_path)` (`<out_path>.docs.jsonl`): one line per kept document
       `{"id", "offset", "tokens", "split", "group", "sha256"}` (`tokens` counts the
       end-of-text id; `sha256` is the text's), then one `{"summary": {...}}` line:
       chunk sha256, tokenizer identity, dtype, counts, split settings.
3. `gather_shards(tokenized_paths, out_dir, ShardParams)` packs those into
   `train_000000.bin, ...` and `val_000000.bin, ...` plus `metadata.json`.
4. `prepare_text_file(path, tokenizer, out_dir, TextFileParams)`: the position
   split of one text file (nanoGPT's Shakespeare).

Train/val split (`tokenize_chunk`): a document goes to val when the first 8 bytes
of sha256(salt, NUL, key), read as a fraction of 2**64, fall below
`val_fraction`. The key is the document's group when the chunk has groups (a
group never straddles train and val), else its id. So the split depends on
neither chunking nor order, and a rerun gives the same split.

Exact de-duplication (sha256 of the UTF-8 text; the first occurrence is kept):
`tokenize_chunk` drops repeats inside its chunk and records every kept hash;
`gather_shards` drops repeats across chunks, first chunk in the order given
wins. It de-duplicates before the split, so an exact copy never lands in both
train and val. Its memory grows with the number of distinct documents (a set of
16-byte digests, ~100 bytes a document; 10 M documents ~ 1 GB): the one thing
here that is not constant in corpus size. Set `dedup: false` to avoid it.

Packing (`gather_shards`): whole documents only, in chunk order; a shard is
closed when the next unit would take it past the target size. A unit is a
group's kept documents of one split (written together, in chunk order), or one
document when the chunks carry no groups. A unit larger than the target gets a
shard of its own. Groups are kept together within a chunk, as `split_corpus`
with `group_by` guarantees; a group seen again in a later chunk is an error.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from fractions import Fraction
from pathlib import Path

import numpy as np

from shardflow.core.atomic import atomic_open, write_json
from shardflow.core.fields import check_field_types, whole_floats_as_ints
from shardflow.core.files import iter_json_lines
from shardflow.core.hashing import sha256_file
from shardflow.core.runlog import share_tokenizer_threads
from shardflow.core.s3 import logical_path
from shardflow.corpus.chunks import iter_chunk
from shardflow.corpus.readers import decode_text, nul_byte
from shardflow.train.shards import (
    FORMATS,
    HEADER_BYTES,
    MAX_TOKENS,
    Shard,
    ShardWriter,
    choose_dtype,
    open_shard,
)
from shardflow.train.tokenizer import (
    CharTokenizer,
    Tokenizer,
    copy_saved,
    load_pretrained,
    load_tokenizer,
    train_bpe,
)

log = logging.getLogger(__name__)

TOKENIZED_FORMAT = "shardflow.train.tokenized_chunk/1"
METADATA_FORMAT = "shardflow.train.shards/1"
DEFAULT_TOKENS_PER_SHARD = 100_000_000  # llm.c's fineweb.py default
COPY_RUN = 1 << 20  # most tokens copied in one read (4 MiB of uint32)
SHARD_NAME = re.compile(r"^(train|val)_\d{6}\.bin$")
# Plain-text pieces: cut near this many characters, where no tokenizer here merges
# across (see `_text_pieces`); hard cut at 16x.
PIECE_CHARS = 1 << 20
# Most bytes of a plain-text file read at once: a longer line (a file without a line
# feed is one line) is read in parts, so a piece stays bounded whatever the lines.
READ_BYTES = 1 << 20
# Where a piece may end: before a space, tab, CR or LF that follows a non-space
# character (`_text_pieces`).
_PIECE_END = re.compile(r"(?<=\S)[ \t\r\n]")
# A tokenizer whose tokens may span line breaks encodes a position split's file in one
# piece up to this size; a larger file would hold tens of GB in the tokenizer at once,
# so it is still encoded in PIECE_CHARS pieces, with a warning that its tokens may
# differ from the whole file's at each cut.
ONE_PIECE_MAX_BYTES = 256 << 20


# ---------------------------------------------------------------- parameters


@dataclass(frozen=True)
class TokenizerParams:
    kind: str = "char"  # char | bpe | path to a tokenizer.json or model folder | "default" (MiniLM)
    vocab_size: int = 8192  # bpe only: target size, end-of-text included
    min_frequency: int = 2  # bpe only: least count for a merge

    def __post_init__(self) -> None:
        whole_floats_as_ints(self)  # vocab_size 300.0 (the schema's "integer" takes it): the BPE trainer takes no float
        # Only "" is empty: None, 0 or False was called empty too; they are the type check's
        # TypeError, which names the value ('kind None: expected a string').
        if self.kind == "":
            raise ValueError(
                "tokenizer kind is empty: expected char, bpe, default, or a tokenizer.json or model folder to copy"
            )
        check_field_types(self)  # before the bound: a string there is Python's bare TypeError
        if self.kind == "bpe" and self.vocab_size < 257:
            raise ValueError(f"bpe vocab_size {self.vocab_size} must be at least 257")


BPE_ONLY_KEYS = ("vocab_size", "min_frequency")


def tokenizer_params(shards: Mapping) -> dict:
    """The train_tokenizer job's params from the `shards` section: the keys only bpe reads
    (BPE_ONLY_KEYS), then `kind`. For any other kind (char, a pretrained one) those keys
    change no byte of the tokenizer, so they hold TokenizerParams' defaults, whatever the
    config says: given as written, a changed one reran the tokenizer and every job after
    it. Defaults, not nothing: a record made before, at the shipped values (the
    defaults), stays the same, so that no finished job reruns on upgrade."""
    kind = shards["tokenizer"]
    defaults = {f.name: f.default for f in fields(TokenizerParams)}
    return {**{k: shards[k] if kind == "bpe" else defaults[k] for k in BPE_ONLY_KEYS}, "kind": kind}


def check_token_dtype(dtype: str) -> None:
    """A shard's token dtype is auto or one of the shard formats (uint16, uint32)."""
    if dtype not in ("auto", *FORMATS):
        raise ValueError(f"token dtype {dtype!r}: expected auto, {' or '.join(FORMATS)}")


@dataclass(frozen=True)
class TokenizeParams:
    val_fraction: float = 0.1
    split_salt: str = "shardflow"  # change it to draw a different (still deterministic) split
    dedup: bool = True  # exact, within the chunk
    dtype: str = "auto"  # auto | uint16 | uint32
    batch_docs: int = 256  # documents encoded per call

    def __post_init__(self) -> None:
        whole_floats_as_ints(self)  # batch_docs 256.0 is 256
        check_token_dtype(self.dtype)
        # Before the bounds: a string there is Python's bare TypeError; dedup='false' (a
        # true string) was kept, and a split_salt of 5 failed in the hash of the first record.
        check_field_types(self)
        if not 0 <= self.val_fraction < 1:
            raise ValueError(f"val_fraction {self.val_fraction} must be in [0, 1)")
        if self.batch_docs < 1:
            raise ValueError("batch_docs must be >= 1")


def shard_target_tokens(tokens_per_shard: int | None, shard_mb: float | None, dtype: str) -> int:
    """Tokens per shard: given, or what fits `shard_mb` MiB with the header, or the default.
    The gather packs a shard up to it; a unit (document or group) longer gets a shard of
    its own. The parse compares it with train.block_size (plan.train_settings)."""
    if shard_mb is not None:
        target = int((shard_mb * 2**20 - HEADER_BYTES) // np.dtype(dtype).itemsize)
    else:
        target = DEFAULT_TOKENS_PER_SHARD if tokens_per_shard is None else tokens_per_shard
    if not 1 <= target <= MAX_TOKENS:
        given = (
            f"shards.shard_mb {shard_mb} leaves {target} {dtype} tokens beside the {HEADER_BYTES:,}-byte header"
            if shard_mb is not None
            else f"shards.tokens_per_shard {target}"
        )
        raise ValueError(f"{given}: a shard holds between 1 and {MAX_TOKENS} tokens (the int32 header counts them)")
    return target


@dataclass(frozen=True)
class ShardParams:
    tokens_per_shard: int | None = None  # default 100 M, or from shard_mb
    shard_mb: float | None = None  # target file size in MiB, header included
    dedup: bool = True  # exact, across chunks
    dtype: str = "auto"
    group_field: str | None = None  # the corpus field the chunks' groups came from (metadata)

    def __post_init__(self) -> None:
        whole_floats_as_ints(self)  # tokens_per_shard 200.0 (the schema's "integer" takes it) is 200
        if self.tokens_per_shard is not None and self.shard_mb is not None:
            raise ValueError("give tokens_per_shard or shard_mb, not both")
        check_token_dtype(self.dtype)
        # tokens_per_shard='100' or shard_mb='1' was kept, and the gather stopped on it
        # after every tokenize job; dedup='no' (a true string) was kept as true.
        check_field_types(self)


@dataclass(frozen=True)
class TextFileParams:
    val_fraction: float = 0.1
    tokens_per_shard: int | None = None
    shard_mb: float | None = None
    dtype: str = "auto"

    def __post_init__(self) -> None:
        whole_floats_as_ints(self)  # tokens_per_shard 200.0 (the schema's "integer" takes it): range() takes no float
        check_field_types(self)  # before the bound: a string or None there is Python's bare TypeError
        # As TokenizeParams: another word was refused only by choose_dtype, in the job.
        check_token_dtype(self.dtype)
        if not 0 <= self.val_fraction < 1:
            raise ValueError(f"val_fraction {self.val_fraction} must be in [0, 1)")
        if self.tokens_per_shard is not None and self.shard_mb is not None:
            raise ValueError("give tokens_per_shard or shard_mb, not both")


# ---------------------------------------------------------------- helpers


def assign_split(key: str, val_fraction: float, salt: str = "shardflow") -> str:
    """'val' or 'train' from a hash of `key` alone (see the module docstring)."""
    h = hashlib.sha256(salt.encode("utf-8") + b"\0" + key.encode("utf-8")).digest()
    return "val" if int.from_bytes(h[:8], "big") < val_fraction * 2**64 else "train"


def position_split(n: int, val_fraction: float) -> int:
    """The train part of a position split of N characters: floor(N * (1 - val_fraction)), in
    exact arithmetic on the decimal value of val_fraction (0.1 -> 9/10), so N=10 gives 9,
    never 8 (nanoGPT's int(n * 0.9), without its float rounding)."""
    return math.floor(n * (1 - Fraction(str(val_fraction))))


def docs_path(tokens_path: str | os.PathLike) -> Path:
    """The sidecar of a tokenized chunk file."""
    p = Path(tokens_path)
    return p.with_name(p.name + ".docs.jsonl")


def _text_pieces(path: str | os.PathLike, piece_chars: int | None = PIECE_CHARS) -> Iterator[tuple[int, str]]:
    """(first line number, text) pieces of a UTF-8 text file, streamed, exact (no newline changes).

    A piece ends, once it holds `piece_chars` characters, before the next space, tab,
    CR or LF that follows a non-space character: byte-level BPE (GPT-2 pre-tokenizer),
    WordPiece and char tokens never span that point, and a text that starts there
    encodes as the rest of the whole does, so encoding piece by piece gives the same
    tokens as encoding the whole file. (Pieces used to end after a LF between two
    non-space characters; after a CRLF that fails: byte-level BPE encodes a text's final
    "\\r\\n" as one token where the whole file's "\\r\\nS" gives "\\r", "\\n".) A stretch of 16
    pieces' length without one is cut at the next read's end regardless (at a line end
    where lines are shorter than a read; tokens may then differ at that one point), never
    inside a character or a CR/LF pair. `piece_chars` None: the whole file is one piece (a
    tokenizer whose tokens may span any newline, `Tokenizer.splits_at_line_breaks`).
    """
    if piece_chars is None:
        parts = [text for _, text in _text_reads(path)]
        if parts:
            yield 1, "".join(parts)
        return
    buf: list[str] = []
    size, start, last = 0, 1, ""  # last: the piece's last character
    for lineno, text in _text_reads(path):
        if size >= 16 * piece_chars and not (last == "\r" and text.startswith("\n")):
            yield start, "".join(buf)
            buf, size, start, last = [], 0, lineno, ""
        at = size  # where `text` starts in the piece
        buf.append(text)
        size += len(text)
        while size > piece_chars:  # a piece may end before its character `piece_chars` or later
            lo = max(piece_chars - at, 0)
            if lo == 0 and text[:1] in (" ", "\t", "\r", "\n") and last and not last.isspace():
                end = 0
            else:
                m = _PIECE_END.search(text, max(lo, 1))
                if m is None:
                    break
                end = m.start()
            buf[-1] = text[:end]
            yield start, "".join(buf)
            text = text[end:]
            buf, size, start, at, last = [text], len(text), lineno, 0, ""
        last = text[-1:] or last
    if buf:
        yield start, "".join(buf)


def _text_reads(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 text file, a line at a time, a line longer than
    READ_BYTES in parts of at most that many bytes, none ending inside a character. A NUL
    or invalid UTF-8 is an error naming the line and the byte, counted from the line's
    first byte however many reads it took."""
    lineno, done, carry = 1, 0, b""  # done: bytes of the line decoded; carry: a character cut by the last read
    with open(path, "rb") as fh:
        while True:
            read = fh.readline(READ_BYTES)
            raw = carry + read
            if not raw:
                return
            # A raw NUL is binary data, as the split's readers hold (UTF-16 without a
            # byte-order mark, a file padded with NULs): never characters to train on.
            if nul := nul_byte(raw, done):
                raise ValueError(f"{path}:{lineno}: {nul}")
            # Short of READ_BYTES: the line's (or the file's) end; else keep back a
            # character the read cut, to decode with the next.
            whole = raw if len(read) < READ_BYTES or read.endswith(b"\n") else raw[: _utf8_whole(raw)]
            try:
                text = decode_text(whole, lineno) if done == 0 else whole.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ValueError(f"{path}:{lineno}: invalid UTF-8 at byte {done + exc.start} of the line") from exc
            yield lineno, text
            if read.endswith(b"\n"):
                lineno, done, carry = lineno + 1, 0, b""
            else:
                done, carry = done + len(whole), raw[len(whole) :]


def _utf8_whole(raw: bytes) -> int:
    """How many bytes of `raw` end with a whole UTF-8 character: all of them, less a
    character's first 1 to 3 bytes when the rest are yet to be read."""
    for back in range(1, min(4, len(raw)) + 1):
        byte = raw[-back]
        if byte < 0x80 or byte >= 0xC0:  # ASCII, or a character's first byte
            size = 1 if byte < 0x80 else 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return len(raw) - back if size > back else len(raw)
    return len(raw)  # continuation bytes only: invalid, and decoding says where


def _corpus_texts(paths: Iterable[str | os.PathLike]) -> Iterator[str]:
    """Texts of chunk files (`*.jsonl`, one per record) or plain text files (in pieces)."""
    for path in paths:
        if str(path).endswith(".jsonl"):
            for rec in iter_chunk(path):
                yield rec.text
        else:
            for _, piece in _text_pieces(path):
                yield piece


def _batches(items: Iterable, n: int) -> Iterator[list]:
    batch: list = []
    for item in items:
        batch.append(item)
        if len(batch) == n:
            yield batch
            batch = []
    if batch:
        yield batch


def _encode(tokenizer: Tokenizer, texts: Sequence[str], names: Sequence[str], where: str) -> list[np.ndarray]:
    """Encode a batch; on failure, find and name the document that fails."""
    try:
        return tokenizer.encode_batch(texts)
    except Exception:
        for text, name in zip(texts, names, strict=True):
            try:
                tokenizer.encode_batch([text])
            except Exception as exc:
                raise ValueError(
                    f"{where}: document {name} cannot be encoded by the {tokenizer.kind} tokenizer: {exc}"
                ) from exc
        raise


def _unk_count(tokenizer: Tokenizer, arrays: Sequence[np.ndarray]) -> int:
    unk = getattr(tokenizer, "unk_id", None)
    return 0 if unk is None else int(sum(int((a == unk).sum()) for a in arrays))


# ---------------------------------------------------------------- 1. tokenizer


def train_tokenizer(
    chunk_paths: Sequence[str | os.PathLike], params: TokenizerParams, out_folder: str | os.PathLike
) -> dict:
    """Build the tokenizer `params.kind` names and save it into `out_folder`; return its identity.

    char and bpe stream the texts of `chunk_paths` (chunk `.jsonl` files, or plain
    text files); a pretrained tokenizer is copied and the chunks are not read.
    """
    share_tokenizer_threads()  # bpe training's pool: the job's threads, not the machine's cores
    if params.kind == "char":
        try:
            tok: Tokenizer = CharTokenizer.train(_corpus_texts(chunk_paths))
        except ValueError as exc:
            raise ValueError(f"{exc} (read {list(map(str, chunk_paths))})") from exc
    elif params.kind == "bpe":
        texts = _corpus_texts(chunk_paths)
        first = next(texts, None)
        if first is None:
            raise ValueError(f"cannot train the bpe tokenizer: no text in {list(map(str, chunk_paths))}")
        tok = train_bpe(_chain(first, texts), params.vocab_size, params.min_frequency)
    else:
        try:
            tok = load_pretrained(params.kind)
        except FileNotFoundError as exc:  # moved or deleted since the parse-time check passed it
            raise FileNotFoundError(f"shards.tokenizer: {exc}") from None
    ident = tok.save(out_folder)
    log.info(
        "tokenizer %s: vocab_size %d, eot id %d, sha256 %s",
        ident["kind"],
        ident["vocab_size"],
        ident["eot_id"],
        ident["sha256"],
    )
    return ident


def _chain(first: str, rest: Iterator[str]) -> Iterator[str]:
    yield first
    yield from rest


# ---------------------------------------------------------------- 2. tokenize


def tokenize_chunk(
    chunk_path: str | os.PathLike, tokenizer: Tokenizer, out_path: str | os.PathLike, params: TokenizeParams
) -> dict:
    """Tokenize one chunk file into `out_path` and its sidecar; return the summary."""
    share_tokenizer_threads()  # a tokenize job's one thread, not the machine's cores (its jobs run side by side)
    dtype = choose_dtype(tokenizer.vocab_size, params.dtype)
    eot = np.array([tokenizer.eot_id], dtype=np.uint32)
    seen: set[bytes] = set()
    counts = {"documents": 0, "tokens": 0, "duplicates": 0, "unk_tokens": 0, "train_tokens": 0, "val_tokens": 0}
    groups = None
    offset = 0
    with ShardWriter(out_path, dtype) as writer, atomic_open(docs_path(out_path), "w", encoding="utf-8") as side:
        for batch in _batches(iter_chunk(chunk_path), params.batch_docs):
            kept, hashes = [], []  # hashes: hex sha256 of each kept text
            for rec in batch:
                try:
                    digest = hashlib.sha256(rec.text.encode("utf-8")).digest()
                except UnicodeEncodeError as exc:
                    raise ValueError(
                        f"{chunk_path}: document {rec.id!r} holds text that is not valid Unicode ({exc})"
                    ) from exc
                if params.dedup:
                    if digest in seen:
                        counts["duplicates"] += 1
                        continue
                    seen.add(digest)
                kept.append(rec)
                hashes.append(digest.hex())
            if groups is None and kept:
                groups = kept[0].group is not None
            arrays = _encode(tokenizer, [r.text for r in kept], [repr(r.id) for r in kept], str(chunk_path))
            counts["unk_tokens"] += _unk_count(tokenizer, arrays)
            parts = []
            for rec, digest, ids in zip(kept, hashes, arrays, strict=True):
                if (rec.group is not None) != groups:
                    raise ValueError(
                        f"{chunk_path}: document {rec.id!r} {'has no' if groups else 'has a'} group, unlike the chunk's first"
                    )
                n = ids.size + 1
                if offset + n > MAX_TOKENS:  # else the writer stops naming out_path, a file the user never named
                    raise ValueError(
                        f"{chunk_path}: document {rec.id!r} takes the chunk past {MAX_TOKENS:,} tokens, more than "
                        "its tokenized file can hold (the llm.c header counts tokens in an int32); split the corpus "
                        "into more chunks (n_chunks; under chunking.by: source, smaller source files)"
                    )
                split = assign_split(rec.group if groups else rec.id, params.val_fraction, params.split_salt)
                doc = {
                    "id": rec.id,
                    "offset": offset,
                    "tokens": n,
                    "split": split,
                    "group": rec.group,
                    "sha256": digest,
                }
                side.write(json.dumps(doc, ensure_ascii=False, separators=(",", ":")) + "\n")
                parts += [ids, eot]
                offset += n
                counts["documents"] += 1
                counts[f"{split}_tokens"] += n
            if parts:
                writer.write(np.concatenate(parts))
        counts["tokens"] = offset
        summary = {
            "format": TOKENIZED_FORMAT,
            "chunk": logical_path(chunk_path),
            "chunk_sha256": sha256_file(chunk_path),
            "tokenizer": tokenizer.identity(),
            "dtype": dtype,
            "grouped": groups,  # None: an empty chunk, which cannot tell
            "split": {"method": "hash", "val_fraction": params.val_fraction, "salt": params.split_salt},
            "dedup": params.dedup,
            **counts,
        }
        side.write(json.dumps({"summary": summary}, ensure_ascii=False, separators=(",", ":")) + "\n")
    log.info(
        "%s: %d documents, %d tokens, %d duplicates dropped",
        chunk_path,
        counts["documents"],
        offset,
        counts["duplicates"],
    )
    return summary


def read_summary(tokens_path: str | os.PathLike) -> dict:
    """The summary line of a tokenized chunk's sidecar (its last line), checked against the token file."""
    side = docs_path(tokens_path)
    with open(side, "rb") as fh:
        end = fh.seek(0, os.SEEK_END)
        block = 1 << 16
        while True:  # read back from the end until the last line is whole
            start = max(0, end - block)
            fh.seek(start)
            data = fh.read(end - start).rstrip(b"\n")
            if b"\n" in data or start == 0:
                break
            block *= 4
        tail = data.rsplit(b"\n", 1)[-1]
    try:
        summary = json.loads(tail)["summary"]
    except (ValueError, KeyError, TypeError) as exc:  # ValueError: not JSON, or not UTF-8
        raise ValueError(f"{side}: no summary line at the end (incomplete or not a tokenized-chunk sidecar)") from exc
    if summary.get("format") != TOKENIZED_FORMAT:
        raise ValueError(f"{side}: format {summary.get('format')!r}, expected {TOKENIZED_FORMAT!r}")
    header = open_shard(tokens_path, summary["dtype"]).header
    if header.n_tokens != summary["tokens"]:
        raise ValueError(f"{tokens_path}: {header.n_tokens} tokens, but its sidecar records {summary['tokens']}")
    return summary


def iter_docs(tokens_path: str | os.PathLike) -> Iterator[dict]:
    """The per-document lines of a tokenized chunk's sidecar, in order; a damaged line is an
    error naming the sidecar and the line."""
    for _, obj in iter_json_lines(docs_path(tokens_path)):
        if "summary" not in obj:
            yield obj


# ---------------------------------------------------------------- 3. gather


class _ShardSequence:
    """Shards `<split>_000000.bin, ...` of one split, filled unit by unit.

    Copies go through one pending contiguous run of the current source chunk,
    flushed when a document is not adjacent, at COPY_RUN tokens, or at a shard
    boundary: memory is one run, whatever the shard or corpus size.
    """

    def __init__(self, out_dir: Path, split: str, dtype: str, target: int):
        self.out_dir, self.split, self.dtype, self.target = out_dir, split, dtype, target
        self.shards: list[dict] = []
        self.writer: ShardWriter | None = None
        self.documents = 0
        self.run: tuple[Shard, int, int] | None = None

    def add(self, src: Shard, docs: list[dict]) -> None:
        n = sum(d["tokens"] for d in docs)
        if self.writer is not None and self.writer.n_tokens + self._pending() + n > self.target:
            self.finish()
        if self.writer is None:
            name = f"{self.split}_{len(self.shards):06d}.bin"
            self.writer = ShardWriter(self.out_dir / name, self.dtype)
        for d in docs:
            start, stop = d["offset"], d["offset"] + d["tokens"]
            run = self.run
            if run is not None and run[0] is src and run[2] == start and stop - run[1] <= COPY_RUN:
                self.run = (src, run[1], stop)
            else:
                self.flush()
                self.run = (src, start, stop)
        self.documents += len(docs)

    def _pending(self) -> int:
        return 0 if self.run is None else self.run[2] - self.run[1]

    def flush(self) -> None:
        if self.run is not None:
            src, start, stop = self.run
            for a in range(start, stop, COPY_RUN):  # a huge document still copies in bounded pieces
                self.writer.write(src.read(a, min(a + COPY_RUN, stop)))
            self.run = None

    def finish(self) -> None:
        if self.writer is None:
            return
        self.flush()
        n = self.writer.close()
        path = self.writer.path
        self.shards.append(
            {
                "file": path.name,
                "split": self.split,
                "tokens": n,
                "documents": self.documents,
                "sha256": sha256_file(path),
            }
        )
        self.writer, self.documents = None, 0

    def abort(self) -> None:
        if self.writer is not None:
            self.writer.abort()


def _units(docs: Iterable[dict], grouped: bool) -> Iterator[list[dict]]:
    """Per-chunk packing units: each group's documents together (first-seen order), or single documents."""
    if not grouped:
        for d in docs:
            yield [d]
        return
    by_group: dict[str, list[dict]] = {}
    for d in docs:
        by_group.setdefault(d["group"], []).append(d)
    yield from by_group.values()


def _check_same(summaries: list[tuple[str, dict]], key: str) -> None:
    first_path, first = summaries[0]
    for path, s in summaries[1:]:
        if s[key] != first[key]:
            raise ValueError(
                f"{path}: {key} {s[key]!r} differs from {first_path}'s {first[key]!r}; "
                "all chunks must be tokenized with the same settings"
            )


def gather_shards(
    tokenized_paths: Sequence[str | os.PathLike],
    out_dir: str | os.PathLike,
    params: ShardParams,
    tokenizer_folder: str | os.PathLike | None = None,
) -> dict:
    """Pack tokenized chunks into train/val shards and `metadata.json` in `out_dir`; return the metadata.

    With `tokenizer_folder` (a folder `train_tokenizer` wrote), its files are
    copied beside the shards after checking they are the chunks' tokenizer.
    Shard files in `out_dir` that the new metadata does not list (a previous
    run's) are removed; consumers should list shards from metadata.json.
    """
    if not tokenized_paths:
        raise ValueError("gather_shards: no tokenized chunk files given")
    out_dir = Path(out_dir)
    summaries = [(str(p), read_summary(p)) for p in tokenized_paths]
    for key in ("tokenizer", "dtype", "split", "dedup"):
        _check_same(summaries, key)
    nonempty = [(p, s) for p, s in summaries if s["grouped"] is not None]
    if nonempty:
        _check_same(nonempty, "grouped")
    grouped = bool(nonempty) and nonempty[0][1]["grouped"]
    first = summaries[0][1]
    ident = first["tokenizer"]
    if tokenizer_folder is not None and load_tokenizer(tokenizer_folder).identity() != ident:
        raise ValueError(f"{tokenizer_folder}: not the tokenizer the chunks were tokenized with")
    if sum(s["documents"] for _, s in summaries) == 0:
        raise ValueError(f"empty corpus: the {len(summaries)} tokenized chunks hold no document")
    if params.group_field is not None and not grouped:
        raise ValueError(
            f"group_field {params.group_field!r} is set, but the chunks carry no group values "
            "(split the corpus with chunking.group_by)"
        )
    dtype = choose_dtype(ident["vocab_size"], params.dtype)
    if dtype != first["dtype"]:
        raise ValueError(f"shards requested as {dtype}, but the chunks were tokenized as {first['dtype']}")
    target = shard_target_tokens(params.tokens_per_shard, params.shard_mb, dtype)
    out_dir.mkdir(parents=True, exist_ok=True)

    seqs = {s: _ShardSequence(out_dir, s, dtype, target) for s in ("train", "val")}
    seen: set[bytes] = set()
    group_chunk: dict[str, str] = {}
    cross_dups = unk = 0
    try:
        for path, summary in summaries:
            with open_shard(path, dtype) as src:
                for unit in _units(iter_docs(path), grouped):
                    if grouped:
                        g = unit[0]["group"]
                        if group_chunk.setdefault(g, path) != path:
                            raise ValueError(
                                f"group {g!r} appears in {group_chunk[g]} and again in {path}; "
                                "gather keeps groups together only within a chunk"
                            )
                    kept = []
                    for d in unit:
                        if params.dedup:
                            h = bytes.fromhex(d["sha256"])[:16]
                            if h in seen:
                                cross_dups += 1
                                continue
                            seen.add(h)
                        kept.append(d)
                    if kept:
                        seqs[kept[0]["split"]].add(src, kept)
                for seq in seqs.values():
                    seq.flush()  # before `src` closes
            unk += summary["unk_tokens"]
        for seq in seqs.values():
            seq.finish()
    except BaseException:
        for seq in seqs.values():  # no half-set of shards without its metadata.json
            seq.abort()
            for shard in seq.shards:
                (out_dir / shard["file"]).unlink(missing_ok=True)
        raise

    shards = seqs["train"].shards + seqs["val"].shards
    totals = {
        s: {
            "shards": len(q.shards),
            "tokens": sum(x["tokens"] for x in q.shards),
            "documents": sum(x["documents"] for x in q.shards),
        }
        for s, q in seqs.items()
    }
    totals["tokens"] = totals["train"]["tokens"] + totals["val"]["tokens"]
    totals["documents"] = totals["train"]["documents"] + totals["val"]["documents"]
    metadata = {
        **_metadata_head(ident, dtype, target, shards),
        "totals": totals,
        "split": {**first["split"], "key": "group" if grouped else "id"},
        "dedup": {
            "within_chunks": first["dedup"],
            "across_chunks": params.dedup,
            "duplicates_within_chunks": sum(s["duplicates"] for _, s in summaries),
            "duplicates_across_chunks": cross_dups,
        },
        "group_field": params.group_field,
        "grouped": grouped,
        "unk_tokens": unk,
        "sources": [
            {
                "chunk": s["chunk"],
                "sha256": s["chunk_sha256"],
                "tokenized": logical_path(p),
                "documents": s["documents"],
                "tokens": s["tokens"],
            }
            for p, s in summaries
        ],
    }
    _check_splits(metadata["totals"], metadata["split"]["val_fraction"])
    _publish(out_dir, metadata, tokenizer_folder)
    log.info(
        "gathered %d train / %d val tokens into %d shards (%d cross-chunk duplicates dropped)",
        totals["train"]["tokens"],
        totals["val"]["tokens"],
        len(shards),
        cross_dups,
    )
    return metadata


def _check_splits(totals: dict, val_fraction: float) -> None:
    """Stop here, not in the train job (after its retries), when a split asked for cannot
    train or evaluate: it needs a token to predict, so 2 tokens at least. (val_fraction 0
    asks for no val split: shards for training elsewhere.)"""
    for split in ("train", "val") if val_fraction > 0 else ("train",):
        n, docs = totals[split]["tokens"], totals[split]["documents"]
        if n < 2:
            held = f"{n} tokens" + ("" if docs is None else f" ({docs} documents)")
            hint = f"raise shards.val_fraction ({val_fraction}), or " if split == "val" else ""
            raise ValueError(
                f"the {split} split holds {held} of {totals['tokens']}: training needs a token to predict in "
                f"each split; {hint}give the corpus more text"
            )


def _metadata_head(ident: dict, dtype: str, target: int, shards: list[dict]) -> dict:
    """The part of metadata.json both split methods write the same way."""
    magic, version = FORMATS[dtype]
    return {
        "format": METADATA_FORMAT,
        "shard_format": _shard_format(dtype),
        "tokenizer": ident,
        "vocab_size": ident["vocab_size"],
        "eot_id": ident["eot_id"],
        "dtype": dtype,
        "magic": magic,
        "version": version,
        "tokens_per_shard": target,
        "shards": shards,
    }


def _shard_format(dtype: str) -> dict:
    magic, version = FORMATS[dtype]
    return {
        "layout": "llm.c dev/data/data_common.py",
        "header_bytes": HEADER_BYTES,
        "header": "256 x int32 LE: magic, version, n_tokens",
        "magic": magic,
        "version": version,
        "token_dtype": dtype,
        "byteorder": "little",
    }


def _publish(out_dir: Path, metadata: dict, tokenizer_folder: str | os.PathLike | None) -> None:
    if tokenizer_folder is not None:
        copy_saved(tokenizer_folder, out_dir)
    write_json(out_dir / "metadata.json", metadata)
    listed = {s["file"] for s in metadata["shards"]}
    for p in out_dir.iterdir():
        if SHARD_NAME.match(p.name) and p.name not in listed:
            p.unlink()


# ---------------------------------------------------------------- 4. position split


def prepare_text_file(
    path: str | os.PathLike,
    tokenizer: Tokenizer,
    out_dir: str | os.PathLike,
    params: TextFileParams,
    tokenizer_folder: str | os.PathLike | None = None,
) -> dict:
    """Position split of one text file, as nanoGPT's `data/shakespeare*/prepare.py` make it:
    the text is cut at character floor(N * (1 - val_fraction)) (`position_split`; N is its
    Unicode code points as `_text_pieces` reads them: a leading BOM dropped, line endings
    as they are), and each part is encoded on its own, the first to train, the rest to
    val. Cutting the tokens instead would give a BPE other counts, and a token across
    the cut (nanoGPT's GPT-2 Shakespeare: 301,966 / 36,059). The file is one text: no
    end-of-text is added.

    A first pass counts the characters, a second encodes the file piece by piece (the
    piece holding the cut is encoded as its two parts), so neither holds the file.
    Tokens stream to a hidden scratch file in `out_dir` (removed afterwards), then
    are cut into `train_*.bin` / `val_*.bin` of at most the target size. The scratch
    holds bare tokens, no llm.c header: the file may have more tokens than a header's
    int32 counts (2**31 - 1), and only the shards cut from it are held to that. Per-shard
    `documents` is null: there are no documents to count.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    dtype = choose_dtype(tokenizer.vocab_size, params.dtype)
    target = shard_target_tokens(params.tokens_per_shard, params.shard_mb, dtype)
    scratch = out_dir / f".position-split-{os.getpid()}.bin"
    # In pieces where they encode as the whole file does; else the file at once (a
    # SentencePiece-style tokenizer prefixes each encoded piece and merges across lines).
    piece_chars = PIECE_CHARS if tokenizer.splits_at_line_breaks else None
    if piece_chars is None and os.path.getsize(path) > ONE_PIECE_MAX_BYTES:
        piece_chars = PIECE_CHARS
        log.warning(
            "%s: over %d MiB, encoded in pieces of about 1 MiB cut before a space or line break; the %s "
            "tokenizer's tokens may span those, so they may differ from the whole file's at each cut "
            "(shards.split: documents has none)",
            path, ONE_PIECE_MAX_BYTES >> 20, tokenizer.kind,
        )  # fmt: skip
    elif piece_chars is None:
        log.info("%s: encoded in one piece (the %s tokenizer's tokens may span line breaks)", path, tokenizer.kind)
    n_chars = sum(len(piece) for _, piece in _text_pieces(path))
    if n_chars == 0:
        raise ValueError(f"empty corpus: {path} holds no text")
    cut = position_split(n_chars, params.val_fraction)
    unk = 0

    def encode_into(w: ShardWriter, line: int, text: str) -> None:
        nonlocal unk
        try:
            (ids,) = tokenizer.encode_batch([text])
        except Exception as exc:
            at = getattr(exc, "offset", None)
            where = f"{path}:{line + text[:at].count(chr(10))}" if at is not None else f"{path} (from line {line})"
            raise ValueError(f"{where}: cannot be encoded by the {tokenizer.kind} tokenizer: {exc}") from exc
        unk += _unk_count(tokenizer, [ids])
        w.write(ids)

    try:
        with ShardWriter(scratch, dtype, header=False) as w:
            read, n_train = 0, None
            for line, piece in _text_pieces(path, piece_chars):
                if n_train is None and read + len(piece) >= cut:  # the piece holding the cut
                    head, tail = piece[: cut - read], piece[cut - read :]
                    if head:
                        encode_into(w, line, head)
                    n_train = w.n_tokens
                    if tail:
                        encode_into(w, line + head.count("\n"), tail)
                else:
                    encode_into(w, line, piece)
                read += len(piece)
            if read != n_chars:
                raise ValueError(f"{path}: changed while it was read ({n_chars} characters, then {read})")
        with open_shard(scratch, dtype, header=False) as src:
            n = src.n_tokens
            if n == 0:
                raise ValueError(f"empty corpus: {path} holds no text")
            shards = _cut(src, 0, n_train, out_dir, "train", dtype, target) + _cut(
                src, n_train, n, out_dir, "val", dtype, target
            )
    finally:
        scratch.unlink(missing_ok=True)

    metadata = {
        **_metadata_head(tokenizer.identity(), dtype, target, shards),
        "totals": {
            "train": {"shards": sum(s["split"] == "train" for s in shards), "tokens": n_train, "documents": None},
            "val": {"shards": sum(s["split"] == "val" for s in shards), "tokens": n - n_train, "documents": None},
            "tokens": n,
            "documents": None,
        },
        "split": {
            "method": "position",
            "val_fraction": params.val_fraction,
            "rule": "the text's first floor(N * (1 - val_fraction)) characters train, the rest val, each encoded apart",
            "characters": {"train": cut, "val": n_chars - cut},
        },
        "dedup": None,
        "group_field": None,
        "grouped": False,
        "unk_tokens": unk,
        "sources": [{"chunk": logical_path(path), "sha256": sha256_file(path), "tokens": n}],
    }
    _check_splits(metadata["totals"], params.val_fraction)
    _publish(out_dir, metadata, tokenizer_folder)
    log.info("%s: %d tokens, %d train / %d val", path, n, n_train, n - n_train)
    return metadata


def _cut(src: Shard, start: int, stop: int, out_dir: Path, split: str, dtype: str, target: int) -> list[dict]:
    shards = []
    for i, lo in enumerate(range(start, stop, target)):
        hi = min(lo + target, stop)
        path = out_dir / f"{split}_{i:06d}.bin"
        with ShardWriter(path, dtype) as w:
            for a in range(lo, hi, COPY_RUN):
                w.write(src.read(a, min(a + COPY_RUN, hi)))
        shards.append(
            {"file": path.name, "split": split, "tokens": hi - lo, "documents": None, "sha256": sha256_file(path)}
        )
    return shards


__all__ = [
    "ShardParams",
    "TextFileParams",
    "TokenizeParams",
    "TokenizerParams",
    "assign_split",
    "docs_path",
    "gather_shards",
    "iter_docs",
    "position_split",
    "prepare_text_file",
    "read_summary",
    "tokenize_chunk",
    "train_tokenizer",
]

"""Tokenizers for token shards: one interface over three kinds.

- `char`: the vocabulary is the sorted distinct characters of the training text
  (as nanoGPT's shakespeare_char), ids 0..n-1 in code-point order, plus one
  end-of-text id n. Text holding a character outside the vocabulary is refused
  (`UnknownCharacterError` names the character and its offset; `prepare` adds
  the document id), never mapped to a silent stand-in.
- `bpe`: byte-level BPE (the GPT-2 scheme) trained on the corpus with the
  Hugging Face `tokenizers` library; special token `<|endoftext|>`. Byte-level
  means every string encodes, and decode(encode(t)) == t exactly.
- pretrained: an existing `tokenizer.json`, or a model folder holding one
  ("default" is the bundled MiniLM, which works offline). Its end-of-text id is
  the tokenizer's EOS token, else its SEP token: MiniLM is a BERT WordPiece
  model with no EOS, so its `[SEP]` (id 102) marks document ends. A WordPiece
  model lower-cases and maps unseen words to `[UNK]`, so decode is not an exact
  inverse there; `prepare` counts the `[UNK]` tokens it writes.

A document is text: an end-of-text (or other special) token written in it, such as a
literal "<|endoftext|>" or "[SEP]", is encoded as the characters it is made of, as
llm.c and nanoGPT do (tiktoken's `encode_ordinary`); only `prepare` puts end-of-text
ids, one after each document. The exported tokenizer does the same
(`split_special_tokens`).

Common interface: `encode(text) -> list[int]`, `encode_batch(texts) -> list of
numpy arrays` (the fast path `prepare` uses), `decode(ids) -> str`, `vocab_size`,
`eot_id`, `identity()`, `save(folder)`; `load_tokenizer(folder)` reads any saved
kind back.

A saved folder holds the vocabulary file (`tokenizer.json` in the Hugging Face
format for bpe and pretrained, `char_tokenizer.json` for char) and
`shardflow_tokenizer.json`, which names the kind and the end-of-text token.
`identity()["sha256"]` is the sha256 of the vocabulary file as saved, so the same
vocabulary always has the same identity.
"""

from __future__ import annotations

import abc
import hashlib
import json
import os
import shutil
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

import numpy as np

from shardflow.core.atomic import atomic_open, atomic_path, write_json

EOT_TOKEN = "<|endoftext|>"
META_FILE = "shardflow_tokenizer.json"
CHAR_FILE = "char_tokenizer.json"
HF_FILE = "tokenizer.json"
CHAR_FORMAT = "shardflow.char_tokenizer/1"
# Pretrained tokenizers: the files beside a tokenizer.json read for its end-of-text token,
# in this order; the first of these keys a file names is end-of-text.
EOT_CONFIG_FILES = ("tokenizer_config.json", "special_tokens_map.json")
EOT_CONFIG_KEYS = ("eos_token", "sep_token")
# ... and, without a config, the first of these the vocabulary holds.
EOT_CANDIDATES = (EOT_TOKEN, "</s>", "<eos>", "[SEP]")


def vocabulary_file(kind: str) -> str:
    """The vocabulary file a saved folder of tokenizer `kind` (char, bpe, or a pretrained
    spec) holds beside META_FILE: the workflow declares both, so that they reach jobs
    that share no filesystem (S3 storage)."""
    return CHAR_FILE if kind == "char" else HF_FILE


class UnknownCharacterError(ValueError):
    """A character the char vocabulary does not hold."""

    def __init__(self, char: str, offset: int, vocab_chars: int):
        super().__init__(
            f"character {char!r} (U+{ord(char):04X}) at offset {offset} is not in the char "
            f"vocabulary ({vocab_chars} characters, built from the training text)"
        )
        self.char, self.offset = char, offset


class Tokenizer(abc.ABC):
    """What every kind provides; see the module docstring."""

    kind: str
    vocab_size: int
    eot_id: int
    eot_token: str
    file: str  # name of the vocabulary file in a saved folder
    # Whether a text cut before a space, tab, CR or LF that follows a non-space character
    # (a line break between such characters among them) encodes, piece by piece, to the
    # tokens of the whole text (prepare._text_pieces, the position split's streaming).
    splits_at_line_breaks: bool = True

    def encode(self, text: str) -> list[int]:
        return self.encode_batch([text])[0].tolist()

    @abc.abstractmethod
    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]: ...

    @abc.abstractmethod
    def decode(self, ids: Iterable[int]) -> str: ...

    @abc.abstractmethod
    def vocab_bytes(self) -> bytes:
        """The vocabulary file's bytes, exactly as `save` writes them."""

    @abc.abstractmethod
    def hf_tokenizer(self):
        """This vocabulary as a `tokenizers.Tokenizer` that encodes a text to the same
        ids as `encode` (no special-token template, no truncation or padding) and decodes
        them back: what `save_for_transformers` writes."""

    def save_for_transformers(self, folder: str | os.PathLike, max_length: int, bos_is_eot: bool = True) -> None:
        """tokenizer.json and tokenizer_config.json in `folder`, so that transformers'
        `AutoTokenizer.from_pretrained(folder)` encodes as this tokenizer does (with
        `add_special_tokens=False`, as the shards were made) and decodes the ids back;
        end-of-text is its eos token, and its bos token where a text begins after one in
        the training data (`bos_is_eot`), as in the exported model's config
        (hf_export.gpt2_config): a position split has none."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_open(folder / HF_FILE, "w", encoding="utf-8") as fh:
            fh.write(self.hf_tokenizer().to_str())
        write_json(folder / "tokenizer_config.json", {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "eos_token": self.eot_token,
            "bos_token": self.eot_token if bos_is_eot else None,
            "model_max_length": max_length,
            "clean_up_tokenization_spaces": False,
            # A special token written in a text is text, as in the shards (module docstring).
            "split_special_tokens": True,
        })

    def identity(self) -> dict:
        return {
            "kind": self.kind,
            "vocab_size": self.vocab_size,
            "eot_id": self.eot_id,
            "eot_token": self.eot_token,
            "file": self.file,
            "sha256": hashlib.sha256(self.vocab_bytes()).hexdigest(),
        }

    def save(self, folder: str | os.PathLike) -> dict:
        """Write the vocabulary file and `shardflow_tokenizer.json` into `folder`; return the identity."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        with atomic_open(folder / self.file, "wb") as fh:
            fh.write(self.vocab_bytes())
        ident = self.identity()
        write_json(folder / META_FILE, {"kind": self.kind, "eot_token": self.eot_token, "identity": ident})
        return ident


class CharTokenizer(Tokenizer):
    kind = "char"
    file = CHAR_FILE

    def __init__(self, chars: Iterable[str], eot_token: str = EOT_TOKEN):
        chars = sorted(set(chars))
        if not chars:
            raise ValueError("a char tokenizer needs at least one character (the training text is empty)")
        if any(len(c) != 1 for c in chars):
            raise ValueError("char vocabulary entries must be single characters")
        self.chars = chars
        # Sorted strings of one character sort by code point, so an id is the
        # position of its code point in this array: searchsorted encodes a whole text.
        self._codes = np.array([ord(c) for c in chars], dtype=np.uint32)
        self.vocab_size = len(chars) + 1
        self.eot_id = len(chars)
        self.eot_token = eot_token

    @classmethod
    def train(cls, texts: Iterable[str]) -> CharTokenizer:
        """The sorted distinct characters of `texts` (streamed; memory: the set of characters)."""
        seen: set[str] = set()
        for text in texts:
            seen.update(text)
        if not seen:
            raise ValueError("cannot build a char tokenizer: the training text is empty")
        return cls(seen)

    def _encode_array(self, text: str) -> np.ndarray:
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        ids = np.searchsorted(self._codes, codes)
        bad = ids >= len(self._codes)
        bad[~bad] = self._codes[ids[~bad]] != codes[~bad]
        if bad.any():
            at = int(np.argmax(bad))
            raise UnknownCharacterError(text[at], at, len(self.chars))
        return ids.astype(np.uint32)

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        return [self._encode_array(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        out = []
        for i in ids:
            i = int(i)
            if i == self.eot_id:
                out.append(self.eot_token)
            elif 0 <= i < self.eot_id:
                out.append(self.chars[i])
            else:
                raise ValueError(f"id {i} is outside the char vocabulary (size {self.vocab_size})")
        return "".join(out)

    def vocab_bytes(self) -> bytes:
        obj = {"format": CHAR_FORMAT, "chars": "".join(self.chars), "eot_token": self.eot_token}
        return (json.dumps(obj, ensure_ascii=True, sort_keys=True) + "\n").encode("ascii")

    def hf_tokenizer(self):
        """Every character its own word (a regex split that keeps each one), looked up in
        a word-level vocabulary of the characters; decoded by joining the pieces. A
        character outside the vocabulary is an error there too (no unknown token)."""
        from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
        from tokenizers import Tokenizer as HFTk

        vocab = {c: i for i, c in enumerate(self.chars)}
        vocab[self.eot_token] = self.eot_id
        tk = HFTk(models.WordLevel(vocab, unk_token=None))
        tk.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        tk.decoder = decoders.Fuse()
        tk.add_special_tokens([AddedToken(self.eot_token, special=True, normalized=False)])
        return tk

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> CharTokenizer:
        obj = json.loads(Path(path).read_text(encoding="ascii"))
        if obj.get("format") != CHAR_FORMAT:
            raise ValueError(
                f"{path}: not a char tokenizer file (format {obj.get('format')!r}, expected {CHAR_FORMAT!r})"
            )
        return cls(obj["chars"], obj["eot_token"])


class HFTokenizer(Tokenizer):
    """A Hugging Face `tokenizers` tokenizer: our trained bpe, or a pretrained one."""

    file = HF_FILE

    def __init__(self, tk, kind: str, eot_token: str, raw: bytes | None = None):
        tk.no_truncation()  # a pretrained file may carry a model's truncation/padding (MiniLM: 128)
        tk.no_padding()
        self._tk = tk
        self.kind = kind
        # Pretrained files are kept byte for byte (their identity is the source file's sha256).
        self._raw = raw if raw is not None else tk.to_str().encode("utf-8")
        eot = tk.token_to_id(eot_token)
        if eot is None:
            raise ValueError(f"end-of-text token {eot_token!r} is not in the tokenizer vocabulary")
        self.eot_token, self.eot_id = eot_token, eot
        self.vocab_size = _id_space(tk)
        unk = json.loads(self._raw).get("model", {}).get("unk_token")
        self.unk_id = tk.token_to_id(unk) if unk else None  # WordPiece's [UNK]; byte-level BPE has none
        tk.encode_special_tokens = True  # a literal "<|endoftext|>" in a document is text (module docstring)
        self.splits_at_line_breaks = _splits_at_line_breaks(json.loads(self._raw))

    def encode_batch(self, texts: Sequence[str]) -> list[np.ndarray]:
        # add_special_tokens=False: no [CLS]/[SEP] template; prepare adds end-of-text itself.
        encs = self._tk.encode_batch(list(texts), add_special_tokens=False)
        return [np.asarray(e.ids, dtype=np.uint32) for e in encs]

    def decode(self, ids: Iterable[int]) -> str:
        return self._tk.decode([int(i) for i in ids], skip_special_tokens=False)

    def vocab_bytes(self) -> bytes:
        return self._raw

    def hf_tokenizer(self):
        """The same file without what a pretrained one may carry for its own model: a
        special-token template ([CLS] ... [SEP]), truncation, padding."""
        from tokenizers import Tokenizer as HFTk

        obj = json.loads(self._raw)
        obj.update(post_processor=None, truncation=None, padding=None)
        return HFTk.from_str(json.dumps(obj))


def _id_space(tk) -> int:
    """The number of ids a model of this tokenizer needs: its largest id + 1. The model's
    embedding table and the shards' dtype are sized from it. `get_vocab_size` counts the
    tokens instead, which is smaller where the ids have holes (ids left unused, special
    tokens numbered after a gap): the embedding would lack rows for the highest ids, and
    training would fail on them (an IndexError on the CPU, a device assert on CUDA).
    Never below the count (tokens sharing an id), so a tokenizer without holes keeps the
    size it always had."""
    count = tk.get_vocab_size(with_added_tokens=True)
    return max(count, max(tk.get_vocab(with_added_tokens=True).values(), default=-1) + 1)


# Pre-tokenizers that end a word at every space, tab, CR and LF that follows a non-space
# character and add nothing at the start of a text, and normalizers that map characters
# one by one: with only these, tokens never span such a point, line breaks included
# (see Tokenizer.splits_at_line_breaks). Not SentencePiece's
# Metaspace (or a Prepend normalizer), which prefixes each encoded text with "▁" and
# keeps words across newlines, nor ByteLevel with add_prefix_space.
LINE_SAFE_PRE_TOKENIZERS = ("BertPreTokenizer", "Whitespace", "WhitespaceSplit")
LINE_SAFE_NORMALIZERS = ("BertNormalizer", "Lowercase", "NFC", "NFD", "NFKC", "NFKD", "StripAccents")


def _splits_at_line_breaks(obj: dict) -> bool:
    """Whether a Hugging Face tokenizer.json (`obj`) encodes a text cut at a line break as
    the whole text (byte-level BPE as GPT-2's, WordPiece as BERT's); unknown kinds: False."""

    def parts(node: dict | None) -> list[dict]:
        if node is None:
            return []
        if node.get("type") == "Sequence":
            return [q for sub in node.get("pretokenizers", node.get("normalizers", [])) for q in parts(sub)]
        return [node]

    def pre_safe(node: dict) -> bool:
        if node.get("type") == "ByteLevel":
            return node.get("use_regex", True) and not node.get("add_prefix_space", True)
        return node.get("type") in LINE_SAFE_PRE_TOKENIZERS

    pre = parts(obj.get("pre_tokenizer"))
    return (
        bool(pre)
        and all(pre_safe(q) for q in pre)
        and all(q.get("type") in LINE_SAFE_NORMALIZERS for q in parts(obj.get("normalizer")))
    )


def train_bpe(texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> HFTokenizer:
    """Byte-level BPE on streamed `texts` (the library keeps word counts, not the texts)."""
    from tokenizers import Tokenizer as HFTk
    from tokenizers import decoders, models, pre_tokenizers, trainers

    if vocab_size < 257:
        raise ValueError(f"bpe vocab_size {vocab_size} must be at least 257 (256 byte tokens + end-of-text)")
    tk = HFTk(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=[EOT_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    seen = [0]

    def counted() -> Iterator[str]:
        for t in texts:
            seen[0] += 1
            yield t

    tk.train_from_iterator(counted(), trainer=trainer)
    if seen[0] == 0:
        raise ValueError("cannot train a bpe tokenizer: the training text is empty")
    return HFTokenizer(tk, "bpe", EOT_TOKEN)


def _pretrained_eot(folder: Path | None, tk) -> str:
    if folder is not None:
        for name in EOT_CONFIG_FILES:
            path = folder / name
            if not path.is_file():
                continue
            cfg = json.loads(path.read_text(encoding="utf-8"))
            for key in EOT_CONFIG_KEYS:
                tok = cfg.get(key)
                tok = tok.get("content") if isinstance(tok, dict) else tok
                if isinstance(tok, str) and tk.token_to_id(tok) is not None:
                    return tok
    for tok in EOT_CANDIDATES:
        if tk.token_to_id(tok) is not None:
            return tok
    raise ValueError(
        "cannot tell this tokenizer's end-of-text token: no eos_token/sep_token in its "
        f"tokenizer_config.json and none of {EOT_CANDIDATES} in its vocabulary"
    )


def _pretrained_file(spec: str | os.PathLike) -> tuple[Path, Path, str | None]:
    """(folder, tokenizer.json, why it cannot be read or None) for a pretrained `spec`."""
    if str(spec) == "default":
        from shardflow.core.models import resolve_model

        spec = resolve_model("default")
    path = Path(os.path.expanduser(str(spec)))
    if path.is_dir():
        folder, file = path, path / HF_FILE
    else:
        folder, file = path.parent, path
    if not file.is_file():
        return folder, file, (
            f"no {file} (expected 'char', 'bpe', a tokenizer.json, or a model folder holding a tokenizer.json)"
        )
    return folder, file, None


def pretrained_files(spec: str) -> list[str]:
    """The files load_pretrained reads for the pretrained tokenizer `spec`, as its job's
    declared inputs (so an edit reruns the copy and every job after it): the
    tokenizer.json, named even where it is missing (Snakemake then names it), and those of
    EOT_CONFIG_FILES beside it that exist."""
    folder, file, _ = _pretrained_file(spec)
    return [str(file), *(str(folder / name) for name in EOT_CONFIG_FILES if (folder / name).is_file())]


def pretrained_unavailable(spec: str) -> str | None:
    """Why the pretrained tokenizer `spec` (shards.tokenizer) cannot be read here, or None."""
    return _pretrained_file(spec)[2]


def load_pretrained(spec: str | os.PathLike) -> HFTokenizer:
    """A `tokenizer.json` file, a folder holding one, or "default" (the bundled MiniLM)."""
    from tokenizers import Tokenizer as HFTk

    folder, file, missing = _pretrained_file(spec)
    if missing:
        raise FileNotFoundError(f"tokenizer {str(spec)!r}: {missing}")
    raw = file.read_bytes()
    tk = HFTk.from_str(raw.decode("utf-8"))
    return HFTokenizer(tk, "pretrained", _pretrained_eot(folder, tk), raw=raw)


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Read a folder written by `Tokenizer.save` (or any pretrained tokenizer.json/folder)."""
    path = Path(path)
    meta_path = path / META_FILE
    if not meta_path.is_file():
        return load_pretrained(path)
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta["kind"] == "char":
        tok: Tokenizer = CharTokenizer.from_file(path / CHAR_FILE)
    else:
        from tokenizers import Tokenizer as HFTk

        raw = (path / HF_FILE).read_bytes()
        tok = HFTokenizer(HFTk.from_str(raw.decode("utf-8")), meta["kind"], meta["eot_token"], raw=raw)
    recorded, now = meta.get("identity"), tok.identity()
    if recorded and recorded != now:
        # Named key by key: a folder saved before vocab_size counted the largest id
        # (_id_space) differs only in vocab_size.
        differing = "; ".join(
            f"{k}: recorded {recorded.get(k)!r}, now {now.get(k)!r}"
            for k in sorted(set(recorded) | set(now))
            if recorded.get(k) != now.get(k)
        )
        raise ValueError(
            f"{path}: the tokenizer files do not match the identity recorded in {META_FILE} ({differing}); "
            "make the tokenizer again (snakemake -R train_tokenizer)"
        )
    return tok


def copy_saved(src: str | os.PathLike, dst: str | os.PathLike) -> None:
    """Copy a saved tokenizer folder's two files (beside shards), atomically each."""
    src, dst = Path(src), Path(dst)
    meta = json.loads((src / META_FILE).read_text(encoding="utf-8"))
    for name in (vocabulary_file(meta["kind"]), META_FILE):
        with atomic_path(dst / name) as tmp:
            shutil.copyfile(src / name, tmp)

"""Opening input files: gzip is recognised by its magic bytes, not its name.

So `corpus.jsonl.gz`, an MS MARCO `collection.tsv` that was gzipped without
renaming, and a plain file all open the same way. JSON files are read by `read_json`,
whose errors name the file, line and column; JSON-lines files the workflow writes (a
tokenized chunk's sidecar, a summaries file) by `iter_json_lines`, whose errors name the
file and line.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import Iterator
from typing import IO, Any

GZIP_MAGIC = b"\x1f\x8b"
# Names that say gzip. Not how a file is opened (its magic bytes decide): the split sizes
# disk by them (workflow.disk), and the corpus readers take a file so named that ends
# before the magic is whole (0 bytes, or 1F alone) for a gzip stream cut short.
GZIP_SUFFIXES = (".gz", ".gzip")


def open_binary(path: str | os.PathLike) -> IO[bytes]:
    """Open a file for reading bytes, gunzipping it when it starts with the gzip magic."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == GZIP_MAGIC else open(path, "rb")


def cut_short(exc: json.JSONDecodeError) -> bool:
    """Whether the text ends (white space aside) where json found it bad: a value cut
    short. json then places the error after the text's final newline, if it has one, at
    column 1 of a line that holds nothing."""
    return bool(exc.doc.strip()) and not exc.doc[exc.pos :].strip()


class NestedTooDeep(json.JSONDecodeError):
    """A JSON text nested deeper than json can decode: where is not known, so no column."""


def loads_json(text: str, **kwargs: Any) -> Any:
    """`json.loads(text, **kwargs)`, with a text nested too deeply for it (`"[" * 100000`)
    raised as a JSONDecodeError, as any other bad JSON is, so the readers of user lines
    name its file and line: json decodes arrays and objects by recursion, and there raises
    a bare RecursionError, which names neither."""
    try:
        return json.loads(text, **kwargs)
    except RecursionError:
        reason = "arrays or objects nested deeper than Python's recursion limit lets json read"
        raise NestedTooDeep(reason, text, 0) from None


def malformed_json(exc: json.JSONDecodeError, unit: str = "line") -> str:
    """A bad JSON text's reason, with its column, or "at the end of the line" (`unit`) for
    a text cut short (json's own message may end in " at": "Invalid control character
    at")."""
    if isinstance(exc, NestedTooDeep):
        return f"malformed JSON ({exc.msg})"
    where = f"the end of the {unit}" if cut_short(exc) else f"column {exc.colno}"
    return f"malformed JSON ({exc.msg.removesuffix(' at')} at {where})"


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file's content (UTF-8); invalid JSON raises ValueError naming the file and
    line (json's own error names neither): for a file cut short, its last line that is not
    blank. So do bytes that are not UTF-8 (a config saved in Latin-1 or UTF-16), with
    their offset in the file."""
    with open(path, encoding="utf-8") as fh:
        try:
            return json.load(fh)
        except json.JSONDecodeError as exc:
            line = exc.doc.count("\n", 0, len(exc.doc.rstrip())) + 1 if cut_short(exc) else exc.lineno
            raise ValueError(f"{os.fspath(path)}:{line}: {malformed_json(exc, 'file')}") from None
        except UnicodeDecodeError as exc:  # json.load reads the whole file: exc.object is its bytes
            line = exc.object.count(b"\n", 0, exc.start) + 1
            raise ValueError(
                f"{os.fspath(path)}:{line}: invalid UTF-8 at byte {exc.start} of the file ({exc.reason})"
            ) from None


def iter_json_lines(path: str | os.PathLike, error: type[ValueError] = ValueError) -> Iterator[tuple[int, dict]]:
    """(line number, object) for each line of a JSON-lines file the workflow wrote. A line
    that is not UTF-8, not JSON (cut short, overwritten) or not an object raises `error`
    naming the file and line: json's and the codec's own errors name neither. A blank
    line is bad too, since the workflow writes none."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            try:
                obj = json.loads(raw.decode("utf-8"))
            except UnicodeDecodeError as exc:
                raise error(f"{os.fspath(path)}:{lineno}: invalid UTF-8 at byte {exc.start} of the line") from None
            except json.JSONDecodeError as exc:
                raise error(f"{os.fspath(path)}:{lineno}: {malformed_json(exc)}") from None
            if not isinstance(obj, dict):
                raise error(f"{os.fspath(path)}:{lineno}: JSON value is {type(obj).__name__}, not an object")
            yield lineno, obj

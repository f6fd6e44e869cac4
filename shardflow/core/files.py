"""Opening input files: gzip is recognised by its magic bytes, not its name.

So `corpus.jsonl.gz`, an MS MARCO `collection.tsv` that was gzipped without
renaming, and a plain file all open the same way. JSON files are read by `read_json`,
whose errors name the file, line and column.
"""

from __future__ import annotations

import gzip
import json
import os
from typing import IO, Any

GZIP_MAGIC = b"\x1f\x8b"


def open_binary(path: str | os.PathLike) -> IO[bytes]:
    """Open a file for reading bytes, gunzipping it when it starts with the gzip magic."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == GZIP_MAGIC else open(path, "rb")


def malformed_json(exc: json.JSONDecodeError) -> str:
    """A bad JSON text's reason, with its column (json's own message may end in " at":
    "Invalid control character at")."""
    return f"malformed JSON ({exc.msg.removesuffix(' at')} at column {exc.colno})"


def read_json(path: str | os.PathLike) -> Any:
    """A JSON file's content (UTF-8); invalid JSON raises ValueError naming the file and
    line (json's own error names neither)."""
    with open(path, encoding="utf-8") as fh:
        try:
            return json.load(fh)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{os.fspath(path)}:{exc.lineno}: {malformed_json(exc)}") from None

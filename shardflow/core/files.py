"""Opening input files: gzip is recognised by its magic bytes, not its name.

So `corpus.jsonl.gz`, an MS MARCO `collection.tsv` that was gzipped without
renaming, and a plain file all open the same way.
"""

from __future__ import annotations

import gzip
import os
from typing import IO

GZIP_MAGIC = b"\x1f\x8b"


def open_binary(path: str | os.PathLike) -> IO[bytes]:
    """Open a file for reading bytes, gunzipping it when it starts with the gzip magic."""
    with open(path, "rb") as fh:
        magic = fh.read(2)
    return gzip.open(path, "rb") if magic == GZIP_MAGIC else open(path, "rb")

"""Values the workflow derives from large input files when it is parsed, kept between parses.

Every Snakemake invocation parses the workflow again, and so does every job on a
cluster (a SLURM job, a Kubernetes pod). What the parse reads from a data set (a
corpus's record count for `n_chunks: auto`, the judged query ids of a qrels file)
would be read again each time: seconds per parse for corpora and qrels of millions of
lines. `cached(name, paths, extra, compute)` stores each value in
`.snakemake/shardflow/<name>.json` under the working directory, keyed by the files'
paths, sizes and modification times and by `extra`: a changed file is read again.
Concurrent parses may each compute a value; the file is replaced atomically, and a
lost entry is computed at the next parse. Keeping is best effort: where the file cannot
be written (a read-only working directory, a full disk), the value is computed anew at
each parse, never replaced by an error.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from shardflow.core.atomic import tmp_path
from shardflow.core.hashing import file_version

FOLDER = ".snakemake/shardflow"


def cache_file(name: str) -> Path:
    """Where values of kind `name` are kept (relative to the working directory)."""
    return Path(FOLDER) / f"{name}.json"


def cached(name: str, paths: Iterable[str], extra: Any, compute: Callable[[], Any]) -> Any:
    """compute(), or the value it gave for the same files (path, size, mtime) and `extra`
    (JSON: what else the value depends on). The value must be JSON too."""
    key = json.dumps([file_version(p) for p in paths] + [extra], sort_keys=True)
    path = cache_file(name)
    try:
        cache = json.loads(path.read_text())
        if not isinstance(cache, dict):
            cache = {}
    except (OSError, ValueError):
        cache = {}
    if key not in cache:
        cache[key] = compute()
        tmp = tmp_path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(cache))
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                tmp.unlink()
    return cache[key]

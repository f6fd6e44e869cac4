"""Values the workflow derives from large input files when it is parsed, kept between parses.

Every Snakemake invocation parses the workflow again, and so does every job on a
cluster (a SLURM job, a Kubernetes pod). What the parse reads from a data set (a
corpus's record count for `n_chunks: auto`, the judged query ids of a qrels file)
would be read again each time: seconds per parse for corpora and qrels of millions of
lines. `cached(name, paths, extra, compute)` stores each value in
`.snakemake/shardflow/<name>.json` under the working directory, keyed by the files'
paths, sizes and modification times and by `extra`: a changed file is read again. A
value is kept only where its files (and `extra`, where it is read from files) are the
same after computing it as before: one computed while they changed is of neither
version.
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
    (JSON: what else the value depends on). The value must be JSON too. `extra` may be a
    function that reads it (the state of a model's files, hashing.model_files_state).

    The files, and such an `extra`, are read again after compute, and the value kept only
    where they read as before. One computed while they changed (a corpus rewritten while
    it was counted, a model swapped while it was hashed, which takes minutes for a large
    one) is of neither version: kept against the first, it was taken for that version
    once it was back (a link to the model put back), at every later parse. It is
    returned unkept; the next parse computes it again."""
    paths = list(paths)
    read = extra if callable(extra) else lambda: extra

    def version() -> str:
        return json.dumps([file_version(p) for p in paths] + [read()], sort_keys=True)

    key = version()
    path = cache_file(name)
    try:
        cache = json.loads(path.read_text())
        if not isinstance(cache, dict):
            cache = {}
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return cache[key]
    value = compute()
    try:
        settled = version() == key
    except OSError:  # a file gone since: the next parse names it
        settled = False
    if not settled:
        return value
    cache[key] = value
    tmp = tmp_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(cache))
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
    return value

"""merge_summaries: the chunks' summaries files into one, in chunk order, checked.

Chunk order is corpus order, except with `chunking.group_by` (whole groups are placed
on chunks largest first; each keeps its records' corpus order).

Like embedding's merge + verify in one streaming pass: every record has its
fields, ids are unique across the corpus, and the count equals the records the
split read (its manifest). A failed check stops the run with the list of what
failed; nothing is written then.
"""

from __future__ import annotations

import logging
import os
import shutil

from shardflow.core.atomic import atomic_open
from shardflow.core.columns import duplicate_ids
from shardflow.summarise.records import iter_summaries

log = logging.getLogger(__name__)


class SummariesCheckError(RuntimeError):
    """The merged summaries are incomplete or inconsistent (lists every failed check)."""


def merge_summaries(parts: list[str], out_path: str | os.PathLike, expected_records: int) -> dict:
    """Concatenate `parts` into `out_path` after checking them; return the checks."""

    def id_batches():
        for path in parts:
            yield [rec["id"] for rec in iter_summaries(path)]

    n, duplicates = duplicate_ids(id_batches)  # also validates every record's fields
    checks = {
        "count": {"ok": n == expected_records, "records": n, "expected": expected_records},
        "ids_unique": {"ok": not duplicates, "duplicates": len(duplicates), "examples": duplicates[:10]},
    }
    failed = [name for name, c in checks.items() if not c["ok"]]
    if failed:
        lines = [f"  - {name}: {checks[name]}" for name in failed]
        raise SummariesCheckError(f"summaries of {len(parts)} chunks failed checks:\n" + "\n".join(lines))
    with atomic_open(out_path, "wb") as out:
        for path in parts:
            with open(path, "rb") as fh:
                shutil.copyfileobj(fh, out, 1 << 22)
                # A part whose last line lacks its newline (cut short, or written by hand) read
                # as whole records above; copied as it is, the next part's first record would
                # share its line. The workflow's own parts all end in one: their bytes are kept.
                if fh.tell():
                    fh.seek(-1, os.SEEK_END)
                    if fh.read(1) != b"\n":
                        out.write(b"\n")
    log.info("merged %d summaries from %d chunks into %s", n, len(parts), out_path)
    return {"ok": True, "records": n, "chunks": len(parts), "checks": checks}

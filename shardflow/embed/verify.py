"""Check the merged embeddings before anything downstream trusts them.

Count equals the records the split read, dimension equals the model's, every
value is finite, norms are 1 within tolerance when the model normalises (else no row
is all zeros), ids are unique. The result is a JSON-able dict; `VerificationError`
carries a message listing every failed check.

Norms are computed in float64: a finite float32 vector of huge values (about 3e38)
has a norm past float32's largest, which float32 arithmetic makes inf (and the
histogram's range with it). In float64 it is a finite number, judged like any other:
outside the tolerance when the model normalises, as the norms check's first_row says.

A row of zeros is no embedding: its cosine to anything is undefined (retrieval scores it
0, so the document is never found), and a row left unwritten can look like one (a large
fresh buffer is zeros). Where the model normalises, its norm 0 fails the norms check;
where it does not, the `nonzero` check names such rows, which no other check sees. A
correct run has none: the one input that pools to zeros (or NaN), a text that leaves no
token to pool, stops its embed job naming the record (engine.EmptyTextError).

A failed finite, norms or nonzero check names its first row and that row's id
(`first_id`, from ids.parquet; null where the file has no such row): a row number of a
matrix of millions is no record a user can look up. A passing record has no `first_id`.

Given the split manifest's chunks (their `items` and `path`, in chunk order, the order
merge concatenates them in), such a check names its first row's chunk too
(`first_chunk`): its index, its rows in the matrix (first and last, 0-based), its file and
the row's line there (1-based: an embed job embeds every line of its chunk file, in
order, one row a line: corpus.chunks.read_chunk, engine.Encoder.encode), and, given the
pattern of the embed jobs' logs, the log of the job that made the row. Where the matrix
holds other than the chunks' rows (the count check fails), which chunk is off is not
known, and none is named.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow.parquet as pq

from shardflow.core.columns import duplicate_ids, id_at
from shardflow.core.fields import check_field_types, whole_floats_as_ints
from shardflow.core.npyio import iter_row_blocks, read_header, rows_per_block


class VerificationError(RuntimeError):
    pass


# The numbers verification.json holds, nested keys joined with "." as a reproduction names
# them (reproduce.expect.metrics, checked when the workflow parses: workflow.plan). The
# record is written only when every check passed, so each check's first_row is null there
# and its ok a boolean: no value a reproduction can compare. The norms check is the
# record's where the model normalises, the nonzero check where not. Kept beside
# verify_embeddings, which writes them (tests/unit/embed/test_verify.py ties the two).
RECORD_METRICS = (
    "rows", "dim", "norm_min", "norm_max", "checks.count.expected", "checks.count.got", "checks.dimension.expected",
    "checks.dimension.got", "checks.finite.rows_with_non_finite", "checks.ids_match_rows.ids",
    "checks.ids_match_rows.rows", "checks.ids_unique.duplicates",
)  # fmt: skip
NORMS_METRICS = ("checks.norms.tolerance", "checks.norms.rows_outside")
NONZERO_METRICS = ("checks.nonzero.rows_all_zero",)


def record_metrics(normalized: bool | None) -> tuple[str, ...]:
    """The names of RECORD_METRICS and those of the check a model that normalises
    (`normalized`) or does not gets; both checks' where that is not known (None)."""
    checks = {True: NORMS_METRICS, False: NONZERO_METRICS, None: NORMS_METRICS + NONZERO_METRICS}[normalized]
    return RECORD_METRICS + checks


@dataclass(frozen=True)
class VerifyParams:
    expected_records: int
    expected_dim: int
    normalized: bool
    norm_tolerance: float = 1e-3
    block_rows: int | None = None  # None: about 4 MiB of vectors a block
    id_batch: int = 65536

    def __post_init__(self) -> None:
        whole_floats_as_ints(self)  # 5000.0 (JSON Schema's "integer" takes it) is 5000
        check_field_types(self)
        # 1 or more passed a normalising model's zero row (its norm 0 is within 1 of 1, and
        # the nonzero check runs only where the model does not normalise); 0 fails every row.
        if not 0 < self.norm_tolerance < 1:
            raise ValueError(f"norm_tolerance {self.norm_tolerance!r}: expected a number above 0 and below 1")


def _id_batches(ids_path: str, block_rows: int):
    """A factory of the id column's batches (duplicate_ids reads it twice at most)."""

    def batches():
        for batch in pq.ParquetFile(ids_path).iter_batches(columns=["id"], batch_size=block_rows):
            yield batch.column(0).to_pylist()

    return batches


def _histogram(norms: np.ndarray, bins: int = 60) -> dict:
    """Counts over [min, max] of the norms (widened when they are all equal)."""
    if norms.size == 0:
        return {"edges": [0.0, 1.0, bins], "counts": [0] * bins}
    norms = norms.astype(np.float64, copy=False)  # verify's are: no copy of 8 bytes a row
    lo, hi = float(norms.min()), float(norms.max())
    pad = max((hi - lo) * 0.05, 1e-6 * max(1.0, abs(hi)))
    counts, _ = np.histogram(norms, bins=bins, range=(lo - pad, hi + pad))
    return {"edges": [lo - pad, hi + pad, bins], "counts": counts.tolist()}


def _row_chunk(row: int, chunks: list[dict], embed_log: str | None) -> dict | None:
    """Where row `row` of the merged matrix came from, by the manifest's `chunks`."""
    start = 0
    for i, entry in enumerate(chunks):
        end = start + entry["items"]
        if row < end:
            where = {"chunk": i, "rows": [start, end - 1], "path": entry["path"], "line": row - start + 1}
            if embed_log is not None:
                where["embed_log"] = embed_log.format(chunk=i)
            return where
        start = end
    return None


def verify_embeddings(
    npy_path: str, ids_path: str, params: VerifyParams, chunks: list[dict] | None = None, embed_log: str | None = None
) -> dict:
    """`chunks`: the split manifest's, to name a failed row's chunk; `embed_log`: the embed
    jobs' log, `{chunk}` standing for the chunk's index (see the module docstring)."""
    shape, dtype, _, _ = read_header(npy_path)
    checks: dict[str, dict] = {}
    rows = shape[0] if len(shape) == 2 else -1
    dim = shape[1] if len(shape) == 2 else -1
    checks["count"] = {"ok": rows == params.expected_records, "expected": params.expected_records, "got": rows}
    checks["dimension"] = {"ok": dim == params.expected_dim, "expected": params.expected_dim, "got": dim}

    non_finite = 0
    first_bad = None
    norms_min, norms_max, bad_norm_rows, first_bad_norm = np.inf, -np.inf, 0, None
    zero_rows, first_zero = 0, None
    # 8 bytes a row, for a histogram over the actual range, in one array (a list of blocks
    # is joined into a second copy), drawn and freed before the id check, which holds 8
    # bytes a row of its own (16 while it joins them): the two never add up.
    all_norms = np.empty(max(rows, 0), dtype=np.float64)
    block_rows = params.block_rows or rows_per_block(max(dim, 1), dtype)
    blocks = iter_row_blocks(npy_path, block_rows) if rows > 0 else ()
    for start, block in zip(range(0, max(rows, 0), block_rows), blocks, strict=True):
        block = block.astype(np.float64)  # see the module docstring: float32 squares overflow
        finite = np.isfinite(block).all(axis=1)
        if not finite.all():
            non_finite += int((~finite).sum())
            first_bad = first_bad if first_bad is not None else start + int(np.argmin(finite))
        norms = np.linalg.norm(np.where(np.isfinite(block), block, 0.0), axis=1)
        norms_min, norms_max = min(norms_min, float(norms.min())), max(norms_max, float(norms.max()))
        all_norms[start : start + len(norms)] = norms
        if params.normalized:
            off = np.abs(norms - 1.0) > params.norm_tolerance
            if off.any():
                bad_norm_rows += int(off.sum())
                first_bad_norm = first_bad_norm if first_bad_norm is not None else start + int(np.argmax(off))
        else:
            zero = ~block.any(axis=1)  # NaN counts as non-zero: a NaN row is the finite check's
            if zero.any():
                zero_rows += int(zero.sum())
                first_zero = first_zero if first_zero is not None else start + int(np.argmax(zero))
    checks["finite"] = {"ok": non_finite == 0, "rows_with_non_finite": non_finite, "first_row": first_bad}
    if params.normalized:
        checks["norms"] = {
            "ok": bad_norm_rows == 0,
            "tolerance": params.norm_tolerance,
            "rows_outside": bad_norm_rows,
            "first_row": first_bad_norm,
        }
    else:
        checks["nonzero"] = {"ok": zero_rows == 0, "rows_all_zero": zero_rows, "first_row": first_zero}
    histogram = _histogram(all_norms)
    del all_norms
    n_ids, dups = duplicate_ids(_id_batches(ids_path, params.id_batch))
    located = chunks is not None and sum(entry["items"] for entry in chunks) == rows
    for check in ("finite", "norms", "nonzero"):  # a failed one: the record its first row is
        if checks.get(check, {}).get("first_row") is not None:
            checks[check]["first_id"] = id_at(ids_path, checks[check]["first_row"])
            where = _row_chunk(checks[check]["first_row"], chunks, embed_log) if located else None
            if where is not None:
                checks[check]["first_chunk"] = where
    checks["ids_match_rows"] = {"ok": n_ids == rows, "ids": n_ids, "rows": rows}
    checks["ids_unique"] = {"ok": not dups, "duplicates": len(dups), "examples": dups[:10]}
    result = {
        "ok": all(c["ok"] for c in checks.values()),
        "rows": rows,
        "dim": dim,
        "dtype": str(dtype),
        "norm_min": None if rows <= 0 else norms_min,
        "norm_max": None if rows <= 0 else norms_max,
        "norm_histogram": histogram,
        "checks": checks,
    }
    return result


def failure_message(result: dict, path: str) -> str:
    lines = [f"verification of {path} failed:"]
    for name, c in result["checks"].items():
        if not c["ok"]:
            # an id in quotes: one holding a comma or a space still reads as one value
            detail = ", ".join(
                f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}"
                for k, v in c.items()
                if k not in ("ok", "first_chunk")
            )
            lines.append(f"  - {name}: {detail}")
            if where := c.get("first_chunk"):
                log = f", embed job log {where['embed_log']}" if "embed_log" in where else ""
                first, last = where["rows"]
                lines.append(
                    f"      from chunk {where['chunk']} (rows {first}..{last}): {where['path']}:{where['line']}{log}"
                )
    return "\n".join(lines)

"""verify: each check fails on its own fault, and the message names it."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardflow.core.atomic import write_json
from shardflow.embed.verify import VerifyParams, failure_message, record_metrics, verify_embeddings

ROWS, DIM = 50, 8
ALL_CHECKS = {"count", "dimension", "finite", "norms", "ids_match_rows", "ids_unique"}


def unit_rows(rows: int = ROWS, dim: int = DIM, seed: int = 0) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(rows, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def write(tmp_path: Path, emb: np.ndarray, ids: list[str]) -> tuple[str, str]:
    npy, idp = tmp_path / "embeddings.npy", tmp_path / "ids.parquet"
    np.save(npy, emb)
    pq.write_table(pa.table({"id": pa.array(ids, pa.string())}), idp)
    return str(npy), str(idp)


def params(**over) -> VerifyParams:
    return VerifyParams(**{"expected_records": ROWS, "expected_dim": DIM, "normalized": True, **over})


def verify(tmp_path, emb=None, ids=None, **over) -> dict:
    emb = unit_rows() if emb is None else emb
    ids = [f"id{i}" for i in range(len(emb))] if ids is None else ids
    return verify_embeddings(*write(tmp_path, emb, ids), params(**over))


def failed(result: dict) -> set[str]:
    return {name for name, c in result["checks"].items() if not c["ok"]}


def test_good_matrix_passes(tmp_path):
    result = verify(tmp_path)
    assert result["ok"] and failed(result) == set()
    assert set(result["checks"]) == ALL_CHECKS
    assert (result["rows"], result["dim"], result["dtype"]) == (ROWS, DIM, "float32")
    assert result["norm_min"] == pytest.approx(1, abs=1e-5) and result["norm_max"] == pytest.approx(1, abs=1e-5)
    assert sum(result["norm_histogram"]["counts"]) == ROWS


def test_good_float16_matrix_passes(tmp_path):
    assert verify(tmp_path, unit_rows(dim=384).astype(np.float16), expected_dim=384)["ok"]


def with_nan(row: int) -> np.ndarray:
    emb = unit_rows()
    emb[row, 2] = np.nan
    return emb


def with_long_row(row: int) -> np.ndarray:
    emb = unit_rows()
    emb[row] *= 1.01
    return emb


FAULTS = {
    "count": lambda tmp: verify(tmp, expected_records=ROWS + 1),
    "dimension": lambda tmp: verify(tmp, expected_dim=DIM * 2),
    "finite": lambda tmp: verify(tmp, with_nan(7)),
    "norms": lambda tmp: verify(tmp, with_long_row(11)),
    "ids_unique": lambda tmp: verify(tmp, ids=[f"id{i}" for i in range(ROWS - 1)] + ["id3"]),
    "ids_match_rows": lambda tmp: verify(tmp, ids=[f"id{i}" for i in range(ROWS - 1)]),
}


@pytest.mark.parametrize("check", FAULTS)
def test_each_fault_fails_only_its_check(tmp_path, check):
    result = FAULTS[check](tmp_path)
    assert not result["ok"]
    # A NaN row also has a wrong norm; every other fault flips exactly one check.
    expected = {"finite", "norms"} if check == "finite" else {check}
    assert failed(result) == expected


@pytest.mark.parametrize("check", FAULTS)
def test_failure_message_names_the_failed_check(tmp_path, check):
    result = FAULTS[check](tmp_path)
    message = failure_message(result, "results/x/embeddings.npy")
    assert message.startswith("verification of results/x/embeddings.npy failed:")
    assert f"  - {check}:" in message
    for other in ALL_CHECKS - failed(result):
        assert f"- {other}:" not in message


def test_non_finite_reports_the_first_bad_row_across_blocks(tmp_path):
    emb = unit_rows()
    emb[23, 0] = np.inf
    emb[41, 1] = np.nan
    check = verify(tmp_path, emb, block_rows=10)["checks"]["finite"]
    assert (check["rows_with_non_finite"], check["first_row"]) == (2, 23)


def test_norms_report_rows_outside_the_tolerance(tmp_path):
    emb = unit_rows()
    emb[30] *= 1.0005  # inside 1e-3
    emb[12] *= 0.99
    emb[45] *= 1.02
    check = verify(tmp_path, emb, block_rows=16)["checks"]["norms"]
    assert (check["rows_outside"], check["first_row"]) == (2, 12)


# Finite in float32 (whose largest is about 3.4e38), but not its square, nor the norm of
# a row of them (about 8.5e38 in DIM=8): verify computes norms in float64.
HUGE = 3e38


@pytest.mark.filterwarnings("error::RuntimeWarning")  # no overflow on the way either
def test_a_huge_finite_row_fails_the_norms_check_naming_its_row(tmp_path):
    """Such a row crashed verify (float32 norm inf, then an infinite histogram range);
    it is a long row like any other: the norms check names it, and the failed result
    is strict JSON (what the rule writes to failed.json)."""
    emb = unit_rows()
    emb[17] = HUGE
    result = verify(tmp_path, emb, block_rows=10)
    assert failed(result) == {"norms"}
    check = result["checks"]["norms"]
    assert (check["rows_outside"], check["first_row"]) == (1, 17)
    assert result["norm_max"] == pytest.approx(HUGE * np.sqrt(DIM), rel=1e-6)
    assert sum(result["norm_histogram"]["counts"]) == ROWS
    assert "  - norms: tolerance=0.001, rows_outside=1, first_row=17" in failure_message(result, "e.npy")
    write_json(tmp_path / "failed.json", result)


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_huge_finite_row_of_an_unnormalised_model_passes_with_its_norm(tmp_path):
    emb = unit_rows()
    emb[17] = HUGE
    result = verify(tmp_path, emb, normalized=False)
    assert result["ok"] and result["norm_max"] == pytest.approx(HUGE * np.sqrt(DIM), rel=1e-6)


def test_norms_are_not_checked_for_unnormalised_models(tmp_path):
    result = verify(tmp_path, unit_rows() * 3, normalized=False)
    assert result["ok"] and "norms" not in result["checks"] and result["checks"]["nonzero"]["ok"]
    assert result["norm_min"] == pytest.approx(3, rel=1e-5)


def test_a_zero_row_of_an_unnormalised_model_fails_naming_its_row(tmp_path):
    """A row of zeros (a row never written, or no embedding at all: its cosine is
    undefined) passed where the model does not normalise: no check looked at it."""
    emb = unit_rows() * 3
    emb[23] = 0
    emb[41] = -0.0
    result = verify(tmp_path, emb, normalized=False, block_rows=10)
    assert failed(result) == {"nonzero"}
    assert result["checks"]["nonzero"] == {"ok": False, "rows_all_zero": 2, "first_row": 23, "first_id": "id23"}
    assert "  - nonzero: rows_all_zero=2, first_row=23" in failure_message(result, "e.npy")


def test_a_zero_row_of_a_normalised_model_fails_the_norms_check(tmp_path):
    emb = unit_rows()
    emb[5] = 0
    result = verify(tmp_path, emb)
    assert failed(result) == {"norms"} and "nonzero" not in result["checks"]
    assert (result["checks"]["norms"]["first_row"], result["norm_min"]) == (5, 0.0)


def test_a_nan_row_of_an_unnormalised_model_is_not_a_zero_row(tmp_path):
    emb = unit_rows()
    emb[7] = 0
    emb[7, 3] = np.nan
    result = verify(tmp_path, emb, normalized=False)
    assert failed(result) == {"finite"} and result["checks"]["nonzero"]["rows_all_zero"] == 0


def test_peak_memory_is_16_bytes_a_row_not_32(tmp_path):
    """verify held the norms (8 bytes a row, and a joined copy at the end) through the id
    check, whose hashes sat beside their sorted copy and the batches' arrays: 32 bytes a
    row at the peak, 3.2 GB for 100 M rows (a 4 GB pod's limit, with the rest). The
    norms are one array, freed before the id check, which sorts in place: 16 at the peak,
    while the id batches' hashes are joined."""
    rows = 300_000  # the histogram's blocks (65,536 rows) hold a few MB whatever the size
    npy, idp = write(tmp_path, np.ones((rows, 1), dtype=np.float32), [f"id{i}" for i in range(rows)])
    tracemalloc.start()
    try:
        result = verify_embeddings(
            npy, idp, params(expected_records=rows, expected_dim=1, block_rows=500, id_batch=500)
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result["ok"]
    assert peak / rows < 20, peak  # 32.6 before


def test_duplicates_are_listed(tmp_path):
    ids = [f"id{i}" for i in range(ROWS - 3)] + ["id5", "id5", "id9"]
    check = verify(tmp_path, ids=ids, block_rows=7)["checks"]["ids_unique"]
    assert (check["duplicates"], check["examples"]) == (2, ["id5", "id9"])


def test_non_matrix_fails_count_and_dimension(tmp_path):
    result = verify(tmp_path, np.ones(ROWS, dtype=np.float32), ids=[f"id{i}" for i in range(ROWS)])
    assert {"count", "dimension", "ids_match_rows"} <= failed(result)


def test_failure_message_of_a_passing_result_lists_nothing(tmp_path):
    assert failure_message(verify(tmp_path), "e.npy") == "verification of e.npy failed:"


def numbers_and_nulls(record: dict, prefix: str = "") -> tuple[set[str], set[str]]:
    """The keys a record holds a number at, and those it holds null at, nested keys joined by '.'."""
    numbers, nulls = set(), set()
    for key, value in record.items():
        if isinstance(value, dict):
            inner = numbers_and_nulls(value, f"{prefix}{key}.")
            numbers, nulls = numbers | inner[0], nulls | inner[1]
        elif value is None:
            nulls.add(f"{prefix}{key}")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            numbers.add(f"{prefix}{key}")
    return numbers, nulls


@pytest.mark.parametrize("normalized", [True, False])
def test_record_metrics_are_the_numbers_a_passing_record_holds(tmp_path, normalized):
    """A reproduction's metric names for verification.json are checked against
    record_metrics when the workflow parses (workflow.plan): a value the writer adds,
    renames or drops fails here. The record is written only when it passes, so each
    check's first_row is null there: no value a reproduction can compare."""
    numbers, nulls = numbers_and_nulls(verify(tmp_path, normalized=normalized))
    assert numbers == set(record_metrics(normalized))
    assert nulls and all(name.endswith(".first_row") for name in nulls)
    assert set(record_metrics(None)) == set(record_metrics(True)) | set(record_metrics(False))


@pytest.mark.parametrize(
    ("over", "message"),
    [  # one case a field; each was accepted, and a count of "10" failed verification as a mismatch
        ({"expected_records": "10"}, "expected_records '10': expected an integer"),
        ({"expected_dim": None}, "expected_dim None: expected an integer"),
        ({"normalized": 1}, "normalized 1: expected a bool"),
        ({"norm_tolerance": "1e-3"}, "norm_tolerance '1e-3': expected a number"),
        ({"block_rows": True}, "block_rows True: expected an integer or None"),
        ({"id_batch": 100.5}, "id_batch 100.5: expected an integer"),
    ],
)
def test_a_wrong_python_type_is_one_error_naming_the_field(over, message):
    with pytest.raises(TypeError) as info:
        params(**over)
    assert str(info.value) == message


def test_whole_floats_are_ints():
    p = params(expected_records=10.0, id_batch=500.0)
    assert [(v, type(v)) for v in (p.expected_records, p.id_batch)] == [(10, int), (500, int)]


@pytest.mark.parametrize("tolerance", [1.0, 2.5, 0.0, -1e-3])
def test_a_norm_tolerance_that_would_pass_a_zero_row_or_fail_every_row_is_refused(tolerance):
    """A zero row of a normalising model fails only the norms check (|0 - 1| = 1 above the
    tolerance, and no nonzero check runs there): a tolerance of 1 or more passed it, so an
    all-zero row (no embedding at all) went through verify; one of 0 or less fails every
    row. The config refuses both (schema: 0 < verify.norm_tolerance < 1), and so does the
    class, for a Python caller."""
    with pytest.raises(ValueError, match=rf"^norm_tolerance {tolerance!r}: expected a number above 0 and below 1"):
        params(norm_tolerance=tolerance)


def test_a_failed_row_check_names_the_id_of_its_first_row(tmp_path):
    """Row 23 of a matrix of millions is no record a user can find: the finite, norms and
    nonzero checks named a row only. A failed one names its first row's id too, read from
    ids.parquet (here in its second row group), so the record can be looked up."""
    ids = [f"doc-{i}" for i in range(ROWS)]
    npy, idp = tmp_path / "embeddings.npy", tmp_path / "ids.parquet"
    pq.write_table(pa.table({"id": pa.array(ids, pa.string())}), idp, row_group_size=16)
    emb = unit_rows()
    emb[23, 2] = np.nan
    np.save(npy, emb)
    result = verify_embeddings(str(npy), str(idp), params(block_rows=10))
    assert result["checks"]["finite"]["first_id"] == "doc-23"
    assert result["checks"]["norms"]["first_id"] == "doc-23"  # a NaN row's norm is off too
    message = failure_message(result, "e.npy")
    assert "  - finite: rows_with_non_finite=1, first_row=23, first_id='doc-23'" in message
    emb = unit_rows() * 3
    emb[41] = 0
    np.save(npy, emb)
    result = verify_embeddings(str(npy), str(idp), params(normalized=False, block_rows=10))
    assert result["checks"]["nonzero"] == {"ok": False, "rows_all_zero": 1, "first_row": 41, "first_id": "doc-41"}
    assert "first_id" not in result["checks"]["finite"]  # only a failed check names one


def test_a_failed_row_past_the_last_id_names_none(tmp_path):
    """Fewer ids than rows (ids_match_rows fails too): a bad row without an id names none."""
    emb = unit_rows()
    emb[ROWS - 1] = np.inf
    result = verify(tmp_path, emb, ids=[f"id{i}" for i in range(ROWS - 2)])
    assert failed(result) == {"finite", "norms", "ids_match_rows"}
    assert result["checks"]["finite"]["first_id"] is None


CHUNK_ITEMS = [20, 0, 15, 15]  # rows 0..19, none, 20..34, 35..49


def write_chunks(tmp_path: Path, ids: list[str]) -> list[dict]:
    """Chunk files of CHUNK_ITEMS records, one a line in row order (as split writes them and
    each embed job embeds them), and the manifest's entries for them."""
    entries, start = [], 0
    for i, items in enumerate(CHUNK_ITEMS):
        path = tmp_path / f"chunk_{i}.jsonl"
        path.write_text("".join(f'{{"id":"{k}","text":"t"}}\n' for k in ids[start : start + items]))
        entries.append({"chunk": i, "path": str(path), "items": items})
        start += items
    return entries


@pytest.mark.parametrize(
    ("row", "chunk", "rows", "line"), [(19, 0, [0, 19], 20), (20, 2, [20, 34], 1), (37, 3, [35, 49], 3)]
)
def test_a_failed_row_check_names_the_chunk_line_and_embed_log_of_its_first_row(tmp_path, row, chunk, rows, line):
    """A row of a merged matrix of millions named only its id: which chunk, and so which
    embed job (whose log holds the cause), made it was left to the user to count out of
    the manifest. A failed finite, norms or nonzero check names it: the chunk, its rows in
    the matrix, its file and the row's line there, and the embed job's log."""
    ids = [f"doc-{i}" for i in range(ROWS)]
    chunks = write_chunks(tmp_path, ids)
    emb = unit_rows()
    emb[row] = np.nan  # whole: its norm (of the finite values) is 0, off too
    npy, idp = write(tmp_path, emb, ids)
    result = verify_embeddings(npy, idp, params(block_rows=10), chunks, "logs/embed/x/chunk_{chunk}.log")
    path = str(tmp_path / f"chunk_{chunk}.jsonl")
    where = {"chunk": chunk, "rows": rows, "path": path, "line": line, "embed_log": f"logs/embed/x/chunk_{chunk}.log"}
    assert result["checks"]["finite"]["first_chunk"] == where
    assert result["checks"]["norms"]["first_chunk"] == where
    # the named line is the record the row embeds
    assert Path(path).read_text().splitlines()[line - 1].startswith(f'{{"id":"doc-{row}"')
    message = failure_message(result, "e.npy")
    assert (
        f"  - finite: rows_with_non_finite=1, first_row={row}, first_id='doc-{row}'\n"
        f"      from chunk {chunk} (rows {rows[0]}..{rows[1]}): {path}:{line}, embed job log logs/embed/x/chunk_{chunk}.log\n"
    ) in message


def test_a_zero_row_names_its_chunk_without_a_log_where_none_is_known(tmp_path):
    """A sweep's verify jobs read embed jobs whose logs their own rules declare elsewhere:
    without a log pattern the chunk, file and line are named, no log."""
    ids = [f"id{i}" for i in range(ROWS)]
    chunks = write_chunks(tmp_path, ids)
    emb = unit_rows() * 3
    emb[41] = 0
    result = verify_embeddings(*write(tmp_path, emb, ids), params(normalized=False), chunks)
    assert result["checks"]["nonzero"]["first_chunk"] == {
        "chunk": 3,
        "rows": [35, 49],
        "path": chunks[3]["path"],
        "line": 7,
    }
    assert f"      from chunk 3 (rows 35..49): {chunks[3]['path']}:7\n" in failure_message(result, "e.npy") + "\n"
    assert "first_chunk" not in result["checks"]["finite"]  # only a failed check names one


def test_no_chunk_is_named_where_the_rows_are_not_the_manifests(tmp_path):
    """Where the matrix holds more or fewer rows than the manifest's chunks (count fails),
    which chunk is off is not known: naming one by the manifest's counts could name the
    wrong job."""
    ids = [f"id{i}" for i in range(ROWS)]
    chunks = write_chunks(tmp_path, ids)
    chunks[0]["items"] += 1
    emb = unit_rows()
    emb[40] = np.inf
    result = verify_embeddings(*write(tmp_path, emb, ids), params(), chunks, "logs/embed/x/chunk_{chunk}.log")
    assert "first_chunk" not in result["checks"]["finite"]
    assert "from chunk" not in failure_message(result, "e.npy")


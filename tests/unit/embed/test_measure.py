"""measure: an embed sweep job's speed, GPU-hours and agreement with the main run, from the
records the jobs write (stats, benchmarks, verification) and the two runs' vectors; the
cost the sweep's collection prices from them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from shardflow.core.columns import write_ids_parquet
from shardflow.core.jobs import write_job_table
from shardflow.embed.measure import agreement, run_metrics
from shardflow.sweep.cost import COST_METRICS, Price, read_job_records, with_cost
from shardflow.sweep.metrics import EMBED, EMBED_AGREEMENT, stage_metrics

BENCH = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n{s}\t0:00:01\t{rss}\t1\t1\t1\t0\t0\t0\t1\n"


def _vectors(folder: Path, name: str, x: np.ndarray, ids: list[str]) -> tuple[Path, Path]:
    np.save(folder / f"{name}.npy", x)
    write_ids_parquet(folder / f"{name}.ids.parquet", ids)
    return folder / f"{name}.npy", folder / f"{name}.ids.parquet"


def _stat(items, embedded, seconds, start, warmup=0.0, warmup_items=0, device="cuda:0") -> dict:
    # As the engine counts them: tokens of the records this job computed (resumed parts' not).
    return {"items": items, "items_embedded": embedded, "tokens": embedded * 10, "real_tokens": embedded * 10,
            "padded_tokens": embedded * 12,
            "seconds": seconds, "warmup_seconds": warmup, "warmup_items": warmup_items, "warmup_tokens": warmup_items * 10,
            "start_time": start, "end_time": start + seconds, "device": device, "oom_backoffs": 1}


def _job_table(folder: Path, stats: list[dict], job_seconds: list[float], rss: list[float]) -> Path:
    paths, benches = [], []
    for i, (s, t, r) in enumerate(zip(stats, job_seconds, rss, strict=True)):
        (folder / f"s{i}.json").write_text(json.dumps(s))
        (folder / f"b{i}.tsv").write_text(BENCH.format(s=t, rss=r))
        paths.append(str(folder / f"s{i}.json"))
        benches.append(str(folder / f"b{i}.tsv"))
    write_job_table(folder / "jobs.json", paths, benches)
    return folder / "jobs.json"


def test_agreement_is_the_cosine_per_row_streamed_in_blocks(tmp_path):
    rng = np.random.default_rng(0)
    ref = rng.normal(size=(50, 8)).astype(np.float32)
    mine = (ref + rng.normal(scale=0.05, size=ref.shape)).astype(np.float16)  # output_dtype float16
    mine[3] = 0
    ref[4] = 0
    mine[4] = 0  # both zero: the same vector
    ids = [f"d{i}" for i in range(50)]
    got = agreement(*_vectors(tmp_path, "mine", mine, ids), *_vectors(tmp_path, "ref", ref, ids), block_rows=7)
    a, b = mine.astype(np.float64), ref.astype(np.float64)
    cos = (a * b).sum(1) / np.maximum(np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1), 1e-300)
    cos[3], cos[4] = 0.0, 1.0
    assert got["rows"] == 50 and got["cosine_min"] == 0.0
    assert got["cosine_mean"] == pytest.approx(cos.mean(), abs=1e-6)
    assert got["cosine_p1"] == pytest.approx(np.percentile(cos, 1), abs=1e-6)


def test_a_set_against_itself_agrees_to_float64_rounding(tmp_path):
    """Norms and dot products in one precision: float32 norms put 1.5e-7 into a cosine
    of two equal vectors (every point of a sweep showed 0.99999985), and overflowed for
    components near float32's largest (a cosine of 0)."""
    rng = np.random.default_rng(1)
    x = rng.normal(size=(300, 384)).astype(np.float32)
    x[7] = 3.0e38
    ids = [f"d{i}" for i in range(300)]
    got = agreement(*_vectors(tmp_path, "a", x, ids), *_vectors(tmp_path, "b", x.copy(), ids))
    assert 1 - got["cosine_min"] < 1e-12 and got["cosine_mean"] == pytest.approx(1.0, abs=1e-12)


def test_other_records_or_another_width_is_an_error_naming_the_files(tmp_path):
    x = np.ones((3, 4), dtype=np.float32)
    mine = _vectors(tmp_path, "mine", x, ["a", "b", "c"])
    with pytest.raises(ValueError, match=r"ref\.ids\.parquet do not hold the same records.*first difference at row 1"):
        agreement(*mine, *_vectors(tmp_path, "ref", x, ["a", "x", "c"]))
    with pytest.raises(ValueError, match="3 and 2 ids; first difference at row 2"):
        agreement(*mine, *_vectors(tmp_path, "short", x[:2], ["a", "b"]))
    with pytest.raises(ValueError, match=r"mine\.npy has 4 dimensions but the reference .*wide\.npy has 6"):
        agreement(*mine, *_vectors(tmp_path, "wide", np.ones((3, 6), dtype=np.float32), ["a", "b", "c"]))


def test_rates_are_per_encode_second_and_count_what_the_jobs_computed(tmp_path):
    """Two chunk jobs side by side: the rate is per device (summed encode seconds), not
    per wall second; a resumed job's earlier rows count as records, not in the rates."""
    stats = [_stat(100, 100, 10.0, 1000.0, warmup=2.0, warmup_items=20), _stat(300, 200, 10.0, 1000.0)]
    jobs = _job_table(tmp_path, stats, [15.0, 13.0], [500.0, 700.0])
    (tmp_path / "v.json").write_text(json.dumps({"ok": True, "dim": 8, "dtype": "float16"}))
    ids = [f"d{i}" for i in range(4)]
    x = np.eye(4, 8, dtype=np.float32)
    vectors = _vectors(tmp_path, "mine", x, ids)
    m = run_metrics(jobs, tmp_path / "v.json", *vectors, reference=_vectors(tmp_path, "ref", x, ids))
    assert (m["records"], m["records_resumed"], m["tokens"], m["chunks"]) == (400, 100, 3000, 2)
    assert m["items_per_s"] == pytest.approx(300 / 20) and m["tokens_per_s"] == pytest.approx(3000 / 20)
    assert m["steady_items_per_s"] == pytest.approx(280 / 18) and m["job_items_per_s"] == pytest.approx(300 / 28)
    assert m["wall_seconds"] == pytest.approx(10.0) and m["padding_fraction"] == pytest.approx(1 - 10 / 12)
    assert m["max_rss_mb"] == 700.0 and m["gpu_hours"] == pytest.approx(28 / 3600)
    assert m["oom_backoffs"] == 2  # the budget was lowered in both jobs: not the point's settings throughout
    assert (m["peak_gpu_mem_mib"], m["peak_gpu_mem_reserved_mib"]) == (None, None)  # stats without peaks
    assert m["dtype"] == "float16"
    # paid for: the records computed (300), not those in the output (400): the resumed 100
    # rows' GPU time was an earlier attempt's, not in the GPU-hours
    assert m["records_paid"] == 300
    assert m["agreement"]["cosine_min"] == 1.0 and m["agreement"]["reference"].endswith("ref.npy")

    other = run_metrics(jobs, tmp_path / "v.json", *vectors, reference=None)
    assert other["agreement"] is None and "another model" in other["agreement_reason"]


def test_a_runs_peak_gpu_memory_is_its_largest_chunk_jobs(tmp_path):
    stats = [{**_stat(4, 4, 1.0, 0.0), "peak_gpu_mem_mib": a, "peak_gpu_mem_reserved_mib": r}
             for a, r in ((1000.0, 1800.0), (1500.0, 1600.0))]
    jobs = _job_table(tmp_path, stats, [2.0, 2.0], [100.0, 100.0])
    (tmp_path / "v.json").write_text(json.dumps({"ok": True, "dim": 8, "dtype": "float32"}))
    x = np.eye(8, 8, dtype=np.float32)
    m = run_metrics(jobs, tmp_path / "v.json", *_vectors(tmp_path, "m", x, [f"d{i}" for i in range(8)]), reference=None)
    assert (m["peak_gpu_mem_mib"], m["peak_gpu_mem_reserved_mib"]) == (1500.0, 1800.0)
    assert "peak_gpu_mem_chunk" not in m  # a chunk number is no metric


def test_the_names_a_sweep_may_rank_by_are_the_ones_written(tmp_path):
    """shardflow.sweep.metrics lists the embed names (that layer may not import this one),
    checked at parse time: pinned here to the writer."""
    from tests.unit.sweep.test_metrics import leaf_names

    jobs = _job_table(tmp_path, [_stat(4, 4, 1.0, 0.0)], [2.0], [100.0])
    (tmp_path / "v.json").write_text(json.dumps({"ok": True, "dim": 8, "dtype": "float32"}))
    ids = ["a", "b", "c", "d"]
    x = np.eye(4, 8, dtype=np.float32)
    m = run_metrics(jobs, tmp_path / "v.json", *_vectors(tmp_path, "m", x, ids),
                    reference=_vectors(tmp_path, "ref", x, ids))
    assert leaf_names(m) == set(EMBED + EMBED_AGREEMENT)
    # the collection adds the cost: the names a sweep ranks by are the priced record's
    assert leaf_names(with_cost(m, 2.5)) == set(EMBED + COST_METRICS + EMBED_AGREEMENT) == set(stage_metrics("embed", {}))


def test_the_collection_prices_a_job_as_the_job_priced_itself_before(tmp_path):
    """The job records GPU-hours and the records they paid for, not their price; the
    sweep's collection prices them (read_job_records, from metrics.json as written) to
    the numbers the job wrote itself before (shardflow.embed.measure until 2026-11-27:
    job_costs' GPU-hours x the price, over the paid-for records), bit for bit. Here a job
    resumed twice: once from attempts with records (its earlier rows paid for and their
    CUDA time in the GPU-hours), once from attempts without (only its own rows), and a
    CPU job, which costs nothing."""
    killed = {**_stat(300, 200, 10.0, 1000.0), "earlier_attempts": 1, "earlier_attempt_devices": {"cuda:1": 900.0}}
    old_parts = _stat(300, 100, 10.0, 1000.0)
    stats = [killed, old_parts, _stat(50, 50, 5.0, 1000.0, device="cpu")]
    jobs = _job_table(tmp_path, stats, [15.0, 13.0, 7.0], [500.0, 700.0, 300.0])
    (tmp_path / "v.json").write_text(json.dumps({"ok": True, "dim": 8, "dtype": "float32"}))
    ids = [f"d{i}" for i in range(4)]
    x = np.eye(4, 8, dtype=np.float32)
    m = run_metrics(jobs, tmp_path / "v.json", *_vectors(tmp_path, "mine", x, ids), reference=None)
    assert not set(COST_METRICS) & set(m)  # no price in the job's record: a changed price reruns no job
    (tmp_path / "metrics.json").write_text(json.dumps(m))
    bench = str(tmp_path / "b0.tsv")
    (record,) = read_job_records([("p", 0, 0, 1)], [str(tmp_path / "metrics.json")], [], [bench], price=Price(3.0, "USD"))
    gpu_hours = (15.0 + 13.0) / 3600 + 900.0 / 3600  # the CUDA jobs' benchmarks and the killed CUDA attempt
    assert m["gpu_hours"] == pytest.approx(gpu_hours) and m["records_paid"] == 300 + 100 + 50
    cost = m["gpu_hours"] * 3.0
    assert record.metrics["estimated_cost"] == cost
    assert record.metrics["estimated_cost_per_million_records"] == cost / 450 * 1e6
    assert record.metrics["gpu_hour_price"] == 3.0
    assert record.metrics["estimated_cost_per_million_records"] == pytest.approx(gpu_hours * 3.0 / 450 * 1e6)
    # Nothing paid for (every row resumed from attempts without records): no cost per record.
    assert with_cost({**m, "records_paid": 0}, 3.0)["estimated_cost_per_million_records"] is None


def test_ids_are_compared_in_blocks_whatever_the_files_row_groups(tmp_path):
    """The ids are streamed (Arrow blocks, not a Python object per id: several GB at tens
    of millions of rows): files written in other row groups still line up row for row,
    and a difference past the first block is found at its row."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = [f"d{i}" for i in range(50)]
    x = np.ones((50, 4), dtype=np.float32)
    np.save(tmp_path / "mine.npy", x)
    np.save(tmp_path / "ref.npy", x)
    pq.write_table(pa.table({"id": pa.array(ids, pa.string())}), tmp_path / "mine.ids.parquet", row_group_size=7)
    pq.write_table(pa.table({"id": pa.array(ids, pa.string())}), tmp_path / "ref.ids.parquet", row_group_size=11)
    mine, ref = (tmp_path / "mine.npy", tmp_path / "mine.ids.parquet"), (tmp_path / "ref.npy", tmp_path / "ref.ids.parquet")
    assert agreement(*mine, *ref, block_rows=5)["rows"] == 50
    other = ids[:33] + ["x"] + ids[34:]
    pq.write_table(pa.table({"id": pa.array(other, pa.string())}), tmp_path / "ref.ids.parquet", row_group_size=11)
    with pytest.raises(ValueError, match=r"\(50 and 50 ids; first difference at row 33\)"):
        agreement(*mine, *ref, block_rows=5)
    pq.write_table(pa.table({"id": pa.array(ids + ["d50"], pa.string())}), tmp_path / "ref.ids.parquet", row_group_size=11)
    with pytest.raises(ValueError, match=r"\(50 and 51 ids; first difference at row 50\)"):
        agreement(*mine, *ref, block_rows=5)


def test_the_reference_is_named_as_the_workflow_names_it(tmp_path, monkeypatch):
    """On default storage (the eks profile) a job reads the main run's vectors from
    Snakemake's local copy: the record names results/<data set>/embeddings.npy, as the
    jobs' other records do, not the copy's path with the bucket in it."""
    monkeypatch.setenv("SHARDFLOW_STORAGE_PREFIX", "s3://bucket/runs/x")
    monkeypatch.chdir(tmp_path)
    copy = tmp_path / ".snakemake/storage/s3/bucket/runs/x/results/demo"
    copy.mkdir(parents=True)
    jobs = _job_table(tmp_path, [_stat(4, 4, 1.0, 0.0)], [2.0], [100.0])
    (tmp_path / "v.json").write_text(json.dumps({"ok": True, "dim": 8, "dtype": "float32"}))
    ids = ["a", "b", "c", "d"]
    x = np.eye(4, 8, dtype=np.float32)
    ref = _vectors(copy, "embeddings", x, ids)
    rel = tuple(os.path.relpath(p, tmp_path) for p in ref)
    m = run_metrics(jobs, tmp_path / "v.json", *_vectors(tmp_path, "m", x, ids), reference=rel)
    assert m["agreement"]["reference"] == "results/demo/embeddings.npy"

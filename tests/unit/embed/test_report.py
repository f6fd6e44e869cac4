"""report: the summary's arithmetic, the 2-D map, benchmark parsing, and that
build_report writes every output from small fake inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardflow.core.jobs import write_job_table
from shardflow.embed import report
from shardflow.embed.report import ReportParams, build_report, project_2d, run_summary

BENCH_HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def stat(chunk, items, start, end, device="cuda:0", tokens=None, seconds=None) -> dict:
    seconds = end - start if seconds is None else seconds
    return {
        "chunk": chunk,
        "items": items,
        "tokens": items * 10 if tokens is None else tokens,
        "seconds": seconds,
        "items_per_s": items / seconds,
        "start_time": start,
        "end_time": end,
        "device": device,
    }


VERIFICATION = {"ok": True, "dim": 8, "dtype": "float32"}


def test_summary_totals_and_rates():
    stats = [stat(0, 100, 1000.0, 1010.0), stat(1, 300, 1005.0, 1020.0)]
    s = run_summary(stats, [{"s": 12.0}, {"s": 18.0}], {"rejected_records": 4}, VERIFICATION, ReportParams())
    assert (s["records"], s["tokens"], s["chunks"], s["rejected_records"]) == (400, 4000, 2, 4)
    assert s["embed_wall_time_s"] == 20.0  # first start to last end, overlap counted once
    assert s["embed_job_seconds"] == 30.0  # benchmark seconds, summed
    assert (s["items_per_s"], s["tokens_per_s"]) == (20.0, 200.0)
    assert (s["verification_ok"], s["dim"], s["dtype"]) == (True, 8, "float32")
    # A gap in which no job encoded (another stage's jobs ran) is not the stage's time.
    apart = [stat(0, 100, 1000.0, 1010.0), stat(1, 300, 1050.0, 1060.0)]
    s = run_summary(apart, [{"s": 12.0}, {"s": 12.0}], {}, VERIFICATION, ReportParams())
    assert s["embed_wall_time_s"] == 20.0 and s["items_per_s"] == 20.0


def test_a_resumed_job_rates_what_it_computed():
    """A job resumed from a killed attempt's parts wrote 300 rows but computed 100 of them in
    its 10 s: its rate is 10 records/s, not 30, and the resumed rows are counted apart."""
    resumed = dict(stat(0, 300, 1000.0, 1010.0), items_embedded=100, tokens=1000, at_max_length=3)
    s = run_summary([resumed], [{"s": 12.0}], {}, VERIFICATION, ReportParams())
    assert s["records"] == 300 and s["records_resumed"] == 200 and s["texts_at_max_length"] == 3
    assert (s["items_per_s"], s["tokens_per_s"]) == (10.0, 100.0)


def test_summary_costs_only_gpu_jobs():
    stats = [stat(0, 100, 0.0, 10.0, "cuda:0"), stat(1, 100, 0.0, 10.0, "cpu"), stat(2, 100, 0.0, 10.0, "cuda:1")]
    benches = [{"s": 1800.0}, {"s": 3600.0}, {"s": 1800.0}]
    s = run_summary(stats, benches, {}, VERIFICATION, ReportParams(gpu_hour_price=3.0, currency="EUR"))
    assert s["gpu_hours"] == 1.0  # the two CUDA jobs, half an hour each
    assert s["device_hours"] == 2.0
    assert (s["estimated_cost"], s["currency"]) == (3.0, "EUR")
    assert s["estimated_cost_per_million_records"] == pytest.approx(3.0 / 300 * 1e6)
    assert s["devices"] == ["cpu", "cuda:0", "cuda:1"]
    assert s["rejected_records"] == 0  # manifest without the key


def test_a_job_given_more_gpus_is_priced_for_every_gpu_it_held():
    """resources.embed.gpu 2 (ReportParams.gpus: the report rule's param, plan.job_gpus): each
    chunk job on CUDA held and paid for both GPUs, though its stats record none, so
    summary.json (and the first page, from the same run_summary) count 2 GPU-hours an
    hour, as make status and make estimate do; the report counted one."""
    stats = [stat(0, 100, 0.0, 10.0, "cuda:0"), stat(1, 100, 0.0, 10.0, "cpu")]
    benches = [{"s": 1800.0}, {"s": 1800.0}]
    one = run_summary(stats, benches, {}, VERIFICATION, ReportParams(gpu_hour_price=3.0))
    two = run_summary(stats, benches, {}, VERIFICATION, ReportParams(gpu_hour_price=3.0, gpus=2))
    assert (one["gpu_hours"], two["gpu_hours"]) == (0.5, 1.0)  # the CUDA job's half hour, x its GPUs
    assert two["estimated_cost"] == 3.0 and two["estimated_cost_per_million_records"] == pytest.approx(3.0 / 200 * 1e6)
    assert two["device_hours"] == one["device_hours"] == 1.0  # a device's hours, not per GPU


def test_cpu_only_run_costs_nothing():
    cpu = {**stat(0, 10, 0.0, 5.0, "cpu"), "peak_gpu_mem_mib": None, "peak_gpu_mem_reserved_mib": None}
    s = run_summary([cpu], [{"s": 5.0}], {}, VERIFICATION, ReportParams())
    assert (s["gpu_hours"], s["estimated_cost"]) == (0.0, 0.0)
    assert (s["peak_gpu_mem_mib"], s["peak_gpu_mem_reserved_mib"]) == (None, None)  # not on a GPU: null, not 0


def test_summary_holds_the_largest_jobs_peak_gpu_memory_and_its_chunk():
    peaks = [(0, 2100.0, 2600.0), (1, 2300.0, 2400.0)]
    stats = [{**stat(c, 10, 0.0, 5.0), "peak_gpu_mem_mib": a, "peak_gpu_mem_reserved_mib": r} for c, a, r in peaks]
    s = run_summary(stats, [{"s": 5.0}, {"s": 5.0}], {}, VERIFICATION, ReportParams())
    assert (s["peak_gpu_mem_mib"], s["peak_gpu_mem_reserved_mib"], s["peak_gpu_mem_chunk"]) == (2300.0, 2600.0, 1)
    assert s["peak_gpu_mem_unrecorded"] == 0


def test_summary_falls_back_to_job_seconds_without_a_benchmark_time():
    stats = [stat(0, 10, 0.0, 5.0, seconds=7.0)]
    s = run_summary(stats, [{"max_rss": 100.0}], {}, VERIFICATION, ReportParams())
    assert s["embed_job_seconds"] == 7.0


def test_summary_refuses_unpaired_benchmarks():
    stats = [stat(0, 10, 0.0, 5.0), stat(1, 10, 0.0, 5.0)]
    with pytest.raises(ValueError, match="2 per-chunk stats but 1 benchmark"):
        run_summary(stats, [{"s": 5.0}], {}, VERIFICATION, ReportParams())


# --- project_2d --------------------------------------------------------------------------


def elongated(n=200, seed=0) -> np.ndarray:
    """Points spread 10x more along (1, 1, 0, 0)/sqrt(2) than along anything else."""
    rng = np.random.default_rng(seed)
    main = np.array([1, 1, 0, 0], dtype=np.float32) / np.sqrt(2)
    return (rng.normal(size=(n, 1)) * 10 * main + rng.normal(size=(n, 4))).astype(np.float32) + 5


def test_pca_map_has_one_point_per_row():
    assert project_2d(elongated(), "pca", 0).shape == (200, 2)


def test_pca_first_axis_follows_the_largest_spread():
    x = elongated()
    xy = project_2d(x, "pca", 0)
    assert xy[:, 0].var() > 20 * xy[:, 1].var()
    along_main = (x - x.mean(axis=0)) @ (np.array([1, 1, 0, 0]) / np.sqrt(2))
    assert abs(np.corrcoef(xy[:, 0], along_main)[0, 1]) > 0.99


def test_pca_map_is_centred():
    assert np.allclose(project_2d(elongated(), "pca", 0).mean(axis=0), 0, atol=1e-3)


def test_pca_signs_do_not_depend_on_the_svd(monkeypatch):
    x = elongated()
    expected = project_2d(x, "pca", 0)
    real_svd = np.linalg.svd

    def flipped_svd(a, full_matrices=True):
        u, s, vt = real_svd(a, full_matrices=full_matrices)
        return -u, s, -vt  # an equally valid decomposition

    monkeypatch.setattr(np.linalg, "svd", flipped_svd)
    assert np.allclose(project_2d(x, "pca", 0), expected, atol=1e-4)


def test_pca_maps_vectors_too_large_for_float32_sums(tmp_path):
    """An unnormalised model's vectors pass verify whatever their size (it judges norms in
    float64). Finite but over about 3e34, their float32 mean (a sum of up to 5,000 rows)
    or a projection (a row's norm) went past float32's largest: the SVD did not converge,
    a bare LinAlgError naming no file, or points went to inf and were left off the map.
    Such vectors are mapped as the same vectors scaled down would be, scaled up."""
    shape = elongated()
    for x, scale in [(shape, 2.0**120), (np.random.default_rng(1).normal(size=(5, 1024)).astype(np.float32), 2.0**124)]:
        huge = (x * np.float32(scale)).astype(np.float32)
        assert np.isfinite(huge).all()
        xy = project_2d(huge, "pca", 0)
        assert np.isfinite(xy).all()
        np.testing.assert_allclose(xy / scale, project_2d(x, "pca", 0), rtol=1e-4, atol=1e-4 * np.abs(xy / scale).max())
    np.save(tmp_path / "e.npy", (shape * np.float32(2.0**120)).astype(np.float32))
    assert report.plot_map(str(tmp_path / "e.npy"), str(tmp_path / "map.png"), ReportParams()) == 200


@pytest.mark.parametrize("rows", [0, 1, 2])
def test_fewer_than_three_rows_map_to_the_origin(rows):
    xy = project_2d(np.ones((rows, 4), dtype=np.float32), "pca", 0)
    assert xy.shape == (rows, 2) and not xy.any()


def test_umap_on_three_points_maps_them_by_pca():
    # UMAP's spectral start fails below four points (scipy: k >= N); umap-learn is not
    # even imported for them.
    x = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0]], dtype=np.float32)
    np.testing.assert_array_equal(project_2d(x, "umap", 0), project_2d(x, "pca", 0))


def test_umap_without_umap_learn_says_so(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_umap(name, *args, **kwargs):
        if name == "umap":
            raise ImportError("No module named 'umap'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_umap)
    with pytest.raises(RuntimeError, match="umap-learn is not installed"):
        project_2d(elongated(), "umap", 0)


def test_sample_rows_takes_an_even_stride(tmp_path):
    path = tmp_path / "e.npy"
    np.save(path, np.arange(100, dtype=np.float16).reshape(50, 2))
    idx, x = report.sample_rows(str(path), 5)
    assert idx.tolist() == [0, 12, 24, 36, 49]
    assert x.dtype == np.float32 and x[:, 0].tolist() == [0, 24, 48, 72, 98]
    assert report.sample_rows(str(path), 500)[0].tolist() == list(range(50))


# --- build_report ------------------------------------------------------------------------


@pytest.fixture
def fake_run(tmp_path) -> dict:
    """Per-chunk stats, benchmarks, manifest, verification and a small normalised matrix."""
    n_chunks, rows = 3, 60
    stats_paths, bench_paths = [], []
    for i in range(n_chunks):
        sp, bp = tmp_path / f"embed_{i}.stats.json", tmp_path / f"chunk_{i}.tsv"
        sp.write_text(json.dumps(stat(i, 20, 100.0 + i, 110.0 + 2 * i, "cpu")))
        bp.write_text(BENCH_HEADER + f"{11 + i}.0\t0:00:11\t500\t900\t400\t450\t0\t0\t80\t10\n")
        stats_paths.append(str(sp))
        bench_paths.append(str(bp))
    x = np.random.default_rng(0).normal(size=(rows, 8)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    npy = tmp_path / "embeddings.npy"
    np.save(npy, x)
    counts = [0] * 200
    counts[100] = rows
    verification = {
        "ok": True,
        "rows": rows,
        "dim": 8,
        "dtype": "float32",
        "norm_min": 0.9999,
        "norm_max": 1.0001,
        "norm_histogram": {"edges": [0.0, 2.0, 200], "counts": counts},
        "checks": {},
    }
    (tmp_path / "verification.json").write_text(json.dumps(verification))
    (tmp_path / "manifest.json").write_text(json.dumps({"rejected_records": 2, "total_records": rows}))
    outputs = {k: str(tmp_path / "report" / f"{k}.png") for k in ("throughput", "timeline", "norms", "map")}
    outputs["summary"] = str(tmp_path / "report" / "summary.json")
    write_job_table(tmp_path / "jobs.json", stats_paths, bench_paths)
    return {
        "args": (
            str(tmp_path / "jobs.json"),
            str(tmp_path / "manifest.json"),
            str(tmp_path / "verification.json"),
            str(npy),
            outputs,
        ),
        "outputs": outputs,
    }


def test_build_report_writes_every_output(fake_run):
    summary = build_report(*fake_run["args"], ReportParams(map_points=40))
    for key in ("throughput", "timeline", "norms", "map"):
        assert Path(fake_run["outputs"][key]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", key
    assert json.loads(Path(fake_run["outputs"]["summary"]).read_text()) == summary
    assert (summary["records"], summary["chunks"], summary["rejected_records"]) == (60, 3, 2)
    assert summary["embed_job_seconds"] == 11 + 12 + 13  # from the benchmark files
    report_dir = Path(fake_run["outputs"]["summary"]).parent
    assert sorted(p.name for p in report_dir.iterdir()) == sorted(
        ["throughput.png", "timeline.png", "norms.png", "map.png", "summary.json"]
    )


def test_cost_per_record_counts_the_records_the_jobs_computed():
    """A job resumed from an earlier attempt's parts computed only the rest, in the time
    its benchmark records: counting the earlier rows made the run look cheaper per record
    (the embed sweep's metrics and this summary share chunk_totals)."""
    resumed = {**stat(0, 400, 0.0, 3600.0), "items_embedded": 100}
    s = run_summary([resumed], [{"s": 3600.0}], {}, VERIFICATION, ReportParams(gpu_hour_price=2.0))
    assert (s["records"], s["records_resumed"]) == (400, 300)
    assert s["estimated_cost_per_million_records"] == pytest.approx(2.0 / 100 * 1e6)
    nothing = run_summary([{**resumed, "items_embedded": 0}], [{"s": 3600.0}], {}, VERIFICATION, ReportParams())
    assert nothing["estimated_cost_per_million_records"] is None


@pytest.mark.parametrize(
    ("over", "message"),
    [  # one case a field; each was accepted
        ({"map_method": None}, "map_method None: expected a string"),
        ({"map_points": "5000"}, "map_points '5000': expected an integer"),
        ({"gpu_hour_price": True}, "gpu_hour_price True: expected a number"),
        ({"currency": 1}, "currency 1: expected a string"),
        ({"seed": 0.5}, "seed 0.5: expected an integer"),
    ],
)
def test_report_params_name_a_wrong_python_type(over, message):
    with pytest.raises(TypeError) as info:
        ReportParams(**over)
    assert str(info.value) == message
    assert ReportParams(map_points=5000.0, gpu_hour_price=2).map_points.__class__ is int  # a price may be an int

"""The job table merge writes from per-chunk stats and Snakemake benchmarks."""

import json

import pytest

from shardflow.core.jobs import read_benchmark, read_job_table, timings, write_job_table

BENCH_HEADER = "s\th:m:s\tmax_rss\tmax_vms\tmax_uss\tmax_pss\tio_in\tio_out\tmean_load\tcpu_time\n"


def test_read_benchmark_takes_the_last_repeat_as_numbers(tmp_path):
    path = tmp_path / "b.tsv"
    path.write_text(
        BENCH_HEADER
        + "1.5\t0:00:01\t100.1\t200\t50\t60\t1.0\t2.0\t90.5\t1.2\n"
        + "2.5\t0:00:02\t120.0\t210\t55\t65\t1.5\t2.5\t95.0\t2.2\n"
    )
    b = read_benchmark(str(path))
    assert b["s"] == 2.5 and b["max_rss"] == 120.0 and b["cpu_time"] == 2.2
    assert b["h:m:s"] == "0:00:02"  # not a number: kept as text


def test_read_benchmark_keeps_na_as_text(tmp_path):
    path = tmp_path / "b.tsv"
    path.write_text("s\tmax_rss\n3.0\tNA\n")
    assert read_benchmark(str(path)) == {"s": 3.0, "max_rss": "NA"}


def test_read_benchmark_empty_file_raises(tmp_path):
    path = tmp_path / "b.tsv"
    path.write_text(BENCH_HEADER)
    with pytest.raises(ValueError, match="empty benchmark"):
        read_benchmark(str(path))




def test_a_stats_file_cut_short_is_an_error_naming_it(tmp_path):
    """json's own error ("Unterminated string starting at: line 1 column 14") named no
    file: merge reads one a chunk, a thousand of them in a large run."""
    good, cut = tmp_path / "embed_0.stats.json", tmp_path / "embed_1.stats.json"
    good.write_text('{"items": 3}')
    cut.write_text('{"items": 3, "se')
    bench = tmp_path / "b.tsv"
    bench.write_text("s\n1.0\n")
    with pytest.raises(ValueError, match=r"embed_1\.stats\.json:1: "):
        write_job_table(tmp_path / "jobs.json", [str(good), str(cut)], [str(bench), str(bench)])
    assert not (tmp_path / "jobs.json").exists()


def test_job_table_pairs_stats_with_benchmarks_in_chunk_order(tmp_path):
    stats, benches = [], []
    for i in range(3):
        sp, bp = tmp_path / f"s{i}.json", tmp_path / f"b{i}.tsv"
        sp.write_text(json.dumps({"chunk": i, "items": 10 + i}))
        bp.write_text(BENCH_HEADER + f"{5 + i}.0\t0:00:05\t100\t200\t1\t1\t0\t0\t50\t{2 + i}\n")
        stats.append(str(sp))
        benches.append(str(bp))
    rows = write_job_table(tmp_path / "jobs.json", stats, benches)
    assert read_job_table(tmp_path / "jobs.json") == rows
    assert [(r["stats"]["items"], r["benchmark"]["s"]) for r in rows] == [(10, 5.0), (11, 6.0), (12, 7.0)]
    assert timings(rows)[benches[2]] == {"s": 7.0, "max_rss": 100.0, "cpu_time": 4.0}
    with pytest.raises(ValueError, match="3 stats files but 2 benchmark files"):
        write_job_table(tmp_path / "bad.json", stats, benches[:2])


def test_busy_seconds_count_overlaps_once_and_gaps_not_at_all():
    from shardflow.core.jobs import busy_seconds

    assert busy_seconds([]) == 0.0
    assert busy_seconds([(0.0, 10.0), (5.0, 12.0), (20.0, 25.0), (21.0, 22.0)]) == 17.0
    assert busy_seconds([(3.0, 4.0), (0.0, 1.0)]) == 2.0


def test_job_costs_count_the_killed_attempts_that_ran_on_cuda():
    """A job's earlier attempts (a preempted pod, from the resume folder's attempt
    records) add their CUDA seconds to the GPU-hours and the cost; the wall time and
    job seconds stay the last attempts'. Stats without them add nothing."""
    from shardflow.core.jobs import job_costs, priced

    base = {"start_time": 0.0, "end_time": 1800.0, "seconds": 1800.0, "device": "cuda:0"}
    rerun = {**base, "earlier_attempts": 2, "earlier_attempt_seconds": 2700.0,
             "earlier_attempt_devices": {"cpu": 900.0, "cuda:0": 1800.0}}
    costs = job_costs([rerun, base], [{"s": 1800.0}, {"s": 1800.0}])
    assert costs["gpu_hours"] == pytest.approx(1.5) and priced(costs["gpu_hours"], 2.0)["estimated_cost"] == pytest.approx(3.0)
    assert costs["device_hours"] == pytest.approx(1.75) and costs["job_seconds"] == 3600.0
    assert (costs["earlier_attempts"], costs["earlier_attempt_seconds"]) == (2, 2700.0)
    assert costs["earlier_attempt_gpu_hours"] == pytest.approx(0.5)
    old = job_costs([base], [{"s": 1800.0}])
    assert old["gpu_hours"] == 0.5 and old["earlier_attempts"] == 0 and old["earlier_attempt_seconds"] == 0


def test_job_costs_name_the_killed_attempts_devices_apart_from_the_rates_devices():
    """A job killed on cuda:1 (and once on the CPU) and finished on cuda:0: the seconds
    on each killed attempt's device sum over the jobs; `devices` stays the devices the
    rates ran on (the landing page's throughput line names them)."""
    from shardflow.core.jobs import job_costs

    base = {"start_time": 0.0, "end_time": 10.0, "seconds": 10.0, "device": "cuda:0"}
    killed = {**base, "earlier_attempts": 2, "earlier_attempt_devices": {"cpu": 5.0, "cuda:1": 20.0}}
    again = {**base, "earlier_attempts": 1, "earlier_attempt_devices": {"cuda:1": 10.0}}
    costs = job_costs([killed, again, base], [{"s": 10.0}] * 3)
    assert costs["devices"] == ["cuda:0"]
    assert costs["earlier_attempt_devices"] == {"cpu": 5.0, "cuda:1": 30.0}
    assert job_costs([base], [{"s": 10.0}])["devices"] == ["cuda:0"]


def test_a_multi_gpu_jobs_killed_attempts_count_per_gpu():
    """A two-GPU job (a training run's world_size, or gpus) killed once after 30 min on
    CUDA and finished in 30 min: both attempts held both GPUs, so each counts 2 x 0.5
    GPU-h; the killed attempt's seconds by device stay wall seconds. A one-GPU job's
    stats (no gpus, no world_size) count as before."""
    from shardflow.core.jobs import earlier_attempt_costs, gpus_held, job_costs, last_attempt_gpu_hours

    two = {"start_time": 0.0, "end_time": 1800.0, "seconds": 1800.0, "device": "cuda:0", "world_size": 2,
           "earlier_attempts": 1, "earlier_attempt_devices": {"cuda:0": 1800.0}}
    assert gpus_held(two) == 2 and gpus_held({"gpus": 4, "world_size": 2}) == 4 and gpus_held({}) == 1
    assert last_attempt_gpu_hours(two, 1800.0) == pytest.approx(1.0)
    assert last_attempt_gpu_hours({**two, "device": "cpu"}, 1800.0) == 0.0
    earlier = earlier_attempt_costs([two])
    assert earlier["earlier_attempt_gpu_hours"] == pytest.approx(1.0)
    assert (earlier["earlier_attempt_seconds"], earlier["earlier_attempt_devices"]) == (1800.0, {"cuda:0": 1800.0})
    assert job_costs([two], [{"s": 1800.0}])["gpu_hours"] == pytest.approx(2.0)
    one = {k: v for k, v in two.items() if k != "world_size"}
    assert job_costs([one], [{"s": 1800.0}])["gpu_hours"] == pytest.approx(1.0)


def test_a_chunk_job_counts_the_gpus_its_rule_gave_it():
    """An embed or summarise chunk job's stats record no `gpus`: the GPUs its rule gave it
    (resources.<rule>.gpu, plan.job_gpus) come as `gpus`, as make status counts them
    (status.finish), where the stage reports counted one. Its killed attempts held
    them too; a record's own `gpus` or `world_size` still decides, and a CPU job costs none."""
    from shardflow.core.jobs import earlier_attempt_costs, gpus_held, job_costs, last_attempt_gpu_hours

    chunk = {"start_time": 0.0, "end_time": 1800.0, "seconds": 1800.0, "device": "cuda:0",
             "earlier_attempts": 1, "earlier_attempt_devices": {"cuda:0": 1800.0}}
    assert gpus_held(chunk, 2) == 2 and gpus_held({"world_size": 4}, 2) == 4 and gpus_held({"gpus": 1}, 2) == 1
    assert last_attempt_gpu_hours(chunk, 1800.0, 2) == pytest.approx(1.0)
    assert earlier_attempt_costs([chunk], 2)["earlier_attempt_gpu_hours"] == pytest.approx(1.0)
    costs = job_costs([chunk], [{"s": 1800.0}], gpus=2)
    assert (costs["gpu_hours"], costs["earlier_attempt_gpu_hours"]) == (pytest.approx(2.0), pytest.approx(1.0))
    assert costs["device_hours"] == pytest.approx(1.0)  # wall seconds on a device, not per GPU
    on_cpu = {**chunk, "device": "cpu", "earlier_attempt_devices": {"cpu": 1800.0}}
    assert job_costs([on_cpu], [{"s": 1800.0}], gpus=2)["gpu_hours"] == 0.0


def test_a_stages_peak_gpu_memory_is_its_largest_jobs_with_its_chunk():
    from shardflow.core.jobs import peak_gpu_memory

    gpu = [{"chunk": i, "device": "cuda:0", "peak_gpu_mem_mib": a, "peak_gpu_mem_reserved_mib": r}
           for i, (a, r) in enumerate([(900.0, 1500.0), (1200.5, 1400.0), (800.0, 1000.0)])]
    assert peak_gpu_memory(gpu) == {"peak_gpu_mem_mib": 1200.5, "peak_gpu_mem_reserved_mib": 1500.0,
                                    "peak_gpu_mem_chunk": 1, "peak_gpu_mem_unrecorded": 0}
    # On the CPU the jobs' peaks are null: none for the stage either, not 0.
    cpu = [{"chunk": 0, "device": "cpu", "peak_gpu_mem_mib": None, "peak_gpu_mem_reserved_mib": None}]
    assert peak_gpu_memory(cpu)["peak_gpu_mem_mib"] is None and peak_gpu_memory(cpu)["peak_gpu_mem_unrecorded"] == 0
    # A CUDA job whose stats predate the record is counted apart, not taken as no memory.
    old = {"chunk": 3, "device": "cuda:1"}
    assert peak_gpu_memory([old])["peak_gpu_mem_mib"] is None
    got = peak_gpu_memory([*gpu, old])
    assert (got["peak_gpu_mem_mib"], got["peak_gpu_mem_unrecorded"]) == (1200.5, 1)


def test_a_jobs_rate_counts_what_its_last_attempt_computed():
    from shardflow.core.jobs import items_computed

    assert items_computed({"items": 10, "items_embedded": 4}) == 4  # an embed job that resumed 6 rows
    assert items_computed({"items": 10, "items_generated": 0}) == 0  # a summarise job that resumed them all
    assert items_computed({"items": 10, "method": "lead"}) == 10  # a lead job's record from before the key


@pytest.mark.parametrize("content", ['{"rows": []}', '[]', '{"jobs": {}}'])
def test_a_file_that_is_no_job_table_is_named(tmp_path, content):
    path = tmp_path / "jobs.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=rf"^{path}: not a job table \(an object with a 'jobs' list\)$"):
        read_job_table(path)


def test_small_figures_print_in_fixed_point_to_two_significant_digits():
    """`:.2g` printed a cost of 0.00004 as 4e-05 and a rate of 0.00003 records/s as 3e-05:
    make estimate, make status and the first page print such figures in fixed point."""
    from shardflow.core.jobs import money, significant

    assert [money(x) for x in (0.0, 0.00004, 0.0049, 0.005, 1234.5)] == ["0.00", "0.00004", "0.0049", "0.01", "1234.50"]
    assert [significant(x) for x in (3e-05, 0.04, 2.5, 9.96, 0.0)] == ["0.00003", "0.04", "2.5", "10", "0"]


def test_read_benchmark_that_the_csv_module_refuses_is_a_value_error_naming_it(tmp_path):
    """A power loss can leave a benchmark of zero bytes: past the csv module's field limit
    (128 KiB) it refused the file with csv.Error (Python 3.10: at any NUL), which neither
    `make status` nor the report caught as an unreadable file."""
    import csv

    path = tmp_path / "b.tsv"
    path.write_bytes(b"s\th:m:s\n" + b"\0" * 200_000)
    # The limit as a fresh process has it: the corpus readers raise it process-wide.
    before = csv.field_size_limit(131_072)
    try:
        with pytest.raises(ValueError, match=f"{path}: not a benchmark table"):
            read_benchmark(path)
    finally:
        csv.field_size_limit(before)


def test_a_finished_jobs_gpu_hours_add_a_resumed_train_jobs_earlier_training():
    """One count for status, a sweep's cost.json and the first page: the benchmark's
    seconds plus the training of the attempts a train job resumed from, per GPU held."""
    from shardflow.core.jobs import finished_job_gpu_hours

    train = {"device": "cuda:0", "world_size": 2, "train_seconds_total": 2700.0, "wall_seconds": 900.0}
    assert finished_job_gpu_hours(train, 1800.0) == pytest.approx((1800 + 1800) * 2 / 3600)
    chunk = {"device": "cuda:0"}  # no train seconds: the benchmark's alone
    assert finished_job_gpu_hours(chunk, 1800.0, 2) == pytest.approx(1.0)
    assert finished_job_gpu_hours({**chunk, "device": "cpu"}, 1800.0) == 0.0

import math
import re

import pytest

from shardflow.sweep.cost import JobCost, origin, sweep_cost


def test_origin_of_each_kind_of_benchmark():
    assert origin("benchmarks/sweeps/ret/p=1/seed=0/retrieval_evaluate.tsv", "ret") == "sweep"
    assert origin("./benchmarks/sweeps/ret/x.tsv", "ret") == "sweep"
    assert origin("benchmarks/sweeps/_embeddings/arguana/corpus/k1/embed_0.tsv", "ret") == "shared"
    assert origin("benchmarks/embed/arguana/embed_0.tsv", "ret") == "main_run"
    # The local copy a storage plugin made (EKS profile: default storage on S3).
    s3 = ".snakemake/storage/s3/bucket/runs/a"
    assert origin(f"{s3}/benchmarks/sweeps/ret/p=1/seed=0/retrieval_evaluate.tsv", "ret") == "sweep"
    assert origin(f"{s3}/benchmarks/sweeps/_embeddings/arguana/queries/k/embed_queries.tsv", "ret") == "shared"
    assert origin(f"{s3}/benchmarks/embed/arguana/embed_0.tsv", "ret") == "main_run"
    # Another sweep's folder that merely starts with this one's name is not this sweep's.
    assert origin("benchmarks/sweeps/ret2/p/seed=0/x.tsv", "ret") == "main_run"


def test_shared_jobs_count_once_and_by_origin():
    main = JobCost("benchmarks/embed/d/embed_0.tsv", 100.0, 0.1)
    shared = JobCost("benchmarks/sweeps/_embeddings/d/corpus/k/embed_0.tsv", 50.0, 0.05)
    runs = [
        [main, JobCost("benchmarks/sweeps/s/a/seed=0/retrieval_evaluate.tsv", 2.0)],
        [main, JobCost("benchmarks/sweeps/s/b/seed=0/retrieval_evaluate.tsv", 3.0)],
        [shared, JobCost("benchmarks/sweeps/s/c/seed=0/retrieval_evaluate.tsv", 4.0)],
        [shared, JobCost("benchmarks/sweeps/s/d/seed=0/retrieval_evaluate.tsv", 1.0)],
    ]
    cost = sweep_cost(runs, "s")
    assert cost["jobs"] == 6
    assert cost["wall_time_s"] == pytest.approx(160.0)
    assert cost["gpu_hours"] == pytest.approx(0.15)
    none = {"earlier_attempts": 0, "earlier_attempt_seconds": 0.0, "earlier_attempt_gpu_hours": 0.0}
    assert cost["by_origin"]["sweep"] == {"jobs": 4, "wall_time_s": 10.0, "gpu_hours": 0.0, **none}
    assert cost["by_origin"]["shared"] == {"jobs": 1, "wall_time_s": 50.0, "gpu_hours": 0.05, **none}
    assert cost["by_origin"]["main_run"] == {"jobs": 1, "wall_time_s": 100.0, "gpu_hours": 0.1, **none}
    # An origin without jobs writes floats all the same (a typed column when tabulated).
    empty = sweep_cost(runs[2:], "s")["by_origin"]["main_run"]
    assert empty == {"jobs": 0, "wall_time_s": 0.0, "gpu_hours": 0.0, **none} and isinstance(empty["gpu_hours"], float)
    # The runs table summed over points counts the main run's and the shared set twice.
    assert cost["summed_over_runs"]["wall_time_s"] == pytest.approx(310.0)
    assert cost["summed_over_runs"]["gpu_hours"] == pytest.approx(0.3)


def test_a_benchmark_read_with_two_different_figures_is_refused():
    a = JobCost("benchmarks/embed/d/embed_0.tsv", 1.0)
    with pytest.raises(ValueError, match="embed_0.tsv: read twice with different figures"):
        sweep_cost([[a], [JobCost(a.benchmark, 2.0)]], "s")


def test_missing_seconds_are_not_summed():
    cost = sweep_cost([[JobCost("benchmarks/sweeps/s/a.tsv", math.nan)], [JobCost("benchmarks/sweeps/s/a.tsv", math.nan)]], "s")
    assert cost["jobs"] == 1 and cost["wall_time_s"] == 0.0
    # NaN never reaches cost.json (it is not JSON): missing figures count as nothing.
    cost = sweep_cost([[JobCost("benchmarks/sweeps/s/b.tsv", math.nan, math.nan)]], "s")
    assert cost["gpu_hours"] == 0.0 and cost["summed_over_runs"]["gpu_hours"] == 0.0


def test_read_job_records_pairs_stats_with_the_first_benchmarks(tmp_path):
    """Two retrieval points reading one shared corpus embedding on CUDA (2 GPUs held),
    each with an evaluation job of its own; the shared files are listed for each."""
    import json

    from shardflow.sweep.cost import read_job_records

    def write(name, text):
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    bench = "s\th:m:s\tmax_rss\n{}\t0:00:01\t1.0\n"
    shared_stats = write("embed_0.stats.json", json.dumps({"device": "cuda:0", "gpus": 2}))
    shared_bench = write("embed_0.tsv", bench.format(1800.0))
    metrics = [write(f"m{i}.json", json.dumps({"ndcg_at_10": 0.5 + i})) for i in range(2)]
    evaluate = [write(f"e{i}.tsv", bench.format(10.0 + i)) for i in range(2)]
    records = read_job_records(
        [("a", 0, 1, 2), ("b", 0, 1, 2)], metrics, [shared_stats, shared_stats],
        [shared_bench, evaluate[0], shared_bench, evaluate[1]],
    )
    assert [(r.point, r.seed, r.metrics["ndcg_at_10"]) for r in records] == [("a", 0, 0.5), ("b", 0, 1.5)]
    assert records[0].gpu_hours == pytest.approx(1.0) and records[1].wall_time_s == pytest.approx(1811.0)
    assert records[0].costs[1].gpu_hours == 0.0  # no stats paired: not counted as GPU time
    cost = sweep_cost([r.costs for r in records], "s")
    assert cost["jobs"] == 3 and cost["gpu_hours"] == pytest.approx(1.0)
    assert cost["summed_over_runs"]["gpu_hours"] == pytest.approx(2.0)


def test_killed_attempts_count_as_a_stage_report_counts_them(tmp_path):
    """A sweep embed job rerun after a preempted attempt on another GPU: cost.json's
    GPU-hours add the attempt's CUDA seconds, as the stage's report does (one helper,
    core.jobs.earlier_attempt_costs), and say which part they were; the seconds stay
    the benchmarks'. A CPU attempt adds seconds but no GPU-hours."""
    import json

    from shardflow.core.jobs import job_costs
    from shardflow.sweep.cost import read_job_records

    def write(name, text):
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    stats = {"start_time": 0.0, "end_time": 1800.0, "seconds": 1800.0, "device": "cuda:0", "earlier_attempts": 2,
             "earlier_attempt_seconds": 2700.0, "earlier_attempt_devices": {"cpu": 900.0, "cuda:1": 1800.0}}
    bench = "s\th:m:s\tmax_rss\n{}\t0:00:01\t1.0\n"
    records = read_job_records(
        [("a", 0, 1, 2)], [write("m.json", json.dumps({"x": 1}))], [write("embed_0.stats.json", json.dumps(stats))],
        [write("embed_0.tsv", bench.format(1800.0)), write("merge.tsv", bench.format(5.0))],
    )
    assert records[0].gpu_hours == pytest.approx(1.0)  # 0.5 h of its own, 0.5 h of the killed CUDA attempt
    assert records[0].costs[0].gpu_hours == pytest.approx(job_costs([stats], [{"s": 1800.0}])["gpu_hours"])
    cost = sweep_cost([records[0].costs], "s")
    assert (cost["gpu_hours"], cost["wall_time_s"]) == (pytest.approx(1.0), 1805.0)
    assert (cost["earlier_attempts"], cost["earlier_attempt_seconds"]) == (2, 2700.0)
    assert cost["earlier_attempt_gpu_hours"] == pytest.approx(0.5)
    assert cost["by_origin"]["main_run"]["earlier_attempt_gpu_hours"] == pytest.approx(0.5)  # tmp_path: not the sweep's
    assert cost["summed_over_runs"]["gpu_hours"] == pytest.approx(1.0)


def test_an_embed_sweep_ranks_by_the_cost_its_collection_prices(tmp_path):
    """An embed job records GPU-hours and the records they paid for; the collection prices
    them at report.gpu_hour_price (a param of its own: a changed price reruns it, not the
    jobs), and the tables hold the cost columns the jobs wrote before, ranked and averaged
    over seeds as any metric: the cheaper point per record is the best one. Every figure
    in money says its currency (report.currency, also the collection's param): the
    tables' currency column, the paper tables' headers, best.json and cost.json, which
    prices the sweep's GPU-hours."""
    import json

    import pandas as pd

    from shardflow.sweep.cost import Price, read_job_records
    from shardflow.sweep.report import write_report
    from shardflow.sweep.table import run_result

    from .conftest import parse, sweep

    spec = parse({"speed": sweep(stage="embed", grid={"embedding.max_length": [64, 128]}, seeds=[0, 1],
                                 metrics={"estimated_cost_per_million_records": "min", "estimated_cost": "min"})})["speed"]
    bench = tmp_path / "b.tsv"
    bench.write_text("s\th:m:s\tmax_rss\n1.0\t0:00:01\t1.0\n")
    gpu_hours = {("max_length=64", 0): 0.5, ("max_length=64", 1): 0.7, ("max_length=128", 0): 0.9,
                 ("max_length=128", 1): 1.1}
    paths = []
    for (point, seed), hours in gpu_hours.items():
        path = tmp_path / f"{point}-{seed}.json"
        path.write_text(json.dumps({"gpu_hours": hours, "records_paid": 1000, "items_per_s": 1.0}))
        paths.append(str(path))
    assert list(gpu_hours) == spec.jobs()
    price = Price(2.0, "EUR")
    stats = tmp_path / "embed_0.stats.json"  # each job's one chunk job, on one GPU for its benchmark's 1 s
    stats.write_text(json.dumps({"device": "cuda:0"}))
    jobs = read_job_records([(p, s, 1, 1) for p, s in spec.jobs()], paths, [str(stats)] * 4, [str(bench)] * 4,
                            price=price)
    results = [run_result(j.point, j.seed, j.metrics, wall_time_s=j.wall_time_s, gpus=1) for j in jobs]
    files = write_report(spec, results, [j.costs for j in jobs], str(tmp_path / "speed"), price=price)
    runs = pd.read_parquet(files["runs_parquet"])
    assert runs["estimated_cost"].tolist() == [h * 2.0 for h in gpu_hours.values()]
    assert runs["estimated_cost_per_million_records"].tolist() == [h * 2.0 / 1000 * 1e6 for h in gpu_hours.values()]
    assert set(runs["gpu_hour_price"]) == {2.0}
    summary = pd.read_parquet(files["summary_parquet"]).set_index("point")
    assert summary.loc["max_length=64", "estimated_cost_per_million_records_mean"] == pytest.approx(1200.0)
    assert set(runs["currency"]) == {"EUR"} and set(summary["currency"]) == {"EUR"}
    assert pd.read_csv(files["runs_csv"])["currency"].tolist() == ["EUR"] * 4
    with open(files["best"], encoding="utf-8") as fh:
        assert json.load(fh) | {"params": None} == {
            "sweep": "speed", "metric": "estimated_cost_per_million_records", "goal": "min", "point": "max_length=64",
            "params": None, "mean": pytest.approx(1200.0), "std": pytest.approx(282.842712), "n_seeds": 2,
            "currency": "EUR",
        }
    with open(files["markdown"], encoding="utf-8") as fh:
        assert fh.readline() == "| max_length | estimated_cost_per_million_records (EUR) ↓ | estimated_cost (EUR) ↓ |\n"
    with open(files["latex"], encoding="utf-8") as fh:
        assert r"estimated\_cost\_per\_million\_records (EUR) $\downarrow$ & estimated\_cost (EUR)" in fh.read()
    with open(files["cost"], encoding="utf-8") as fh:
        cost = json.load(fh)
    assert cost["gpu_hours"] == round(1 / 3600, 6)  # one benchmark file, read by the four jobs: counted once
    assert (cost["estimated_cost"], cost["gpu_hour_price"], cost["currency"]) == (pytest.approx(round(1 / 3600, 6) * 2.0), 2.0, "EUR")
    # No price (another stage's collection): the records as the jobs wrote them.
    (plain,) = read_job_records([("max_length=64", 0, 0, 1)], paths[:1], [], [str(bench)])
    assert plain.metrics == {"gpu_hours": 0.5, "records_paid": 1000, "items_per_s": 1.0}


def test_an_embed_record_from_before_the_collection_priced_it_is_named(tmp_path):
    """A metrics.json written when the job priced itself has no records_paid: the
    collection stops naming the file and the job to rerun, not with a bare KeyError."""
    import json

    from shardflow.sweep.cost import Price, read_job_records

    old = tmp_path / "metrics.json"
    old.write_text(json.dumps({"gpu_hours": 0.5, "estimated_cost": 1.25, "gpu_hour_price": 2.5}))
    bench = tmp_path / "b.tsv"
    bench.write_text("s\th:m:s\tmax_rss\n1.0\t0:00:01\t1.0\n")
    with pytest.raises(ValueError, match=r"metrics\.json has no 'records_paid'.*--forcerun sweep_embed_metrics"):
        read_job_records([("p", 0, 0, 1)], [str(old)], [], [str(bench)], price=Price(2.5, "USD"))


def test_a_multi_gpu_jobs_killed_attempts_count_per_gpu_in_the_sweeps_cost(tmp_path):
    """A training sweep job on 2 GPUs (world_size 2), killed once after 30 min on CUDA and
    finished in 30 min: its GPU-hours are 2 x 0.5 for each attempt, in the run's row and
    in cost.json, and earlier_attempt_gpu_hours says 1.0 of them were the killed one's."""
    import json

    from shardflow.sweep.cost import read_job_records

    metrics = {"best_val_loss": 1.0, "device": "cuda:0", "world_size": 2, "earlier_attempts": 1,
               "earlier_attempt_devices": {"cuda:0": 1800.0}}
    path = tmp_path / "metrics.json"
    path.write_text(json.dumps(metrics))
    bench = tmp_path / "train.tsv"
    bench.write_text("s\th:m:s\tmax_rss\n1800.0\t0:30:00\t1.0\n")
    (record,) = read_job_records([("a", 0, 1, 1)], [str(path)], [str(path)], [str(bench)])
    assert record.gpu_hours == pytest.approx(2.0)
    cost = sweep_cost([record.costs], "s")
    assert (cost["gpu_hours"], cost["earlier_attempt_gpu_hours"]) == (pytest.approx(2.0), pytest.approx(1.0))
    assert cost["earlier_attempt_seconds"] == 1800.0


def test_a_chunk_job_counts_the_gpus_its_rule_gave_it_in_the_sweeps_cost(tmp_path):
    """resources.embed.gpu 2: an embed sweep's chunk jobs each held 2 GPUs, which their stats
    do not record. The collection's `jobs` param gives each stats file's GPUs
    (rules/common.smk sweep_job_shapes, plan.job_gpus), so cost.json, the run's
    gpu_hours and the cost it prices from the job's metrics (which count one GPU a chunk
    job, embed.measure) count both, killed attempts included; cost.json counted one. The
    priced record's gpu_hours are the ones its cost is priced from: 2.0, not the job's 1.0
    beside a cost of 2.0 GPU-hours. A shape without them (a test's, or a collection from
    before) counts one each."""
    import json

    from shardflow.sweep.cost import Price, read_job_records

    metrics = tmp_path / "metrics.json"
    metrics.write_text(json.dumps({"gpu_hours": 1.0, "records_paid": 1000}))  # 30 min + the killed 30 min
    stats = tmp_path / "embed_0.stats.json"
    stats.write_text(json.dumps({"device": "cuda:0", "earlier_attempts": 1, "earlier_attempt_devices": {"cuda:0": 1800.0}}))
    chunk, merge = tmp_path / "embed_0.tsv", tmp_path / "merge.tsv"
    chunk.write_text("s\th:m:s\tmax_rss\n1800.0\t0:30:00\t1.0\n")
    merge.write_text("s\th:m:s\tmax_rss\n10.0\t0:00:10\t1.0\n")
    files = [str(metrics)], [str(stats)], [str(chunk), str(merge)]
    (job,) = read_job_records([("p", 0, 1, 2, (2,))], *files, price=Price(3.0, "EUR"))
    assert job.gpu_hours == pytest.approx(2.0) and job.costs[0].earlier_attempt_gpu_hours == pytest.approx(1.0)
    assert job.costs[1].gpu_hours == 0.0  # the merge: no stats, no GPU
    assert sweep_cost([job.costs], "s", Price(3.0, "EUR"))["estimated_cost"] == pytest.approx(6.0)
    assert (job.metrics["estimated_cost"], job.metrics["gpu_hours"]) == (pytest.approx(6.0), 2.0)  # 1.0 x 2 GPUs
    assert job.metrics["gpu_hours"] == pytest.approx(job.gpu_hours)  # the runs table's figure
    (one,) = read_job_records([("p", 0, 1, 2)], *files, price=Price(3.0, "EUR"))
    assert one.gpu_hours == pytest.approx(1.0) and one.metrics["estimated_cost"] == pytest.approx(3.0)
    assert one.metrics["gpu_hours"] == 1.0  # as written


def test_a_resumed_training_jobs_earlier_attempts_count_in_the_sweeps_cost(tmp_path):
    """A training sweep job on 2 GPUs killed (a preempted spot node) and resumed from its
    checkpoint: its benchmark is the last attempt's alone, its metrics' train_seconds_total
    holds the training before it too. cost.json counts both, x the GPUs it held, as make
    status counts a train job (core.jobs.finished_job_gpu_hours, one helper); its job time
    stays the benchmark's. A job that ran from scratch has nothing before it."""
    import json

    from shardflow.core.jobs import earlier_train_seconds, finished_job_gpu_hours
    from shardflow.sweep import cost as sweep_cost_module
    from shardflow.sweep.cost import read_job_records
    from shardflow.workflow import status

    metrics = {"best_val_loss": 1.0, "device": "cuda:0", "world_size": 2, "steps": 1000, "resumed_from_step": 600,
               "wall_seconds": 400.0, "train_seconds_total": 1000.0}  # 600 s of training before this attempt
    path = tmp_path / "metrics.json"
    bench = tmp_path / "train.tsv"
    bench.write_text("s\th:m:s\tmax_rss\n420.0\t0:07:00\t1.0\n")  # the last attempt, start-up included

    def cost_of(record: dict) -> dict:
        path.write_text(json.dumps(record))
        (job,) = read_job_records([("a", 0, 1, 1)], [str(path)], [str(path)], [str(bench)])
        return sweep_cost([job.costs], "s")

    cost = cost_of(metrics)
    assert cost["gpu_hours"] == pytest.approx(round((420 + 600) * 2 / 3600, 6)) and cost["wall_time_s"] == 420.0
    assert status.finished_job_gpu_hours is sweep_cost_module.finished_job_gpu_hours is finished_job_gpu_hours
    assert earlier_train_seconds(metrics) == 600.0
    assert cost_of({**metrics, "resumed_from_step": 0, "train_seconds_total": 390.0})["gpu_hours"] == pytest.approx(
        round(420 * 2 / 3600, 6)
    )


def test_a_metrics_or_stats_file_that_is_not_a_json_object_is_named(tmp_path):
    """The collection reads every job's metrics and stats after every job ran: a file cut
    short (a full disk, a copy stopped midway) or holding another JSON value stops it
    naming the file and line, not with json's bare "Expecting value: line 1 column 1"
    or an AttributeError, which name neither among a hundred jobs' files."""
    from shardflow.sweep.cost import read_job_records

    bench = tmp_path / "b.tsv"
    bench.write_text("s\th:m:s\tmax_rss\n1.0\t0:00:01\t1.0\n")
    good = tmp_path / "good.json"
    good.write_text('{"best_val_loss": 1.0}')
    cut = tmp_path / "cut.json"
    cut.write_text('{"best_val_loss": 1.0,\n "steps"')
    listed = tmp_path / "list.json"
    listed.write_text("[1.0]")
    with pytest.raises(ValueError, match="^" + re.escape(f"{cut}:2: malformed JSON")):
        read_job_records([("p", 0, 0, 1)], [str(cut)], [], [str(bench)])
    with pytest.raises(ValueError, match="^" + re.escape(f"{listed}: a JSON list, not an object")):
        read_job_records([("p", 0, 0, 1)], [str(listed)], [], [str(bench)])
    with pytest.raises(ValueError, match="^" + re.escape(f"{cut}:2: malformed JSON")):
        read_job_records([("p", 0, 1, 1)], [str(good)], [str(cut)], [str(bench)])
    with pytest.raises(ValueError, match="^" + re.escape(f"{listed}: a JSON list, not an object")):
        read_job_records([("p", 0, 1, 1)], [str(good)], [str(listed)], [str(bench)])

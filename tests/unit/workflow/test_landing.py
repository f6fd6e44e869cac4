"""The report's first screen: sections render as reStructuredText tables, values stay text."""

import json

from docutils.core import publish_parts

from shardflow.workflow.landing import Section, records_in, render, retrieval_section, summarisation_section


def test_render_is_valid_rst_and_escapes_values():
    text = render([Section("Embedding: demo_*", [("records in", "3,000 read, 0 rejected"), ("odd", "a|b `c` *d*")])])
    html = publish_parts(text, writer_name="html", settings_overrides={"report_level": 2, "halt_level": 2})["html_body"]
    assert "<table" in html and "Embedding: demo_*" in html and "a|b `c` *d*" in html


def test_retrieval_and_summarisation_sections(tmp_path):
    metrics = {k: 0.5 for k in ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_10")}
    metrics.update(n_queries=6, n_documents=40, top_k=100)
    (tmp_path / "m.json").write_text(json.dumps(metrics))
    rows = dict(retrieval_section("tiny", {"metrics": tmp_path / "m.json"}).rows)
    assert rows["ndcg@10"] == "0.50000" and "6 queries against 40 documents" in rows["evaluated"]
    (tmp_path / "manifest.json").write_text(json.dumps({"total_records": 15, "rejected_records": 1}))
    rouge = {"systems": {"lead": {"rouge1": {"mean": 40.0, "ci_low": 38.0, "ci_high": 42.0, "n": 15}}}, "n_documents": 15}
    (tmp_path / "r.json").write_text(json.dumps(rouge))
    section = summarisation_section("news", {"manifest": tmp_path / "manifest.json", "metrics": tmp_path / "r.json"})
    assert dict(section.rows)["ROUGE lead"] == "rouge1 40.00 [38.00, 42.00]"


def training_files(tmp_path):
    """A training run's shards metadata and job table, as the training section reads them."""
    meta = {"totals": {"documents": None, "tokens": 100, "train": {"tokens": 90}, "val": {"tokens": 10}},
            "split": {"val_fraction": 0.1}, "tokenizer": {"kind": "char", "vocab_size": 65, "eot_id": 64},
            "tokens_per_shard": 100, "dtype": "uint16", "shards": [{"tokens": 90}, {"tokens": 10}]}
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "metadata.json").write_text(json.dumps(meta))
    (tmp_path / "jobs.json").write_text(json.dumps({"jobs": []}))


def sweep_summary(path, metric: str, means: dict) -> str:
    """A sweep's summary.parquet, as its collection writes it, with `metric`'s mean per point:
    the first page prints the best value with the decimals of its table column."""
    import pandas as pd

    pd.DataFrame({"point": list(means), f"{metric}_mean": list(means.values())}).to_parquet(path, index=False)
    return path


def test_training_section_of_a_diverged_run(tmp_path):
    """A diverged run's losses are null in metrics.json (strict JSON): the page says so."""
    from shardflow.workflow.landing import training_section

    training_files(tmp_path)
    metrics = {"steps": 6, "tokens_per_step": 64, "n_params": 1000, "resumed_from_step": 0, "best_val_loss": 4.1,
               "best_step": 3, "final_val_loss": None, "final_train_loss": None, "diverged": True,
               "train_seconds_total": 1.0, "wall_seconds": 2.0, "tokens_per_second": 100.0, "mfu": None,
               "device": "cpu", "world_size": 1, "dtype": "float32"}
    files = {"shards": tmp_path / "shards", "jobs": tmp_path / "jobs.json", "metrics": tmp_path / "m.json"}
    for best, want in ((4.1, "4.1000 at step 3 (last weights not finite (training diverged) on the whole val split)"),
                       (None, "none: no validation loss was finite (training diverged; see losses.parquet)")):
        files["metrics"].write_text(json.dumps({**metrics, "best_val_loss": best}, allow_nan=False))
        assert dict(training_section("tr", files).rows)["best val loss"] == want


def test_records_in_counts_what_was_read_kept_and_rejected():
    """A manifest's total_records are the records kept: 30 kept and 8 rejected were 38 read
    (the landing page said "30 read, 8 rejected")."""
    assert records_in({"total_records": 30, "rejected_records": 8}) == "38 read: 30 kept, 8 rejected"
    assert records_in({"total_records": 3000}) == "3,000 read: 3,000 kept, 0 rejected"


def test_sweep_section_names_the_best_point(tmp_path):
    from shardflow.workflow.landing import sweep_section

    (tmp_path / "best.json").write_text(json.dumps(
        {"metric": "rouge1", "goal": "max", "mean": 40.3887, "std": None, "params": {"summarise.k": 3}, "point": "k=3"}
    ))
    (tmp_path / "points.json").write_text(json.dumps(
        {"stage": "summarise", "params": ["summarise.k"], "seeds": [0], "points": [{"id": f"k={k}"} for k in (1, 2, 3)]}
    ))
    from shardflow.sweep.cost import JobCost, sweep_cost

    main = JobCost("benchmarks/embed/d/embed_0.tsv", 3600.0, 1.0)
    own = [JobCost(f"benchmarks/sweeps/lead-k/k={k}/seed=0/evaluate.tsv", 10.0) for k in (1, 2, 3)]
    (tmp_path / "cost.json").write_text(json.dumps(sweep_cost([[main, job] for job in own], "lead-k")))
    files = {name: tmp_path / f"{name}.json" for name in ("best", "points", "cost")}
    files["summary"] = sweep_summary(tmp_path / "summary.parquet", "rouge1", {"k=1": 38.1, "k=2": 39.7, "k=3": 40.3887})
    rows = dict(sweep_section("lead-k", files).rows)
    assert rows["stage"] == "summarise: 3 points x 1 seeds"
    assert rows["best rouge1 (max)"] == "40.389 at summarise.k=3"
    best = json.loads((tmp_path / "best.json").read_text())
    best["params"] = {"summarise.k": 3, "summarise.generation.num_beams": None}
    (tmp_path / "best.json").write_text(json.dumps(best))
    assert dict(sweep_section("lead-k", files).rows)["best rouge1 (max)"].endswith("num_beams=null")  # as the table says
    # The main run's embed job, read by every point, counts once.
    assert rows["cost"] == "4 jobs, 1 GPU-hours, 3,630 s of job time (each once; of them read: 1 of the main run's)"
    from shardflow.workflow.landing import _sweep_cost

    big = {"jobs": 1, "gpu_hours": 1234.5, "wall_time_s": 10.0,
           "by_origin": {"main_run": {"jobs": 0}, "shared": {"jobs": 1}}}
    assert _sweep_cost(big) == "1 job, 1,234 GPU-hours, 10 s of job time (each once; of them read: 1 shared)"
    tiny = {**big, "gpu_hours": 0.0000512}
    assert _sweep_cost(tiny).startswith("1 job, 0.0000512 GPU-hours,")  # fixed point, not 5.12e-05
    # The killed attempts the GPU-hours count, said as a stage's line says them.
    killed = {**big, "earlier_attempts": 2, "earlier_attempt_seconds": 1800.0, "earlier_attempt_gpu_hours": 0.5}
    assert _sweep_cost(killed).endswith("1 shared); 30.0 min of 2 killed attempts counted (0.5000 GPU-h; a lower "
                                        "bound: from each one's start to its last saved part)")


def test_a_sampled_sweeps_lines_say_its_points_were_drawn_at_random(tmp_path):
    """points.json's `sample` (spec `sample:`): the stage line says the points were drawn
    at random and with which seed, where a grid's says how many points; the varied line
    what each parameter was drawn from, where a grid's names the parameters."""
    from shardflow.sweep.cost import sweep_cost
    from shardflow.workflow.landing import page_problem, sweep_section

    params = ["train.lr", "train.n_layer", "train.dtype"]
    ids = ["dtype=bf16__lr=0.00333__n_layer=4", "dtype=fp32__lr=0.000137__n_layer=6"]
    sample = {"points": 2, "seed": 7, "grid": {"train.lr": {"log_uniform": [0.0001, 0.01]},
                                               "train.n_layer": {"int_uniform": [2, 8]}, "train.dtype": ["fp32", "bf16"]}}
    points = {"stage": "train", "params": params, "seeds": [0, 1], "points": [{"id": i} for i in ids], "sample": sample}
    best = {"metric": "best_val_loss", "goal": "min", "mean": 4.2, "std": 0.1, "point": ids[0],
            "params": {"train.lr": 0.00333, "train.n_layer": 4, "train.dtype": "bf16"}}
    for name, record in (("best", best), ("points", points), ("cost", sweep_cost([], "lr-random"))):
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    files = {name: tmp_path / f"{name}.json" for name in ("best", "points", "cost")}
    files["summary"] = sweep_summary(tmp_path / "summary.parquet", "best_val_loss", {ids[0]: 4.2, ids[1]: 5.0})
    section = sweep_section("lr-random", files)
    rows = dict(section.rows)
    assert rows["stage"] == "train: 2 points drawn at random (sample seed 7) x 2 seeds"
    assert rows["varied"] == ("train.lr log-uniform between 1e-4 and 1e-2; train.n_layer uniform over the integers "
                              "2 to 8; train.dtype one of fp32, bf16")
    assert page_problem(render([section])) is None
    # A points.json its collection wrote before the sample named its grid: the parameters.
    (tmp_path / "points.json").write_text(json.dumps({**points, "sample": {"points": 2, "seed": 7}}))
    assert dict(sweep_section("lr-random", files).rows)["varied"] == "train.lr, train.n_layer, train.dtype"
    # A grid's lines, as before.
    (tmp_path / "points.json").write_text(json.dumps({k: v for k, v in points.items() if k != "sample"}))
    rows = dict(sweep_section("lr-random", files).rows)
    assert (rows["stage"], rows["varied"]) == ("train: 2 points x 2 seeds", "train.lr, train.n_layer, train.dtype")


def test_a_priced_sweeps_lines_say_their_currency(tmp_path):
    """An embed sweep's collection prices it (report.gpu_hour_price, in report.currency):
    the first page's best line and cost line name the currency of what is money, as a
    stage's cost line does; a best metric that is no money has none."""
    from shardflow.sweep.cost import JobCost, Price, sweep_cost
    from shardflow.workflow.landing import sweep_section

    (tmp_path / "best.json").write_text(json.dumps(
        {"metric": "estimated_cost", "goal": "min", "mean": 0.5, "std": 0.25, "params": {"embedding.max_length": 64},
         "point": "max_length=64", "currency": "EUR"}
    ))
    (tmp_path / "points.json").write_text(json.dumps(
        {"stage": "embed", "params": ["embedding.max_length"], "seeds": [0, 1],
         "points": [{"id": "max_length=64"}, {"id": "max_length=128"}]}
    ))
    own = [JobCost(f"benchmarks/sweeps/speed/{p}/seed=0/embed_0.tsv", 1800.0, 0.5) for p in ("a", "b")]
    (tmp_path / "cost.json").write_text(json.dumps(sweep_cost([own], "speed", Price(2.0, "EUR"))))
    files = {name: tmp_path / f"{name}.json" for name in ("best", "points", "cost")}
    files["summary"] = sweep_summary(tmp_path / "summary.parquet", "estimated_cost",
                                     {"max_length=64": 0.5, "max_length=128": 0.75})
    rows = dict(sweep_section("speed", files).rows)
    assert rows["best estimated_cost (min)"] == "0.500 ± 0.250 EUR at embedding.max_length=64"
    assert rows["cost"] == "2 jobs, 1 GPU-hours (2.00 EUR at 2 EUR per GPU-hour), 3,600 s of job time"


def test_the_shards_line_says_which_shards_hold_a_longer_document_alone():
    """A document longer than tokens_per_shard gets a shard of its own: 'at most' was false."""
    from shardflow.workflow.landing import _shards_line

    meta = {"tokens_per_shard": 30, "dtype": "uint16", "shards": [{"tokens": 30}, {"tokens": 299}, {"tokens": 12}]}
    assert _shards_line(meta) == "3 of up to 30 uint16 tokens (1 hold one longer document or group alone, the largest 299 tokens)"
    meta["shards"].pop(1)
    assert _shards_line(meta) == "2 of up to 30 uint16 tokens"


def _embedding_rows(folder, stats: dict, job_seconds: float, gpu_hour_price: float = 2.5) -> dict:
    """The embedding section's rows for one chunk job with these stats and benchmark seconds."""
    from shardflow.core.jobs import write_job_table
    from shardflow.embed.report import ReportParams
    from shardflow.workflow.landing import embedding_section

    (folder / "s.json").write_text(json.dumps(stats))
    (folder / "b.tsv").write_text(f"s\tmax_rss\n{job_seconds}\t100\n")
    write_job_table(folder / "jobs.json", [str(folder / "s.json")], [str(folder / "b.tsv")])
    (folder / "manifest.json").write_text(json.dumps({"total_records": 30, "rejected_records": 0}))
    (folder / "v.json").write_text(json.dumps({"ok": True, "rows": 30, "dim": 8, "dtype": "float32"}))
    files = {"manifest": folder / "manifest.json", "jobs": folder / "jobs.json", "verification": folder / "v.json"}
    return dict(embedding_section("demo", files, ReportParams(gpu_hour_price=gpu_hour_price)).rows)


def test_embedding_section_where_every_record_came_from_resumed_parts(tmp_path):
    """The cost per record counts the records the jobs computed: none here (every chunk's
    job found all its parts), so the page says so instead of failing on a null."""
    stats = {"chunk": 0, "items": 30, "items_embedded": 0, "tokens": 0, "seconds": 0.5, "start_time": 10.0,
             "end_time": 10.5, "device": "cuda:0"}
    rows = _embedding_rows(tmp_path, stats, 2.0)
    assert rows["GPU-hours and cost"].endswith("(every record came from resumed parts: no cost per record); the "
                                               "killed attempts left no records (from before attempt records): "
                                               "their cost is not counted")


def test_embedding_section_says_how_much_of_killed_attempts_it_counted(tmp_path):
    """A job rerun after a preempted attempt: the attempt's CUDA time (from its record in
    the resume folder) is in the GPU-hours and cost, and the page says how much."""
    stats = {"chunk": 0, "items": 30, "items_embedded": 10, "tokens": 100, "seconds": 0.5, "start_time": 10.0,
             "end_time": 10.5, "device": "cuda:0", "earlier_attempts": 1, "earlier_attempt_seconds": 1800.0,
             "earlier_attempt_devices": {"cuda:1": 1800.0}}
    rows = _embedding_rows(tmp_path, stats, 1800.0, gpu_hour_price=2.0)
    assert rows["GPU-hours and cost"].startswith("1.0000 GPU-h, 2.00 USD (66666.67 per million records computed)")
    assert rows["GPU-hours and cost"].endswith("; 30.0 min of 1 killed attempts counted (on cuda:1 for 30.0 min; "
                                               "0.5000 GPU-h; a lower bound: from each one's start to its last "
                                               "saved part)")
    # The killed attempt ran on another GPU: the GPU-hours line names it; the rates are
    # the last attempt's, on its device alone.
    assert "while encoding on cuda:0 (20 records came from resumed parts" in rows["throughput"]


def test_a_cost_per_million_records_under_half_a_cent_is_not_zero(tmp_path):
    """A fast model on a cheap GPU: a million records in 2 s of job time at 2.5 an hour cost
    0.0014 per million. The line printed the cost with money() (0.0014 USD) but the cost per
    million with :.2f, "0.00 per million records computed", which reads as free."""
    stats = {"chunk": 0, "items": 1_000_000, "items_embedded": 1_000_000, "tokens": 10_000_000, "seconds": 1.5,
             "start_time": 10.0, "end_time": 11.5, "device": "cuda:0"}
    rows = _embedding_rows(tmp_path, stats, 2.0)
    assert rows["GPU-hours and cost"] == "0.0006 GPU-h, 0.0014 USD (0.0014 per million records computed)"
    # From half a cent up, to the cent as before.
    stats = {**stats, "items": 30, "items_embedded": 30}
    assert _embedding_rows(tmp_path, stats, 2.0)["GPU-hours and cost"] == (
        "0.0006 GPU-h, 0.0014 USD (46.30 per million records computed)")


def test_the_summarisation_rate_says_how_many_documents_came_from_resumed_parts(tmp_path):
    """As the embedding line does: the rate counts what the jobs summarised, so documents
    from a killed attempt's parts are named, and a run without any reads as before."""
    (tmp_path / "manifest.json").write_text(json.dumps({"total_records": 15}))
    summary = {"records": 15, "records_resumed": 0, "truncated_inputs": 0, "input_tokens": 10,
               "summary_tokens": 5, "compression_ratio": 0.5, "summarise_wall_time_s": 1.0, "chunks": 3,
               "items_per_s": 15.0, "devices": ["cuda:0"], "gpu_hours": 0.1, "estimated_cost": 0.25,
               "currency": "USD", "earlier_attempts": 0}
    files = {"manifest": tmp_path / "manifest.json", "summary": tmp_path / "s.json"}
    before = {k: v for k, v in summary.items() if k != "records_resumed"}  # a summary.json from before it was
    for written in (summary, before):
        files["summary"].write_text(json.dumps(written))
        rows = dict(summarisation_section("news", files).rows)
        assert rows["throughput"] == "15.00 documents/s while summarising on cuda:0"
        assert rows["GPU-hours and cost"] == "0.1000 GPU-h, 0.25 USD"
    files["summary"].write_text(json.dumps({**summary, "records_resumed": 1200, "items_per_s": 3.0}))
    rows = dict(summarisation_section("news", files).rows)
    assert rows["throughput"] == ("3.00 documents/s while summarising on cuda:0 (1,200 documents came from resumed "
                                  "parts of killed attempts, whose time this rate does not count)")
    assert rows["GPU-hours and cost"] == ("0.1000 GPU-h, 0.25 USD; the killed attempts left no records (from "
                                          "before attempt records): their cost is not counted")


def test_each_stages_page_says_its_peak_gpu_memory_or_not_on_a_gpu(tmp_path):
    """The largest job's peak GPU memory and its chunk, for picking a GPU and a batch size;
    a CPU run says so instead of 0; jobs from before peaks were recorded say that."""
    base = {"chunk": 2, "items": 30, "items_embedded": 30, "tokens": 300, "seconds": 0.5, "start_time": 10.0,
            "end_time": 10.5}
    gpu = {**base, "device": "cuda:0", "peak_gpu_mem_mib": 1536.4, "peak_gpu_mem_reserved_mib": 2048.0}
    assert _embedding_rows(tmp_path, gpu, 2.0)["peak GPU memory"] == (
        "1,536 MiB allocated, 2,048 MiB reserved by its one job (chunk 2)")
    cpu = {**base, "device": "cpu", "peak_gpu_mem_mib": None, "peak_gpu_mem_reserved_mib": None}
    assert _embedding_rows(tmp_path, cpu, 2.0)["peak GPU memory"] == "not on a GPU"
    assert _embedding_rows(tmp_path, {**base, "device": "cuda:0"}, 2.0)["peak GPU memory"] == (
        "not recorded (the jobs ran before shardflow recorded it)")

    (tmp_path / "manifest.json").write_text(json.dumps({"total_records": 15}))
    summary = {"records": 15, "truncated_inputs": 0, "input_tokens": 10, "summary_tokens": 5,
               "compression_ratio": 0.5, "summarise_wall_time_s": 1.0, "chunks": 3, "items_per_s": 15.0,
               "devices": ["cuda:0"], "gpu_hours": 0.1, "estimated_cost": 0.25, "currency": "USD",
               "peak_gpu_mem_mib": 900.0, "peak_gpu_mem_reserved_mib": 1000.0, "peak_gpu_mem_chunk": 0,
               "peak_gpu_mem_unrecorded": 2}
    files = {"manifest": tmp_path / "manifest.json", "summary": tmp_path / "s.json"}
    for changes, want in (
        ({}, "900 MiB allocated, 1,000 MiB reserved by the job of chunk 0, the largest of the 3 jobs' peaks; 2 of "
             "the jobs ran before shardflow recorded it and are not counted"),
        ({"devices": ["cpu"], "peak_gpu_mem_mib": None, "peak_gpu_mem_reserved_mib": None}, "not on a GPU"),
    ):
        files["summary"].write_text(json.dumps({**summary, **changes}))
        assert dict(summarisation_section("news", files).rows)["peak GPU memory"] == want
    # Lead and extractive count words, which the page called tokens.
    files["summary"].write_text(json.dumps({**summary, "length_unit": "words"}))
    assert dict(summarisation_section("news", files).rows)["lengths"].startswith("10 input and 5 summary words (")


def test_the_training_page_says_the_largest_ranks_peak_gpu_memory(tmp_path):
    from shardflow.workflow.landing import training_section

    training_files(tmp_path)
    metrics = {"steps": 6, "tokens_per_step": 64, "n_params": 1000, "resumed_from_step": 0, "best_val_loss": 4.1,
               "best_step": 3, "final_val_loss": 4.0, "train_seconds_total": 1.0, "wall_seconds": 2.0,
               "tokens_per_second": 100.0, "mfu": 0.2, "device": "cuda:0", "world_size": 2, "dtype": "bfloat16",
               "peak_gpu_mem_mib": 5120.0, "peak_gpu_mem_reserved_mib": 6000.0,
               "peak_gpu_mem_mib_by_rank": [5120.0, 4900.5]}
    (tmp_path / "train.tsv").write_text("s\th:m:s\n3.0\t0:00:03\n")
    files = {"shards": tmp_path / "shards", "jobs": tmp_path / "jobs.json", "metrics": tmp_path / "m.json",
             "benchmark": tmp_path / "train.tsv"}
    cases = (
        ({}, "5,120 MiB allocated, 6,000 MiB reserved on the busiest GPU: the largest of the 2 ranks' peaks "
             "(allocated by rank: 5,120, 4,900 MiB)"),
        ({"world_size": 1, "peak_gpu_mem_mib_by_rank": [5120.0]}, "5,120 MiB allocated, 6,000 MiB reserved"),
        ({"device": "cpu", "mfu": None, "peak_gpu_mem_mib": None, "peak_gpu_mem_reserved_mib": None,
          "peak_gpu_mem_mib_by_rank": [None, None]}, "not on a GPU"),
        ({"peak_gpu_mem_mib": None}, "not recorded (the run finished before shardflow recorded it)"),
    )
    for changes, want in cases:
        files["metrics"].write_text(json.dumps({**metrics, **changes}))
        assert dict(training_section("tr", files).rows)["peak GPU memory"] == want
    # GPU-hours: the job's 3 benchmark seconds on each of the 2 ranks' GPUs (core.jobs.last_attempt_gpu_hours).
    files["metrics"].write_text(json.dumps(metrics))
    assert dict(training_section("tr", files).rows)["GPU-hours and cost"] == f"{6 / 3600:.4f} GPU-h"
    # A run that trained with a smaller micro-batch after running out of memory says so.
    files["metrics"].write_text(json.dumps({**metrics, "micro_batch": 8, "grad_accum": 16, "config_micro_batch": 32,
                                            "config_grad_accum": 4}))
    assert dict(training_section("tr", files).rows)["micro-batch"] == (
        "micro-batch 8 (config 32) x grad_accum 16 after out-of-memory: the same global batch; numbers not "
        "bitwise those of micro-batch 32")
    files["metrics"].write_text(json.dumps({**metrics, "micro_batch": 32, "grad_accum": 4, "config_micro_batch": 32,
                                            "config_grad_accum": 4}))
    assert "micro-batch" not in dict(training_section("tr", files).rows)


def test_retrieval_metrics_beyond_the_ranking_depth_are_marked(tmp_path):
    """retrieval.top_k 100 over a larger corpus: metrics.json's @1000 metrics come from the
    100 hits; the section says so, from the record's list or, in a record written before
    it held one, from its top_k and n_documents. A sweep's best value so computed says it."""
    from shardflow.workflow.landing import sweep_section

    metrics = {k: 0.5 for k in ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_10")}
    metrics.update(n_queries=6, n_documents=8674, top_k=100)
    for record in (metrics, {**metrics, "beyond_ranking_depth": [f"all.{m}_at_1000" for m in ("ndcg", "recall")]}):
        (tmp_path / "m.json").write_text(json.dumps(record))
        rows = dict(retrieval_section("arguana", {"metrics": tmp_path / "m.json"}).rows)
        assert rows["recall@100"] == "0.50000"  # at the ranking's depth: the metric itself
        beyond = rows["† beyond the ranking"]
        assert "at a k deeper than the top-100 ranking (k = 1000: all.ndcg_at_1000, all." in beyond
        assert beyond.endswith("(metrics.json: beyond_ranking_depth; retrieval.top_k 1000 gives them)")
    (tmp_path / "m.json").write_text(json.dumps({**metrics, "top_k": 8674, "n_documents": 8674}))
    assert "† beyond the ranking" not in dict(retrieval_section("a", {"metrics": tmp_path / "m.json"}).rows)
    best = {"metric": "all.recall_at_1000", "goal": "max", "mean": 0.95, "std": None, "point": "top_k=100"}
    best.update(params={"retrieval.top_k": 100}, beyond_ranking_depth=True)
    points = {"stage": "retrieval", "params": ["retrieval.top_k"], "seeds": [0], "points": [{"id": "top_k=100"}]}
    origins = {"main_run": {"jobs": 0}, "shared": {"jobs": 0}}
    cost = {"jobs": 1, "gpu_hours": 0.0, "wall_time_s": 1.0, "by_origin": origins}
    for name, record in (("best", best), ("points", points), ("cost", cost)):
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    files = {name: tmp_path / f"{name}.json" for name in ("best", "points", "cost")}
    files["summary"] = sweep_summary(tmp_path / "summary.parquet", "all.recall_at_1000", {"top_k=100": 0.95})
    assert dict(sweep_section("depth", files).rows)["best all.recall_at_1000 (max)"] == (
        "0.950 at retrieval.top_k=100; computed on a ranking shallower than its k (retrieval.top_k): not the metric at k"
    )


def test_a_key_of_wide_or_combining_characters_keeps_the_table_whole(tmp_path):
    """A stored system's name is a key of the user's JSON ("ROUGE 要約"): docutils counts an
    East Asian wide character as two columns and a combining accent as none, so a key
    padded by characters ran into the value's column ("Malformed table. Text in column
    margin") and the page showed an error where its table was. The landing page itself
    still reads as one rule landing wrote (first_page would put a placeholder there)."""
    from shardflow.workflow.landing import page_problem

    (tmp_path / "manifest.json").write_text(json.dumps({"total_records": 2}))
    score = {"mean": 40.0, "ci_low": 38.0, "ci_high": 42.0, "n": 2}
    systems = {"要約": {"rouge1": score}, "café": {"rouge1": score}, "cafe\u0301": {"rouge1": score}}
    (tmp_path / "r.json").write_text(json.dumps({"systems": systems, "n_documents": 2}))
    section = summarisation_section("news", {"manifest": tmp_path / "manifest.json", "metrics": tmp_path / "r.json"})
    text = render([section, Section("Sweep: 長い名前", [("best 要約", "1"), ("stage", "summarise")])])
    html = publish_parts(text, writer_name="html", settings_overrides={"report_level": 2, "halt_level": 2})["html_body"]
    assert html.count("<table") == 2 and "ROUGE 要約" in html and "rouge1 40.00 [38.00, 42.00]" in html
    assert "ROUGE cafe\u0301" in html and "Sweep: 長い名前" in html
    assert page_problem(text) is None


def test_counts_on_the_first_page_have_thousands_separators_as_its_other_counts(tmp_path):
    """The page writes counts as 12,000 ("12,000 steps of ...", "3,000 read", "resumed from
    step 12,000"), but a few bare: "at step 12000" under "12,000 steps", "2000 chunk jobs"
    beside "2,000 read", "1500 killed attempts", "1000 points". Each reads as the others now."""
    from shardflow.workflow.landing import sweep_section, training_section

    training_files(tmp_path)
    metrics = {"steps": 12000, "tokens_per_step": 64, "n_params": 1000, "resumed_from_step": 0,
               "best_val_loss": 4.1, "best_step": 12000, "final_val_loss": 4.0, "train_seconds_total": 1.0,
               "wall_seconds": 2.0, "tokens_per_second": 100.0, "mfu": None, "device": "cpu", "world_size": 1,
               "dtype": "float32"}
    (tmp_path / "m.json").write_text(json.dumps(metrics))
    files = {"shards": tmp_path / "shards", "jobs": tmp_path / "jobs.json", "metrics": tmp_path / "m.json"}
    rows = dict(training_section("tr", files).rows)
    assert rows["steps"].startswith("12,000 steps of 64 tokens")
    assert rows["best val loss"] == "4.1000 at step 12,000 (last weights 4.0000 on the whole val split)"

    (tmp_path / "manifest.json").write_text(json.dumps({"total_records": 2000}))
    summary = {"records": 2000, "truncated_inputs": 0, "input_tokens": 10, "summary_tokens": 5,
               "compression_ratio": 0.5, "summarise_wall_time_s": 1.0, "chunks": 2000, "items_per_s": 15.0,
               "devices": ["cuda:0"], "gpu_hours": 0.1, "estimated_cost": 0.25, "currency": "USD",
               "earlier_attempts": 1500, "earlier_attempt_seconds": 1800.0, "earlier_attempt_gpu_hours": 0.5,
               "peak_gpu_mem_mib": 900.0, "peak_gpu_mem_reserved_mib": None, "peak_gpu_mem_chunk": 7,
               "peak_gpu_mem_unrecorded": 1200}
    (tmp_path / "s.json").write_text(json.dumps(summary))
    rows = dict(summarisation_section("news", {"manifest": tmp_path / "manifest.json", "summary": tmp_path / "s.json"})
                .rows)
    assert rows["wall time"] == "1.0 s summarising (2,000 chunk jobs, model loading not included)"
    # One chunk: "1 chunk job", as the neighbours section says it (it said "1 chunk jobs").
    (tmp_path / "s1.json").write_text(json.dumps({**summary, "chunks": 1}))
    one = dict(summarisation_section("news", {"manifest": tmp_path / "manifest.json", "summary": tmp_path / "s1.json"})
               .rows)
    assert one["wall time"] == "1.0 s summarising (1 chunk job, model loading not included)"
    assert "; 30.0 min of 1,500 killed attempts counted (" in rows["GPU-hours and cost"]
    assert rows["peak GPU memory"] == ("900 MiB allocated by the job of chunk 7, the largest of the 2,000 jobs' "
                                       "peaks; 1,200 of the jobs ran before shardflow recorded it and are not counted")

    ids = [f"k={k}" for k in range(1000)]
    points = {"stage": "summarise", "params": ["summarise.k"], "seeds": [0], "points": [{"id": i} for i in ids]}
    best = {"metric": "rouge1", "goal": "max", "mean": 40.0, "std": None, "params": {"summarise.k": 1}, "point": "k=1"}
    cost = {"jobs": 1000, "gpu_hours": 0.0, "wall_time_s": 1.0, "by_origin": {"main_run": {"jobs": 0},
                                                                               "shared": {"jobs": 0}}}
    for name, record in (("best", best), ("points", points), ("cost", cost)):
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    files = {name: tmp_path / f"{name}.json" for name in ("best", "points", "cost")}
    files["summary"] = sweep_summary(tmp_path / "summary.parquet", "rouge1", dict.fromkeys(ids, 40.0))
    assert dict(sweep_section("k", files).rows)["stage"] == "summarise: 1,000 points x 1 seeds"


def test_the_documents_line_says_duplicates_were_not_looked_for_under_dedup_false(tmp_path):
    """shards.dedup: false drops no duplicate because none is looked for: "0 duplicates
    dropped" read as a corpus checked and clean, where a copy may be in both splits."""
    from shardflow.workflow.landing import training_section

    training_files(tmp_path)
    meta = json.loads((tmp_path / "shards" / "metadata.json").read_text())
    meta["totals"] = {"documents": 10, "tokens": 100, "train": {"documents": 9, "tokens": 90},
                      "val": {"documents": 1, "tokens": 10}}
    meta["split"] = {"method": "hash", "val_fraction": 0.1, "key": "id"}
    metrics = {"steps": 6, "tokens_per_step": 64, "n_params": 1000, "resumed_from_step": 0, "best_val_loss": 4.1,
               "best_step": 3, "final_val_loss": 4.0, "train_seconds_total": 1.0, "wall_seconds": 2.0,
               "tokens_per_second": 100.0, "mfu": None, "device": "cpu", "world_size": 1, "dtype": "float32"}
    (tmp_path / "m.json").write_text(json.dumps(metrics))
    files = {"shards": tmp_path / "shards", "jobs": tmp_path / "jobs.json", "metrics": tmp_path / "m.json"}
    checked = {"within_chunks": True, "across_chunks": True, "duplicates_within_chunks": 2,
               "duplicates_across_chunks": 1}
    unchecked = {"within_chunks": False, "across_chunks": False, "duplicates_within_chunks": 0,
                 "duplicates_across_chunks": 0}
    for dedup, want in (
        (checked, "10 (9 train / 1 val, by id hash); 3 duplicates dropped"),
        (unchecked, "10 (9 train / 1 val, by id hash); duplicates not looked for (shards.dedup: false: a copy of a "
                    "document may be in both splits)"),
    ):
        (tmp_path / "shards" / "metadata.json").write_text(json.dumps({**meta, "dedup": dedup}))
        assert dict(training_section("tr", files).rows)["documents in"] == want


def test_the_embedding_rates_say_how_many_jobs_ran_at_once(tmp_path):
    """Chunk jobs pinned to their own GPUs each see theirs as cuda:0: four jobs on four
    GPUs at once encode four times as fast as one, and the page said "on cuda:0" of the
    sum, a rate a reader takes for one GPU's. It says how many jobs made it, where more
    than one ran at once."""
    from shardflow.core.jobs import write_job_table
    from shardflow.embed.report import ReportParams
    from shardflow.workflow.landing import embedding_section

    def rows(intervals):
        stats, benches = [], []
        for i, (start, end) in enumerate(intervals):
            s = {"chunk": i, "items": 100, "items_embedded": 100, "tokens": 1000, "seconds": end - start,
                 "start_time": start, "end_time": end, "device": "cuda:0"}
            (tmp_path / f"s{i}.json").write_text(json.dumps(s))
            (tmp_path / f"b{i}.tsv").write_text(f"s\tmax_rss\n{end - start + 5}\t100\n")
            stats.append(str(tmp_path / f"s{i}.json"))
            benches.append(str(tmp_path / f"b{i}.tsv"))
        write_job_table(tmp_path / "jobs.json", stats, benches)
        (tmp_path / "manifest.json").write_text(json.dumps({"total_records": 100 * len(intervals)}))
        (tmp_path / "v.json").write_text(json.dumps({"ok": True, "rows": 100 * len(intervals), "dim": 8,
                                                    "dtype": "float32"}))
        files = {"manifest": tmp_path / "manifest.json", "jobs": tmp_path / "jobs.json", "verification": tmp_path / "v.json"}
        return dict(embedding_section("demo", files, ReportParams()).rows)

    parallel = rows([(0.0, 10.0), (0.0, 10.0), (1.0, 9.0), (2.0, 10.0)])["throughput"]
    assert parallel == ("40.0 records/s, 400 tokens/s while encoding on cuda:0, up to 4 chunk jobs at once: the "
                        "rates are theirs together, not one job's or one device's")
    one_by_one = rows([(0.0, 10.0), (10.0, 20.0)])["throughput"]  # touching, not overlapping
    assert one_by_one == "10.0 records/s, 100 tokens/s while encoding on cuda:0"


def test_a_key_with_a_wide_combining_mark_keeps_the_table_whole():
    """Japanese in decomposed form (NFD, as macOS writes file names) spells が as か and
    U+3099, a combining mark that East Asian width calls wide: docutils gives it one
    column (two, less one for combining), not none. Counted as none, the widest key ran
    into the value's column, and the page showed "Malformed table" where its table was."""
    from shardflow.workflow.landing import page_problem

    nfd = "ROUGE まとめか\u3099き"
    text = render([Section("Summarisation: news", [(nfd, "rouge1 40.00"), ("records in", "2")])])
    html = publish_parts(text, writer_name="html", settings_overrides={"report_level": 2, "halt_level": 2})["html_body"]
    assert html.count("<table") == 1 and nfd in html
    assert page_problem(text) is None


def test_a_retrieval_sections_binary_metrics_name_a_relevance_level_away_from_1(tmp_path):
    """At retrieval.relevance_level 2 (TREC DL's passage judgements) mrr@10, map@10 and
    recall count only grades of 2 and above: not the numbers MTEB's level 1 gives for the
    same run. metrics.json records the level away from 1, and the first page says so."""
    metrics = {k: 0.5 for k in ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_10")}
    metrics.update(n_queries=43, n_documents=1000, top_k=1000)
    (tmp_path / "m.json").write_text(json.dumps(metrics))
    assert dict(retrieval_section("dl19", {"metrics": tmp_path / "m.json"}).rows)["evaluated"] == (
        "43 queries against 1,000 documents (exact top-1000)"
    )
    (tmp_path / "m.json").write_text(json.dumps({**metrics, "relevance_level": 2}))
    assert dict(retrieval_section("dl19", {"metrics": tmp_path / "m.json"}).rows)["evaluated"] == (
        "43 queries against 1,000 documents (exact top-1000); recall, MRR and MAP count grades of 2 and above as "
        "relevant (retrieval.relevance_level), nDCG the grades themselves"
    )


def test_a_retrieval_sweeps_best_line_names_a_relevance_level_away_from_1(tmp_path):
    """A retrieval sweep scored at retrieval.relevance_level 2 (TREC DL's graded passages):
    its best recall@10 counts only grades of 2 and above, not the number MTEB's level 1 gives,
    so the first page's best line names the level as the sweep's figures do. nDCG reads the
    grades, whatever the level, and keeps its line; scored at 1, the page is the same bytes
    as before the level was named anywhere (the text below)."""
    from shardflow.sweep import parse_sweeps
    from shardflow.sweep.report import write_report
    from shardflow.sweep.table import run_result
    from shardflow.workflow.landing import sweep_section

    sweeps = {"dl": {"stage": "retrieval", "grid": {"retrieval.top_k": [100, 1000]}, "seeds": [0],
                     "metrics": {"recall_at_10": "max", "ndcg_at_10": "max"}}}
    config = {"retrieval": {"top_k": 1000, "path": "/data/dl19", "relevance_level": 1}, "embedding": {"seed": 0}}

    def page(levels, best="recall_at_10"):
        """The sweep's section and page, its points' runs scored at `levels` (one a point)."""
        spec = parse_sweeps({"dl": {**sweeps["dl"], "best": best}}, config, lambda c: None)["dl"]
        runs = []
        for i, ((pid, seed), level) in enumerate(zip(spec.jobs(), levels, strict=True)):
            record = {"recall_at_10": 0.5 + 0.1 * i, "ndcg_at_10": 0.4}
            record.update({"relevance_level": level} if level != 1 else {})  # as metrics.json writes it
            runs.append(run_result(pid, seed, record, {"s": 30.0}))
        files = write_report(spec, runs, [[] for _ in runs], str(tmp_path / f"{best}-{levels}"))
        section = sweep_section("dl", {**{name: files[name] for name in ("best", "points", "cost")},
                                       "summary": files["summary_parquet"]})
        return dict(section.rows), render([section])

    assert page((2, 2))[0]["best recall_at_10 (relevance >= 2; max)"] == "0.600 at retrieval.top_k=1000"
    assert "best ndcg_at_10 (max)" in page((2, 2), best="ndcg_at_10")[0]
    # Runs kept from before the level changed (--touch): the best point's own level, the one
    # its value was scored at (it read "relevance >= 1 or 2, by point", every level of the sweep).
    assert page((1, 2))[0]["best recall_at_10 (relevance >= 2; max)"] == "0.600 at retrieval.top_k=1000"
    assert page((2, 1))[0]["best recall_at_10 (relevance >= 1; max)"] == "0.600 at retrieval.top_k=1000"
    assert page((1, 1))[1] == (
        "shardflow run\n=============\n\nWhat to check first, per stage that ran. Figures, per-chunk timings and "
        "provenance\nare in the categories below; results/<dataset>/ holds the files.\n\nSweep: dl\n---------\n\n"
        "========================= " + "=" * 60 + "\n"
        "stage                     retrieval: 2 points x 1 seeds\n"
        "varied                    retrieval.top\\_k\n"
        "best recall\\_at\\_10 (max) 0.600 at retrieval.top\\_k=1000\n"
        "cost                      0 jobs, 0 GPU-hours, 0 s of job time\n"
        "========================= " + "=" * 60 + "\n"
    )


def test_a_sweeps_best_value_reads_as_its_table_cell(tmp_path):
    """The first page printed a sweep's best mean and std with `:.4g`, not as table.md prints
    the same cell (export.metric_decimals, fixed): ndcg@10 means of 0.99962 and 0.99996 (with
    more decimals in the table, which tells them apart) read "1 ± 1.414e-05", a throughput
    of 45678.9 tokens/s "4.568e+04", and a ROUGE of 40.3887 "40.39" beside the table's
    40.389. The page's value is now the table's bold cell, character for character."""
    import re
    from pathlib import Path

    from shardflow.sweep import parse_sweeps
    from shardflow.sweep.report import write_report
    from shardflow.sweep.table import run_result
    from shardflow.workflow.landing import sweep_section

    config = {"retrieval": {"top_k": 1000, "path": "/data/dl19", "relevance_level": 1}, "embedding": {"seed": 0}}
    cases = (
        ("ndcg_at_10", (0.99961, 0.99963, 0.99995, 0.99997), "1.0000 ± 0.0000"),
        ("ndcg_at_10", (45678.9, 45678.9, 1.0, 1.0), "45678.900 ± 0.000"),
        ("ndcg_at_10", (40.3887, 40.3887, 1.0, 1.0), "40.389 ± 0.000"),
    )
    for i, (metric, values, want) in enumerate(cases):
        sweep = {"stage": "retrieval", "grid": {"retrieval.top_k": [1000, 100]}, "seeds": [0, 1],
                 "metrics": {metric: "max"}}
        spec = parse_sweeps({"dl": sweep}, config, lambda c: None)["dl"]
        runs = [run_result(pid, seed, {metric: v}, {"s": 30.0}) for (pid, seed), v in zip(spec.jobs(), values,
                                                                                          strict=True)]
        files = write_report(spec, runs, [[] for _ in runs], str(tmp_path / str(i)))
        section = sweep_section("dl", {**{name: files[name] for name in ("best", "points", "cost")},
                                       "summary": files["summary_parquet"]})
        row = dict(section.rows)[f"best {metric} (max)"]
        table = Path(files["markdown"]).read_text(encoding="utf-8")
        assert row.split(" at ")[0] == want
        assert f"**{want}**" in table, re.findall(r"\*\*[^*]+\*\*", table)


def test_a_priced_sweeps_best_cost_reads_as_its_table_cell(tmp_path):
    """An embed sweep ranked by estimated_cost, its jobs a few GPU seconds each: the best
    line read "0.000 USD" (3 decimals), a cost that is not 0 read as free, beside the
    table's cells. Money columns get the decimals that tell their amounts apart
    (export.money_decimals), and the line reads the table's bold cell."""
    from pathlib import Path

    from shardflow.sweep import parse_sweeps
    from shardflow.sweep.cost import Price
    from shardflow.sweep.report import write_report
    from shardflow.sweep.table import run_result
    from shardflow.workflow.landing import sweep_section

    sweep = {"stage": "embed", "grid": {"embedding.max_length": [64, 128, 256]}, "seeds": [0],
             "metrics": {"estimated_cost": "min"}}
    spec = parse_sweeps({"c": sweep}, {"embedding": {"seed": 0, "max_length": None}}, lambda c: None)["c"]
    costs = (0.0002, 0.0004, 0.0049)
    runs = [run_result(pid, seed, {"estimated_cost": v}, {"s": 1.0}) for (pid, seed), v in zip(spec.jobs(), costs,
                                                                                                strict=True)]
    files = write_report(spec, runs, [[] for _ in runs], str(tmp_path / "c"), price=Price(2.5, "USD"))
    section = sweep_section("c", {**{name: files[name] for name in ("best", "points", "cost")},
                                  "summary": files["summary_parquet"]})
    assert dict(section.rows)["best estimated_cost (min)"] == "0.0002 USD at embedding.max_length=64"
    assert "| 64 | **0.0002** |" in Path(files["markdown"]).read_text(encoding="utf-8")


# snakemake.report.auto_report (9.27): the link targets it appends to every caption before
# Jinja2 renders it, and the Jinja2 options it renders with.
SNAKEMAKE_RST_LINKS = """

.. _Workflow: javascript:show_panel('workflow')
.. _Statistics: javascript:show_panel('statistics')
{% for cat, catresults in categories|dictsort %}
.. _{{ cat.name }}: javascript:app.showCategory('{{ cat.name|urlencode }}')
{% endfor %}
{% for res in files %}
.. _{{ res.target }}: javascript:app.showResultInfo('{{ res.path|urlencode }}')
{% endfor %}
"""


def _caption_as_snakemake_renders_it(caption, params: dict, tmp_path) -> str:
    """Snakemake's own FileRecord.render for a figure of a job with these params (what
    `snakemake --report` does for each output marked report(..., caption=...)): the
    caption file, with the links above, through Jinja2 with `snakemake` (params, config,
    wildcards) and then docutils' HTML writer."""
    import io
    from pathlib import Path
    from types import SimpleNamespace

    from jinja2 import Environment
    from snakemake.iocontainers import InputFiles, Log, OutputFiles, Params, ResourceList, Wildcards
    from snakemake.report import FileRecord

    figure = tmp_path / "per_query_ndcg.png"
    figure.write_bytes(b"\x89PNG\r\n\x1a\n")
    sources = SimpleNamespace(open=lambda path: io.StringIO(Path(path).read_text(encoding="utf-8")))
    rule = SimpleNamespace(name="retrieval_evaluate", module_globals={"config": {}},
                           workflow=SimpleNamespace(sourcecache=sources))
    job = SimpleNamespace(input=InputFiles(), output=OutputFiles(), params=Params(fromdict=params),
                          wildcards=Wildcards(), threads=1, resources=ResourceList(), log=Log(), rule=rule)
    record = FileRecord(path=figure, job=job, raw_caption=caption)
    record.render(Environment(trim_blocks=True, lstrip_blocks=True), SNAKEMAKE_RST_LINKS, {}, [])
    return record.caption


def test_the_per_query_figures_caption_names_a_relevance_level_away_from_1(tmp_path):
    """rules/captions/retrieval_per_query.rst, as the report renders it: away from
    retrieval.relevance_level 1 (a param of retrieval_evaluate only there) it says what the
    figure's recall, MRR and MAP cells count as relevant; at 1 it renders as the caption
    did before it was templated (the text below)."""
    from tests.conftest import REPO

    caption = REPO / "rules" / "captions" / "retrieval_per_query.rst"
    before = tmp_path / "before.rst"
    before.write_text("Distribution of nDCG@10 over the evaluated queries, with the headline metrics.\n")
    at_1 = _caption_as_snakemake_renders_it(caption, {"top_k": 1000, "block_size": 65536}, tmp_path)
    assert at_1 == _caption_as_snakemake_renders_it(before, {"top_k": 1000, "block_size": 65536}, tmp_path)
    assert "relevance" not in at_1
    at_2 = _caption_as_snakemake_renders_it(caption, {"top_k": 1000, "relevance_level": 2}, tmp_path)
    assert at_2.endswith(
        "with the headline metrics; recall, MRR and MAP count grades of 2 and above as relevant "
        "(retrieval.relevance_level), nDCG the grades themselves.</p>\n"
    )


def test_the_training_gpu_hours_are_those_make_status_and_a_sweep_count(tmp_path):
    """The page counted a train job's GPU-hours from its metrics' train_seconds_total alone,
    where make status and a training sweep's cost.json count its benchmark's seconds (the
    whole job: start-up, evaluation, export) and the training of the attempts before it
    (core.jobs.earlier_train_seconds), x the GPUs it held: the page said less for the
    same job."""
    from shardflow.core.jobs import earlier_train_seconds, last_attempt_gpu_hours
    from shardflow.embed.report import ReportParams
    from shardflow.workflow.landing import training_section

    training_files(tmp_path)
    metrics = {"steps": 6, "tokens_per_step": 64, "n_params": 1000, "resumed_from_step": 3, "best_val_loss": 4.1,
               "best_step": 3, "final_val_loss": 4.0, "train_seconds_total": 900.0, "wall_seconds": 500.0,
               "tokens_per_second": 100.0, "mfu": None, "device": "cuda:0", "world_size": 2, "dtype": "bfloat16"}
    (tmp_path / "m.json").write_text(json.dumps(metrics))
    (tmp_path / "train.tsv").write_text("s\th:m:s\tmax_rss\n720.0\t0:12:00\t100.0\n")
    files = {"shards": tmp_path / "shards", "jobs": tmp_path / "jobs.json", "metrics": tmp_path / "m.json",
             "benchmark": tmp_path / "train.tsv"}
    # 720 s of this job's benchmark and 400 s of training before it, on 2 GPUs.
    want = last_attempt_gpu_hours(metrics, 720.0 + earlier_train_seconds(metrics))
    assert want == 2 * 1120 / 3600
    report = ReportParams(gpu_hour_price=3.0, currency="EUR")
    assert dict(training_section("tr", files, report).rows)["GPU-hours and cost"] == (
        f"{want:.4f} GPU-h, {3.0 * want:.2f} EUR"
    )


def neighbours_files(tmp_path, ids: list[str], rows: list[tuple], threshold: float, k: int = 1) -> dict:
    """A neighbours run's summary and job table, as merge_neighbours writes them, from one
    chunk job's table `rows` (id, rank, neighbour, score, row, neighbour row) over `ids`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardflow.core.atomic import write_json
    from shardflow.core.columns import write_ids_parquet
    from shardflow.core.jobs import write_job_table
    from shardflow.retrieval.neighbours import TABLE_SCHEMA, NeighbourParams, merge_neighbours

    columns = list(zip(*rows, strict=True)) or [[] for _ in TABLE_SCHEMA]
    pq.write_table(pa.Table.from_arrays([pa.array(c) for c in columns], schema=TABLE_SCHEMA), tmp_path / "c0.parquet")
    write_ids_parquet(tmp_path / "ids.parquet", ids)
    stats = {"items": len(ids), "documents": len(ids), "k": min(k, len(ids) - 1), "similarity": "cosine",
             "backend": "torch", "device": "cpu", "seconds": 0.25, "chunk": 0}
    write_json(tmp_path / "c0.stats.json", stats)
    (tmp_path / "c0.tsv").write_text("s\th:m:s\tmax_rss\n1.0\t0:00:01\t100\n")
    files = {"summary": tmp_path / "summary.json", "jobs": tmp_path / "jobs.json"}
    write_job_table(files["jobs"], [str(tmp_path / "c0.stats.json")], [str(tmp_path / "c0.tsv")])
    outputs = {name: str(tmp_path / f"{name}.out") for name in ("table", "pairs", "groups", "figure")}
    merge_neighbours([str(tmp_path / "c0.parquet")], str(tmp_path / "ids.parquet"),
                     NeighbourParams(k=k, duplicate_threshold=threshold), {**outputs, "summary": str(files["summary"])})
    return files


def test_the_neighbours_section_says_what_was_searched_the_nearest_scores_and_the_near_duplicates(tmp_path):
    """a and b are twins, each the other's one neighbour (k 1) at 0.99: a pair, one group,
    one document to drop; both have all their neighbours at or above the threshold while
    others were left unlisted, so their group may be larger (`saturated`): that row is
    there only then. Each count's noun agrees with it ("1 pairs", "1 groups", "drops 1
    documents" and "1 chunk jobs" it said)."""
    from shardflow.workflow.landing import neighbours_section, page_problem

    ids = ["a", "b", "c", "d"]
    rows = [("a", 1, "b", 0.99, 0, 1), ("b", 1, "a", 0.99, 1, 0), ("c", 1, "a", 0.5, 2, 0), ("d", 1, "c", 0.3, 3, 2)]
    section = neighbours_section("ds", neighbours_files(tmp_path, ids, rows, 0.9))
    assert section.title == "Neighbours: ds"
    got = dict(section.rows)
    assert list(got) == ["searched", "nearest score", "near-duplicates", "groups may be larger"]
    assert got["searched"] == "4 documents, the 1 nearest of each among the others (exact, cosine), 0.2 s over 1 chunk " \
                              "job on cpu"
    assert got["nearest score"].startswith("median 0.745, 1% of documents below 0.306, 1% above 0.99")
    assert got["near-duplicates"] == ("1 pair scoring 0.9 or more, in 1 group (the largest 2); keeping one a group "
                                      "drops 1 document (25.00%)")
    assert got["groups may be larger"].startswith("2 documents have their one neighbour at or above the threshold")
    # b's one neighbour listed below the threshold: a alone has all its neighbours above it.
    alone = [rows[0], ("b", 1, "c", 0.5, 1, 2), *rows[2:]]
    one = dict(neighbours_section("ds", neighbours_files(tmp_path, ids, alone, 0.9)).rows)
    assert one["groups may be larger"].startswith("1 document has its one neighbour at or above the threshold")
    two = [("a", 1, "b", 0.99, 0, 1), ("a", 2, "c", 0.95, 0, 2), ("b", 1, "a", 0.99, 1, 0), ("b", 2, "c", 0.5, 1, 2),
           ("c", 1, "a", 0.95, 2, 0), ("c", 2, "b", 0.5, 2, 1), ("d", 1, "c", 0.3, 3, 2), ("d", 2, "a", 0.2, 3, 0)]
    wider = dict(neighbours_section("ds", neighbours_files(tmp_path, ids, two, 0.9, k=2)).rows)
    assert wider["groups may be larger"].startswith("1 document has all 2 neighbours at or above the threshold")
    assert page_problem(render([section])) is None
    apart = dict(neighbours_section("ds", neighbours_files(tmp_path, ids, rows, 0.999)).rows)
    assert "groups may be larger" not in apart and apart["near-duplicates"].startswith("0 pairs scoring 0.999")


def test_the_neighbours_section_of_a_one_document_corpus_has_no_nearest_score(tmp_path):
    """One document has no other to be near: its summary's nearest_score is None, and the
    section says so rather than the k nearest of each (which it said, as it said k for a
    corpus of k documents or fewer)."""
    from shardflow.workflow.landing import neighbours_section, page_problem

    section = neighbours_section("one", neighbours_files(tmp_path, ["a"], [], 0.9, k=3))
    got = dict(section.rows)
    assert list(got) == ["searched", "near-duplicates"]
    assert got["searched"].startswith("1 document, none other to search among (exact, cosine)")
    assert got["near-duplicates"].startswith("0 pairs scoring 0.9 or more, in 0 groups")
    assert page_problem(render([section])) is None
    # A k past the corpus less one lists every other document: that many, not k.
    three = ["x", "y", "z"]
    rows = [(a, rank, b, 0.5, three.index(a), three.index(b))
            for a in three for rank, b in enumerate((o for o in three if o != a), 1)]
    searched = dict(neighbours_section("three", neighbours_files(tmp_path, three, rows, 0.9, k=10)).rows)
    assert searched["searched"].startswith("3 documents, the 2 nearest of each among the others (exact, cosine)")


def search_files(tmp_path, queries: int, best_score: dict | None) -> dict:
    """A search job's summary and record, as search_queries and scripts/search.py write them."""
    summary = {"queries": queries, "documents": 1200, "dim": 8, "k": 10, "hits": queries * 10, "similarity": "cosine",
               "backend": "torch", "device": "cuda", "best_score": best_score, "best_histogram": None}
    files = {"summary": tmp_path / "summary.json", "stats": tmp_path / "search.stats.json"}
    files["summary"].write_text(json.dumps(summary))
    files["stats"].write_text(json.dumps({**summary, "seconds": 3.25}))
    return files


def test_the_search_section_says_what_was_searched_the_best_scores_and_where_the_hits_are(tmp_path):
    """The query count's noun agrees with it ("1 query", "2 queries", not "querys"); a
    summary without best scores (None) has no row for them rather than a KeyError."""
    from shardflow.workflow.landing import page_problem, search_section

    quantiles = {"min": 0.1, "p01": 0.2, "median": 0.61234, "p99": 0.9, "max": 0.95}
    section = search_section("ds", search_files(tmp_path, 2, quantiles))
    assert section.title == "Search: ds"
    got = dict(section.rows)
    assert list(got) == ["searched", "best hit's score", "hits"]
    assert got["searched"] == "2 queries against 1,200 documents, the 10 nearest of each (exact, cosine), 3.2 s on cuda"
    assert got["best hit's score"] == "median 0.612, 1% of queries below 0.200, 1% above 0.900"
    assert got["hits"] == "results/ds/search/hits.parquet: 20 rows (query_id, rank, id, score, row)"
    assert page_problem(render([section])) is None
    one = dict(search_section("ds", search_files(tmp_path, 1, quantiles)).rows)
    assert one["searched"].startswith("1 query against 1,200 documents")
    assert one["hits"].startswith("results/ds/search/hits.parquet: 10 rows")
    assert list(dict(search_section("ds", search_files(tmp_path, 2, None)).rows)) == ["searched", "hits"]

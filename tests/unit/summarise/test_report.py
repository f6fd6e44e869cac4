"""The summarisation report's numbers and figures at their edges: no jobs, no documents,
jobs on the CPU, mixed methods, damaged inputs. The numbers of a normal run, resumed
jobs and peak memory are in test_stage.py."""

import json
import tracemalloc

import numpy as np
import pytest

from shardflow.summarise.records import SummariesError, write_summaries
from shardflow.summarise.report import SummaryReportParams, build_report, document_lengths, plot_lengths, run_summary

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def job(items=2, method=None, device="cpu", start=0.0, end=10.0, **kw):
    stats = {"items": items, "truncated": 0, "items_per_s": items / (end - start), "start_time": start, "end_time": end, "seconds": end - start,
             "device": device, **kw}  # fmt: skip
    if method is not None:
        stats["method"] = method
    return stats


def summaries_file(path, lengths):
    rec = [{"summary": "s", "input_tokens": i, "output_tokens": o, "truncated": False} for i, o in lengths]
    write_summaries(path, [f"doc-{n}" for n in range(len(lengths))], rec)
    return path


def test_report_params_default_to_the_configs_price():
    assert SummaryReportParams() == SummaryReportParams(gpu_hour_price=2.5, currency="USD")


@pytest.mark.parametrize(
    ("kw", "message"),
    [  # '2.5' and None stopped the report in the cost's arithmetic, True priced at 1 an hour
        ({"gpu_hour_price": "2.5"}, "gpu_hour_price '2.5': expected a number"),
        ({"gpu_hour_price": None}, "gpu_hour_price None: expected a number"),
        ({"gpu_hour_price": True}, "gpu_hour_price True: expected a number"),
        ({"currency": None}, "currency None: expected a string"),
    ],
)
def test_report_params_a_wrong_python_type_is_one_error_naming_the_field(kw, message):
    with pytest.raises(TypeError) as info:
        SummaryReportParams(**kw)
    assert str(info.value) == message


def test_report_params_take_a_whole_price_as_the_config_gives_it():
    assert SummaryReportParams(gpu_hour_price=0).gpu_hour_price == 0  # YAML's 0: the schema's "number"


def test_no_jobs_and_no_documents_is_all_zeros_not_a_division_error():
    s = run_summary([], [], {}, SummaryReportParams(currency="EUR"), np.zeros((0, 2), dtype=np.int64))
    assert s == {
        "records": 0, "records_resumed": 0, "rejected_records": 0, "chunks": 0, "input_tokens": 0,
        "summary_tokens": 0, "compression_ratio": 0.0, "length_unit": "tokens", "truncated_inputs": 0,
        "summarise_wall_time_s": 0.0, "summarise_job_seconds": 0, "items_per_s": 0.0, "devices": [], "gpu_hours": 0,
        "estimated_cost": 0, "currency": "EUR", "earlier_attempts": 0, "earlier_attempt_seconds": 0,
        "earlier_attempt_gpu_hours": 0.0, "earlier_attempt_devices": {}, "peak_gpu_mem_mib": None,
        "peak_gpu_mem_reserved_mib": None, "peak_gpu_mem_chunk": None, "peak_gpu_mem_unrecorded": 0,
    }  # fmt: skip


def test_documents_with_no_input_have_a_ratio_over_one_not_a_division_error():
    s = run_summary([job()], [{}], {}, SummaryReportParams(), np.array([[0, 0], [0, 3]]))
    assert (s["input_tokens"], s["summary_tokens"], s["compression_ratio"]) == (0, 3, 3.0)


def test_cpu_jobs_cost_nothing_whatever_the_price():
    s = run_summary([job(), job(start=5.0, end=20.0)], [{"s": 10.0}, {"s": 15.0}], {"rejected_records": 4},
                    SummaryReportParams(gpu_hour_price=100.0), np.array([[10, 2]] * 4))  # fmt: skip
    assert (s["gpu_hours"], s["estimated_cost"], s["devices"]) == (0, 0, ["cpu"])
    assert (s["records"], s["chunks"], s["rejected_records"]) == (4, 2, 4)
    assert (s["summarise_wall_time_s"], s["summarise_job_seconds"]) == (20.0, 25.0)  # the overlap counted once
    assert s["items_per_s"] == 0.2


def test_a_job_given_more_gpus_is_priced_for_every_gpu_it_held():
    """resources.summarise.gpu 2 (SummaryReportParams.gpus: the report rule's param,
    plan.job_gpus): a chunk job on CUDA held and paid for both GPUs, though its stats
    record none, killed attempts included; summary.json counted one."""
    killed = job(device="cuda:0", start=0.0, end=1800.0, earlier_attempts=1, earlier_attempt_devices={"cuda:0": 900.0})
    stats, benches, lengths = [killed, job()], [{"s": 1800.0}, {"s": 1800.0}], np.array([[10, 2]] * 4)
    one = run_summary(stats, benches, {}, SummaryReportParams(gpu_hour_price=2.0), lengths)
    two = run_summary(stats, benches, {}, SummaryReportParams(gpu_hour_price=2.0, gpus=2), lengths)
    assert (one["gpu_hours"], two["gpu_hours"]) == (0.75, 1.5)  # 30 min and a killed 15 min, x 2
    assert (two["estimated_cost"], two["earlier_attempt_gpu_hours"]) == (3.0, 0.5)


@pytest.mark.parametrize(
    ("methods", "unit"),
    [
        (["lead", "lead"], "words"),
        (["lead", "extractive"], "words"),
        (["lead", None], "tokens"),  # an abstractive job's stats name no method
        (["abstractive", "lead"], "tokens"),
        ([None], "tokens"),
    ],
)
def test_the_length_unit_is_words_only_when_every_job_counted_words(methods, unit):
    stats = [job(method=m) for m in methods]
    s = run_summary(stats, [{}] * len(stats), {}, SummaryReportParams(), np.array([[1, 1]] * (2 * len(stats))))
    assert s["length_unit"] == unit


def test_stats_and_benchmarks_of_different_counts_are_an_error():
    with pytest.raises(ValueError) as info:
        run_summary([job(), job()], [{"s": 1.0}], {}, SummaryReportParams(), np.zeros((4, 2), dtype=np.int64))
    assert str(info.value) == "2 per-chunk stats but 1 benchmark records"


def test_document_lengths_of_an_empty_file_are_zero_by_two(tmp_path):
    path = tmp_path / "summaries.jsonl"
    path.write_bytes(b"")
    lengths = document_lengths(str(path))
    assert (lengths.shape, lengths.dtype) == ((0, 2), np.int64)


def test_document_lengths_in_file_order(tmp_path):
    path = summaries_file(tmp_path / "summaries.jsonl", [(5, 1), (0, 0), (2**40, 7)])
    lengths = document_lengths(str(path))
    assert lengths.tolist() == [[5, 1], [0, 0], [2**40, 7]] and lengths.dtype == np.int64


def test_document_lengths_hold_the_two_numbers_a_document_not_a_python_row(tmp_path):
    # A list of (input, output) tuples held about 130 bytes a document before the array
    # was made: 13 GB for 100M summaries; the array itself is 16.
    n = 40_000
    path = summaries_file(tmp_path / "summaries.jsonl", [(300 + k % 700, 60 + k % 90) for k in range(n)])
    tracemalloc.start()
    try:
        lengths = document_lengths(str(path))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert lengths.shape == (n, 2) and lengths[-1].tolist() == [300 + (n - 1) % 700, 60 + (n - 1) % 90]
    assert peak / n < 40, peak


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ({"id": "a", "summary": "s", "input_tokens": "5", "output_tokens": 1, "truncated": False},
         'input_tokens is "5", not an integer'),
        ({"id": "a", "summary": "s", "input_tokens": 5.0, "output_tokens": 1, "truncated": False},
         "input_tokens is 5.0, not an integer"),
        ({"id": "a", "summary": "s", "input_tokens": 5, "truncated": False}, "missing output_tokens"),
    ],
)  # fmt: skip
def test_a_damaged_summaries_line_names_the_file_and_line(tmp_path, line, message):
    path = summaries_file(tmp_path / "summaries.jsonl", [(1, 1)])
    with path.open("a") as fh:
        fh.write(json.dumps(line) + "\n")
    with pytest.raises(SummariesError) as info:
        document_lengths(str(path))
    assert str(info.value) == f"{path}:2: {message}"


@pytest.mark.filterwarnings("ignore:No artists with labels found")  # the empty histogram's legend
def test_plot_lengths_draws_even_without_documents(tmp_path):
    for name, lengths in (("none", np.zeros((0, 2), dtype=np.int64)), ("no_input", np.array([[0, 2], [3, 1]]))):
        path = tmp_path / f"{name}.png"
        plot_lengths(lengths, str(path))
        assert path.read_bytes().startswith(PNG_MAGIC)


def _report_files(tmp_path, stats, lengths, manifest=None):
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps({"jobs": [{"stats": s, "benchmark": {"s": s["seconds"]}} for s in stats]}))
    man = tmp_path / "manifest.json"
    man.write_text(json.dumps(manifest if manifest is not None else {"total_records": len(lengths)}))
    summaries = summaries_file(tmp_path / "summaries.jsonl", lengths)
    outputs = {k: str(tmp_path / f"{k}.png") for k in ("throughput", "timeline", "lengths")}
    outputs["summary"] = str(tmp_path / "summary.json")
    return str(jobs), str(man), str(summaries), outputs


def test_build_report_writes_every_output_and_the_summary_it_returns(tmp_path):
    jobs, man, summaries, outputs = _report_files(
        tmp_path, [job(items=2, method="lead", chunk=0)], [(12, 3), (8, 2)], {"rejected_records": 1}
    )
    s = build_report(jobs, man, summaries, outputs, SummaryReportParams())
    assert json.loads((tmp_path / "summary.json").read_text()) == s
    assert (s["records"], s["rejected_records"], s["input_tokens"], s["summary_tokens"]) == (2, 1, 20, 5)
    assert (s["compression_ratio"], s["length_unit"]) == (0.25, "words")
    for k in ("throughput", "timeline", "lengths"):
        assert (tmp_path / f"{k}.png").read_bytes().startswith(PNG_MAGIC)


def test_build_report_with_a_malformed_job_table_names_the_file(tmp_path):
    jobs, man, summaries, outputs = _report_files(tmp_path, [job()], [(1, 1), (1, 1)])
    with open(jobs, "a") as fh:
        fh.write("{")
    with pytest.raises(ValueError, match=rf"^{jobs}:1: "):
        build_report(jobs, man, summaries, outputs, SummaryReportParams())
    assert not (tmp_path / "summary.json").exists()


def test_build_report_with_a_missing_manifest_names_it(tmp_path):
    jobs, man, summaries, outputs = _report_files(tmp_path, [job()], [(1, 1), (1, 1)])
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(FileNotFoundError, match="manifest.json"):
        build_report(jobs, man, summaries, outputs, SummaryReportParams())
    assert not (tmp_path / "summary.json").exists()

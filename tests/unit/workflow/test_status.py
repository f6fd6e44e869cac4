"""status: where a run stands (python -m shardflow.cli status).

Each test works in its own folder, holding what a run leaves there, made by hand with
the package's own writers: outputs and stats as the embed rule names them, resume
parts and attempt records through core.parts.PartStore (on a clock of the test's), a
failure record through core.failures, a log as core.runlog ends a failed one.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from shardflow.cli import main
from shardflow.core import parts
from shardflow.core.atomic import write_json
from shardflow.core.failures import Guard, RepeatedFailureError, check_earlier, record_path, write_record
from shardflow.core.runlog import FAILED
from shardflow.core.s3 import logical_path
from shardflow.sweep.shared import plan as shared_plan
from shardflow.workflow import estimate as est
from shardflow.workflow import plan
from shardflow.workflow import status as st

CHUNKS = 6
ITEMS = 100  # records a chunk
WINDOW = 25  # records a part


@pytest.fixture(autouse=True)
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def now() -> float:
    """The time of the run's files: the test's start (the CLI reads the real clock)."""
    return time.time()


class Clock:
    def __init__(self, t: float):
        self.t = t

    def time(self) -> float:
        return self.t

    def time_ns(self) -> int:
        return int(self.t * 1e9)


def config(tmp_path, **overlay) -> dict:
    with open("corpus.jsonl", "w") as fh:
        fh.writelines(json.dumps({"id": i, "text": f"doc {i}"}) + "\n" for i in range(CHUNKS * ITEMS))
    base = {"dataset": "ds", "n_chunks": CHUNKS, "input": {"path": "corpus.jsonl"}, "report": {"gpu_hour_price": 3600}}
    path = tmp_path / "overlay.yaml"
    path.write_text(yaml.safe_dump({**base, **overlay}))
    return est.load_config([str(path)])


def split_manifest() -> None:
    """The split's manifest (after the corpus: it is newer)."""
    chunks = [{"items": ITEMS, "bytes": 1000} for _ in range(CHUNKS)]
    write_json(
        "results/ds/chunks/manifest.json",
        {
            "n_chunks": CHUNKS,
            "chunks": chunks,
            "total_records": CHUNKS * ITEMS,
            "sources": [logical_path("corpus.jsonl")],
        },
    )


def job_files(chunk: int) -> tuple[dict, str, str]:
    return st.rule_files("embed").of({"dataset": "ds", "chunk": chunk})


def finished(chunk: int) -> None:
    """A finished embed job: its outputs, stats (100 records in 10 s, 4 parts; a killed
    attempt's 6 s before it) and benchmark (12 s: 2 s of model loading)."""
    outputs, log, bench = job_files(chunk)
    for path in outputs.values():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(path).write_bytes(b"x")
    stats = {
        "chunk": chunk,
        "items": ITEMS,
        "items_embedded": ITEMS,
        "seconds": 10.0,
        "parts": 4,
        "device": "cuda:0",
        "earlier_attempts": 1,
        "earlier_attempt_devices": {"cuda:0": 6.0},
    }
    write_json(outputs["stats"], stats)
    os.makedirs(os.path.dirname(bench), exist_ok=True)
    Path(bench).write_text("s\th:m:s\tmax_rss\n12.0\t0:00:12\t100\n")
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text("... INFO embed: done\n")


def in_progress(
    chunk: int, start: float, n_parts: int, monkeypatch, log: bool = True, files=None, root: str = "results/ds/.resume"
) -> str:
    """A running attempt that saved `n_parts` parts of WINDOW records, one each 2.5 s from
    `start`, as the engine saves them (PartStore, labelled with the job's output); `files`:
    the job's (outputs, log, benchmark), an embed chunk job's of data set ds by default,
    and `root` its resume root."""
    outputs, log_path, _ = files or job_files(chunk)
    clock = Clock(start)
    folder = parts.resume_folder(root, f"key{chunk}")
    manifest = {"n_texts": ITEMS, "window": WINDOW, "dim": 4, "output_dtype": "float32"}
    with monkeypatch.context() as m:
        m.setattr(parts, "time", clock)
        store = parts.PartStore(folder, manifest, device="cuda:0", job=logical_path(outputs["npy"])).open()
        for w in range(n_parts):
            clock.t += 2.5
            store.save_array(w, np.zeros((WINDOW, 4), dtype=np.float32))
    if log:
        Path(log_path).parent.mkdir(parents=True, exist_ok=True)
        Path(log_path).write_text("... INFO embed: params=...\n")
        os.utime(log_path, (start, start))
    return folder


def failed_on_input(chunk: int) -> None:
    """An attempt that failed on a bad record: its failure record beside its log."""
    _, log, _ = job_files(chunk)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text("... CRITICAL embed: failed: ValueError: bad record\n")
    write_record(record_path(log), "ValueError", "corpus.jsonl line 3: bad record\nmore", 1, {}, "rule embed")


def failed_out_of_memory(chunk: int) -> None:
    """An attempt whose log ends on core.runlog's line (no record: a retry may cure it)."""
    _, log, _ = job_files(chunk)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text(
        "2026-01-01 00:00:00,000 INFO embed: params={}\n"
        f"2026-01-01 00:00:09,000 CRITICAL embed: {FAILED}OutOfMemoryError: CUDA out of memory\n"
        "Traceback (most recent call last):\n  ...\n"
    )


def a_run(tmp_path, monkeypatch, now: float, **overlay) -> dict:
    """Six chunks: 0 done, 1 running (2 parts, the last 1 s ago), 2 failed on its input,
    3 stalled (1 part, 10 min ago), 4 failed out of memory, 5 waiting; `overlay`: config."""
    cfg = config(tmp_path, **overlay)
    split_manifest()
    finished(0)
    in_progress(1, now - 6.0, 2, monkeypatch)
    failed_on_input(2)
    in_progress(3, now - 602.5, 1, monkeypatch)
    failed_out_of_memory(4)
    return cfg


def embed(result: st.Status) -> st.Stage:
    return next(s for s in result.stages if s.stage == "embed")


def test_a_run_with_finished_running_stalled_failed_and_waiting_chunks(tmp_path, monkeypatch, now):
    cfg = a_run(tmp_path, monkeypatch, now)
    stage = embed(st.status(cfg, 2, "--gpus", now=now))
    assert [j.state for j in stage.jobs] == ["done", "running", "failed", "stalled", "failed", "waiting"]
    # Records: the finished job's stats, the running jobs' parts.
    assert stage.records_total == 600 and stage.records_done == 100 + 50 + 25
    # One job's rate: (100 + 50 + 25) records in (10 + 5 + 2.5) s; a part every 2.5 s.
    assert stage.rate == pytest.approx(10.0) and stage.overhead_s == pytest.approx(2.0)
    assert stage.part_interval == pytest.approx(2.5)
    # Left: 5 s (chunk 1), 7.5 s (3), 12 s each for 2, 4, 5 (not started: 10 s + loading),
    # longest first on 2 GPUs: [12, 12], 12 -> 24, 7.5 -> 19.5, 5 -> 24.5.
    assert stage.slots == 2 and stage.left_s == pytest.approx(24.5)
    # GPU-hours: the finished job's 12 s and its killed attempt's 6 s, the attempts of
    # chunks 1 and 3 to their last part (5 s, 2.5 s); at 3600 a GPU-hour, cost = seconds.
    assert stage.gpu_hours == pytest.approx(25.5 / 3600) and stage.cost == pytest.approx(25.5)
    # To finish: the jobs' seconds left, 5 + 7.5 + 3 x 12, on one GPU each.
    assert stage.left_gpu_hours == pytest.approx(48.5 / 3600) and stage.left_cost == pytest.approx(48.5)
    assert "25.50 USD so far, about 0.0135 GPU-h, 48.50 USD to finish" in st.stage_line(stage, "USD")
    failed = {j.name: (j.error, j.error_file) for j in stage.jobs if j.state == "failed"}
    assert failed == {
        "chunk 2": ("ValueError: corpus.jsonl line 3: bad record", "logs/embed/ds/chunk_2.log.failure.json"),
        "chunk 4": ("OutOfMemoryError: CUDA out of memory", "logs/embed/ds/chunk_4.log"),
    }


def test_a_job_holds_the_gpus_its_rules_resources_give_it(tmp_path, monkeypatch, now):
    """resources.<rule>.gpu: 2 gives each embed job two GPUs, which the cluster bills, as
    make estimate counts them (estimate.job_gpus): the GPU-hours so far and to finish
    are twice those of test_a_run_with_finished_running_stalled_failed_and_waiting_chunks,
    and 4 GPUs run 2 jobs at once. Stats that record their `gpus` keep their own count."""
    cfg = a_run(tmp_path, monkeypatch, now, resources={"embed": {"gpu": 2}})
    stage = embed(st.status(cfg, 4, "--gpus", now=now))
    assert stage.gpus == 2 and stage.slots == 2
    assert stage.gpu_hours == pytest.approx(2 * 25.5 / 3600) and stage.left_gpu_hours == pytest.approx(2 * 48.5 / 3600)
    stats_path = job_files(0)[0]["stats"]
    write_json(stats_path, {**json.loads(Path(stats_path).read_text()), "gpus": 1})
    stage = embed(st.status(cfg, 4, "--gpus", now=now))
    assert stage.gpu_hours == pytest.approx((18 + 2 * 7.5) / 3600)


def test_a_stalled_chunk_says_how_long_it_made_no_progress(tmp_path, monkeypatch, now):
    cfg = a_run(tmp_path, monkeypatch, now)
    text = st.table(st.status(cfg, 2, "--gpus", now=now))
    stalled = next(line for line in text.splitlines() if "embed ds chunk 3:" in line)
    assert "no progress for 10.0 min" in stalled and "a part every 2 s is typical" in stalled
    assert "25/100 records in parts (results/ds/.resume/key3)" in stalled
    _, log3, _ = job_files(3)
    assert stalled.endswith(f"; log {log3}")
    Path(log3).unlink()  # a killed pod's log never reaches the bucket: no log to name
    text = st.table(st.status(cfg, 2, "--gpus", now=now))
    stalled = next(line for line in text.splitlines() if "embed ds chunk 3:" in line)
    assert "no progress for " in stalled and "; log " not in stalled
    running = next(line for line in text.splitlines() if "embed ds chunk 1:" in line)
    assert "running, 50/100 records in parts" in running and "last part 1 s ago" in running
    # Before its first part a job also loads its model: its log is its sign of life.
    _, log, _ = job_files(5)
    Path(log).write_text("... INFO embed: params=...\n")
    os.utime(log, (now - 9.0, now - 9.0))  # under 3 x 2.5 s + 2 s of loading
    assert embed(st.status(cfg, 2, "--gpus", now=now)).jobs[5].state == "running"
    os.utime(log, (now - 10.0, now - 10.0))
    assert embed(st.status(cfg, 2, "--gpus", now=now)).jobs[5].state == "stalled"


def test_a_cost_under_half_a_cent_is_shown_not_rounded_to_0(tmp_path, monkeypatch, now):
    """At a low price the GPU time so far and to finish costs under half a cent: shown to
    two significant digits, beside its GPU-h, not as the 0.00 of a stage on the CPU."""
    cfg = a_run(tmp_path, monkeypatch, now, report={"gpu_hour_price": 0.1})
    result = st.status(cfg, 2, "--gpus", now=now)
    line = st.stage_line(embed(result), "USD")
    # 25.5 s so far and 48.5 s to finish (test_a_run_with_...) at 0.1 a GPU-hour
    assert "; 0.00708 GPU-h, 0.00071 USD so far, about 0.0135 GPU-h, 0.0013 USD to finish;" in line
    (row,) = [r for r in st.table(result).splitlines() if r.startswith("ds ")]
    assert row.split()[-2:] == ["0.00708", "0.00071"]


def test_large_gpu_hours_print_in_fixed_point_as_make_estimate_prints_them(tmp_path, monkeypatch, now):
    """A long run's GPU-hours so far and to finish read "2083", not the "2.08e+03" of :.3g
    (read as 2.08 at a glance), on the stage's line and in the table: estimate.gpu_hours,
    as make estimate prints them."""
    cfg = a_run(tmp_path, monkeypatch, now)
    result = st.status(cfg, 2, "--gpus", now=now)
    stage = embed(result)
    stage.gpu_hours, stage.left_gpu_hours = 2083.4, 12345.6
    line = st.stage_line(stage, "USD")
    assert "; 2083 GPU-h, 25.50 USD so far, about 12346 GPU-h, 48.50 USD to finish;" in line
    (row,) = [r for r in st.table(result).splitlines() if r.startswith("ds ")]
    assert row.split()[-2:] == ["2083", "25.50"]


def test_time_left_runs_the_jobs_left_longest_first_on_the_slots():
    left = [(100, False), (50, True), (30, True)]  # (records left, started) at 10/s, 2 s loading
    assert st.time_left(left, 10.0, 2.0, 1, 1) == pytest.approx(12 + 5 + 3)
    assert st.time_left(left, 10.0, 2.0, 1, 2) == pytest.approx(12)  # [12], [5, 3]
    assert st.time_left(left, 10.0, 2.0, 2, 1) == pytest.approx(20)  # two-GPU jobs, one slot
    assert st.time_left([], 10.0, 2.0, 1, 4) == 0.0


def test_a_rate_under_one_record_a_second_is_shown_not_rounded_to_0(tmp_path, now):
    """A slow stage (abstractive summaries, a CPU run) does under one record a second per
    job: the table and the total line show that rate, as the time left beside it is
    computed from it, not "0 records/s" beside hours left."""
    cfg = config(tmp_path)
    split_manifest()
    finished(0)
    stats_path = job_files(0)[0]["stats"]
    write_json(stats_path, {**json.loads(Path(stats_path).read_text()), "seconds": 250.0})  # 100 records: 0.4/s
    result = st.status(cfg, 1, "--gpus", now=now)
    assert embed(result).rate == pytest.approx(0.4)
    line = st.stage_line(embed(result), "USD")
    assert ", 0.4 records/s, about 20.8 min left;" in line  # 5 jobs x 250 s
    (row,) = [r for r in st.table(result).splitlines() if r.startswith("ds ")]
    assert row.split()[9:12] == ["100/600", "records", "0.4"]
    assert [st.compact(n) for n in (0.04, 2.5, 9.96, 12.3, 1234, 12345)] == [
        "0.04",
        "2.5",
        "10",
        "12",
        "1,234",
        "12.3k",
    ]


def test_a_measured_rate_in_the_details_prints_in_fixed_point(tmp_path, now):
    """The rate's source under the table printed 17,906 records/s per job as "1.79e+04"
    (:.3g): in fixed point, thousands grouped, as make estimate prints its rates."""
    cfg = config(tmp_path)
    split_manifest()
    finished(0)
    stats_path = job_files(0)[0]["stats"]
    write_json(stats_path, {**json.loads(Path(stats_path).read_text()), "seconds": ITEMS / 17906})
    result = st.status(cfg, 1, "--gpus", now=now)
    assert embed(result).rate_source.startswith("17,906 records/s per job, over 1 finished job(s)' stats")
    assert "embed ds: rate 17,906 records/s per job" in st.table(result)


def test_a_count_prints_in_the_unit_its_rounded_value_fits_up_to_trillions():
    """A train stage's tokens run to trillions (2.5e12 printed "2500.0B"), and a count
    just under a unit's 1,000 rounds up into the next (999,950 printed "1000.0k")."""
    cases = {
        9_999.4: "9,999",
        9_999.5: "10.0k",
        999_949: "999.9k",
        999_950: "1.0M",
        -999_950: "-1.0M",
        999_950_000: "1.0B",
        2.5e12: "2.5T",
        999_950_000_000: "1.0T",
        4.2e15: "4200.0T",
    }
    assert {n: st.compact(n) for n in cases} == cases


def test_the_cli_prints_the_table_and_the_total_line_last(tmp_path, monkeypatch, capsys, now):
    a_run(tmp_path, monkeypatch, now)
    assert main(["status", "--configfile", str(tmp_path / "overlay.yaml"), "--gpus", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("data set"))
    assert lines[head].split()[3:12] == [
        "jobs", "done", "running", "stalled", "failed", "retrying", "waiting", "work", "rate/s"
    ]  # fmt: skip
    assert lines[head + 1].split()[:9] == ["ds", "embed", "6", "1", "1", "1", "2", "0", "1"]
    assert "concurrency for the time left: 2 GPU(s) (--gpus)" in "\n".join(lines)
    failed = next(line for line in lines if "embed ds chunk 2:" in line)
    assert "failed: ValueError: corpus.jsonl line 3: bad record (log logs/embed/ds/chunk_2.log; " in failed
    assert "logs/embed/ds/chunk_2.log.failure.json: an input or config error" in failed
    assert "  embed ds chunk 4: failed: OutOfMemoryError: CUDA out of memory (log logs/embed/ds/chunk_4.log)" in lines
    assert lines[-1].startswith("embed ds: 1/6 jobs, 175/600 records, 20 records/s, about ")
    assert lines[-1].endswith(
        " left; 0.00708 GPU-h, 25.50 USD so far, about 0.0135 GPU-h, 48.50 USD to finish; 1 stalled, 2 failed"
    )


def test_json_holds_each_stage_and_the_jobs_not_done(tmp_path, monkeypatch, capsys, now):
    a_run(tmp_path, monkeypatch, now)
    assert main(["status", "--configfile", str(tmp_path / "overlay.yaml"), "--gpus", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    (stage,) = out["stages"]
    assert out["format"] == "shardflow.status/1" and out["gpus"] == 2 and out["total"] == stage["summary"]
    assert {k: stage[k] for k in ("jobs", "done", "failed", "waiting", "records_done", "records_total")} == {
        "jobs": 6,
        "done": 1,
        "failed": 2,
        "waiting": 1,
        "records_done": 175,
        "records_total": 600,
    }
    assert stage["rate_per_job"] == pytest.approx(10.0) and stage["cost"] == pytest.approx(25.5)
    assert stage["left_gpu_hours"] == pytest.approx(48.5 / 3600) and stage["left_cost"] == pytest.approx(48.5)
    assert [j["name"] for j in stage["not_done"]] == ["chunk 1", "chunk 2", "chunk 3", "chunk 4"]
    assert stage["not_done"][0]["resume_folder"] == "results/ds/.resume/key1"


def test_nothing_here_says_status_reads_local_files_only(tmp_path, capsys):
    config(tmp_path)
    assert main(["status", "--configfile", str(tmp_path / "overlay.yaml"), "--gpus", "1"]) == 0
    out = capsys.readouterr().out
    assert "status read local files only (no output, log or resume folder of this run is here)" in out
    assert "make status STORAGE=s3://<bucket>/<prefix>" in " ".join(out.split())  # the table folds long notes
    assert out.splitlines()[-1] == "embed ds: 0/6 jobs, 0/? records; 0 GPU-h, 0.00 USD so far"


def test_a_sweep_is_counted_by_its_jobs_metrics_and_failure_records(tmp_path, now):
    sweep = {
        "tb": {
            "stage": "embed",
            "grid": {"embedding.token_budget": [512, 1024]},
            "seeds": [0],
            "metrics": {"items_per_s": "max"},
        }
    }
    cfg = config(tmp_path, sweeps=sweep)
    spec = est.sweeps(cfg)["tb"]
    (a, _), (b, _) = spec.jobs()
    write_json(f"results/sweeps/tb/{a}/seed=0/metrics.json", {})
    log = Path(f"logs/sweeps/tb/{b}/seed=0/embed_0.log")
    log.parent.mkdir(parents=True)
    write_record(record_path(log), "ValueError", "bad", 1, {}, "rule sweep_embed_chunk")
    stage = next(s for s in st.status(cfg, 1, "--gpus", now=now).stages if s.sweep)
    assert [j.state for j in stage.jobs] == ["done", "failed"] and stage.jobs[1].error == "ValueError: bad"
    assert st.stage_line(stage, "USD") == "sweep (embed) tb: 1/2 jobs; 1 failed"


def test_a_sweep_job_whose_log_ends_on_its_error_is_failed_not_running(tmp_path, now):
    """A point's chunk job out of memory (no failure record: a retry may cure it) left its
    log's failed line, as a chunk job of the run's own does: failed, not running forever."""
    grid = {"embedding.token_budget": [512, 65536]}
    sweep = {"tb": {"stage": "embed", "grid": grid, "seeds": [0], "metrics": {"items_per_s": "max"}}}
    cfg = config(tmp_path, sweeps=sweep)
    (a, _), (b, _) = est.sweeps(cfg)["tb"].jobs()
    for point, last in ((a, "INFO embed: done"), (b, f"CRITICAL embed: {FAILED}OutOfMemoryError: CUDA out of memory")):
        log = Path(f"logs/sweeps/tb/{point}/seed=0/embed_0.log")
        log.parent.mkdir(parents=True)
        log.write_text(f"2026-01-01 00:00:00,000 INFO embed: params={{}}\n2026-01-01 00:00:09,000 {last}\n")
    stage = next(s for s in st.status(cfg, 1, "--gpus", now=now).stages if s.sweep)
    assert [j.state for j in stage.jobs] == ["running", "failed"]
    assert stage.jobs[1].error == "OutOfMemoryError: CUDA out of memory"
    log = f"logs/sweeps/tb/{b}/seed=0/embed_0.log"
    assert stage.jobs[1].error_file == log
    line = st._job_line(stage, stage.jobs[1], now)
    assert line == f"sweep (embed) tb tb/{b}/seed=0: failed: OutOfMemoryError: CUDA out of memory (log {log})"


def _failed_log(path: Path, reason: str, after: int) -> None:
    """A log as a torchrun train job leaves it: its records, the failed line, then
    `after` bytes of traceback and output (every rank's, torchrun's summary)."""
    frame = '  File "/opt/venv/lib/python3.11/site-packages/torch/_dynamo/eval_frame.py", line 655, in _fn\n'
    path.write_text(
        "2026-01-01 00:00:00,000 INFO train: params={}\n"
        f"2026-01-01 00:00:09,000 CRITICAL train: {FAILED}{reason}\n"
        "Traceback (most recent call last):\n" + frame * (after // len(frame) + 1),
        encoding="utf-8",
    )


def test_the_failed_line_is_found_behind_more_than_one_read_of_traceback(tmp_path):
    """The failed line is followed by far more than LOG_TAIL bytes of traceback and
    output (a torch.compile error; each rank's traceback after it): status reads back
    past them, LOG_TAIL at a time, and finds the reason, the last failed line of those."""
    log = tmp_path / "train.log"
    _failed_log(log, "RuntimeError: NCCL error: unhandled système error", 3 * st.LOG_TAIL)
    with log.open("a", encoding="utf-8") as fh:  # a second rank's failure, later
        fh.write(f"2026-01-01 00:00:10,000 CRITICAL train: {FAILED}ValueError: rank 1\n" + "x" * st.LOG_TAIL + "\n")
    assert st.log_error(str(log)) == "ValueError: rank 1"
    _failed_log(log, "RuntimeError: NCCL error: unhandled système error", 3 * st.LOG_TAIL)
    assert st.log_error(str(log)) == "RuntimeError: NCCL error: unhandled système error"


@pytest.mark.parametrize("block", [1, 2, 3, 7, 64])
def test_a_failed_line_cut_by_the_reads_is_read_whole(tmp_path, monkeypatch, block):
    """Reads of any size cut the log anywhere, inside a line or a character of several
    bytes (é): the line is read whole, and a line of a read before the failed one, which
    holds " CRITICAL " without the failed text, does not stand for it."""
    monkeypatch.setattr(st, "LOG_TAIL", block)
    log = tmp_path / "job.log"
    _failed_log(log, "ValueError: données.jsonl:3: bad record", 300)
    log.write_text(
        f"2026-01-01 00:00:08,000 CRITICAL embed: disk almost full\n{log.read_text(encoding='utf-8')}\r\nrank 0 done\r",
        encoding="utf-8",
    )
    assert st.log_error(str(log)) == "ValueError: données.jsonl:3: bad record"


def test_the_failure_record_a_log_names_is_found_behind_more_than_one_read(tmp_path, monkeypatch):
    """The record a job's log names (RepeatedFailureError's "remove <record>)") is read
    back as far as the failed line is, not from the log's last read alone: each rank's
    traceback after it hid it, and the job lost its record on a storage prefix."""
    monkeypatch.setattr(st, "LOG_TAIL", 1024)
    log = tmp_path / "train.log"
    stopped = f"CRITICAL train: {FAILED}RepeatedFailureError: attempt 1 failed, remove {{}}.failure.json)\n"
    log.write_text(stopped.format("/v/old") + "y\n" * 100 + stopped.format("/v/train") + "x" * 3000 + "\n")
    assert st.logged_record(str(log)) == "/v/train.failure.json"
    assert st.logged_record(str(tmp_path / "gone.log")) is None


def test_a_log_is_read_back_no_further_than_log_scan(tmp_path, monkeypatch):
    """A running job's long log holds no failed line: status reads at most LOG_SCAN bytes
    of it, so a line further back is not seen, and a log it cannot read has no error."""
    monkeypatch.setattr(st, "LOG_TAIL", 1024)
    monkeypatch.setattr(st, "LOG_SCAN", 4096)
    log = tmp_path / "job.log"
    _failed_log(log, "ValueError: bad", 3800)
    assert st.log_error(str(log)) == "ValueError: bad"
    _failed_log(log, "ValueError: bad", 5000)
    assert st.log_error(str(log)) is None
    assert st.log_error(str(tmp_path / "gone.log")) is None


def test_rule_files_are_the_rules_own_patterns(tmp_path):
    files = st.rule_files("embed")
    assert files.outputs["stats"] == "results/{dataset}/embed/embed_{chunk}.stats.json"
    assert files.log == "logs/embed/{dataset}/chunk_{chunk}.log" and files.where.startswith("rules/embed.smk:")
    assert st.rule_files("train").outputs["hf"] == "results/{dataset}/train/hf"  # directory(...)
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "x.smk").write_text('rule x:\n    output:\n        f"results/{NAME}/x",\n    shell:\n        "true"\n')
    with pytest.raises(st.StatusError, match=r"x.smk:2: rule x's output '0' is no plain pattern"):
        st.rule_files("x", str(rules))
    # A sweep rule: `use rule ... with:` in an `if` block, f-strings of the rules files' names.
    sweep = st.rule_files("sweep_embed_chunk")
    assert sweep.log == "logs/sweeps/{sweep}/{point}/seed={seed}/embed_{chunk}.log" and sweep.temp == {
        "npy": "chunk_vectors"
    }
    assert sweep.outputs["stats"] == "results/sweeps/{sweep}/{point}/seed={seed}/embed/embed_{chunk}.stats.json"
    # A retrieval sweep's shared set: names and patterns that rules/common.smk shared_embeddings builds.
    shared = st.rule_files("sweep_embed")
    assert (
        shared.outputs["stats"]
        == "results/sweeps/_embeddings/{RETRIEVAL}/corpus/{settings}/embed/embed_{chunk}.stats.json"
    )
    assert shared.log == "logs/sweeps/_embeddings/{RETRIEVAL}/corpus/{settings}/embed_{chunk}.log"
    rules = tmp_path / "rules2"  # rule_files and the names it reads are cached by folder
    rules.mkdir()
    (rules / "y.smk").write_text(
        'P = "pre"\nrule y:\n    output:\n        "a/{w}",\n    log:\n        "l/{w}.log",\n\n'
        'if P:\n    use rule y as z with:\n        output:\n            f"{P}/{{w}}",\n'
    )
    z = st.rule_files("z", str(rules))
    assert (z.outputs, z.log, z.benchmark) == ({"0": "pre/{w}"}, "l/{w}.log", None)  # its log is y's
    # The names are read once, for the patterns and for sweep_stage's SWEEP_LOG alike.
    assert st.smk_constant("P", str(rules)) == "pre" and st.smk_constant("SWEEP_LOG").startswith("logs/sweeps/")
    with pytest.raises(st.StatusError, match=r"rules2/\*\.smk: none sets SWEEP_LOG to a string"):
        st.smk_constant("SWEEP_LOG", str(rules))


def test_a_chunk_whose_temp_vectors_merge_deleted_is_done(tmp_path, now):
    """Under embedding.keep_chunk_vectors: false Snakemake deletes each embed_<i>.npy once
    merge has read it: a finished run's chunks are done, not running (their logs), while
    a chunk file gone before merge ran is a job to rerun, and kept chunk files must be there."""
    cfg = config(tmp_path, embedding={"keep_chunk_vectors": False})
    split_manifest()
    for chunk in range(CHUNKS):
        finished(chunk)
        os.remove(job_files(chunk)[0]["npy"])
    assert {j.state for j in embed(st.status(cfg, 2, "--gpus", now=now)).jobs} == {"running"}  # merge not run
    for path in st.rule_files("merge").of({"dataset": "ds"})[0].values():
        Path(path).write_bytes(b"x")
    stage = embed(st.status(cfg, 2, "--gpus", now=now))
    assert [j.state for j in stage.jobs] == ["done"] * CHUNKS and stage.records_done == CHUNKS * ITEMS
    assert ", finished;" in st.stage_line(stage, "USD")
    kept = config(tmp_path, embedding={"keep_chunk_vectors": True})
    assert {j.state for j in embed(st.status(kept, 2, "--gpus", now=now)).jobs} == {"running"}


def test_an_out_of_memory_record_is_no_failure(tmp_path):
    """A train job's out-of-memory record stays (for a smaller micro-batch) while its retry runs."""
    path = tmp_path / "train.failure.json"
    write_record(path, "OutOfMemoryError", "CUDA out of memory", 1, {}, "train out", out_of_memory={"micro_batch": 4})
    assert st.failure_record(path) is None
    write_record(path, "ValueError", "bad\nmore", 2, {}, "train out", earlier=json.loads(path.read_text()))
    assert st.failure_record(path) == ("ValueError: bad", str(path))


def test_status_on_a_host_without_gpus_takes_the_device_from_the_jobs_records(tmp_path, monkeypatch, capsys, now):
    """A SLURM login node has no GPU: the run's jobs are elsewhere, so this host's GPUs
    decide nothing; the jobs' stats and attempt records name their device."""
    from shardflow.core import gpu_slots

    a_run(tmp_path, monkeypatch, now)
    monkeypatch.setattr(est, "host_gpus", lambda cfg: [])
    monkeypatch.setattr(gpu_slots, "concurrent_gpu_jobs", lambda *a, **k: 1)
    assert main(["status", "--configfile", str(tmp_path / "overlay.yaml"), "--json"]) == 0
    (stage,) = json.loads(capsys.readouterr().out)["stages"]
    assert stage["gpus_per_job"] == 1 and stage["gpu_hours"] == pytest.approx(25.5 / 3600)
    # Jobs whose records say cpu ran on the CPU: as many at once as run now.
    cfg = config(tmp_path)
    finished(0)
    stats_path = job_files(0)[0]["stats"]
    write_json(stats_path, {**json.loads(Path(stats_path).read_text()), "device": "cpu"})
    for folder in Path("results/ds/.resume").iterdir():
        for record in folder.glob("attempt-*.json"):
            record.write_text(json.dumps({**json.loads(record.read_text()), "device": "cpu"}))
    stage = embed(st.status(cfg, 4, "--gpus", now=now))
    assert stage.gpus == 0 and stage.slots == 1 and "on the CPU: its jobs' records say they ran there" in stage.notes


def test_a_train_stage_on_a_host_without_gpus_counts_the_configured_gpus(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(est, "host_gpus", lambda cfg: [])
    cfg = config(tmp_path, tasks=["training"], train={"gpus": 2})
    assert main(["status", "--configfile", str(tmp_path / "overlay.yaml"), "--json"]) == 0
    (train,) = [s for s in json.loads(capsys.readouterr().out)["stages"] if s["stage"] == "train"]
    assert train["gpus_per_job"] == 2 and train["records_total"] == est.train_tokens(cfg, 2)


def test_a_train_stage_on_the_cpu_plans_the_global_batch_of_train_gpus(tmp_path, now):
    """Under gpu_jobs.device cpu a train job of train.gpus 2 runs one process that trains
    the micro-batches of both (shardflow.train.trainer `processes`): the same global batch
    and tokens as on two GPUs, as make estimate plans them, and no GPU. Status planned one
    process's batch, half the tokens the job trains."""
    cfg = config(tmp_path, tasks=["training"], train={"gpus": 2}, gpu_jobs={"device": "cpu"})
    (train,) = [s for s in st.status(cfg, 1, "--gpus", now=now).stages if s.stage == "train"]
    assert train.gpus == 0 and train.records_total == est.train_tokens(cfg, 2)
    (planned,) = [r for r in est.estimate(cfg, 1, "--gpus").rows if r.stage == "train"]
    assert planned.work == train.records_total


def test_an_s3_glob_input_uses_the_split_manifest_of_its_objects(tmp_path, monkeypatch, now):
    from shardflow.core import s3

    monkeypatch.setattr(s3, "expand", lambda *a: pytest.fail("status listed the bucket"))
    cfg = config(tmp_path, input={"path": "s3://corpora/news/*.jsonl"})
    split_manifest()
    manifest = json.loads(Path("results/ds/chunks/manifest.json").read_text())
    objects = ["s3://corpora/news/a.jsonl", "s3://corpora/news/b.jsonl"]
    write_json("results/ds/chunks/manifest.json", {**manifest, "sources": objects})
    finished(0)
    result = st.status(cfg, 2, "--gpus", now=now)
    assert embed(result).records_total == 600 and embed(result).left_s is not None
    assert not any("other input files" in n for n in result.notes)


def test_a_train_sweep_job_fails_on_the_record_its_resume_folder_holds(tmp_path, now):
    """sweep_train writes its failure record beside its resume folder (rules/common.smk
    sweep_train_resume), not in its log folder; an out-of-memory record is none."""
    from shardflow.workflow import plan

    sweep = {
        "lr": {"stage": "train", "grid": {"train.lr": [1e-3, 2e-3]}, "seeds": [0], "metrics": {"best_val_loss": "min"}}
    }
    cfg = config(tmp_path, tasks=["training"], sweeps=sweep)
    spec = est.sweeps(cfg)["lr"]
    (a, _), (b, _) = spec.jobs()
    for point in (a, b):
        Path(f"logs/sweeps/lr/{point}/seed=0").mkdir(parents=True)
        Path(f"logs/sweeps/lr/{point}/seed=0/train.log").write_text("... INFO train: step 10\n")
    record = record_path(plan.sweep_train_resume(None, f"lr/{b}/seed=0"))
    assert str(record) == f"results/sweeps/.resume/lr/{b}/seed=0/train.failure.json"
    write_record(record, "OutOfMemoryError", "CUDA out of memory", 1, {}, "train", out_of_memory={"micro_batch": 4})
    stage = next(s for s in st.status(cfg, 1, "--gpus", now=now).stages if s.sweep)
    assert [j.state for j in stage.jobs] == ["running", "running"]
    write_record(record, "ValueError", "bad", 2, {}, "train", earlier=json.loads(record.read_text()))
    stage = next(s for s in st.status(cfg, 1, "--gpus", now=now).stages if s.sweep)
    assert [j.state for j in stage.jobs] == ["running", "failed"] and stage.jobs[1].error == "ValueError: bad"


def test_a_running_train_job_says_it_has_no_parts_and_no_gpu_hours_yet(tmp_path, now):
    cfg = config(tmp_path, tasks=["training"])
    outputs, log, _ = st.rule_files("train").of({"dataset": "ds"})
    Path(log).parent.mkdir(parents=True)
    Path(log).write_text("... INFO train: step 10\n")
    result = st.status(cfg, 1, "--gpus", now=now)
    (train,) = [s for s in result.stages if s.stage == "train"]
    assert train.jobs[0].state == "running" and train.gpu_hours is None and train.cost is None
    text = st.table(result)
    assert "train ds: running; training keeps checkpoints, not parts, so how far it got is in its log" in text
    assert "train ds: 0/1 jobs" in text.splitlines()[-1] and "GPU-h and cost not known while it trains" in text
    row = next(line for line in text.splitlines() if line.startswith("ds") and " train " in line)
    assert row.split()[-2:] == ["-", "-"]


def test_a_train_job_resumed_after_a_kill_counts_the_gpu_time_before_it(tmp_path, now):
    """A train job killed (a preempted spot node) resumes from its checkpoint: its
    metrics' train_seconds_total holds the training seconds of the attempts before it
    (the checkpoint's, to its last save), its benchmark the last attempt's alone. Both
    count, x the GPUs it held; a job that ran from scratch has none before it."""
    cfg = config(tmp_path, tasks=["training"], train={"gpus": 2})
    outputs, log, bench = st.rule_files("train").of({"dataset": "ds"})
    for name, path in outputs.items():
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).mkdir() if name == "hf" else Path(path).write_bytes(b"x")
    metrics = {
        "steps": 1000,
        "resumed_from_step": 600,
        "tokens_per_step": 1536,
        "wall_seconds": 400.0,  # this attempt: steps 600 to 1000 and the final evaluation
        "train_seconds_total": 1000.0,  # 600 s of training before it, to the checkpoint it resumed from
        "device": "cuda:0",
        "world_size": 2,
    }
    write_json(outputs["metrics"], metrics)
    Path(bench).parent.mkdir(parents=True)
    Path(bench).write_text("s\th:m:s\tmax_rss\n420.0\t0:07:00\t100\n")  # the last attempt, start-up included
    (train,) = [s for s in st.status(cfg, 2, "--gpus", now=now).stages if s.stage == "train"]
    assert train.jobs[0].state == "done"
    assert train.gpu_hours == pytest.approx((420 + 600) * 2 / 3600) and train.cost == pytest.approx(2040.0)
    write_json(outputs["metrics"], {**metrics, "resumed_from_step": 0, "train_seconds_total": 390.0})
    (train,) = [s for s in st.status(cfg, 2, "--gpus", now=now).stages if s.stage == "train"]
    assert train.gpu_hours == pytest.approx(420 * 2 / 3600)


def test_a_failed_train_job_has_no_gpu_hours_known_rather_than_none_spent(tmp_path, now):
    """A train job that failed (or is retrying) spent its attempts' GPU time, which its
    checkpoint holds and no record status reads does: not known, rather than 0.00 so far."""
    cfg = config(tmp_path, tasks=["training"])
    _, log, _ = st.rule_files("train").of({"dataset": "ds"})
    Path(log).parent.mkdir(parents=True)
    Path(log).write_text(f"2026-01-01 00:00:00,000 CRITICAL train: {FAILED}RuntimeError: NCCL error\n")
    result = st.status(cfg, 1, "--gpus", now=now)
    (train,) = [s for s in result.stages if s.stage == "train"]
    assert train.jobs[0].state == "failed" and train.gpu_hours is None and train.cost is None
    line = st.stage_line(train, "USD")
    assert "0.00 USD so far" not in line and "GPU-h and cost not known" in line
    assert "while it trains" not in line


@pytest.mark.parametrize(
    "stats, why",
    [([], "holds a list, not a JSON object"), ({"items": "a"}, "items is 'a', not a number"), ("{", "")],
)
def test_an_unreadable_stats_file_is_named_and_status_goes_on(tmp_path, monkeypatch, now, stats, why):
    cfg = a_run(tmp_path, monkeypatch, now)
    path = job_files(0)[0]["stats"]
    Path(path).write_text(stats if isinstance(stats, str) else json.dumps(stats))
    stage = embed(st.status(cfg, 2, "--gpus", now=now))
    assert stage.jobs[0].state == "done" and stage.jobs[0].stats is None
    (note,) = [n for n in stage.notes if path in n]
    assert note.startswith(f"{path} is not readable (") and why in note and "its job is counted done" in note


@pytest.mark.parametrize(
    "bench, why",
    [
        (b"s\th:m:s\tmax_rss\n" + b"\0" * 400 + b"\n", "s is '\\x00"),  # a power loss: zeros where the row was
        (b"s\th:m:s\tmax_rss\n", "empty benchmark file"),  # cut short as Snakemake wrote it
        (b"s\th:m:s\tmax_rss\nnan\t0:00:12\t100\n", "s is nan"),
    ],
)
def test_an_unreadable_benchmark_is_named_and_its_jobs_stats_still_count(
    tmp_path, monkeypatch, capsys, now, bench, why
):
    """Snakemake writes a benchmark in place (not through a temporary): one cut short or
    zeroed is named in a note, and chunk 0's stats still count its records, rate and
    GPU-hours, its time its stats' own 10 s (no model loading known); status goes on."""
    cfg = a_run(tmp_path, monkeypatch, now)
    path = job_files(0)[2]
    Path(path).write_bytes(bench)
    stage = embed(st.status(cfg, 2, "--gpus", now=now))
    assert stage.jobs[0].state == "done" and stage.jobs[0].stats is not None and stage.records_done == 175
    # 10 s (its stats) and the killed attempt's 6 s, chunks 1 and 3's 5 s and 2.5 s.
    assert stage.gpu_hours == pytest.approx(23.5 / 3600)
    (note,) = [n for n in stage.notes if path in n]
    assert note.startswith(f"{path} is not readable (") and why in note and len(note) < 200, note
    assert main(["status", "--configfile", str(tmp_path / "overlay.yaml"), "--gpus", "2"]) == 0
    assert path in capsys.readouterr().out


def test_an_unreadable_split_manifest_or_attempt_record_is_named_and_status_goes_on(tmp_path, monkeypatch, now):
    cfg = a_run(tmp_path, monkeypatch, now)
    manifest = json.loads(Path("results/ds/chunks/manifest.json").read_text())
    write_json("results/ds/chunks/manifest.json", {**manifest, "chunks": ["a"] * CHUNKS})
    record = next(Path("results/ds/.resume/key1").glob("attempt-*.json"))
    record.write_text("[]")
    result = st.status(cfg, 2, "--gpus", now=now)
    assert any(n.startswith("results/ds/chunks/manifest.json is not readable") for n in result.notes)
    assert any(n.startswith("resume folder results/ds/.resume/key1 (") for n in result.notes)
    assert embed(result).records_total is None  # the records of the chunks are not known
    assert main(["status", "--configfile", str(tmp_path / "overlay.yaml"), "--gpus", "2"]) == 0


def test_an_attempt_whose_clock_was_set_back_counts_for_no_rate_and_no_part_interval(tmp_path, monkeypatch, now):
    """Chunk 2's attempt opened its folder 4 s ago; then NTP set the host's clock back 36 s,
    and it saved 2 parts at 2.5 s on the new clock: its record's last part is before its
    start, its time not known. It is not 50 records in 0 s (a rate twice chunk 1's), nor
    parts 0 s apart, which halved the typical interval and showed it stalled 4 s after its
    log's last line."""
    cfg = config(tmp_path)
    split_manifest()
    in_progress(1, now - 6.0, 2, monkeypatch)  # 50 records in 5 s, a part 1 s ago
    outputs, log, _ = job_files(2)
    clock = Clock(now - 4.0)
    manifest = {"n_texts": ITEMS, "window": WINDOW, "dim": 4, "output_dtype": "float32"}
    with monkeypatch.context() as m:
        m.setattr(parts, "time", clock)
        store = parts.PartStore("results/ds/.resume/key2", manifest, "cuda:0", logical_path(outputs["npy"])).open()
        clock.t = now - 40.0  # set back
        for w in range(2):
            clock.t += 2.5
            store.save_array(w, np.zeros((WINDOW, 4), dtype=np.float32))
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text("... INFO embed: params=...\n")
    os.utime(log, (now - 4.0, now - 4.0))
    stage = embed(st.status(cfg, 2, "--gpus", now=now))
    assert stage.rate == pytest.approx(10.0) and stage.part_interval == pytest.approx(2.5)
    assert [j.state for j in stage.jobs[1:3]] == ["running", "running"]
    assert stage.jobs[2].records_done == 50  # its parts still count


def test_a_retry_loading_its_model_after_earlier_parts_is_not_stalled(tmp_path, monkeypatch, now):
    """records_done counts the killed attempt's parts; the retry's own attempt has none
    yet, so it gets the model loading's allowance as a first attempt does."""
    cfg = a_run(tmp_path, monkeypatch, now)
    folder = "results/ds/.resume/key3"  # chunk 3: one part, 10 min ago
    outputs, log, _ = job_files(3)
    with monkeypatch.context() as m:
        m.setattr(parts, "time", Clock(now - 9.0))  # the retry opened the folder 9 s ago
        parts.PartStore(
            folder, json.loads(Path(folder, "manifest.json").read_text()), "cuda:0", logical_path(outputs["npy"])
        ).open()
    os.utime(log, (now - 9.0, now - 9.0))
    stage = embed(st.status(cfg, 2, "--gpus", now=now))
    assert stage.jobs[3].records_done == 25 and stage.jobs[3].state == "running"  # under 3 x 2.5 s + 2 s


def test_by_source_counts_each_chunk_whose_own_split_ran_before_the_collector(tmp_path, now):
    """chunking.by: source: a chunk's records are known from its split_source job's part
    manifest (the package's own writer), before the data set's manifest, which waits for
    every source; a part older than its source, or of another source, is not used."""
    from shardflow.corpus.by_source import split_source
    from shardflow.corpus.readers import ReaderOptions

    for name, n in (("a", 3), ("b", 5), ("c", 2)):
        Path(f"part-{name}.jsonl").write_text(
            "".join(json.dumps({"id": f"{name}{i}", "text": "t"}) + "\n" for i in range(n))
        )
    cfg = config(tmp_path, n_chunks="auto", input={"path": "part-*.jsonl"}, chunking={"by": "source"})
    parts_dir = Path("results/ds/chunks/sources")
    for i, name in ((0, "a"), (2, "c")):
        split_source(
            f"part-{name}.jsonl",
            ReaderOptions(),
            40.0,
            f"results/ds/chunks/chunk_{i}.jsonl",
            parts_dir / f"chunk_{i}.json",
            parts_dir / f"chunk_{i}.rejects.jsonl",
            parts_dir / f"chunk_{i}.keys.parquet",
        )
    assert [j.records for j in embed(st.status(cfg, 1, "--gpus", now=now)).jobs] == [3, None, 2]
    os.utime("part-c.jsonl", (now + 60, now + 60))  # changed after its split
    shutil.copy(parts_dir / "chunk_0.json", parts_dir / "chunk_1.json")  # a's part where b's belongs
    assert [j.records for j in embed(st.status(cfg, 1, "--gpus", now=now)).jobs] == [3, None, None]


def test_a_storage_prefix_with_nothing_under_it_says_so(tmp_path):
    """A mistyped prefix is an empty copy: the note says nothing is there, not that 0
    objects were read as if the run had not started."""
    from shardflow.workflow.mirror import Mirrored

    cfg = config(tmp_path)
    empty = Mirrored(prefix="s3://bkt/runs/typo/", folder=tmp_path / "copy")
    got = st.status(cfg, 1, "--gpus", storage=empty)
    assert any(n.startswith("nothing under s3://bkt/runs/typo/: ") for n in got.notes), got.notes
    assert not any(n.startswith("read from ") for n in got.notes), got.notes
    assert ", from the files under s3://bkt/runs/typo/ (a local copy) (outputs, " in st.table(got).splitlines()[0]


def test_read_from_a_storage_prefix_a_resume_dir_on_a_volume_is_named_as_not_seen(tmp_path):
    """With gpu_jobs.resume_dir on the pods' volume, the parts are not under the prefix:
    status says so instead of showing running jobs as waiting without a word."""
    from shardflow.workflow.mirror import Mirrored

    copied = Mirrored(prefix="s3://bkt/runs/a/", folder=tmp_path / "copy", objects=5)
    got = st.status(config(tmp_path, gpu_jobs={"resume_dir": "/resume"}), 1, "--gpus", storage=copied)
    assert any(n.startswith("the resume parts in /resume/ds (gpu_jobs.resume_dir, ") for n in got.notes), got.notes
    assert not any("resume parts in" in n for n in st.status(config(tmp_path), 1, "--gpus", storage=copied).notes)


@pytest.mark.parametrize("resume_dir", ["/resume", None], ids=["volume", "pod-disk"])
def test_read_from_a_storage_prefix_a_job_the_bucket_shows_nothing_of_is_said_to_be_unseen(tmp_path, resume_dir):
    """What the bucket cannot show is said plainly: a job's log reaches it when the job
    ends, and never where its pod was killed (out of memory, evicted); parts on the pods'
    volume and train's checkpoints and failure record are not in it. A train job with
    nothing in the bucket is waiting only as far as the bucket shows."""
    from shardflow.workflow.mirror import Mirrored

    copied = Mirrored(prefix="s3://bkt/runs/a/", folder=tmp_path / "copy", objects=5)
    cfg = config(tmp_path, tasks=["embedding", "training"], gpu_jobs={"resume_dir": resume_dir})
    got = st.status(cfg, 1, "--gpus", storage=copied)
    train = next(s for s in got.stages if s.stage == "train")
    unseen = (
        "waiting as far as the bucket shows: its log reaches the bucket when it ends, never where its pod was killed "
        "first (out of memory, evicted, its node lost), and its checkpoints and failure record lie "
    )
    where = (
        "on the pods' volume (/resume/ds/train, /resume/ds/train.failure.json), which this host cannot read"
        if resume_dir
        else "on its pod's disk"
    )
    assert unseen + where in train.notes, train.notes
    volume = [n for n in got.notes if n.startswith("the resume parts in /resume/ds (gpu_jobs.resume_dir, ")]
    assert len(volume) == (1 if resume_dir else 0), got.notes
    if resume_dir:
        assert "this host cannot read them: a running job shows as waiting until it ends" in volume[0], volume
        assert "killed first (out of memory, evicted, its node lost) stores no log and stays waiting" in volume[0]
    # Once its log is in the bucket the job shows from it, and nothing is said.
    _, log, _ = st.rule_files("train").of({"dataset": "ds"})
    Path(log).parent.mkdir(parents=True)
    Path(log).write_text("... INFO train: step 10\n")
    train = next(s for s in st.status(cfg, 1, "--gpus", storage=copied).stages if s.stage == "train")
    assert train.jobs[0].state == "running" and not any(n.startswith("waiting as far") for n in train.notes)


class _Lines(logging.Handler):
    """The lines a job's logger writes, as core.runlog formats them."""

    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(f"2026-01-01 00:00:09,000 {record.levelname} {record.name}: {record.getMessage()}")


def a_pod_log(log: str, error: str, message: str, record: str, retry: bool = False, launcher: bool = False) -> None:
    """The log a GPU job's pod stored in the bucket after an input error (core.failures,
    with its own messages): attempt 1's, whose failed line is followed by the note that
    the error was recorded in `record` (before it: the train launcher's, `launcher`), or,
    `retry`, the in-place retry's, which stopped on that record (RepeatedFailureError)."""
    lines = _Lines()
    logger = logging.getLogger("embed")
    logger.addHandler(lines)
    logger.propagate = False
    try:
        if retry:  # the record, on the pod's disk while the pod lives
            sig = {"inputs": [], "params": "p", "code": "c"}
            write_record(Path(record), error, message, 1, sig, "rule embed")
            with pytest.raises(RepeatedFailureError) as stop:
                check_earlier(Path(record), 2, sig, f"rule embed (log {record[: -len('.failure.json')]})", logger)
            shutil.rmtree(".snakemake/storage")  # gone with the pod
            failed = [f"2026-01-01 00:00:09,000 CRITICAL embed: {FAILED}RepeatedFailureError: {stop.value}"]
        else:
            failed = [f"2026-01-01 00:00:09,000 CRITICAL embed: {FAILED}{error}: {message}"]
            failed += ["Traceback (most recent call last):", "  ...", f"{error}: {message}"]
            Guard(Path(record), 1, {}, "rule embed").say_recorded(error, logger)
    finally:
        logger.removeHandler(lines)
        logger.propagate = True
    head = ["2026-01-01 00:00:00,000 INFO embed: params={}"]
    body = (lines.lines + failed) if launcher else (failed + lines.lines)
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text("\n".join(head + body) + "\n")


def test_read_from_a_storage_prefix_a_failure_record_the_log_names_is_said_where_it_lies(tmp_path, monkeypatch, now):
    """On EKS a GPU job's failure record is not in the bucket: a script job's lies beside
    its log's local copy on the pod's disk, gone with the pod; a train job's beside its
    resume folder on the pods' volume (gpu_jobs.resume_dir), which status cannot read.
    The log, which the pod stores when the job fails, names it: status says the error is
    an input or config error and where its record lies. A retry on the pod's disk runs
    again (a new pod does not see it), so the job may be retrying; one on the volume stops
    at once, so the job stays failed. An error recorded nowhere (chunk 4's) is as before."""
    from shardflow.workflow.mirror import Mirrored

    cfg = config(
        tmp_path, tasks=["embedding", "training"], input={"path": "s3://corpora/c.jsonl"}, gpu_jobs={"resume_dir": "/v"}
    )
    pod = ".snakemake/storage/s3/bkt/runs/a/"  # a job's local copies of its files, in its pod
    logs = {chunk: job_files(chunk)[1] for chunk in (2, 3, 4)}
    a_pod_log(logs[2], "ValueError", "corpus.jsonl:3: bad record", f"{pod}{logs[2]}.failure.json")
    a_pod_log(logs[3], "ValueError", "corpus.jsonl:5: bad record\nmore", f"{pod}{logs[3]}.failure.json", retry=True)
    failed_out_of_memory(4)
    _, train_log, _ = st.rule_files("train").of({"dataset": "ds"})
    volume = str(record_path(plan.train_resume("/v", "ds")))
    a_pod_log(train_log, "ValueError", "shard 0: bad header", volume, launcher=True)
    snakemake_log([("start", 2, 1, now - 30), ("error", 2, 1, now), ("restart", 2, 1, now)])
    copied = Mirrored(prefix="s3://bkt/runs/a/", folder=tmp_path, objects=4)

    got = st.status(cfg, 1, "--gpus", now=now, storage=copied)
    stage, train = embed(got), next(s for s in got.stages if s.stage == "train")
    jobs = {c: stage.jobs[c] for c in (2, 3, 4)}
    assert [jobs[c].state for c in (2, 3, 4)] == ["retrying", "failed", "failed"]
    assert [jobs[c].error for c in (2, 3)] == ["ValueError: corpus.jsonl:3: bad record"] + [
        "ValueError: corpus.jsonl:5: bad record"  # the error the retry stopped on, not RepeatedFailureError's text
    ]
    assert [jobs[c].record for c in (2, 3, 4)] == [f"{pod}{logs[2]}.failure.json", f"{pod}{logs[3]}.failure.json", ""]
    on_pod = (
        "an input or config error, recorded on its pod's disk ({}), gone with the pod: a resubmission in a new pod "
    )
    assert st._job_line(stage, jobs[3], now) == (
        f"embed ds chunk 3: failed: ValueError: corpus.jsonl:5: bad record (log {logs[3]}): "
        + on_pod.format(jobs[3].record)
        + "runs it again and fails the same way; fix it and rerun"
    )
    assert st._job_line(stage, jobs[2], now).endswith(
        "; " + on_pod.format(jobs[2].record) + "runs it again, which fails the same way; fix it and rerun"
    )
    assert st._job_line(stage, jobs[4], now) == (
        f"embed ds chunk 4: failed: OutOfMemoryError: CUDA out of memory (log {logs[4]})"
    )
    (job,) = train.jobs
    assert (job.state, job.error, job.error_file, job.record) == (
        "failed",
        "ValueError: shard 0: bad header",
        volume,
        volume,
    )
    assert st._job_line(train, job, now) == (
        f"train ds: failed: ValueError: shard 0: bad header (log {train_log}): an input or config error, recorded in "
        f"{volume} on the pods' volume (gpu_jobs.resume_dir), which this host cannot read: a retry stops at once on "
        "it; fix it and rerun"
    )
    out = st.as_json(got)
    (train_out,) = next(s for s in out["stages"] if s["stage"] == "train")["not_done"]
    assert (train_out["failure_record"], train_out["failure_record_on"]) == (volume, "volume")

    # Read here (a local run), the log's record is its own file: not claimed from the log.
    local = embed(st.status(cfg, 1, "--gpus", now=now))
    assert [j.record for j in local.jobs] == [""] * CHUNKS and local.jobs[2].state == "retrying"


def snakemake_log(
    events: list[tuple],
    ended: bool = False,
    name: str = "2026-01-01T000000.000000",
    host: str | None = None,
    local: bool = False,
) -> str:
    """Snakemake's own log of a run (.snakemake/log), as snakemake 9.27 writes it: for each
    event on an embed chunk (kind, chunk, attempt, unix time; in place of the chunk, the
    name of a retrieval run's one-job rule: `retrieval_files`), the job's start ("start":
    its block, resources with the `attempt` of job_resources), its error ("error") and
    the scheduler's restart ("restart"); `ended`: the run's last lines; `host`: its header,
    naming that host (none without); `local`: its jobs run by the local executor
    ("localrule embed:"), not sent to a cluster ("rule embed:")."""
    lines = ["Building DAG of jobs...", "Select jobs to execute...", "Execute 1 jobs..."]
    if host is not None:
        lines[:0] = [
            "Assuming unrestricted shared filesystem usage.",
            "",
            "SNAKEMAKE",
            "=========",
            "  Date: 2026-11-28 13:35:04",
            "  Workflow ID: dc5a3986-0429-4316-996c-9a1fd72cdb0b",
            "  Platform: Linux-6.18.44-x86_64-with-glibc2.36",
            f"  Host: {host}",
            "  User: me",
            "  Snakemake version: 9.27.1",
            "  Python version: 3.11.7 (main, May  9 2026, 07:35:25) [GCC 12.2.0]",
            "  Command: /work/.venv/bin/snakemake --profile profiles/local",
            "  Snakefile: /work/Snakefile",
            "  Base directory: /work",
            "  Run directory: /work",
            "  Working directory: /work",
            "  Config file(s): ['/work/config/config.yaml']",
            "  Config MD5: 99914b932bd37a50b983c5e7c90ae93b",
            "",
        ]
    for kind, chunk, attempt, at in events:
        if isinstance(chunk, str):  # a retrieval run's one-job rule (`retrieval_files`): no wildcards
            rule, (outputs, log, bench), jobid, wildcards = chunk, retrieval_files(chunk), RETRIEVAL_JOBIDS[chunk], []
            source = "results/beir/retrieval/queries.jsonl"
        else:
            rule, (outputs, log, bench), jobid = "embed", job_files(chunk), chunk + 10
            wildcards, source = [f"    wildcards: dataset=ds, chunk={chunk}"], f"results/ds/chunks/chunk_{chunk}.jsonl"
        stamp = f"[{time.asctime(time.localtime(at))}]"
        if kind == "start":
            lines += [
                stamp,
                f"{'local' if local else ''}rule {rule}:",
                f"    input: {source}",
                f"    output: {', '.join(outputs.values())}",
                f"    log: {log}",
                f"    jobid: {jobid}",
                f"    benchmark: {bench}",
                f"    reason: Missing output files: {outputs.get('stats') or outputs['metrics']}",
                *wildcards,
                "    threads: 4",
                f"    resources: tmpdir=/tmp, gpu=1, mem_mb={1000 * attempt}, mem_mib=954, attempt={attempt}",
            ]
        elif kind == "error":
            lines += [
                stamp,
                f"Error in rule {rule}:",
                f"    jobid: {jobid}",
                f"    input: {source}",
                f"    output: {', '.join(outputs.values())}",
                f"    log: {log} (check log file(s) for error details)",
                "    conda-env: /work/.snakemake/conda/abc_",
                "",
            ]
        else:
            lines.append(f"Trying to restart job {jobid}.")
    if ended:
        lines += [
            "Exiting because a job execution failed. Look above for error messages",
            f"Complete log(s): /work/.snakemake/log/{name}.snakemake.log",
        ]
    path = Path(f".snakemake/log/{name}.snakemake.log")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_a_failed_attempt_snakemake_restarts_is_retrying_and_one_with_no_retry_left_is_failed(
    tmp_path, monkeypatch, capsys, now
):
    """Chunk 4's attempt ran out of memory (its log's failed line, no failure record):
    while Snakemake's log says it restarts the job, or has started the next attempt that
    has not yet written its log (queued on SLURM), it is retrying, not failed; once an
    error is logged with no restart after it (its retries spent), or the run has ended,
    it is failed. Chunk 2's input error (a failure record: its retry stops at once)
    stays failed whatever Snakemake does."""
    cfg = a_run(tmp_path, monkeypatch, now)
    _, log4, _ = job_files(4)
    first = [("start", 4, 1, now - 30), ("start", 2, 1, now - 30), ("error", 4, 1, now), ("restart", 4, 1, now)]
    first += [("error", 2, 1, now), ("restart", 2, 1, now)]
    sm_log = snakemake_log(first)

    def states():
        return [j.state for j in embed(st.status(cfg, 2, "--gpus", now=now)).jobs]

    assert states() == ["done", "running", "failed", "stalled", "retrying", "waiting"]
    stage = embed(st.status(cfg, 2, "--gpus", now=now))
    retrying = stage.jobs[4]
    assert (retrying.attempt, retrying.error, retrying.retry_log) == (1, "OutOfMemoryError: CUDA out of memory", sm_log)
    assert st.stage_line(stage, "USD").endswith("; 1 stalled, 1 failed, 1 retrying")
    assert st._job_line(stage, retrying, now) == (
        f"embed ds chunk 4: retrying: attempt 1 failed: OutOfMemoryError: CUDA out of memory (log {log4}); "
        f"Snakemake runs attempt 2 ({sm_log}; should that Snakemake have stopped, rerun)"
    )
    assert stage.left_s is not None and stage.count("retrying") == 1  # its time left is counted, as a failed job's

    # Attempt 2 submitted, its log not yet written (in the queue): still retrying after attempt 1.
    snakemake_log([*first, ("start", 4, 2, now + 5)])
    assert states()[4] == "retrying" and embed(st.status(cfg, 2, "--gpus", now=now)).jobs[4].attempt == 1
    # Attempt 3 failed and Snakemake restarts it no more: failed.
    snakemake_log(
        [
            *first,
            ("start", 4, 2, now + 5),
            ("error", 4, 2, now + 9),
            ("restart", 4, 2, now + 9),
            ("start", 4, 3, now + 10),
            ("error", 4, 3, now + 20),
        ]
    )
    os.utime(log4, (now + 19, now + 19))
    assert states()[4] == "failed"
    # Attempt 3 started and its own log ends on its error, not yet reported: failed too.
    snakemake_log(
        [
            *first,
            ("start", 4, 2, now + 5),
            ("error", 4, 2, now + 9),
            ("restart", 4, 2, now + 9),
            ("start", 4, 3, now + 10),
        ]
    )
    assert states()[4] == "failed"
    # A restart that an ended run announced never comes.
    os.utime(log4, (now, now))
    snakemake_log(first, ended=True)
    assert states()[4] == "failed"

    snakemake_log(first)
    assert main(["status", "--configfile", str(tmp_path / "overlay.yaml"), "--gpus", "2", "--json"]) == 0
    (out,) = json.loads(capsys.readouterr().out)["stages"]
    assert (out["failed"], out["retrying"]) == (1, 1)
    job4 = next(j for j in out["not_done"] if j["name"] == "chunk 4")
    assert (job4["state"], job4["failed_attempt"], job4["retry_log"]) == ("retrying", 1, sm_log)


def test_a_running_job_snakemake_reported_failed_is_failed_or_retrying_not_running(tmp_path, monkeypatch, capsys, now):
    """Chunk 1 (a part 1 s ago) was SIGKILLed (the out-of-memory killer, a SLURM time
    limit): its log ends on no failed line, and Snakemake logged its error. It is failed,
    with no retry left, or retrying where Snakemake restarts it (the next attempt queued,
    its log still attempt 1's), not running; running again once attempt 2 writes its log.
    A rerun's first attempt, queued after the old log, is judged by its parts as before."""
    cfg = a_run(tmp_path, monkeypatch, now)
    _, log1, _ = job_files(1)

    def chunk_1() -> st.Job:
        return embed(st.status(cfg, 2, "--gpus", now=now)).jobs[1]

    killed = [("start", 1, 1, now - 10), ("error", 1, 1, now)]
    sm_log = snakemake_log(killed)
    job = chunk_1()
    assert job.state == "failed"
    assert (job.error, job.error_file) == (st.KILLED, log1)
    assert job.records_done == 50  # its parts still count
    snakemake_log(killed, ended=True)
    assert chunk_1().state == "failed"
    snakemake_log([*killed, ("restart", 1, 1, now)])
    job = chunk_1()
    assert (job.state, job.attempt, job.retry_log) == ("retrying", 1, sm_log)
    snakemake_log([*killed, ("restart", 1, 1, now), ("start", 1, 2, now + 5)])
    assert (chunk_1().state, chunk_1().attempt) == ("retrying", 1)
    # Attempt 2 opened its folder after its start (its record, by its node's clock) while
    # its log, by a file server's clock some seconds behind, reads as written before it:
    # running, not retrying
    in_progress(1, now + 7.0, 0, monkeypatch, log=False)
    assert chunk_1().state == "running"
    os.utime(log1, (now + 9, now + 9))  # attempt 2 runs its script
    assert chunk_1().state == "running"
    os.utime(log1, (now - 6, now - 6))
    snakemake_log([("start", 1, 1, now + 5)])  # a rerun's first attempt, queued
    assert chunk_1().state == "running"

    snakemake_log(killed)
    assert main(["status", "--configfile", str(tmp_path / "overlay.yaml"), "--gpus", "2"]) == 0
    assert f"embed ds chunk 1: failed: {st.KILLED} (log {log1})" in capsys.readouterr().out


def test_a_snakemake_log_from_before_the_jobs_failure_or_of_another_job_changes_nothing(tmp_path, monkeypatch, now):
    cfg = a_run(tmp_path, monkeypatch, now)
    old = snakemake_log([("start", 4, 1, now - 600), ("error", 4, 1, now - 590), ("restart", 4, 1, now - 590)])
    os.utime(old, (now - 590, now - 590))  # a run that ended before chunk 4's log was written
    snakemake_log([("start", 5, 1, now - 30), ("error", 5, 1, now), ("restart", 5, 1, now)], name="2026-01-02T0")
    assert embed(st.status(cfg, 2, "--gpus", now=now)).jobs[4].state == "failed"


def test_snakemakes_log_is_read_as_it_writes_it():
    """The parser against a log Snakemake 9.27 wrote (a shell rule with `retries: 1`, an
    `attempt` resource; cut to the events), storage paths named under their prefix."""
    text = """\
Select jobs to execute...
Execute 1 jobs...
[Sat Nov 28 11:05:07 2026]
localrule emb:
    output: out/2.txt
    log: logs/emb/2.log
    jobid: 2
    reason: Missing output files: out/2.txt
    wildcards: c=2
    resources: tmpdir=/tmp, attempt=1
RuleException:
CalledProcessError in file "/tmp/h3smk/Snakefile", line 9:
Command 'set -euo pipefail;  echo attempt 1 > logs/emb/2.log; exit 1' returned non-zero exit status 1.
[Sat Nov 28 11:05:07 2026]
Error in rule emb:
    message: None
    jobid: 2
    output: out/2.txt
    log: logs/emb/2.log (check log file(s) for error details)
    shell:
        echo attempt 1 > logs/emb/2.log; exit 1
        (command exited with non-zero exit code)
Trying to restart job 2.
Select jobs to execute...
[Sat Nov 28 11:05:08 2026]
rule emb:
    output: s3://bkt/run/out/1.txt (send to storage)
    log: s3://bkt/run/logs/emb/1.log (send to storage)
    jobid: 1
    resources: tmpdir=/tmp, attempt=1
"""
    Path("smk.log").write_text(text)
    run = st.read_snakemake_log("smk.log", prefix="s3://bkt/run/")
    stamp = time.mktime(time.strptime("Sat Nov 28 11:05:07 2026", "%a %b %d %H:%M:%S %Y"))
    assert run.last == {"logs/emb/2.log": ("restart", 1, stamp), "logs/emb/1.log": ("start", 1, stamp + 1)}
    assert not run.ended


def test_an_error_whose_message_runs_over_several_lines_is_read(tmp_path, monkeypatch, now):
    """An executor's message can run over several lines before the error's jobid and log:
    the slurm plugin's when sbatch refuses a job (its mem_mb grown past what the partition
    has, or slurmctld busy), the kubernetes plugin's when the pod is gone (as Snakemake
    9.27's formatter writes them). Chunk 4's attempt 2 was refused so, and no retry is
    left: it is failed, not retrying on attempt 1's log."""
    cfg = a_run(tmp_path, monkeypatch, now)
    _, log4, _ = job_files(4)
    first = [("start", 4, 1, now - 30), ("error", 4, 1, now), ("restart", 4, 1, now), ("start", 4, 2, now + 5)]
    path = snakemake_log(first)
    sbatch = (
        "sbatch --parsable --job-name 0f3c --output '/w/.snakemake/slurm_logs/rule_embed/ds_4/%j.log' "
        "--export=ALL -p gpu --mem 90000 --gpus=1"
    )
    with open(path, "a") as fh:
        fh.write(
            f"[{time.asctime(time.localtime(now + 6))}]\n"
            "Error in rule embed:\n"
            "    message: SLURM sbatch failed. The error message was 'sbatch: error: Memory specification can not "
            "be satisfied'.\n"
            f"    sbatch call:\n        {sbatch}\n\n"
            "    jobid: 14\n"
            "    input: results/ds/chunks/chunk_4.jsonl\n"
            f"    log: {log4} (check log file(s) for error details)\n"
        )
    assert st.read_snakemake_log(path).last[log4][:2] == ("error", 2)
    assert embed(st.status(cfg, 2, "--gpus", now=now)).jobs[4].state == "failed"
    Path("kube.log").write_text(
        "[Sat Nov 28 11:05:07 2026]\n"
        "Error in rule embed:\n"
        "    message:  For details, please issue:\n"
        "kubectl describe job snakejob-0f3c. Further, make sure to clean up the failed job manually in case it is "
        "not deleted automatically: kubectl delete job {j.external_jobid}.\n"
        "    jobid: 3\n"
        "    log: s3://bkt/run/logs/embed/ds/chunk_3.log (send to storage) (check log file(s) for error details)\n"
        "Select jobs to execute...\n"
    )
    assert st.read_snakemake_log("kube.log", prefix="s3://bkt/run").last["logs/embed/ds/chunk_3.log"][0] == "error"


# Whether a Snakemake process holds a run's log open is read from /proc (core.controller).
needs_proc = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc (Linux)")


@contextlib.contextmanager
def a_snakemake_holding(path: str, tmp_path):
    """A live Snakemake as status sees one: a process whose command is `.../bin/snakemake`
    holding `path` (its run's log) open, as Snakemake's log handler does until it ends."""
    fake = tmp_path / "bin" / "snakemake"
    fake.parent.mkdir(exist_ok=True)
    fake.write_text("import sys\nlog = open(sys.argv[1], 'a')\nprint('ready', flush=True)\nsys.stdin.read()\n")
    proc = subprocess.Popen(
        [sys.executable, str(fake), os.path.abspath(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout.readline() == "ready\n"
        yield proc
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def test_a_snakemake_log_names_its_host_and_the_jobs_it_runs_itself():
    """The parser against the log of a Snakemake 9.27.1 run SIGKILLed while a job's second
    attempt ran (the local executor: "localrule"; cut to the events): its header's host,
    no end, and a job sent to a cluster ("rule") told from one run here."""
    text = """\
Assuming unrestricted shared filesystem usage.

SNAKEMAKE
=========
  Date: 2026-11-28 13:35:04
  Workflow ID: dc5a3986-0429-4316-996c-9a1fd72cdb0b
  Platform: Linux-6.18.44-fc-v669-x86_64-with-glibc2.36
  Host: vm
  User: root
  Snakemake version: 9.27.1
  Python version: 3.11.7 (main, May  9 2026, 07:35:25) [GCC 12.2.0]
  Command: /tmp/h3/.venv/bin/snakemake -c1
  Snakefile: /tmp/h3smk2/Snakefile
  Base directory: /tmp/h3smk2
  Run directory: /tmp/h3smk2
  Working directory: /tmp/h3smk2
  Config file(s): []
  Config MD5: 99914b932bd37a50b983c5e7c90ae93b

Building DAG of jobs...
Using shell: /usr/bin/bash
Provided cores: 1 (use --cores to define parallelism)
Rules claiming more threads will be scaled down.
Select jobs to execute...
Execute 1 jobs...
[Sat Nov 28 13:35:04 2026]
localrule emb:
    output: out/1.txt
    log: logs/emb/1.log
    jobid: 1
    reason: Missing output files: out/1.txt
    wildcards: c=1
    resources: tmpdir=/tmp, attempt=1
RuleException:
CalledProcessError in file "/tmp/h3smk2/Snakefile", line 8:
Command 'set -euo pipefail;  echo attempt 1 > logs/emb/1.log; exit 1' returned non-zero exit status 1.
[Sat Nov 28 13:35:04 2026]
Error in rule emb:
    message: None
    jobid: 1
    output: out/1.txt
    log: logs/emb/1.log (check log file(s) for error details)
    shell:
        echo attempt 1 > logs/emb/1.log; exit 1
        (command exited with non-zero exit code)
Trying to restart job 1.
Select jobs to execute...
Execute 1 jobs...
[Sat Nov 28 13:35:04 2026]
localrule emb:
    output: out/1.txt
    log: logs/emb/1.log
    jobid: 1
    reason: Missing output files: out/1.txt
    wildcards: c=1
    resources: tmpdir=/tmp, attempt=2
[Sat Nov 28 13:35:05 2026]
rule emb:
    output: out/2.txt
    log: logs/emb/2.log
    jobid: 2
    resources: tmpdir=/tmp, attempt=1
"""
    Path("smk.log").write_text(text)
    run = st.read_snakemake_log("smk.log")
    assert (run.host, run.ended) == ("vm", False)
    assert {log: event[:2] for log, event in run.last.items()} == {
        "logs/emb/1.log": ("start", 2),
        "logs/emb/2.log": ("start", 1),
    }
    assert run.local == {"logs/emb/1.log": True, "logs/emb/2.log": False}
    Path("smk.log").write_text(text.replace("  Host: vm\n", ""))  # --quiet host: no header line
    assert st.read_snakemake_log("smk.log").host is None


@needs_proc
def test_a_job_between_attempts_of_a_killed_snakemake_is_failed_not_retrying(tmp_path, monkeypatch, capsys, now):
    """Snakemake SIGKILLed (or its terminal closed) after it restarted chunk 4 (out of
    memory) and before attempt 2 ran: its log has no end, its locks remain, and no process
    holds its log. Nothing runs chunk 4 again, so it is failed, naming that run, and a
    note says what to do. The same log held open by a live Snakemake, or naming another
    host (whose processes status cannot see), leaves it retrying."""
    cfg = a_run(tmp_path, monkeypatch, now)
    _, log4, _ = job_files(4)
    here = platform.node()
    events = [("start", 4, 1, now - 30), ("error", 4, 1, now), ("restart", 4, 1, now)]
    sm_log = snakemake_log(events, host=here, local=True)
    Path(".snakemake/locks").mkdir()
    Path(".snakemake/locks/0.output.lock").write_text("results/ds/embed/chunk_4.npy\n")

    def chunk_4():
        return embed(st.status(cfg, 2, "--gpus", now=now)).jobs[4]

    result = st.status(cfg, 2, "--gpus", now=now)
    stage = embed(result)
    assert (stage.jobs[4].state, stage.jobs[4].stopped_run) == ("failed", sm_log)
    assert st._job_line(stage, stage.jobs[4], now) == (
        f"embed ds chunk 4: failed: OutOfMemoryError: CUDA out of memory (log {log4}); the Snakemake run that "
        f"would retry it ({sm_log}) has stopped: a rerun runs it"
    )
    assert result.notes[0] == (
        f"Snakemake has stopped: its run {sm_log} logged no end, and no Snakemake process on this host ({here}, "
        "where it ran) holds that log open, so it was killed (SIGKILL, a closed terminal or lost session, a power "
        "loss). Nothing retries or records the 1 job(s) it left (shown stalled, or failed where a retry was due). "
        "To go on: `snakemake --unlock` with the run's options (its locks remain in .snakemake/locks), then the same "
        "command again (the profiles set rerun-incomplete, which reruns the jobs it left incomplete; without a "
        "profile add --rerun-incomplete)"
    )
    assert st.total_line(result).endswith(
        " | Snakemake has stopped (killed): nothing runs these jobs until you rerun it"
    )
    assert main(["status", "--configfile", str(tmp_path / "overlay.yaml"), "--gpus", "2", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    job4 = next(j for j in out["stages"][0]["not_done"] if j["name"] == "chunk 4")
    assert (out["stopped_runs"], job4["state"], job4["stopped_run"]) == ([sm_log], "failed", sm_log)

    # Attempt 2 started by the local executor, not yet at its log (waiting for a GPU): failed too.
    snakemake_log([*events, ("start", 4, 2, now + 5)], host=here, local=True)
    assert (chunk_4().state, chunk_4().stopped_run) == ("failed", sm_log)
    # Attempt 2 sent to a cluster, in its queue: it may still run there, so retrying.
    snakemake_log([*events, ("start", 4, 2, now + 5)], host=here)
    assert chunk_4().state == "retrying"
    # A live Snakemake holds the log: it runs attempt 2.
    snakemake_log(events, host=here, local=True)
    with a_snakemake_holding(sm_log, tmp_path):
        result = st.status(cfg, 2, "--gpus", now=now)
        assert embed(result).jobs[4].state == "retrying" and not result.stopped
        assert not any(n.startswith("Snakemake has stopped") for n in result.notes)
    # Unlocked and run again: the new run, live, has not reached chunk 4 yet.
    rerun = snakemake_log([("start", 1, 1, now)], name="2026-01-02T000000.000000", host=here, local=True)
    with a_snakemake_holding(rerun, tmp_path):
        assert chunk_4().state == "retrying"
    os.remove(rerun)
    # Run on another host: its process cannot be seen from here.
    snakemake_log(events, host="login2", local=True)
    assert chunk_4().state == "retrying"


@needs_proc
def test_running_jobs_of_a_killed_snakemake_are_stopped(tmp_path, monkeypatch, now):
    """Snakemake killed with chunks 1 and 3 running under it (a part 1 s ago; one 10 min
    ago): no Snakemake records their outputs now, so both are stopped (counted stalled),
    naming the run, even where an orphan of chunk 1 still saves parts. A later
    `--unlock`'s log (its locks gone: no unlock to advise) changes nothing. Jobs it sent
    to a cluster may run on there, and a newer Snakemake here, starting, will run them:
    judged as before."""
    cfg = a_run(tmp_path, monkeypatch, now)
    events = [("start", 1, 1, now - 10), ("start", 3, 1, now - 610)]
    sm_log = snakemake_log(events, host=platform.node(), local=True)
    unlocked = Path(".snakemake/log/2026-01-02T000000.000000.snakemake.log")
    unlocked.write_text("Unlocked working directory.\n")
    os.utime(unlocked, (now + 1, now + 1))

    def states() -> list[str]:
        return [j.state for j in embed(st.status(cfg, 2, "--gpus", now=now)).jobs]

    result = st.status(cfg, 2, "--gpus", now=now)
    stage = embed(result)
    assert [j.state for j in stage.jobs] == ["done", "stalled", "failed", "stalled", "failed", "waiting"]
    assert stage.jobs[1].stopped_run == stage.jobs[3].stopped_run == sm_log
    assert st._job_line(stage, stage.jobs[1], now) == (
        f"embed ds chunk 1: stopped: the Snakemake run that started it ({sm_log}) has stopped, so no Snakemake "
        "records its outputs, and a process of it still running here stops without them; 50/100 records in parts "
        "(results/ds/.resume/key1). A rerun resumes from its parts"
    )
    assert "the 2 job(s) it left" in result.notes[0] and "--unlock" not in result.notes[0]
    assert st.stage_line(stage, "USD").endswith("; 2 stalled, 2 failed")

    snakemake_log(events, host=platform.node())  # sent to a cluster ("rule embed:")
    assert states() == ["done", "running", "failed", "stalled", "failed", "waiting"]
    snakemake_log(events, host=platform.node(), local=True)
    starting = Path(".snakemake/log/2026-01-03T000000.000000.snakemake.log")
    starting.write_text("Building DAG of jobs...\n")
    os.utime(starting, (now + 2, now + 2))
    with a_snakemake_holding(str(starting), tmp_path):
        assert states() == ["done", "running", "failed", "stalled", "failed", "waiting"]


@needs_proc
def test_a_run_of_another_user_is_not_judged_killed(tmp_path, monkeypatch, now):
    """A shared project folder: the Snakemake log without an end is another user's (a
    colleague's live run), whose process's open files this user cannot read
    (/proc/<pid>/fd), so nothing here is seen holding it. Whether it runs cannot be told:
    chunk 4 stays retrying and chunk 1 running, with no note to --unlock a live run's
    locks. The same run's log, this user's, with no process holding it: killed."""
    cfg = a_run(tmp_path, monkeypatch, now)
    events = [("start", 1, 1, now - 10), ("start", 4, 1, now - 30), ("error", 4, 1, now), ("restart", 4, 1, now)]
    sm_log = snakemake_log(events, host=platform.node(), local=True)
    owner = os.stat(sm_log).st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)  # status run by another user, not root
    result = st.status(cfg, 2, "--gpus", now=now)
    assert [j.state for j in embed(result).jobs][1::3] == ["running", "retrying"]
    assert not result.stopped and not any(n.startswith("Snakemake has stopped") for n in result.notes)
    monkeypatch.setattr(os, "geteuid", lambda: owner)
    result = st.status(cfg, 2, "--gpus", now=now)
    assert [j.state for j in embed(result).jobs][1::3] == ["stalled", "failed"] and result.stopped == [sm_log]


def test_a_sweep_job_whose_chunk_job_makes_no_progress_is_stalled(tmp_path, monkeypatch, now):
    """An embed sweep's jobs run the main data set's chunks (rule sweep_embed_chunk, parts
    under the sweep job's resume root): a chunk job whose parts stopped is judged as a data
    set's is, so its sweep job is stalled, not running for ever; one with a recent part
    is running and shows it."""
    grid = {"embedding.token_budget": [512, 1024, 2048]}
    cfg = config(
        tmp_path, sweeps={"tb": {"stage": "embed", "grid": grid, "seeds": [0], "metrics": {"items_per_s": "max"}}}
    )
    split_manifest()
    spec = est.sweeps(cfg)["tb"]
    (a, _), (b, _), _ = spec.jobs()

    def sweep_chunk(point: str, chunk: int, start: float, n_parts: int) -> tuple[str, str]:
        job = f"results/sweeps/tb/{point}/seed=0/embed/embed_{chunk}"  # as rules/sweep.smk names them
        outputs = {"npy": f"{job}.npy", "ids": f"{job}.ids.parquet", "stats": f"{job}.stats.json"}
        files = (outputs, f"logs/sweeps/tb/{point}/seed=0/embed_{chunk}.log", None)
        root = plan.sweep_resume_root(None, f"tb/{point}/seed=0")
        return in_progress(chunk, start, n_parts, monkeypatch, files=files, root=root), files[1]

    folder_a, _ = sweep_chunk(a, 0, now - 6.0, 2)  # a part every 2.5 s, the last 1 s ago
    folder_b, log_b = sweep_chunk(b, 1, now - 602.5, 1)  # one part, 10 min ago
    stage = next(s for s in st.status(cfg, 1, "--gpus", now=now).stages if s.sweep)
    assert [j.state for j in stage.jobs] == ["running", "stalled", "waiting"]
    assert st.stage_line(stage, "USD") == "sweep (embed) tb: 0/3 jobs; 1 stalled"
    assert stage.part_interval == pytest.approx(2.5)
    stalled = st._job_line(stage, stage.jobs[1], now)
    assert stalled.startswith(f"sweep (embed) tb tb/{b}/seed=0: no progress for 10.0 min (a part every 2 s is typical)")
    assert f"25/100 records in parts ({folder_b})" in stalled and stalled.endswith(f"; log {log_b}")
    running = st._job_line(stage, stage.jobs[0], now)
    assert (
        running == f"sweep (embed) tb tb/{a}/seed=0: running, 50/100 records in parts ({folder_a}), last part 1 s ago"
    )


# ------------------------------------------------ a retrieval run's one-job stages

# The jobids a Snakemake log gives a retrieval run's one-job rules (`snakemake_log`).
RETRIEVAL_JOBIDS = {"embed_queries": 90, "retrieval_evaluate": 91}


def retrieval_files(rule: str) -> tuple[dict, str, str]:
    """The files of a retrieval run's one-job rule (embed_queries, retrieval_evaluate),
    whose patterns name the evaluation by rules/common.smk's RETRIEVAL: here beir."""
    return st.rule_files(rule).of({"RETRIEVAL": "beir"})


def a_retrieval_run(tmp_path) -> dict:
    """retrieval.path set: data set beir (one chunk) beside the main data set ds."""
    return config(tmp_path, retrieval={"path": "beir", "n_chunks": 1})


def stage_of(result: st.Status, label: str) -> st.Stage:
    return next(s for s in result.stages if s.label == label)


def queries_embedded(seconds: float = 12.0) -> None:
    """A finished embed_queries job, as scripts/embed.py writes it: its vectors, ids and
    stats (100 queries in 10 s on cuda:0, a killed attempt's 6 s before it), its log and
    benchmark (`seconds`)."""
    outputs, log, bench = retrieval_files("embed_queries")
    for path in outputs.values():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(path).write_bytes(b"x")
    stats = {"chunk": None, "items": ITEMS, "items_embedded": ITEMS, "seconds": 10.0, "parts": 4, "device": "cuda:0"}
    write_json(outputs["stats"], {**stats, "earlier_attempts": 1, "earlier_attempt_devices": {"cuda:0": 6.0}})
    os.makedirs(os.path.dirname(bench), exist_ok=True)
    Path(bench).write_text(f"s\th:m:s\tmax_rss\n{seconds}\t0:00:12\t100\n")
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text("... INFO embed: done\n")


def test_a_retrieval_run_shows_embed_queries_and_retrieval_evaluate(tmp_path, monkeypatch, now):
    """With retrieval.path set, the queries' embed job and the search are GPU jobs a user
    waits on, after the corpus's embed jobs: embed_queries is judged as an embed chunk job
    is (its parts lie under the data set's resume root, named by its output), and
    retrieval_evaluate, which keeps no parts, runs while its log is there."""
    cfg = a_retrieval_run(tmp_path)
    result = st.status(cfg, 1, "--gpus", now=now)
    labels = ["embed ds", "embed beir", "embed_queries beir", "retrieval_evaluate beir"]
    assert [s.label for s in result.stages] == labels
    assert [j.state for s in result.stages[2:] for j in s.jobs] == ["waiting", "waiting"]
    queries = retrieval_files("embed_queries")
    assert queries[0]["npy"] == "results/beir/retrieval/queries.npy" and queries[1] == "logs/embed_queries/beir.log"
    folder = in_progress(0, now - 6.0, 2, monkeypatch, files=queries, root="results/beir/.resume")
    _, log, _ = retrieval_files("retrieval_evaluate")
    assert_one_job_stages_running(cfg, "embed_queries beir", "retrieval_evaluate beir", folder, log, now)


def assert_one_job_stages_running(cfg: dict, embed_label: str, search_label: str, folder: str, log: str, now: float):
    """A data set's queries' embed job (its first part under `folder`, 2 of 4 done) and
    its search (`log` written 2 minutes ago) as status sees them running: the embed job
    counted from its parts, the search from the queries it embeds, saving no parts."""
    Path(log).parent.mkdir(parents=True)
    rule = search_label.split()[0]
    Path(log).write_text(f"... INFO {rule}: search params ...\n")
    os.utime(log, (now - 120, now - 120))
    result = st.status(cfg, 1, "--gpus", now=now)
    embed_queries, search = stage_of(result, embed_label), stage_of(result, search_label)
    (job,) = embed_queries.jobs
    assert (job.state, job.folder, embed_queries.unit) == ("running", folder, "queries")
    assert (embed_queries.records_done, embed_queries.records_total) == (50, 100)  # its parts' manifest
    assert embed_queries.gpu_hours == pytest.approx(5 / 3600) and embed_queries.left_s == pytest.approx(5.0)
    assert search.jobs[0].state == "running" and search.records_total == 100  # the queries the embed job embeds
    assert search.notes == ["time left not estimated: the search saves no parts to measure its rate by"]
    assert st._job_line(search, search.jobs[0], now) == (
        f"{search_label}: running (it saves no parts: a rerun searches again), log {log} written 2.0 min ago"
    )


def test_a_retrieval_runs_one_job_stages_fail_and_retry_as_chunk_jobs_do(tmp_path, monkeypatch, capsys, now):
    """embed_queries out of memory (its log's failed line) while Snakemake restarts it is
    retrying; retrieval_evaluate's input error (its failure record beside its log) is
    failed, naming the record. The JSON lists both stages, their fields those of every stage."""
    cfg = a_retrieval_run(tmp_path)
    _, queries_log, _ = retrieval_files("embed_queries")
    Path(queries_log).parent.mkdir(parents=True)
    Path(queries_log).write_text(
        "2026-01-01 00:00:00,000 INFO embed: params={}\n"
        f"2026-01-01 00:00:09,000 CRITICAL embed: {FAILED}OutOfMemoryError: CUDA out of memory\n"
    )
    _, log, _ = retrieval_files("retrieval_evaluate")
    Path(log).parent.mkdir(parents=True)
    Path(log).write_text(f"... CRITICAL retrieval_evaluate: {FAILED}ValueError: bad qrels\n")
    write_record(record_path(log), "ValueError", "qrels.json: query q1 judges no document", 1, {}, "rule x")
    result = st.status(cfg, 1, "--gpus", now=now)
    embed_queries, evaluate = stage_of(result, "embed_queries beir"), stage_of(result, "retrieval_evaluate beir")
    assert embed_queries.jobs[0].state == "failed" and embed_queries.jobs[0].error_file == queries_log
    failed = evaluate.jobs[0]
    assert (failed.state, failed.error) == ("failed", "ValueError: qrels.json: query q1 judges no document")
    assert failed.error_file == f"{log}.failure.json"
    sm_log = snakemake_log(
        [
            ("start", "embed_queries", 1, now - 30),
            ("error", "embed_queries", 1, now),
            ("restart", "embed_queries", 1, now),
        ]
    )
    (job,) = stage_of(st.status(cfg, 1, "--gpus", now=now), "embed_queries beir").jobs
    assert (job.state, job.attempt, job.retry_log) == ("retrying", 1, sm_log)

    assert main(["status", "--configfile", str(tmp_path / "overlay.yaml"), "--gpus", "1", "--json"]) == 0
    stages = json.loads(capsys.readouterr().out)["stages"]
    assert [(s["stage"], s["dataset"]) for s in stages][2:] == [
        ("embed_queries", "beir"),
        ("retrieval_evaluate", "beir"),
    ]
    assert {k for s in stages for k in s} == set(stages[0])
    (retrying,), (failed,) = stages[2]["not_done"], stages[3]["not_done"]
    assert (retrying["state"], retrying["failed_attempt"], retrying["log"]) == ("retrying", 1, queries_log)
    assert (failed["state"], failed["error_file"]) == ("failed", f"{log}.failure.json")


def test_a_retrieval_run_is_finished_only_once_retrieval_evaluate_wrote_its_metrics(tmp_path, now):
    """Every corpus chunk embedded and the queries too, the run is not finished until the
    search wrote metrics.json (with its other outputs). Its GPU-hours are its benchmark's
    seconds where its metrics say it searched on CUDA, as embed_queries' are its stats'."""
    cfg = a_retrieval_run(tmp_path)
    for chunk in range(CHUNKS):
        finished(chunk)
    outputs, _, _ = st.rule_files("embed").of({"dataset": "beir", "chunk": 0})
    for path in outputs.values():
        os.makedirs(os.path.dirname(path), exist_ok=True)
        Path(path).write_bytes(b"x")
    write_json(outputs["stats"], {"chunk": 0, "items": 45, "seconds": 1.0, "device": "cuda:0"})
    queries_embedded()
    outputs, log, bench = retrieval_files("retrieval_evaluate")
    for name in ("per_query", "run", "figure", "stats"):
        Path(outputs[name]).write_bytes(b"x")

    def unfinished(result: st.Status) -> list[str]:
        return [s.label for s in result.stages if s.count("done") < len(s.jobs)]

    result = st.status(cfg, 1, "--gpus", now=now)
    assert unfinished(result) == ["retrieval_evaluate beir"]
    assert "retrieval_evaluate beir: 0/1 jobs, 0/100 queries" in st.total_line(result)
    embed_queries = stage_of(result, "embed_queries beir")
    assert embed_queries.gpu_hours == pytest.approx(18 / 3600) and embed_queries.cost == pytest.approx(18.0)
    write_json(outputs["metrics"], {"ndcg_at_10": 0.5, "n_queries": ITEMS, "device": "cuda", "top_k": 100})
    os.makedirs(os.path.dirname(bench))
    Path(bench).write_text("s\th:m:s\tmax_rss\n30.0\t0:00:30\t100\n")
    result = st.status(cfg, 1, "--gpus", now=now)
    assert unfinished(result) == []
    evaluate = stage_of(result, "retrieval_evaluate beir")
    assert (evaluate.records_done, evaluate.records_total) == (100, 100)
    assert evaluate.gpu_hours == pytest.approx(30 / 3600) and evaluate.cost == pytest.approx(30.0)
    assert (
        st.stage_line(evaluate, "USD")
        == "retrieval_evaluate beir: 1/1 jobs, 100/100 queries, finished; 0.00833 GPU-h, 30.00 USD so far"
    )


def test_a_retrieval_runs_one_job_stages_hold_the_gpus_their_resources_give_them(tmp_path, now):
    """resources.embed_queries.gpu and resources.retrieval_evaluate.gpu count in their
    GPU-hours as in make estimate's (estimate.job_gpus): their stats record no `gpus`."""
    cfg = config(
        tmp_path,
        retrieval={"path": "beir", "n_chunks": 1},
        resources={"embed_queries": {"gpu": 2}, "retrieval_evaluate": {"gpu": 3}},
    )
    queries_embedded()
    outputs, _, bench = retrieval_files("retrieval_evaluate")
    for name in ("per_query", "run", "figure", "stats"):
        Path(outputs[name]).write_bytes(b"x")
    write_json(outputs["metrics"], {"ndcg_at_10": 0.5, "n_queries": ITEMS, "device": "cuda", "top_k": 100})
    os.makedirs(os.path.dirname(bench))
    Path(bench).write_text("s\th:m:s\tmax_rss\n30.0\t0:00:30\t100\n")
    result = st.status(cfg, 6, "--gpus", now=now)
    embed_queries, evaluate = stage_of(result, "embed_queries beir"), stage_of(result, "retrieval_evaluate beir")
    assert (embed_queries.gpus, evaluate.gpus) == (2, 3)
    assert embed_queries.gpu_hours == pytest.approx(2 * 18 / 3600) and evaluate.gpu_hours == pytest.approx(
        3 * 30 / 3600
    )


# ------------------------------------------------ a search run's one-job stages


def search_files(rule: str) -> tuple[dict, str, str]:
    """The files of a search run's one-job rule (embed_search_queries, search) on data
    set ds, whose patterns name it by the wildcard `dataset`."""
    return st.rule_files(rule).of({"dataset": "ds"})


def a_search_run(tmp_path, search: dict | None = None, **overlay) -> dict:
    """tasks [embedding, search]: the queries file searched against data set ds;
    `search`: the section's other keys."""
    Path("queries.jsonl").write_text(
        "".join(json.dumps({"id": f"q{i}", "text": f"q {i}"}) + "\n" for i in range(ITEMS))
    )
    search = {"queries": "queries.jsonl", **(search or {})}
    return config(tmp_path, tasks=["embedding", "search"], search=search, **overlay)


def search_done(queries: int = ITEMS) -> None:
    """The queries embedded (as `queries_embedded`) and searched, as scripts/embed.py and
    scripts/search.py write them: the search's outputs, its stats (`queries` searched in
    20 s on cuda:0), log and benchmark (30 s)."""
    for rule in ("embed_search_queries", "search"):
        outputs, log, bench = search_files(rule)
        for path in outputs.values():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            Path(path).write_bytes(b"x")
        os.makedirs(os.path.dirname(bench), exist_ok=True)
        Path(bench).write_text(f"s\th:m:s\tmax_rss\n{12.0 if rule != 'search' else 30.0}\t0:00:30\t100\n")
        Path(log).parent.mkdir(parents=True, exist_ok=True)
        Path(log).write_text(f"... INFO {rule}: done\n")
    stats = {"chunk": None, "items": ITEMS, "items_embedded": ITEMS, "seconds": 10.0, "parts": 4, "device": "cuda:0"}
    write_json(search_files("embed_search_queries")[0]["stats"], stats)
    write_json(
        search_files("search")[0]["stats"],
        {"queries": queries, "documents": CHUNKS * ITEMS, "k": 10, "device": "cuda:0", "seconds": 20.0},
    )


def test_a_search_run_shows_embed_search_queries_and_search(tmp_path, monkeypatch, now):
    """tasks [embedding, search]: the queries' embed job and the search are GPU jobs a
    user waits on, after the corpus's embed jobs, waiting before anything ran. As
    retrieval's: embed_search_queries is judged as an embed chunk job is (its parts lie
    under the data set's resume root, named by its output), and search, which keeps no
    parts, runs while its log is there."""
    cfg = a_search_run(tmp_path)
    result = st.status(cfg, 1, "--gpus", now=now)
    assert [s.label for s in result.stages] == ["embed ds", "embed_search_queries ds", "search ds"]
    assert [(j.state, s.gpus, s.unit) for s in result.stages[1:] for j in s.jobs] == [("waiting", 1, "queries")] * 2
    queries = search_files("embed_search_queries")
    assert queries[0]["npy"] == "results/ds/search/queries.npy" and queries[1] == "logs/embed_search_queries/ds.log"
    folder = in_progress(0, now - 6.0, 2, monkeypatch, files=queries)
    _, log, _ = search_files("search")
    assert_one_job_stages_running(cfg, "embed_search_queries ds", "search ds", folder, log, now)


def test_a_search_run_is_done_once_its_records_exist_counting_their_queries(tmp_path, monkeypatch, capsys, now):
    """Both jobs done once their outputs exist: embed_search_queries counts its stats'
    `items`, search its stats' `queries` (the count it searched, whatever the queries'
    embed job shows: here its vectors and log removed since); their GPU-hours their benchmarks'.
    The JSON lists both stages, their fields those of every stage."""
    cfg = a_search_run(tmp_path)
    search_done()
    result = st.status(cfg, 1, "--gpus", now=now)
    embed_queries, search = stage_of(result, "embed_search_queries ds"), stage_of(result, "search ds")
    assert [j.state for s in (embed_queries, search) for j in s.jobs] == ["done", "done"]
    assert (embed_queries.records_done, embed_queries.records_total) == (ITEMS, ITEMS)
    assert embed_queries.gpu_hours == pytest.approx(12 / 3600)
    assert (
        st.stage_line(search, "USD")
        == "search ds: 1/1 jobs, 100/100 queries, finished; 0.00833 GPU-h, 30.00 USD so far"
    )
    outputs, log, _ = search_files("embed_search_queries")
    os.remove(outputs["npy"]), os.remove(log)
    result = st.status(cfg, 1, "--gpus", now=now)
    embed_queries, search = stage_of(result, "embed_search_queries ds"), stage_of(result, "search ds")
    assert embed_queries.jobs[0].state == "waiting" and embed_queries.records_total is None
    assert (search.jobs[0].state, search.records_done, search.records_total) == ("done", ITEMS, ITEMS)

    assert main(["status", "--configfile", str(tmp_path / "overlay.yaml"), "--gpus", "1", "--json"]) == 0
    stages = json.loads(capsys.readouterr().out)["stages"]
    assert [(s["stage"], s["dataset"], s["unit"]) for s in stages][1:] == [
        ("embed_search_queries", "ds", "queries"),
        ("search", "ds", "queries"),
    ]
    assert {k for s in stages for k in s} == set(stages[0])


def test_a_search_with_a_non_number_for_its_queries_is_named(tmp_path, now):
    """search.stats.json's `queries` is read as a number, as every count status reads."""
    cfg = a_search_run(tmp_path)
    search_done(queries="many")
    search = stage_of(st.status(cfg, 1, "--gpus", now=now), "search ds")
    assert search.jobs[0].state == "done"
    assert search.notes == [
        "results/ds/search/search.stats.json is not readable (queries is 'many', not a number): its job is counted "
        "done, its stats not"
    ]


def test_a_search_runs_stages_hold_their_resources_gpus_and_none_for_faiss(tmp_path, now):
    """resources.embed_search_queries.gpu counts as make estimate counts it; under
    search.backend faiss, which scores on the CPU, the search holds no GPU
    (plan.gpu_rules_on_cpu) and its finished job costs none."""
    cfg = a_search_run(tmp_path, resources={"embed_search_queries": {"gpu": 2}, "search": {"gpu": 3}})
    result = st.status(cfg, 6, "--gpus", now=now)
    assert (stage_of(result, "embed_search_queries ds").gpus, stage_of(result, "search ds").gpus) == (2, 3)
    faiss = a_search_run(tmp_path, search={"backend": "faiss"})
    result = st.status(faiss, 1, "--gpus", now=now)  # before it ran: the config alone
    assert (stage_of(result, "search ds").gpus, stage_of(result, "embed_search_queries ds").gpus) == (0, 1)
    search_done()
    write_json(search_files("search")[0]["stats"], {"queries": ITEMS, "device": "cpu", "seconds": 20.0})
    result = st.status(faiss, 1, "--gpus", now=now)
    search = stage_of(result, "search ds")
    assert (search.gpus, search.gpu_hours, stage_of(result, "embed_search_queries ds").gpus) == (0, 0.0, 1)


def neighbours_searched(chunk: int) -> None:
    """A finished neighbours job of data set ds, as scripts/neighbours.py writes it: its
    table, its stats (100 records against the corpus's 600 in 3 s on cuda:0), its log
    and its benchmark (5 s)."""
    outputs, log, bench = st.rule_files("neighbours").of({"dataset": "ds", "chunk": chunk})
    Path(outputs["table"]).parent.mkdir(parents=True, exist_ok=True)
    Path(outputs["table"]).write_bytes(b"x")
    write_json(outputs["stats"], {"items": ITEMS, "documents": CHUNKS * ITEMS, "k": 10, "similarity": "cosine",
                                  "backend": "torch", "device": "cuda:0", "seconds": 3.0, "chunk": chunk})
    Path(bench).parent.mkdir(parents=True, exist_ok=True)
    Path(bench).write_text("s\th:m:s\tmax_rss\n5.0\t0:00:05\t100\n")
    Path(log).parent.mkdir(parents=True, exist_ok=True)
    Path(log).write_text("... INFO neighbours: done\n")


def test_the_neighbours_task_is_a_chunk_stage_after_the_embed_jobs(tmp_path, now):
    """tasks [embedding, neighbours]: a neighbours job a chunk, each a GPU job a user
    waits on, done once its table and stats exist (counting the records its stats say
    it searched), waiting before; under neighbours.backend faiss, which searches on the
    CPU, its jobs hold no GPU (plan.gpu_rules_on_cpu)."""
    faiss = config(tmp_path, tasks=["embedding", "neighbours"], neighbours={"backend": "faiss"})
    cfg = config(tmp_path, tasks=["embedding", "neighbours"])
    split_manifest()
    assert stage_of(st.status(faiss, 1, "--gpus", now=now), "neighbours ds").gpus == 0
    result = st.status(cfg, 1, "--gpus", now=now)
    assert [s.label for s in result.stages] == ["embed ds", "neighbours ds"]
    search = stage_of(result, "neighbours ds")
    assert search.gpus == 1 and [j.state for j in search.jobs] == ["waiting"] * CHUNKS
    assert (search.records_done, search.records_total) == (0, CHUNKS * ITEMS)
    neighbours_searched(0)
    search = stage_of(st.status(cfg, 1, "--gpus", now=now), "neighbours ds")
    assert [j.state for j in search.jobs] == ["done"] + ["waiting"] * (CHUNKS - 1)
    assert search.jobs[0].records_done == ITEMS and search.records_done == ITEMS
    assert search.gpu_hours == pytest.approx(5 / 3600)  # its benchmark's seconds on its one GPU


def test_a_model_changed_in_place_since_done_jobs_ran_is_named(tmp_path, now):
    """Done embed jobs whose recorded model hash is not the model's now: their outputs
    are the former model's, and Snakemake reruns none of them for it. Status counts them
    done and says so, as the parse does (plan.changed_model)."""
    model = tmp_path / "encoder"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "bert"}')
    cfg = config(tmp_path, embedding={"model": str(model)})
    split_manifest()
    finished(0)
    stats = job_files(0)[0]["stats"]
    record = json.loads(Path(stats).read_text())
    record["made_with"] = {"role": "embedding", "model": {"path": str(model), "sha256": "0" * 64}}
    write_json(stats, record)
    os.utime(stats, (1_000_000_000, 1_000_000_000))  # written before the model's files
    notes = st.status(cfg, 1, "--gpus", now=now).notes
    assert [n for n in notes if "changed since" in n] == [
        f"embedding.model '{model}' ({model}) changed since 1 of the jobs that load it ran: they recorded sha256 "
        f"000000000000, its files hash to {plan.changed_model('embedding.model', str(model), [('embed', stats)]).now[:12]}"
        " now; and jobs that load it have yet to run (results/ds/embed/embed_1.stats.json is not there yet): this run "
        "would mix the two models' outputs. Remake them all with the model as it is now (`--forcerun embed`), or put "
        "the former model back"
    ]
    record["made_with"]["model"]["sha256"] = plan.changed_model("embedding.model", str(model), [("embed", stats)]).now
    write_json(stats, record)
    os.utime(stats, (1_000_000_000, 1_000_000_000))
    assert not [n for n in st.status(cfg, 1, "--gpus", now=now).notes if "changed since" in n]


def test_a_model_changed_in_place_since_a_shared_embedding_set_was_made_is_named(tmp_path, now):
    """A retrieval sweep over embedding.max_length embeds a corpus and queries of its own,
    one set shared by every job with those settings (shardflow.sweep.shared), under
    results/sweeps/_embeddings/<data set>/ (rules/sweep.smk sweep_embed and
    sweep_embed_queries, whose patterns rules/common.smk shared_embeddings builds). Their
    jobs load the model as the main run's do, and status names a model changed since they
    ran, as the parse does."""
    model = tmp_path / "encoder"
    model.mkdir()
    (model / "config.json").write_text('{"model_type": "bert"}')
    sweep = {
        "len": {
            "stage": "retrieval",
            "grid": {"embedding.max_length": [16]},
            "seeds": [0],
            "metrics": {"ndcg_at_10": "max"},
        }
    }
    cfg = config(tmp_path, embedding={"model": str(model)}, retrieval={"path": "beir", "n_chunks": 1}, sweeps=sweep)
    (spec,) = est.sweeps(cfg).values()
    ((point, seed),) = spec.jobs()
    sets = shared_plan([spec], cfg, dataset="beir", n_chunks=1, device=cfg["gpu_jobs"]["device"])
    corpus, queries = sets.of_job(spec.folder, point, seed)
    assert not corpus.main and not queries.main  # embedding.max_length: its own sets
    made = {"role": "embedding", "model": {"path": str(model), "sha256": "0" * 64}}
    chunk = f"results/sweeps/_embeddings/beir/corpus/{corpus.key}/embed/embed_0.stats.json"
    asked = f"results/sweeps/_embeddings/beir/queries/{queries.key}/queries.stats.json"
    for stats in (chunk, asked):
        write_json(stats, {"items": ITEMS, "seconds": 1.0, "device": "cuda:0", "made_with": made})
        os.utime(stats, (1_000_000_000, 1_000_000_000))  # written before the model's files
    now_hash = plan.changed_model("embedding.model", str(model), [("sweep_embed", chunk)]).now
    notes = [n for n in st.status(cfg, 1, "--gpus", now=now).notes if "changed since" in n]
    assert notes == [
        f"embedding.model '{model}' ({model}) changed since 2 of the jobs that load it ran: they recorded sha256 "
        f"000000000000, its files hash to {now_hash[:12]} now; and jobs that load it have yet to run "
        "(results/ds/embed/embed_0.stats.json is not there yet): this run would mix the two models' outputs. "
        "Remake them all with the model as it is now (`--forcerun sweep_embed sweep_embed_queries`), or put the "
        "former model back"
    ]

"""Bad records through the real workflow, and one GPU per embed job with fake devices."""

import json
import re
from datetime import datetime

import pytest

from tests.helpers import offline_env, snakemake, write_config

pytestmark = pytest.mark.workflow


def _corpus_with_bad_line(path, records):
    lines = [json.dumps({"id": r["id"], "text": r["text"]}) for r in records[:12]]
    lines.insert(5, '{"id": "broken", "text": "unterminated')
    path.write_text("\n".join(lines) + "\n")
    return path


def test_bad_record_stops_the_run_naming_file_and_line(tmp_path, demo_texts):
    corpus = _corpus_with_bad_line(tmp_path / "bad.jsonl", demo_texts[1])
    cfg = write_config(tmp_path / "c.yaml", dataset="bad", n_chunks=1, input={"path": str(corpus)})
    proc = snakemake(tmp_path, "results/bad/chunks/manifest.json", "--cores", "1", "--configfile", str(cfg), check=False)
    assert proc.returncode != 0
    log = (tmp_path / "logs/split/bad.log").read_text()
    assert f"{corpus}:6: malformed JSON" in log
    assert "input.on_bad_record: skip sets such records aside in rejects.jsonl" in log  # what to do about it


def test_skipped_bad_record_is_counted_not_lost(tmp_path, demo_texts):
    corpus = _corpus_with_bad_line(tmp_path / "bad.jsonl", demo_texts[1])
    cfg = write_config(
        tmp_path / "c.yaml",
        dataset="bad",
        n_chunks=2,
        input={"path": str(corpus), "on_bad_record": "skip"},
        report={"map_points": 10},
    )
    snakemake(tmp_path, "results/bad/report/summary.json", "--cores", "2", "--configfile", str(cfg))
    rejects = [json.loads(x) for x in (tmp_path / "results/bad/chunks/rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["reason"].split(" (")[0]) for r in rejects] == [(6, "malformed JSON")]
    summary = json.loads((tmp_path / "results/bad/report/summary.json").read_text())
    assert summary["records"] == 12 and summary["rejected_records"] == 1


def test_concurrent_embed_jobs_never_share_a_device(tmp_path, demo_texts):
    """Fake device list of 2, 4 chunks, up to 2 embed jobs at once: each job pins itself
    to a free device (lock-file slot); jobs that overlap in time never share one."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": r["id"], "text": r["text"]}) + "\n" for r in demo_texts[1][:24]))
    cfg = write_config(
        tmp_path / "c.yaml",
        dataset="gpus",
        n_chunks=4,
        input={"path": str(corpus)},
        gpu_jobs={"pinning": "slots", "devices": "0,1"},
        resources={"embed": {"threads": 1}},
    )
    env = offline_env(SHARDFLOW_GPU_LOCK_DIR=str(tmp_path / "locks"))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    snakemake(
        tmp_path, "results/gpus/ids.parquet", "--cores", "2", "--resources", "gpu=2", "--configfile", str(cfg), env=env
    )
    spans = []
    for i in range(4):
        log = (tmp_path / f"logs/embed/gpus/chunk_{i}.log").read_text()
        # The slot is held from this log line (pinning) until the process exits.
        m = re.search(r"^(\S+ \S+) INFO embed: CUDA_VISIBLE_DEVICES=(\S+)", log, re.M)
        pinned = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
        stats = json.loads((tmp_path / f"results/gpus/embed/embed_{i}.stats.json").read_text())
        spans.append((m.group(2), pinned, stats["end_time"]))
    assert {d for d, _, _ in spans} == {"0", "1"}
    overlaps = 0
    for a in range(4):
        for b in range(a + 1, 4):
            (da, sa, ea), (db, sb, eb) = spans[a], spans[b]
            if sa < eb and sb < ea:  # overlapping in time
                overlaps += 1
                assert da != db, f"chunks {a} and {b} ran at once on device {da}"
    assert overlaps >= 1, "no two embed jobs ran at once: the test did not exercise concurrency"

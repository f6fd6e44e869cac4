"""chunking.by: source through the real workflow: a file added to the corpus adds a
chunk, and only its jobs and the merges run; the result is what a run of the whole
corpus from scratch writes (shardflow.corpus.by_source)."""

import json

import pytest

from tests.helpers import job_counts, snakemake, write_config

pytestmark = pytest.mark.workflow

AFTER_A_SOURCE = {
    "split_source": 1,
    "split_grow": 1,
    "summarise": 1,
    "merge_summaries": 1,
    "summarise_report": 1,
    "provenance": 1,
    "landing": 1,
    "all": 1,
    "total": 8,
}


def _part(path, texts):
    path.write_text("".join(json.dumps({"id": f"{path.stem}-{i}", "text": t}) + "\n" for i, t in enumerate(texts)))


def _planned(workdir, cfg, *flags: str) -> tuple[dict, list[str]]:
    """The job counts of a run (a dry run with "-n") and the chunks of its chunk jobs."""
    proc = snakemake(workdir, *flags, "--cores", "2", "--configfile", str(cfg))
    out = proc.stdout + proc.stderr
    chunks = [line.split("chunk=")[1] for line in out.splitlines() if "wildcards: dataset=grow, chunk=" in line]
    return job_counts(out), sorted(set(chunks))


def test_a_source_added_to_the_corpus_runs_only_its_chunk_and_matches_a_fresh_run(tmp_path, demo_texts):
    texts = [r["text"] for r in demo_texts[1][:9]]
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    _part(run / "data/part-1.jsonl", texts[:4])
    _part(run / "data/part-2.jsonl", texts[4:6])
    cfg = write_config(
        tmp_path / "c.yaml",
        dataset="grow",
        n_chunks="auto",
        tasks=["summarisation"],
        input={"path": "data/part-*.jsonl"},
        chunking={"by": "source"},
        summarise={"method": "lead"},
    )
    snakemake(run, "--cores", "2", "--configfile", str(cfg))
    finished = {p.name: p.stat().st_mtime_ns for p in (run / "results/grow/summarise").glob("summaries_*.jsonl")}
    assert sorted(finished) == ["summaries_0.jsonl", "summaries_1.jsonl"]

    # An id that part-1 holds too stops the run at the collector (the chunk jobs do not
    # wait for it); mending the file then reruns its chunk alone, whatever ran.
    (run / "data/part-3.jsonl").write_text(json.dumps({"id": "part-1-0", "text": texts[6]}) + "\n")
    failed = snakemake(run, "--cores", "2", "--configfile", str(cfg), check=False)
    assert failed.returncode != 0
    log = (run / "logs/split/grow.log").read_text()
    assert "data/part-3.jsonl:1: duplicate id 'part-1-0' (first at data/part-1.jsonl:1)" in log

    _part(run / "data/part-3.jsonl", texts[6:])
    counts, chunks = _planned(run, cfg)  # the run itself lists its jobs
    assert counts == AFTER_A_SOURCE and chunks == ["2"], counts
    assert {n: (run / "results/grow/summarise" / n).stat().st_mtime_ns for n in finished} == finished
    manifest = json.loads((run / "results/grow/chunks/manifest.json").read_text())
    assert [(c["source"], c["items"]) for c in manifest["chunks"]] == [
        ("data/part-1.jsonl", 4),
        ("data/part-2.jsonl", 2),
        ("data/part-3.jsonl", 3),
    ]
    summaries = [json.loads(line)["id"] for line in (run / "results/grow/summaries.jsonl").read_text().splitlines()]
    assert summaries == [f"part-{p}-{i}" for p, n in ((1, 4), (2, 2), (3, 3)) for i in range(n)]

    _part(run / "data/part-1.jsonl", texts[:3])  # a changed source: its chunk again, no other
    counts, chunks = _planned(run, cfg, "-n")
    assert counts == AFTER_A_SOURCE and chunks == ["0"], counts

    fresh = tmp_path / "fresh"
    (fresh / "data").mkdir(parents=True)
    for p in (1, 2, 3):
        (fresh / f"data/part-{p}.jsonl").write_bytes((run / f"data/part-{p}.jsonl").read_bytes())
    _part(run / "data/part-1.jsonl", texts[:4])
    _part(fresh / "data/part-1.jsonl", texts[:4])
    snakemake(fresh, "results/grow/summaries.jsonl", "--cores", "2", "--configfile", str(cfg))
    for name in ("chunks/manifest.json", "chunks/rejects.jsonl", "summaries.jsonl"):
        assert (fresh / "results/grow" / name).read_bytes() == (run / "results/grow" / name).read_bytes(), name

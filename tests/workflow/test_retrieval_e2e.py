"""A small synthetic BEIR set through the real retrieval workflow with two retrieval
sweeps (shared embeddings, their cost), the reproduction check failing loudly when an
expected value changes, MS MARCO files, and make evaluate-beir."""

import json
import os
import re

import pytest

from shardflow.core.gpu_slots import acquire_gpu
from tests.helpers import assert_no_secrets, job_counts, offline_env, snakemake, write_config

pytestmark = pytest.mark.workflow


@pytest.fixture(scope="module")
def beir(tmp_path_factory, demo_texts):
    """40 docs, half with titles, and an empty one (title and text, as FiQA has); 6
    queries that repeat a doc's text exactly (so each finds its doc first), one of them
    also judged against a doc missing from the corpus."""
    _, records = demo_texts
    folder = tmp_path_factory.mktemp("beir") / "tiny"
    (folder / "qrels").mkdir(parents=True)
    docs = records[:40]
    with open(folder / "corpus.jsonl", "w") as fh:
        for i, r in enumerate(docs):
            title = r["id"] if i % 2 else ""
            fh.write(json.dumps({"_id": f"d{i}", "title": title, "text": r["text"]}) + "\n")
        fh.write(json.dumps({"_id": "d-empty", "title": "", "text": ""}) + "\n")
    with open(folder / "queries.jsonl", "w") as fh:
        for q in range(6):
            i = 2 * q  # even docs have no title: the query text equals the document text
            fh.write(json.dumps({"_id": f"q{q}", "text": docs[i]["text"]}) + "\n")
        fh.write(json.dumps({"_id": "q-unjudged", "text": "not in qrels, not evaluated"}) + "\n")
    with open(folder / "qrels" / "test.tsv", "w") as fh:
        fh.write("query-id\tcorpus-id\tscore\n")
        for q in range(6):
            fh.write(f"q{q}\td{2 * q}\t1\n")
        fh.write("q5\tmissing-doc\t1\n")
    return folder


# Two retrieval sweeps run with the main run (one workflow run for both tests that read
# it): `topk` varies only what the search reads, so both its points read the main run's
# embeddings; `len` truncates the documents, so its point embeds a set of its own under
# sweeps/_embeddings.
SWEEPS = {
    "topk": {"stage": "retrieval", "grid": {"retrieval.top_k": [100, 200]}, "seeds": [0],
             "metrics": {"ndcg_at_10": "max"}},
    "len": {"stage": "retrieval", "grid": {"embedding.max_length": [16]}, "seeds": [0],
            "metrics": {"ndcg_at_10": "max"}},
}
REPRODUCTION = "results/tiny/reproduction.json"


def _config(workdir, folder, expect_ndcg, **extra):
    return write_config(
        workdir / "config.yaml",
        retrieval={"path": str(folder), "name": "tiny", "n_chunks": 2, "top_k": 100},
        resources={"embed": {"threads": 2}, "embed_queries": {"threads": 2}},
        reproduce={
            "name": "tiny-check",
            "expect": {"metrics": {"ndcg_at_10": {"value": expect_ndcg, "tolerance": 0.001}}},
        },
        **extra,
    )


def _expected_ndcg():
    # 5 queries score 1; q5 has two relevant docs, one missing: DCG 1, IDCG 1 + 1/log2(3).
    import math

    return (5 + 1 / (1 + 1 / math.log2(3))) / 6


@pytest.mark.dryrun
def test_dry_run_shows_the_retrieval_dag_before_data(tmp_path, beir):
    cfg = _config(tmp_path, beir, _expected_ndcg())
    out = snakemake(tmp_path, "results/tiny/reproduction.json", "-n", "--configfile", str(cfg)).stdout
    counts = job_counts(out)
    assert counts["embed"] == 2 and counts["embed_queries"] == 1 and counts["retrieval_evaluate"] == 1
    assert counts["retrieval_prepare"] == counts["retrieval_queries"] == counts["retrieval_qrels"] == 1

    def search_resources(dry_run: str) -> str:
        (block,) = [b for b in re.split(r"\n(?=rule |localrule )", dry_run) if b.startswith("rule retrieval_evaluate:")]
        return re.search(r"resources: (.*)", block).group(1)

    assert re.search(r"\bgpu=1\b", search_resources(out))
    # faiss scores on the CPU: its job asks for no GPU, which it held idle through the search.
    faiss = write_config(tmp_path / "faiss.yaml", retrieval={"backend": "faiss"})
    out = snakemake(tmp_path, "results/tiny/reproduction.json", "-n", "--configfile", str(cfg), str(faiss)).stdout
    assert "gpu=" not in search_resources(out)


@pytest.fixture(scope="module")
def run(tmp_path_factory, beir):
    """The main run to its reproduction check, and both sweeps, in one Snakemake run."""
    workdir = tmp_path_factory.mktemp("retrieval")
    cfg = _config(workdir, beir, _expected_ndcg(), sweeps=SWEEPS)
    targets = [REPRODUCTION, *(f"results/sweeps/{s}/summary.parquet" for s in SWEEPS)]
    snakemake(workdir, *targets, "--cores", "2", "--configfile", str(cfg))
    return workdir, cfg


def test_retrieval_sweeps_read_shared_embeddings_and_count_each_job_once(run):
    """Each sweep's cost.json counts every job it read once, by where it came from."""
    import pandas as pd

    tmp_path, _ = run
    main = json.loads((tmp_path / "results/tiny/retrieval/metrics.json").read_text())
    topk = pd.read_parquet(tmp_path / "results/sweeps/topk/summary.parquet")
    assert topk["ndcg_at_10_mean"].tolist() == pytest.approx([main["ndcg_at_10"]] * 2, abs=1e-12)
    shared = sorted(p.parent.name for p in (tmp_path / "results/sweeps/_embeddings/tiny").glob("*/*/"))
    assert shared == ["corpus", "queries"], shared  # one set of each, for max_length 16

    cost = json.loads((tmp_path / "results/sweeps/topk/cost.json").read_text())
    # The main run's two embed jobs, merge and embed_queries once; the two points' evaluations.
    assert (cost["by_origin"]["main_run"]["jobs"], cost["by_origin"]["sweep"]["jobs"], cost["jobs"]) == (4, 2, 6)
    assert cost["summed_over_runs"]["wall_time_s"] > cost["wall_time_s"]  # the runs table counts them twice
    cost = json.loads((tmp_path / "results/sweeps/len/cost.json").read_text())
    assert (cost["by_origin"]["shared"]["jobs"], cost["by_origin"]["sweep"]["jobs"], cost["by_origin"]["main_run"]["jobs"]) == (4, 1, 0)


def test_make_search_ranks_the_judged_queries_as_the_evaluation_did(run, capsys):
    """make search embeds queries as the run embedded its own (the run's settings from its
    provenance record): the evaluation's queries get the evaluation's hits and scores."""
    import pandas as pd

    from shardflow import cli

    tmp_path, _ = run
    r = tmp_path / "results/tiny/retrieval"
    code = cli.main(["search", "--results", str(tmp_path / "results"), "--dataset", "tiny", "--queries",
                     str(r / "queries.jsonl"), "--top-k", "10", "--device", "cpu", "--json"])
    assert code == 0, capsys.readouterr().err
    answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    ran = pd.read_parquet(r / "run.parquet")
    assert [a["query_id"] for a in answers] == list(dict.fromkeys(ran["query_id"]))
    for answer in answers:
        want = ran[ran["query_id"] == answer["query_id"]].head(10)
        assert [h["id"] for h in answer["hits"]] == want["doc_id"].tolist(), answer["query_id"]
        assert [h["score"] for h in answer["hits"]] == pytest.approx(want["score"].tolist(), abs=1e-5)
    assert answers[0]["hits"][0]["text"] == answers[0]["query"]  # q0 repeats d0's text


def test_metrics_through_the_workflow_and_reproduction_check(run, beir):
    tmp_path, cfg = run
    metrics = json.loads((tmp_path / "results/tiny/retrieval/metrics.json").read_text())
    assert set(metrics) >= {"ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10", "map_at_10"}
    assert metrics["ndcg_at_10"] == pytest.approx(_expected_ndcg(), abs=1e-6)
    assert metrics["recall_at_10"] == pytest.approx((5 + 0.5) / 6, abs=1e-9)
    assert metrics["mrr_at_10"] == pytest.approx(1.0)
    assert metrics["n_queries"] == 6
    assert metrics["n_documents"] == 41  # the empty one embedded and searched, as MTEB does
    assert metrics["judged_documents_not_in_corpus"] == 1  # q5's missing-doc
    assert (tmp_path / "results/tiny/retrieval/per_query_ndcg.png").stat().st_size > 1000
    repro = json.loads((tmp_path / "results/tiny/reproduction.json").read_text())
    assert repro["ok"]

    # An edited qrels or queries file reruns only what reads it: a new judgement of a
    # judged query leaves the corpus side (split, embed) and the queries alone; a newly
    # judged query or a changed query adds the query side. The module's BEIR folder is
    # restored, bytes and times, after each.
    evaluation = {"retrieval_evaluate", "provenance", "verify_reproduction"}  # provenance hashes the files
    query_side = {"retrieval_queries", "embed_queries"}
    for name, line, reruns in [
        ("qrels/test.tsv", "q1\td3\t1\n", {"retrieval_qrels", *evaluation}),
        ("qrels/test.tsv", "q-unjudged\td1\t1\n", {"retrieval_qrels", *query_side, *evaluation}),
        ("queries.jsonl", '{"_id": "q-new", "text": "unjudged"}\n', {*query_side, *evaluation}),
    ]:
        path = beir / name
        text, times = path.read_bytes(), os.stat(path)
        try:
            path.write_bytes(text + line.encode())
            dry = snakemake(tmp_path, "results/tiny/reproduction.json", "-n", "--configfile", str(cfg))
        finally:
            path.write_bytes(text)
            os.utime(path, ns=(times.st_atime_ns, times.st_mtime_ns))
        assert set(job_counts(dry.stdout)) - {"total"} == reruns, f"{name} + {line!r}\n{dry.stdout[-3000:]}"

    # Change the expectation: the check reruns (params changed) and fails with a table.
    bad = _config(tmp_path, beir, 0.5, sweeps=SWEEPS)
    proc = snakemake(
        tmp_path, "results/tiny/reproduction.json", "--cores", "2", "--configfile", str(bad), check=False
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "reproduction 'tiny-check' FAILED" in out
    assert "metric ndcg_at_10" in out and "0.50000" in out and "FAIL" in out
    # The run saw fake credentials (offline_env): no file it wrote holds one.
    files = assert_no_secrets(tmp_path, texts=(proc.stdout, proc.stderr))
    assert any(f.name == "metrics.json" for f in files) and any(f.suffix == ".log" for f in files)


def test_make_evaluate_beir_prints_the_metrics_path_last(beir, tmp_path):
    """The documented one-command evaluation of any BEIR folder (one corpus chunk: the
    pipeline with its chunks is the test above's), here of its dev split (SPLIT=dev: a
    folder with qrels/dev.tsv only)."""
    import shutil
    import subprocess

    from tests.helpers import REPO, offline_env

    data = shutil.copytree(beir, tmp_path / "dev-only")
    (data / "qrels" / "test.tsv").rename(data / "qrels" / "dev.tsv")
    name = "pytest_evaluate_beir"
    try:
        proc = subprocess.run(
            ["make", "--no-print-directory", "evaluate-beir", f"DATA={data}", f"NAME={name}", "CORES=2", "CHUNKS=1",
             "SPLIT=dev"],
            cwd=REPO,
            env=offline_env(),
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        last = proc.stdout.strip().splitlines()[-1]
        assert last == f"results/{name}/retrieval/metrics.json"
        metrics = json.loads((REPO / last).read_text())
        assert metrics["n_queries"] == 6 and metrics["mrr_at_10"] == pytest.approx(1.0)
        assert sorted(p.name for p in (REPO / f"results/{name}/embed").glob("*.npy")) == ["embed_0.npy"]
    finally:  # the target writes into the repo's results/, logs/, benchmarks/
        for path in [REPO / "results" / name, *REPO.glob(f"logs/*/{name}*"), *REPO.glob(f"benchmarks/*/{name}*")]:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def test_msmarco_files_through_the_workflow(tmp_path, beir):
    """The same judgements as MS MARCO files: gzipped `pid<TAB>text` collection, a
    `qid<TAB>text` queries file, TREC 4-column qrels without a header."""
    import gzip

    folder = tmp_path / "marco"
    folder.mkdir()
    docs = [json.loads(line) for line in (beir / "corpus.jsonl").read_text().splitlines()]
    with gzip.open(folder / "collection.tsv.gz", "wt") as fh:
        for i, d in enumerate(docs):
            fh.write(f"{1000 + i}\t{d['text']}\n")
    queries = [json.loads(line) for line in (beir / "queries.jsonl").read_text().splitlines()]
    with open(folder / "queries.dev.small.tsv", "w") as fh:
        for i, q in enumerate(queries):
            fh.write(f"{i}\t{q['text']}\n")
    with open(folder / "qrels.dev.small.tsv", "w") as fh:
        for q in range(6):
            fh.write(f"{q}\t0\t{1000 + 2 * q}\t1\n")
        fh.write("5\t0\t999999\t1\n")  # judged passage missing from the collection
    cfg = write_config(
        tmp_path / "config.yaml",
        gpu_jobs={"pinning": "slots", "devices": "0,1"},
        retrieval={
            "path": str(folder),
            "format": "msmarco",
            "name": "marco",
            "n_chunks": 1,  # the chunked pipeline is the module run's; one embed job fewer
            "top_k": 100,
            "msmarco_collection": "collection.tsv.gz",
        },
    )
    # Pinning with fake devices 0 and 1 while this test holds device 0: every GPU job,
    # retrieval_evaluate included, must take a slot of its own, i.e. device 1.
    locks = tmp_path / "locks"
    env = offline_env(SHARDFLOW_GPU_LOCK_DIR=str(locks))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    with acquire_gpu("0", mode="slots", lock_dir=locks, job="pytest holds device 0"):
        snakemake(
            tmp_path, "results/marco/retrieval/metrics.json", "--cores", "2", "--resources", "gpu=1",
            "--configfile", str(cfg), env=env,
        )
    for log in ["embed/marco/chunk_0", "embed_queries/marco", "retrieval_evaluate/marco"]:
        text = (tmp_path / f"logs/{log}.log").read_text()
        assert "CUDA_VISIBLE_DEVICES=1 (gpu_pinning=slots)" in text, f"{log}: {text[:1500]}"
    metrics = json.loads((tmp_path / "results/marco/retrieval/metrics.json").read_text())
    assert metrics["n_queries"] == 6  # the unjudged query is embedded but not scored
    assert metrics["ndcg_at_10"] == pytest.approx(_expected_ndcg(), abs=1e-6)
    assert metrics["recall_at_10"] == pytest.approx((5 + 0.5) / 6, abs=1e-9)
    assert metrics["mrr_at_10"] == pytest.approx(1.0)
    files = assert_no_secrets(tmp_path)  # fake credentials in its environment, none in its files
    assert any(f.name == "metrics.json" for f in files)

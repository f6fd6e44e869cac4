"""The real workflow end to end on a small corpus, as a subprocess: split into 3 chunks,
embed, merge, verify, report; compared row by row with SentenceTransformer.encode. The
run holds an embed sweep of one point (another token budget), measured against it, and
the neighbours task (each document's nearest, the near-duplicates), checked against a
search by numpy, and the search task (a CSV of queries), checked against numpy and
against `make search`'s answers for the same queries."""

import json
import os
import re

import numpy as np
import pandas as pd
import pytest
import yaml

from shardflow.core.models import bundled_model_path
from tests.helpers import (
    assert_no_secrets,
    assert_status_reads_the_planned_files,
    job_counts,
    sha256,
    snakemake,
    write_config,
)

pytestmark = pytest.mark.workflow


# Two queries that are documents' own texts (records 7 and 50: their top hit is that
# document) and two of a user's words; ids and texts in fields a config names.
QUERY_IDS = ["own-7", "own-50", "sort", "files"]


def _queries(workdir, records):
    path = workdir / "questions.csv"
    texts = [records[7]["text"], records[50]["text"], "sort a list in place", "open a file for reading"]
    pd.DataFrame({"qid": QUERY_IDS, "question": texts}).to_csv(path, index=False)
    return path, texts


def _config(workdir, corpus, queries, **extra):
    return write_config(
        workdir / "config.yaml",
        dataset="e2e",
        tasks=["embedding", "neighbours", "search"],
        n_chunks=3,
        # 0.55: the 90 docstrings' nearest pairs score up to 0.67; a handful of pairs
        neighbours={"k": 4, "duplicate_threshold": 0.55},
        search={"queries": str(queries), "id_field": "qid", "text_field": "question", "k": 5},
        input={"path": str(corpus)},
        embedding={"window": 16, "token_budget": 2048},
        report={"map_points": 50},
        sweeps={"budget": {"stage": "embed", "grid": {"embedding.token_budget": [512]}, "seeds": [0],
                           "metrics": {"items_per_s": "max", "agreement.cosine_min": "max"}}},
        **extra,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory, demo_texts):
    corpus, records = demo_texts
    workdir = tmp_path_factory.mktemp("e2e")
    queries, _ = _queries(workdir, records)
    cfg = _config(workdir, corpus, queries)
    proc = snakemake(workdir, "--cores", "2", "--configfile", str(cfg))
    return workdir, cfg, records, proc


def test_merged_embeddings_equal_sentence_transformers_row_by_row(run):
    from sentence_transformers import SentenceTransformer

    workdir, _, records, _ = run
    emb = np.load(workdir / "results/e2e/embeddings.npy")
    ids = pd.read_parquet(workdir / "results/e2e/ids.parquet")["id"].tolist()
    assert ids == [r["id"] for r in records]  # input order, row k of one is row k of the other
    assert emb.shape == (len(records), 384) and emb.dtype == np.float32
    ref = SentenceTransformer(bundled_model_path(), device="cpu").encode([r["text"] for r in records])
    cos = (emb * ref).sum(1) / (np.linalg.norm(emb, axis=1) * np.linalg.norm(ref, axis=1))
    assert cos.min() > 0.9999, f"worst row {cos.argmin()}: cosine {cos.min()}"


def test_chunks_manifest_and_verification(run):
    workdir, _, records, _ = run
    manifest = json.loads((workdir / "results/e2e/chunks/manifest.json").read_text())
    assert manifest["n_chunks"] == 3 and manifest["total_records"] == len(records)
    assert [c["items"] for c in manifest["chunks"]] == [30, 30, 30]
    verification = json.loads((workdir / "results/e2e/verification.json").read_text())
    assert verification["ok"] and verification["rows"] == len(records) and verification["dim"] == 384
    assert all(check["ok"] for check in verification["checks"].values())


def test_report_outputs_and_summary(run):
    workdir, _, records, _ = run
    summary = json.loads((workdir / "results/e2e/report/summary.json").read_text())
    assert summary["records"] == len(records) and summary["chunks"] == 3
    assert summary["tokens"] > len(records) * 20 and summary["items_per_s"] > 0
    assert summary["gpu_hours"] == 0 and summary["estimated_cost"] == 0  # CPU-only run
    for fig in ("throughput", "timeline", "norms", "map"):
        assert (workdir / f"results/e2e/report/{fig}.png").stat().st_size > 1000
    provenance = json.loads((workdir / "results/e2e/provenance.json").read_text())
    assert provenance["outputs"]["results/e2e/embeddings.npy"] == sha256(workdir / "results/e2e/embeddings.npy")
    assert provenance["models"] == {"embedding": provenance["model"]} and provenance["model"]["sha256"]
    # What the embed, neighbours and search jobs (the queries' embed job and the search)
    # ran with, recorded as they wrote their rows: one checkout, one model.
    made = provenance["jobs_made_with"]
    assert made["jobs"] == 8 and made["models"] == {"embedding": [provenance["model"]]} and len(made["git"]) == 1
    assert made["devices"] == [["cpu", None]] and provenance["warnings"] == []
    log = (workdir / "logs/embed/e2e/chunk_0.log").read_text()
    assert "params=" in log.splitlines()[0] and "torch" in log.splitlines()[0]


def test_neighbours_are_each_documents_exact_nearest_and_the_near_duplicates_their_pairs(run):
    """Checked against numpy on the merged embeddings: each document's 4 nearest by cosine
    (itself left out, ties to the earlier row), read from the three chunk jobs' tables;
    the near-duplicate pairs at 0.55, each once; single-linkage groups keeping their first
    member; the summary and the landing page's section; and make status's view of the jobs."""
    workdir, _, records, _ = run
    r = workdir / "results/e2e"
    emb = np.load(r / "embeddings.npy").astype(np.float64)
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    scores = unit @ unit.T
    np.fill_diagonal(scores, -np.inf)
    order = np.lexsort((np.broadcast_to(np.arange(len(emb)), scores.shape), -scores), axis=1)[:, :4]
    table = pd.read_parquet(r / "neighbours.parquet")
    assert len(table) == 4 * len(records) and table["row"].tolist() == [i for i in range(len(records)) for _ in range(4)]
    got = table["neighbour_row"].to_numpy().reshape(-1, 4)
    # float32 products against float64 here: rows whose 4th and 5th scores all but tie may differ
    close = np.sort(scores, axis=1)[:, ::-1]
    clear = np.abs(close[:, 3] - close[:, 4]) > 1e-5
    assert clear.sum() > len(records) * 0.9 and (got[clear] == order[clear]).all()
    np.testing.assert_allclose(table["score"].to_numpy().reshape(-1, 4), np.take_along_axis(scores, got, 1), atol=1e-5)
    ids = [rec["id"] for rec in records]
    assert table["id"].tolist()[::4] == ids and table["neighbour"].tolist() == [ids[i] for i in got.ravel()]

    listed = {(min(a, b), max(a, b)) for a in range(len(emb)) for b in got[a] if scores[a, b] >= 0.55}
    pairs = pd.read_parquet(r / "neighbours/near_duplicates.parquet")
    assert listed and set(zip(pairs["row"], pairs["neighbour_row"], strict=True)) == listed
    groups = pd.read_parquet(r / "neighbours/duplicate_groups.parquet")
    assert sorted(groups["row"]) == sorted({x for p in listed for x in p})
    first = groups.groupby("group")["row"].min()
    assert groups["keep"].sum() == len(first) and (groups[groups["keep"]]["row"].to_numpy() == sorted(first)).all()
    summary = json.loads((r / "neighbours/summary.json").read_text())
    assert (summary["near_duplicate_pairs"], summary["groups"]) == (len(listed), len(first))
    assert summary["documents_to_drop"] == len(groups) - len(first) and summary["similarity"] == "cosine"
    landing = (workdir / "results/report.rst").read_text()
    assert "Neighbours: e2e" in landing and f"{len(listed)} pairs scoring 0.55 or more" in landing
    from shardflow.workflow.status import rule_files

    for chunk in range(3):  # make status finds each job's files where the rule writes them
        outputs, _, bench = rule_files("neighbours").of({"dataset": "e2e", "chunk": str(chunk)})
        assert all((workdir / f).is_file() for f in (*outputs.values(), bench)), outputs


def test_search_hits_are_the_exact_nearest_and_what_make_search_answers(run):
    """The CSV's queries, read by the fields the config names, in file order, embedded as
    sentence-transformers embeds them (no prompt: MiniLM's default), each with its 5
    nearest documents by cosine (numpy on the merged embeddings, ties to the earlier row),
    a document's own text finding it first; and the same ids and scores `make search`
    (shardflow.workflow.search) gives for the same queries on the finished run."""
    from sentence_transformers import SentenceTransformer

    from shardflow.workflow.search import search

    workdir, _, records, _ = run
    r = workdir / "results/e2e"
    _, texts = _queries(workdir, records)
    prepared = [json.loads(line) for line in (r / "search/queries.jsonl").read_text().splitlines()]
    assert [(q["id"], q["text"]) for q in prepared] == list(zip(QUERY_IDS, texts, strict=True))
    vectors = np.load(r / "search/queries.npy")
    ref = SentenceTransformer(bundled_model_path(), device="cpu").encode(texts)
    cos = (vectors * ref).sum(1) / (np.linalg.norm(vectors, axis=1) * np.linalg.norm(ref, axis=1))
    assert cos.min() > 0.9999, cos

    emb = np.load(r / "embeddings.npy").astype(np.float64)
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    q = vectors.astype(np.float64) / np.linalg.norm(vectors, axis=1, keepdims=True)
    scores = q @ unit.T
    order = np.lexsort((np.broadcast_to(np.arange(len(emb)), scores.shape), -scores), axis=1)[:, :5]
    hits = pd.read_parquet(r / "search/hits.parquet")
    assert hits["query_id"].tolist() == [qid for qid in QUERY_IDS for _ in range(5)]
    assert hits["rank"].tolist() == [1, 2, 3, 4, 5] * len(QUERY_IDS)
    got = hits["row"].to_numpy().reshape(-1, 5)
    assert (got == order).all(), (got, order)
    ids = [rec["id"] for rec in records]
    assert hits["id"].tolist() == [ids[i] for i in got.ravel()]
    np.testing.assert_allclose(hits["score"].to_numpy().reshape(-1, 5), np.take_along_axis(scores, got, 1), atol=1e-5)
    assert got[0, 0] == 7 and got[1, 0] == 50 and hits["score"].iloc[0] > 0.999

    answers, used = search(r, list(zip(QUERY_IDS, texts, strict=True)), 5, device="cpu")
    assert [a.query_id for a in answers] == QUERY_IDS and used["prompt"] == "no prompt"
    assert [[h.id for h in a.hits] for a in answers] == hits["id"].to_numpy().reshape(-1, 5).tolist()
    np.testing.assert_allclose([[h.score for h in a.hits] for a in answers],
                               hits["score"].to_numpy().reshape(-1, 5), atol=1e-5)

    summary = json.loads((r / "search/summary.json").read_text())
    assert (summary["queries"], summary["documents"], summary["k"], summary["hits"]) == (4, len(records), 5, 20)
    assert summary["best_score"]["max"] == pytest.approx(hits["score"].max(), abs=1e-6)
    assert (r / "search/best_scores.png").stat().st_size > 1000
    landing = (workdir / "results/report.rst").read_text()
    assert "Search: e2e" in landing and f"4 queries against {len(records)} documents" in landing
    from shardflow.workflow.status import rule_files

    for rule in ("search_queries", "embed_search_queries", "search"):  # make status finds each job's files
        outputs, _, bench = rule_files(rule).of({"dataset": "e2e"})
        assert all((workdir / f).is_file() for f in (*outputs.values(), *([bench] if bench else []))), outputs


@pytest.mark.dryrun
def test_dry_run_lists_every_neighbours_job_before_any_data(tmp_path):
    """A neighbours job a chunk and their merge, planned before any data exists, each on a
    GPU; with backend faiss (which scores on the CPU) they ask for none."""
    cfg = write_config(tmp_path / "c.yaml", tasks=["embedding", "neighbours"], n_chunks=7)
    out = snakemake(tmp_path, "-n", "--cores", "8", "--configfile", str(cfg)).stdout
    counts = job_counts(out)
    assert counts["neighbours"] == counts["embed"] == 7 and counts["merge_neighbours"] == 1, out[-3000:]
    assert assert_status_reads_the_planned_files(out, "neighbours") == 7  # make status's view of the jobs
    blocks = re.findall(r"^rule neighbours:\n((?:    .*\n)+)", out, flags=re.M)
    assert len(blocks) == 7 and all("gpu=1" in b for b in blocks), blocks[0]
    faiss = write_config(tmp_path / "f.yaml", tasks=["embedding", "neighbours"], n_chunks=2,
                         neighbours={"backend": "faiss"})
    out = snakemake(tmp_path, "-n", "--cores", "8", "--configfile", str(faiss)).stdout
    blocks = re.findall(r"^rule neighbours:\n((?:    .*\n)+)", out, flags=re.M)
    assert len(blocks) == 2 and not any("gpu=" in b for b in blocks), blocks[0]
    assert not (tmp_path / "results").exists()


@pytest.mark.dryrun
def test_dry_run_lists_every_search_job_before_any_data(tmp_path):
    """The queries' three jobs, planned from the queries file alone: its embed job and the
    search each on a GPU; with backend faiss (which scores on the CPU) the search asks for
    none, and the queries' embed job still does."""
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"id": "a", "text": "a question"}\n')
    cfg = write_config(tmp_path / "c.yaml", tasks=["embedding", "search"], n_chunks=3, search={"queries": str(queries)})
    out = snakemake(tmp_path, "-n", "--cores", "8", "--configfile", str(cfg)).stdout
    counts = job_counts(out)
    assert counts["search_queries"] == counts["embed_search_queries"] == counts["search"] == 1, out[-3000:]
    for rule in ("search_queries", "embed_search_queries", "search"):
        assert assert_status_reads_the_planned_files(out, rule) == 1  # make status's view of the jobs
    for rule, gpu in (("search_queries", False), ("embed_search_queries", True), ("search", True)):
        block = re.findall(rf"^rule {rule}:\n((?:    .*\n)+)", out, flags=re.M)[0]
        assert ("gpu=1" in block) == gpu, block
    faiss = write_config(tmp_path / "f.yaml", tasks=["embedding", "search"], n_chunks=2,
                         search={"queries": str(queries), "backend": "faiss"})
    out = snakemake(tmp_path, "-n", "--cores", "8", "--configfile", str(faiss)).stdout
    blocks = {rule: re.findall(rf"^rule {rule}:\n((?:    .*\n)+)", out, flags=re.M)[0]
              for rule in ("embed_search_queries", "search")}
    assert "gpu=1" in blocks["embed_search_queries"] and "gpu=" not in blocks["search"], blocks
    assert not (tmp_path / "results").exists()


def test_html_report_builds(run):
    workdir, cfg, _, _ = run
    snakemake(workdir, "--configfile", str(cfg), "--report", "report.html")
    html = (workdir / "report.html").read_text(errors="replace")
    assert "throughput.png" in html and "summary.json" in html
    # The first screen: the run's landing page (results/report.rst), not only the rule graph.
    landing = (workdir / "results/report.rst").read_text()
    assert "Embedding: e2e" in landing and "verification passed" in landing
    for row in ("records in", "records out", "wall time", "throughput", "GPU-hours and cost"):
        assert row in landing and row in html, row
    # The wall time is the encoding's; the jobs' own time (model loading) is said apart.
    assert "encoding (3 chunk jobs, " in landing and "of job time in all, model loading included" in landing

    # A first page with markup the landing rule never writes is not rendered (Jinja2 would
    # run it, docutils would copy a local file in): the placeholder, with a warning.
    page = workdir / "results/report.rst"
    text, times = page.read_bytes(), os.stat(page)
    try:
        page.write_bytes(text + b"\n.. include:: /etc/hostname\n\n{{ 1234567 * 89 }}\n")
        made = snakemake(workdir, "--configfile", str(cfg), "--report", "tampered.html")
    finally:
        page.write_bytes(text)
        os.utime(page, ns=(times.st_atime_ns, times.st_mtime_ns))
    assert "results/report.rst is not a page rule landing wrote" in made.stderr
    html = (workdir / "tampered.html").read_text(errors="replace")
    assert "has not finished yet" in html and "109876463" not in html and "Embedding: e2e" not in html


def test_second_run_has_nothing_to_do(run):
    workdir, cfg, _, _ = run
    out = snakemake(workdir, "-n", "--configfile", str(cfg)).stdout
    assert "Nothing to be done" in out
    # The same values in another key order (a default written out, on the command line or
    # in a file): the jobs record their section in one order, so nothing reruns (it reran
    # every embed job: Snakemake compares params by repr).
    data = yaml.safe_load(cfg.read_text())
    data["embedding"] = {"seed": 0, "max_length": None, **dict(reversed(list(data.get("embedding", {}).items())))}
    again = write_config(cfg.with_name("reordered.yaml"), **data)
    out = snakemake(workdir, "-n", "--configfile", str(again), "--config", "embedding={dtype: auto}").stdout
    assert "Nothing to be done" in out, out[-3000:]


def _variant(cfg, name, **sections):
    """The module's config with some sections' keys changed, as a file beside it."""
    data = yaml.safe_load(cfg.read_text())
    for section, values in sections.items():
        data[section] = {**data.get(section, {}), **values}
    return write_config(cfg.with_name(f"{name}.yaml"), **data)


def test_where_jobs_run_reruns_no_embed_job_and_what_they_compute_reruns_each(run):
    """Snakemake reruns a finished job whose recorded params changed. Other GPUs, another
    pinning mode, another resume folder (`gpu_jobs`) or a compile cache (params not
    recorded) leave every embed job done; only the provenance record, which holds the
    whole config, is rewritten. A changed embedding setting or device (it decides dtype
    and kernels) reruns each embed job, task search's query embedding among them, for
    that reason."""
    workdir, cfg, _, _ = run
    moved = {"devices": "0,1", "pinning": "slots", "resume_dir": str(workdir / "elsewhere")}
    cache = {"compile_cache": str(workdir / "inductor")}
    out = snakemake(workdir, "-n", "--configfile", str(_variant(cfg, "moved", gpu_jobs=moved, embedding=cache))).stdout
    assert set(job_counts(out)) <= {"provenance", "landing", "all", "total"}, out
    # The record holds the config; Snakemake records only its hash, so the rerun reason
    # names two hashes (it printed the whole config twice, about 5 KB, before).
    (reason,) = [line for line in out.splitlines() if "Params have changed" in line]
    assert len(reason) < 300 and "gpu_jobs" not in reason, reason
    changes = (
        ("window", {"embedding": {"window": 8}}),
        ("device", {"gpu_jobs": {"device": "cpu"}}),
        ("graphs", {"embedding": {"cuda_graphs": "on"}}),  # recorded away from its neutral `auto`
    )
    for name, change in changes:
        out = snakemake(workdir, "-n", "--configfile", str(_variant(cfg, name, **change))).stdout
        counts = job_counts(out)  # the sweep's point inherits the change: its jobs rerun too
        assert counts["embed"] == counts["sweep_embed_chunk"] == 3, (name, out)
        # and task search's queries, embedded with the same settings (their prompt aside)
        assert counts["embed_search_queries"] == 1, (name, out)
        assert out.count("reason: Params have changed") == 7, (name, out)


def test_an_embed_sweep_measures_speed_and_agreement_with_the_main_run(run):
    """The point embeds every chunk again with its own settings (a budget of 512 tokens:
    smaller batches than the main run's 2048), and its metrics hold its speed and the
    cosine of each of its rows with the main run's: the same vectors to float rounding."""
    workdir, _, records, _ = run
    job = workdir / "results/sweeps/budget/token_budget=512/seed=0"
    metrics = json.loads((job / "metrics.json").read_text())
    main = json.loads((workdir / "results/e2e/report/summary.json").read_text())
    assert (metrics["records"], metrics["chunks"], metrics["tokens"]) == (len(records), 3, main["tokens"])
    assert metrics["agreement"]["rows"] == len(records) and metrics["agreement"]["cosine_min"] > 0.9999
    assert metrics["agreement"]["reference"] == "results/e2e/embeddings.npy"
    assert metrics["items_per_s"] > 0 and metrics["job_seconds"] > metrics["encode_seconds"] > 0

    def batches(folder):
        return sum(json.loads(p.read_text())["batches"] for p in folder.glob("embed_*.stats.json"))

    assert batches(job / "embed") > batches(workdir / "results/e2e/embed")

    # threads: auto on this CPU (--cores 2): the main run's 3 chunk jobs share the cores,
    # the sweep's, which measure speed, take both, one job at a time.
    def threads(folder):
        return {json.loads(p.read_text())["made_with"]["threads"] for p in folder.glob("embed_*.stats.json")}

    assert threads(workdir / "results/e2e/embed") == {1} and threads(job / "embed") == {2}
    runs = pd.read_parquet(workdir / "results/sweeps/budget/runs.parquet")
    assert runs["items_per_s"].tolist() == [metrics["items_per_s"]]
    # The job records GPU-hours (none on the CPU) and the records they paid for; the
    # collection prices them at report.gpu_hour_price (its default here).
    assert "estimated_cost" not in metrics and metrics["records_paid"] == len(records)
    assert (runs["estimated_cost"].tolist(), runs["gpu_hour_price"].tolist()) == ([0.0], [2.5])
    assert runs["estimated_cost_per_million_records"].tolist() == [0.0]
    assert "Sweep: budget" in (workdir / "results/report.rst").read_text()


def test_no_fake_credential_in_any_file_of_the_run_or_its_html_report(run):
    """offline_env put fake AWS, Hugging Face, GitHub and Snakemake-storage credentials in
    the environment of every run of this module: none is in any file they wrote
    (results, logs, benchmarks, .snakemake, provenance) or in report.html, where the
    results are embedded base64-encoded."""
    workdir, cfg, _, proc = run
    if not (workdir / "report.html").exists():  # this test run alone
        snakemake(workdir, "--configfile", str(cfg), "--report", "report.html")
    files = assert_no_secrets(workdir, texts=(proc.stdout, proc.stderr))
    names = {f.relative_to(workdir).as_posix() for f in files}
    assert {"report.html", "results/e2e/provenance.json", "logs/embed/e2e/chunk_0.log"} <= names
    assert any(n.startswith(".snakemake/metadata/") for n in names)
    assert any(n.startswith(".snakemake/log/") for n in names)

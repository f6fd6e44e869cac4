"""The real workflow end to end on a small corpus, as a subprocess: split into 3 chunks,
embed, merge, verify, report; compared row by row with SentenceTransformer.encode. The
run holds an embed sweep of one point (another token budget), measured against it."""

import json
import os

import numpy as np
import pandas as pd
import pytest
import yaml

from shardflow.core.models import bundled_model_path
from tests.helpers import assert_no_secrets, job_counts, sha256, snakemake, write_config

pytestmark = pytest.mark.workflow


def _config(workdir, corpus, **extra):
    return write_config(
        workdir / "config.yaml",
        dataset="e2e",
        n_chunks=3,
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
    cfg = _config(workdir, corpus)
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
    # What the embed jobs ran with, recorded as they wrote their rows: one checkout, one model.
    made = provenance["jobs_made_with"]
    assert made["jobs"] == 3 and made["models"] == {"embedding": [provenance["model"]]} and len(made["git"]) == 1
    assert made["devices"] == [["cpu", None]] and provenance["warnings"] == []
    log = (workdir / "logs/embed/e2e/chunk_0.log").read_text()
    assert "params=" in log.splitlines()[0] and "torch" in log.splitlines()[0]


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
    and kernels) reruns each embed job, for that reason."""
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
        assert out.count("reason: Params have changed") == 6, (name, out)


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

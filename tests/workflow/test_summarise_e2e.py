"""Summarisation through the real workflow: one run with a tiny random BART on a small
article file with references (and one bad line, skipped and counted), and a summarise
sweep of one point in the same run, shared by the tests below; plus dry runs of each
method's job graph."""

import json
import re

import pandas as pd
import pytest

from tests.helpers import (
    REPO,
    assert_no_secrets,
    assert_status_reads_the_planned_files,
    job_counts,
    snakemake,
    write_config,
)
from tests.support import tiny_generators

pytestmark = pytest.mark.workflow

N_GOOD = 14


@pytest.fixture(scope="module")
def articles(tmp_path_factory, demo_texts):
    """14 demo docstrings as articles, their first sentence as the reference, and one
    line without a reference field (line 6)."""
    _, records = demo_texts
    path = tmp_path_factory.mktemp("articles") / "articles.jsonl"
    lines = []
    for r in records[:N_GOOD]:
        lines.append(json.dumps({"id": r["id"], "article": r["text"], "highlights": r["text"].split(". ")[0]}))
    lines.insert(5, json.dumps({"id": "no-reference", "article": "An article whose reference is missing."}))
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory, articles):
    """The workflow, abstractive, 2 chunks, references scored; rejects skipped."""
    work = tmp_path_factory.mktemp("summarise_run")
    model = tiny_generators.build_bart(work / "models", max_new_tokens=12)
    cfg = write_config(
        work / "config.yaml",
        dataset="news",
        tasks=["summarisation"],
        n_chunks=2,
        input={"path": str(articles), "text_field": "article", "on_bad_record": "skip"},
        summarise={"method": "abstractive", "model": str(model), "reference_field": "highlights", "window": 3},
        resources={"summarise": {"threads": 1}},
        # The model's own num_beams (2): the point's jobs are the main run's, computed again.
        sweeps={"beams": {"stage": "summarise", "grid": {"summarise.generation.num_beams": [2]}, "seeds": [0],
                          "metrics": {"rouge1": "max"}}},
    )
    proc = snakemake(work, "--cores", "2", "--configfile", str(cfg))
    return {"work": work, "model": model, "proc": proc, "results": work / "results" / "news"}


def test_provenance_hashes_the_summarisation_model(run):
    from shardflow.core.hashing import model_sha256

    prov = json.loads((run["results"] / "provenance.json").read_text())
    want = model_sha256(str(run["model"]))
    assert prov["models"] == {"summarise": want} and prov["model"] == want and want["sha256"]


def _rows(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_summaries_are_in_corpus_order_and_equal_the_engine(run, articles):
    from shardflow.summarise.generate import load_generator
    from shardflow.summarise.generate_params import GenerateParams

    rows = _rows(run["results"] / "summaries.jsonl")
    good = [json.loads(line) for line in articles.read_text().splitlines() if "highlights" in line]
    # The split keeps every record (the missing reference matters only to scoring).
    assert [r["id"] for r in rows] == [r["id"] for r in _rows(articles)]
    assert all(list(r) == ["id", "summary", "input_tokens", "output_tokens", "truncated"] for r in rows)
    gen = load_generator(GenerateParams(model=str(run["model"]), device="cpu", threads=1, window=3))
    want = gen.summarise([r["article"] for r in _rows(articles)])
    assert [{k: v for k, v in r.items() if k != "id"} for r in rows] == want
    assert len({r["summary"] for r in rows}) > 1 and len(good) == N_GOOD


def test_rouge_counts_the_document_without_reference(run):
    metrics = json.loads((run["results"] / "summarise" / "metrics.json").read_text())
    assert metrics["n_documents"] == N_GOOD
    assert metrics["documents_without_reference"] == 1
    for key in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        s = metrics["systems"]["abstractive"][key]
        assert 0 <= s["ci_low"] <= s["mean"] <= s["ci_high"] <= 100
        assert metrics[key] == s["mean"]
    per_doc = pd.read_parquet(run["results"] / "summarise" / "per_document.parquet")
    assert len(per_doc) == N_GOOD and "no-reference" not in set(per_doc["id"])
    assert (run["results"] / "summarise" / "rouge.png").read_bytes()[:4] == b"\x89PNG"


def test_a_summarise_sweep_scores_its_points_as_the_main_run(run):
    """A summarise sweep's jobs, through sweep_evaluate_summaries (the rule that reads the
    split's rejects, like evaluate_summaries): the point equal to the main settings gives
    the main run's metrics."""
    main = json.loads((run["results"] / "summarise" / "metrics.json").read_text())
    folder = run["work"] / "results" / "sweeps" / "beams"
    point = json.loads((folder / "num_beams=2" / "seed=0" / "metrics.json").read_text())
    assert point["n_documents"] == main["n_documents"] == N_GOOD
    assert point["documents_without_reference"] == 1
    assert point["systems"] == main["systems"]
    summary = pd.read_parquet(folder / "summary.parquet")
    assert list(summary["rouge1_mean"]) == [main["rouge1"]]


def test_job_table_report_and_landing(run):
    jobs = json.loads((run["results"] / "summarise" / "jobs.json").read_text())["jobs"]
    assert [j["stats"]["chunk"] for j in jobs] == [0, 1]
    assert sum(j["stats"]["items"] for j in jobs) == N_GOOD + 1
    summary = json.loads((run["results"] / "summarise" / "report" / "summary.json").read_text())
    assert summary["records"] == N_GOOD + 1 and summary["chunks"] == 2
    assert 0 < summary["compression_ratio"] < 5
    landing = (run["work"] / "results" / "report.rst").read_text()
    assert "Summarisation: news" in landing and "ROUGE abstractive" in landing and "rouge1" in landing
    # Each GPU job ran on the CPU here (no GPU on this host) and said so.
    log = (run["work"] / "logs" / "summarise" / "news" / "chunk_0.log").read_text()
    assert "gpu_pinning=off" in log and "device cpu" in log


@pytest.mark.dryrun
def test_dry_run_lists_every_summarise_job_with_its_resources(tmp_path):
    # Lead's resources: test_lead_jobs_ask_slurm_for_what_a_cpu_rule_asks_for_unless_the_run_says_otherwise.
    model = tmp_path / "model"  # what the parse-time check looks for; the dry run loads nothing
    model.mkdir()
    (model / "config.json").write_text("{}")
    cfg = write_config(
        tmp_path / "c.yaml",
        tasks=["embedding", "summarisation"],
        n_chunks=6,
        summarise={"method": "abstractive", "model": str(model)},
        # embed given no GPU: a CPU job, with no gpu resource (a gpu of 0 got its EKS pod the
        # GPU toleration and a request of 0 GPUs)
        resources={"embed": {"gpu": 0}},
    )
    out = snakemake(tmp_path, "-n", "--cores", "8", "--configfile", str(cfg)).stdout
    counts = job_counts(out)
    assert counts["summarise"] == 6 and counts["embed"] == 6 and counts["split_demo"] == 1
    assert counts["merge_summaries"] == counts["summarise_report"] == 1
    assert assert_status_reads_the_planned_files(out, "summarise") == 6  # make status's view of the jobs
    blocks = [b for b in re.split(r"\n(?=rule |localrule )", out) if b.startswith("rule summarise:")]
    resources = [re.search(r"resources: (.*)", b).group(1) for b in blocks]
    assert all(re.search(r"\bgpu=1\b", r) and "mem_mb=6000" in r for r in resources), resources[0]
    embed = [resources for _, resources in _jobs_of(out, "embed")]
    assert len(embed) == 6 and not any(re.search(r"\bgpu=", r) for r in embed), embed[0]


def _jobs_of(dry_run_output: str, rule: str) -> list[tuple[str, str]]:
    """(threads line or "", resources line) of each job of `rule` in a dry run."""
    blocks = [b for b in re.split(r"\n(?=rule |localrule )", dry_run_output) if b.startswith(f"rule {rule}:")]
    return [(" ".join(re.findall(r"^\s+threads: .*$", b, re.MULTILINE)), re.search(r"resources: (.*)", b).group(1))
            for b in blocks]


@pytest.mark.dryrun
def test_lead_jobs_ask_slurm_for_what_a_cpu_rule_asks_for_unless_the_run_says_otherwise(tmp_path):
    """Lead runs on one CPU thread: on the slurm profile its jobs ask for what merge_summaries
    does (the profile's default-resources, one thread, no gpu), not the model methods' sizes
    in config/config.yaml; what the run's own config or profile sets still holds."""
    cfg = write_config(tmp_path / "c.yaml", tasks=["summarisation"], n_chunks=2, summarise={"method": "lead"})
    slurm = ("-n", "--cores", "8", "--profile", str(REPO / "profiles/slurm"), "--configfile", str(cfg))
    out = snakemake(tmp_path, *slurm).stdout
    lead, cpu_rule = _jobs_of(out, "summarise"), _jobs_of(out, "merge_summaries")
    # Besides `attempt`, which no executor reads (shardflow.core.failures: its script knows
    # a retry by it).
    assert all(resources.endswith(", attempt=1") for _, resources in lead), lead
    lead = [(threads, resources.removesuffix(", attempt=1")) for threads, resources in lead]
    assert len(lead) == 2 and lead == cpu_rule * 2, (lead, cpu_rule)
    assert "mem_mb=4000" in cpu_rule[0][1] and not re.search(r"\bgpu=", cpu_rule[0][1]), cpu_rule

    proc = snakemake(tmp_path, *slurm, "--config", "resources={summarise: {mem_mb: 9000, runtime: 30, threads: 3}}",
                     "--set-resources", "summarise:slurm_partition=cpu", "summarise:gpu_model=a100")
    for threads, resources in _jobs_of(proc.stdout, "summarise"):
        assert threads.strip() == "threads: 3" and "mem_mb=9000" in resources and "runtime=30" in resources, resources
        assert "slurm_partition=cpu" in resources and "gpu_model=a100" in resources and not re.search(r"\bgpu=", resources), resources
    # The SLURM plugin asks for a GPU for a job with a gpu_model: the parse says so.
    assert ("set-resources summarise:gpu_model=a100: the SLURM plugin asks sbatch for --gpus=a100:1 for each summarise "
            "job, which runs on the CPU (summarise.method lead)") in proc.stdout + proc.stderr


def test_no_fake_credential_in_any_file_of_the_run(run):
    """The run saw fake credentials (offline_env): no file it wrote holds one."""
    files = assert_no_secrets(run["work"], texts=(run["proc"].stdout, run["proc"].stderr))
    names = {f.relative_to(run["work"]).as_posix() for f in files}
    assert {"results/news/provenance.json", "results/report.rst", "logs/summarise/news/chunk_0.log"} <= names

"""A real embed job SIGKILLed mid-chunk under Snakemake: the rule's retry resumes from the
finished parts kept in `gpu_jobs.resume_dir` (outside the working directory, as on a
volume that outlives a spot node), and the result is byte-identical to an uninterrupted run."""

import json

import pytest

from shardflow.corpus.demo import DemoParams, build_demo_corpus
from tests.helpers import REPO, SNAKEMAKE, offline_env, sha256, snakemake, write_config
from tests.support.faults import kill_job_when

pytestmark = pytest.mark.workflow

TARGETS = ("results/rs/embeddings.npy", "results/rs/ids.parquet")


def test_sigkilled_embed_job_resumes_from_resume_dir(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    build_demo_corpus(str(corpus), DemoParams(max_docs=300, min_words=20))
    resume = tmp_path / "volume" / "resume"
    cfg = write_config(
        tmp_path / "c.yaml",
        dataset="rs",
        n_chunks=1,
        input={"path": str(corpus)},
        # 100 parts of 3 texts, several seconds of compute on one thread.
        embedding={"window": 3},
        resources={"embed": {"threads": 1}},
        gpu_jobs={"resume_dir": str(resume)},
    )
    ref, run = tmp_path / "ref", tmp_path / "run"
    ref.mkdir()
    run.mkdir()
    snakemake(ref, *TARGETS, "--cores", "1", "--configfile", str(cfg))
    assert not any(resume.glob("rs/*/part-*.npy"))  # a finished chunk leaves no parts behind

    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(run), *TARGETS, "--cores", "1", "--configfile", str(cfg)]
    out, returncode = kill_job_when(
        cmd, run, offline_env(), "embed", lambda: len(list(resume.glob("rs/*/part-*.npy"))) >= 2,
        what="second part written",
    )
    assert returncode == 0, out[-4000:]
    assert "embed" in out and "Error in rule embed" in out  # the first attempt died ...

    log = (run / "logs/embed/rs/chunk_0.log").read_text()  # ... and the retry's log:
    assert f"resuming from {resume / 'rs'}" in log, log[-3000:]
    stats = json.loads((run / "results/rs/embed/embed_0.stats.json").read_text())
    assert stats["resumed_parts"] >= 2 and stats["items_embedded"] < 300
    for target in TARGETS:
        assert sha256(ref / target) == sha256(run / target), target
    assert not any(resume.glob("rs/*/part-*.npy"))

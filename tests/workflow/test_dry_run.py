"""The whole graph is known at parse time: dry runs, DAG, lint, formatting."""

import subprocess

import pytest

from tests.helpers import BIN, REPO, job_counts, offline_env, snakemake, write_config

pytestmark = [pytest.mark.workflow, pytest.mark.dryrun]


def test_dry_run_lists_every_chunk_job_before_any_data_exists(tmp_path):
    out = snakemake(tmp_path, "-n", "--config", "n_chunks=16").stdout
    counts = job_counts(out)
    assert counts["embed"] == 16
    assert counts["split_demo"] == counts["merge"] == counts["verify"] == counts["report"] == 1
    assert not (tmp_path / "results").exists()


def test_dag_and_rulegraph_show_every_chunk(tmp_path):
    dag = snakemake(tmp_path, "--dag", "--config", "n_chunks=5").stdout
    assert dag.count("embed\\nchunk: ") == 5 or dag.count("label = \"embed") == 5
    rulegraph = snakemake(tmp_path, "--rulegraph").stdout
    for rule in ("split", "embed", "merge", "verify", "report"):
        assert rule in rulegraph
    svg = subprocess.run(["dot", "-Tsvg"], input=dag, capture_output=True, text=True, check=True).stdout
    assert svg.lstrip().startswith("<?xml") and "<svg" in svg


def test_dag_reads_as_the_pipeline_at_100_chunks(tmp_path):
    """Per-chunk jobs have one edge in (split) and one out (merge); everything after
    merge reads its one job table, so the edge count grows as 2 per chunk."""
    import re

    dag = snakemake(tmp_path, "--dag", "--config", "n_chunks=100").stdout
    labels = dict(re.findall(r'^\s*(\d+)\[label = "(\w+)', dag, re.M))
    edges = [(labels[a], labels[b]) for a, b in re.findall(r"^\s*(\d+) -> (\d+)", dag, re.M)]
    assert sum(1 for _, b in edges if b == "embed") == 100
    assert {b for a, b in edges if a == "embed"} == {"merge"} and sum(1 for a, _ in edges if a == "embed") == 100
    # The rest of the graph does not grow with the chunk count.
    rest = [e for e in edges if "embed" not in e]
    assert len(rest) <= 20, sorted(rest)


def test_a_key_of_the_old_layout_names_its_new_place(tmp_path):
    cfg = write_config(tmp_path / "old.yaml", embedding={"threads": 2, "gpu_pinning": "slots"})
    proc = snakemake(tmp_path, "-n", "--configfile", str(cfg), check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "config key 'embedding.threads' has moved: set 'resources.embed.threads" in out
    assert "config key 'embedding.gpu_pinning' has moved: set 'gpu_jobs.pinning' instead" in out


def test_misspelt_key_stops_the_run_naming_it(tmp_path):
    cfg = write_config(tmp_path / "bad.yaml", embedding={"token_budjet": 100})
    proc = snakemake(tmp_path, "-n", "--configfile", str(cfg), check=False)
    assert proc.returncode != 0
    assert "unknown config key 'token_budjet' in 'embedding'" in proc.stdout + proc.stderr


def test_mistyped_value_stops_the_run_naming_it(tmp_path):
    proc = snakemake(tmp_path, "-n", "--config", "n_chunks=many", check=False)
    assert proc.returncode != 0
    assert "config key 'n_chunks'" in proc.stdout + proc.stderr


def test_local_profile_works_as_typed_from_the_repo_root():
    # `make setup` links ./local -> profiles/local; the test suite runs after it.
    assert (REPO / "local").resolve() == (REPO / "profiles" / "local").resolve()
    proc = subprocess.run(
        [str(BIN / "snakemake"), "--profile", "local", "-n", "--config", "dataset=dryrun_profile_check"],
        cwd=REPO,
        env=offline_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert job_counts(proc.stdout)["embed"] == 4


def test_snakemake_lint_is_clean():
    proc = subprocess.run(
        [str(BIN / "snakemake"), "--lint"], cwd=REPO, env=offline_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_snakefmt_check_is_clean():
    proc = subprocess.run(
        [str(BIN / "snakefmt"), "--check", "Snakefile", "rules/"], cwd=REPO, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr

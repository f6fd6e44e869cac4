"""Helpers shared by the workflow and cluster tests: run the real workflow."""

from __future__ import annotations

import base64
import gzip
import hashlib
import os
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SNAKEMAKE = str(BIN / "snakemake")


# Fake credentials in the environment of every workflow run of the tests (offline_env),
# one distinctive value per variable: no file a run writes may contain any of them
# (assert_no_secrets). Nothing local uses them; the cluster tests build their own
# environment (tests/cluster/conftest.py clean_env) with the S3 server's keys.
FAKE_SECRETS = {
    "AWS_ACCESS_KEY_ID": "AKIAFAKESHARDFLOW7Q2Z",
    "AWS_SECRET_ACCESS_KEY": "fakeAwsSecret/shardflow+Kq3Vz9Rw7MbX2nC5tG8hPd",
    "AWS_SESSION_TOKEN": "FakeAwsSessionToken//shardflow+Ab12Cd34Ef56Gh78Ij90Kl",
    "HF_TOKEN": "hf_FakeShardflowHfToken9c2Lm4Pq7Rs1Tu",
    "HUGGING_FACE_HUB_TOKEN": "hf_FakeShardflowHubToken3Vw5Xy8Za0Bc",
    "GITHUB_TOKEN": "ghp_FakeShardflowGithubToken6De1Fg4Hi",
    "SNAKEMAKE_STORAGE_S3_ACCESS_KEY": "FakeSnakemakeS3AccessKeyShardflow4Jk7",
    "SNAKEMAKE_STORAGE_S3_SECRET_KEY": "fakeSnakemakeS3Secret/shardflow+Lm2No5Pq8",
}


def offline_env(**extra: str) -> dict:
    """The test process's environment, model hubs offline, the venv first on PATH, and
    FAKE_SECRETS in place of any real credentials, then `extra`. A caller that passes
    credentials or an S3 endpoint of its own gets no fakes at all: the S3 plugin would
    prefer a fake SNAKEMAKE_STORAGE_S3_* key to the caller's AWS_* one."""
    env = dict(os.environ)
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": f"{BIN}:{env.get('PATH', '')}"})
    if not set(extra) & {*FAKE_SECRETS, "AWS_ENDPOINT_URL", "AWS_PROFILE"}:
        env.update(FAKE_SECRETS)
    env.update(extra)
    return env


def _secret_patterns(secret: str) -> list[bytes]:
    """The secret as it could appear in a file: plain, URL-quoted, and inside base64 (a
    data URI in report.html) at each of the three byte alignments, as the run of base64
    characters that depends on the secret's bytes only."""
    raw = secret.encode()
    patterns = {raw, urllib.parse.quote(secret, safe="").encode()}
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw)
        start = 4 if shift else 0  # the first group mixes in the bytes before the secret
        stop = 4 * ((shift + len(raw)) // 3)  # the last full group inside the secret
        patterns.add(encoded[start:stop])
    return sorted(patterns)


def _readable_forms(path: Path) -> list[bytes]:
    """A file's bytes, plus its decoded content where the bytes are compressed."""
    data = path.read_bytes()
    forms = [data]
    if data[:2] == b"\x1f\x8b":
        forms.append(gzip.decompress(data))
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        forms.append(repr(pq.read_table(path).to_pylist()).encode())
    return forms


def assert_no_secrets(*roots: Path, texts: tuple[str, ...] = (), secrets: dict[str, str] | None = None) -> list[Path]:
    """No file under `roots` (results, logs, benchmarks, .snakemake, report.html, ...)
    and none of `texts` (a run's stdout/stderr) contains a value of `secrets` (default
    FAKE_SECRETS) in any form _secret_patterns lists. Returns the files read."""
    patterns = {name: _secret_patterns(value) for name, value in (secrets or FAKE_SECRETS).items()}
    files = sorted(p for root in roots for p in Path(root).rglob("*") if p.is_file() and not p.is_symlink())
    blobs = [(str(f), form) for f in files for form in _readable_forms(f)]
    blobs += [(f"text {i}", t.encode()) for i, t in enumerate(texts)]
    leaks = [
        f"{where}: {name}"
        for where, blob in blobs
        for name, forms in patterns.items()
        if any(p in blob for p in forms)
    ]
    assert not leaks, "fake credentials found in run outputs:\n" + "\n".join(leaks)
    return files


def opt_in_data(variable: str, default: str) -> Path:
    """A data set of ../shared for an opt-in check, found where the make targets find it:
    `$<variable>` (ARGUANA=, CNNDM=, TINYSHAKESPEARE=), else `<default>` beside the
    checkout (`shared/data/...`). Without SHARDFLOW_OPTIN=1 the test is skipped; with it, a
    data set that is not there fails the test naming where it was looked for: a skip
    would read as a check that ran (a clone outside the folder beside ../shared)."""
    if os.environ.get("SHARDFLOW_OPTIN") != "1":
        pytest.skip(f"opt-in: needs SHARDFLOW_OPTIN=1 and ../{default} (or {variable}=<path>)")
    path = Path(os.environ.get(variable) or REPO.parent / default)
    if not path.exists():
        pytest.fail(f"SHARDFLOW_OPTIN=1 but {path} is not there: give {variable}=<path>, as the make targets take it")
    return path


def write_config(path: Path, **overrides) -> Path:
    path.write_text(yaml.safe_dump(overrides, sort_keys=False))
    return path


def snakemake(workdir: Path, *args: str, timeout: int = 600, check: bool = True, env: dict | None = None):
    """Run the repo's Snakefile in `workdir`; return the CompletedProcess (output captured)."""
    cmd = [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir), *args]
    proc = subprocess.run(
        cmd, cwd=workdir, env=env or offline_env(), capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}")
    return proc


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def job_counts(dry_run_output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run as {rule: count}."""
    counts: dict[str, int] = {}
    lines = dry_run_output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("Job stats:"))
    for line in lines[start + 3 :]:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts


def assert_status_reads_the_planned_files(dry_run_output: str, rule: str) -> int:
    """`make status` reads each job's files from the rules' patterns as written
    (shardflow.workflow.status.rule_files): assert they are the output, log and benchmark
    files a dry run plans for every job of `rule`; return how many jobs it compared."""
    import re

    from shardflow.workflow.status import rule_files

    blocks = re.findall(rf"^rule {rule}:\n((?:    .*\n)+)", dry_run_output, flags=re.M)
    for block in blocks:
        fields = dict(re.findall(r"^    (\w+): (.*)$", block, flags=re.M))
        wildcards = dict(w.split("=", 1) for w in fields["wildcards"].split(", ")) if "wildcards" in fields else {}
        outputs, log, benchmark = rule_files(rule).of(wildcards)
        assert (sorted(outputs.values()), log, benchmark) == (
            sorted(fields["output"].split(", ")),
            fields.get("log"),
            fields.get("benchmark"),
        ), block
    return len(blocks)


def params_changed(dry_run_output: str) -> set[str]:
    """The rules a dry run's Reasons summary lists as 'params have changed since last
    execution' (those whose recorded params a config change touched)."""
    lines = dry_run_output.splitlines()
    for i, line in enumerate(lines[:-1]):
        if line.strip() == "params have changed since last execution:":
            return {rule.strip() for rule in lines[i + 1].split(",")}
    return set()

"""Fixtures for the cluster-path tests: real SLURM daemons (.ci/slurm.sh), a real S3
server (SeaweedFS) and the Kubernetes API server stand-in (not a cluster).

Services start on demand. Outside CI (no `CI` variable) a service that cannot start
skips its tests with the reason; in CI (`CI=true`) it is a failure.

Every Snakemake run goes through `run_snakemake`, under `timeout -k`: the executor
plugins are known to hang forever on some failures.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import s3server

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "tests" / "support" / "cluster_workflow"
SLURM_SH = REPO / ".ci" / "slurm.sh"
BIN = Path(sys.executable).parent
# Outputs of the tiny workflow that must be byte-identical on every path.
OUTPUTS = ["embeddings/a.json", "embeddings/b.json", "embeddings/c.json", "merged/summary.json"]


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def unavailable(what: str, why: str):
    """Fail in CI, skip elsewhere."""
    message = f"{what} could not be started: {why}"
    if in_ci():
        pytest.fail(message)
    pytest.skip(message)


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def clean_env(**extra: str) -> dict:
    """The test process's environment without AWS/Kubernetes settings, venv first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KUBECONFIG", "SNAKEMAKE_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra)
    return env


@dataclass
class Run:
    returncode: int
    output: str  # stdout and stderr together, in order
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode in (124, 137)


def run_snakemake(workdir: Path, *args: str, timeout_s: int = 180, env: dict | None = None) -> Run:
    """`snakemake ARGS` in workdir under `timeout -k 10 timeout_s`."""
    cmd = ["timeout", "-k", "10", str(timeout_s), str(BIN / "snakemake"), *args]
    start = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=workdir, env=env or clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        check=False,
    )
    return Run(proc.returncode, proc.stdout, time.monotonic() - start)


def describe(run: Run, tail: int = 6000) -> str:
    return f"exit {run.returncode} after {run.seconds:.0f}s; output tail:\n{run.output[-tail:]}"


class Helpers:
    """What the test modules need from here (handed out by the `sm` fixture, since test
    modules should not import conftest)."""

    OUTPUTS = OUTPUTS
    REPO = REPO
    run = staticmethod(run_snakemake)
    describe = staticmethod(describe)
    env = staticmethod(clean_env)
    sha256 = staticmethod(sha256_bytes)


@pytest.fixture(scope="session")
def sm() -> Helpers:
    return Helpers()


@pytest.fixture
def workflow_dir(tmp_path) -> Path:
    """A private copy of the tiny test workflow (outside git, so nothing leaks between runs)."""
    wd = tmp_path / "wf"
    wd.mkdir()
    shutil.copy(WORKFLOW / "Snakefile", wd / "Snakefile")
    return wd


@pytest.fixture(scope="session")
def local_hashes(tmp_path_factory) -> dict[str, str]:
    """sha256 of every output of a plain local run: the reference for all other paths."""
    wd = tmp_path_factory.mktemp("local-reference")
    shutil.copy(WORKFLOW / "Snakefile", wd / "Snakefile")
    run = run_snakemake(wd, "--cores", "2", timeout_s=180)
    assert run.returncode == 0, describe(run)
    return {rel: sha256_bytes((wd / rel).read_bytes()) for rel in OUTPUTS}


# ---- SLURM --------------------------------------------------------------------------------


def _slurm_usable() -> bool:
    if not shutil.which("sinfo"):
        return False
    probe = subprocess.run([str(SLURM_SH), "status"], capture_output=True, text=True, timeout=60, check=False)
    return probe.returncode == 0


@pytest.fixture(scope="session")
def slurm_cluster():
    """A one-node SLURM cluster with 4 fake GPUs, partition `ci` (.ci/slurm.sh).

    Started (and installed with apt, if needed) when not already up; stopped again
    at the end only if this session started it."""
    if _slurm_usable():
        yield "ci"
        return
    if os.geteuid() != 0:
        unavailable("SLURM", ".ci/slurm.sh needs root to install and start the daemons")
    try:
        up = subprocess.run([str(SLURM_SH), "up"], capture_output=True, text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired:
        unavailable("SLURM", ".ci/slurm.sh up did not finish within 900 s")
    if up.returncode != 0:
        unavailable("SLURM", f".ci/slurm.sh up exited {up.returncode}: {up.stderr[-2000:]}")
    try:
        yield "ci"
    finally:
        subprocess.run([str(SLURM_SH), "down"], capture_output=True, text=True, timeout=120, check=False)


# ---- S3 -----------------------------------------------------------------------------------

# The storage plugin deletes a bucket when it removes the last object in it (see
# test_s3.py). Like the production bucket (profiles/README.md), the test bucket keeps a
# sentinel object at its root so that it never becomes empty.
SENTINEL_KEY = ".keep"


@pytest.fixture(scope="session")
def s3(tmp_path_factory):
    """SeaweedFS on loopback with enforced credentials and the bucket `shardflow-ci`."""
    try:
        server = s3server.start(tmp_path_factory.mktemp("seaweedfs"))
    except (s3server.S3ServerError, OSError) as e:  # binary missing, ports, readiness timeout
        unavailable("SeaweedFS S3 server", str(e))
    try:
        server.client().put_object(Bucket=server.bucket, Key=SENTINEL_KEY, Body=b"keep this bucket\n")
        yield server
    finally:
        s3server.stop(server)


@pytest.fixture
def s3_prefix(request) -> str:
    """A fresh folder in the bucket for one test."""
    return "tests/" + re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")

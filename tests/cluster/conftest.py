"""Fixtures for the cluster-path tests: real SLURM daemons (.ci/slurm.sh), a real S3
server (SeaweedFS) and the Kubernetes API server stand-in (not a cluster).

Two workflows go through those paths:
- the real one (the repo's Snakefile: split -> embed_<i> -> merge -> verify) on 30 real
  documents in 2 chunks, compared bit for bit with one local run (`real_local`);
- the tiny stand-in workflow of tests/support/cluster_workflow/, only where a test needs
  what the real one cannot do on demand: a chunk that fails (always, or once).

Services start on demand. Outside CI (no `CI` variable) a service that cannot start
skips its tests with the reason; in CI (`CI=true`) it is a failure.

Every Snakemake run goes through `run_snakemake`, under `timeout -k`: the executor
plugins are known to hang forever on some failures.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support import s3server

REPO = Path(__file__).resolve().parents[2]
WORKFLOW = REPO / "tests" / "support" / "cluster_workflow"
SLURM_SH = REPO / ".ci" / "slurm.sh"
BIN = Path(sys.executable).parent
# Outputs of the tiny workflow (failure tests: which of them exist afterwards).
OUTPUTS = ["embeddings/a.json", "embeddings/b.json", "embeddings/c.json", "merged/summary.json"]

# The real workflow: data set name, target, and the files that must be byte-identical
# on every path (the merged matrix and its ids; the chunks too, where compared).
DATASET = "cluster"
N_CHUNKS = 2
CORPUS_DOCS = 30
TARGET = f"results/{DATASET}/verification.json"  # through verify; the report is skipped
MERGED = [f"results/{DATASET}/embeddings.npy", f"results/{DATASET}/ids.parquet"]
CHUNKS = [f"results/{DATASET}/chunks/chunk_{i}.jsonl" for i in range(N_CHUNKS)]
# Where the corpus lies in the test bucket, for the runs that read it from S3.
CORPUS_KEY = "corpora/cluster-corpus.jsonl"


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
    """The test process's environment without AWS/Kubernetes settings, venv first on PATH,
    model hubs offline (the real workflow uses the bundled model)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "KUBECONFIG", "SNAKEMAKE_"))}
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
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


def run_snakemake(
    workdir: Path, *args: str, timeout_s: int = 180, env: dict | None = None, snakemake: list[str] | None = None
) -> Run:
    """`snakemake ARGS` in workdir under `timeout -k 10 timeout_s`; `snakemake`: the
    command to run instead of the venv's snakemake (tests/support/slurm_polls.py)."""
    cmd = ["timeout", "-k", "10", str(timeout_s), *(snakemake or [str(BIN / "snakemake")]), *args]
    start = time.monotonic()
    proc = subprocess.run(
        cmd, cwd=workdir, env=env or clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        check=False,
    )
    return Run(proc.returncode, proc.stdout, time.monotonic() - start)


class Background:
    """`snakemake ARGS` running in the background, for the fault tests (they act on a
    service or a job while the run goes on) and for a local reference run made beside a
    cluster run; collected like run_snakemake's run."""

    def __init__(
        self, workdir: Path, args: tuple[str, ...], timeout_s: int, env: dict | None, snakemake: list[str] | None
    ):
        cmd = ["timeout", "-k", "10", str(timeout_s), *(snakemake or [str(BIN / "snakemake")]), *args]
        self._start = time.monotonic()
        self._proc = subprocess.Popen(
            cmd, cwd=workdir, env=env or clean_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        self._lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self._lines)

    def wait_until(self, condition, what: str, timeout_s: float = 120):
        """Poll `condition()` until it returns something true (returned); fail if the
        run ends first or the time is up."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = condition()
            if found:
                return found
            if self._proc.poll() is not None:
                self._reader.join(5)
                pytest.fail(f"the run ended before {what}: {describe(self.finish())}")
            time.sleep(0.05)
        self._proc.kill()
        pytest.fail(f"no {what} within {timeout_s} s: {describe(self.finish())}")

    def finish(self) -> Run:
        returncode = self._proc.wait()
        self._reader.join(10)
        return Run(returncode, self.output, time.monotonic() - self._start)


def start_snakemake(
    workdir: Path, *args: str, timeout_s: int = 180, env: dict | None = None, snakemake: list[str] | None = None
) -> Background:
    """run_snakemake, in the background."""
    return Background(workdir, args, timeout_s, env, snakemake)


def describe(run: Run, tail: int = 6000) -> str:
    return f"exit {run.returncode} after {run.seconds:.0f}s; output tail:\n{run.output[-tail:]}"


# ---- the real workflow ----------------------------------------------------------------------


def write_real_config(path: Path, corpus: str) -> Path:
    """The config of every real-workflow run; only the corpus location differs.

    One embedding thread everywhere, so that every path computes the same fp32
    arithmetic on CPU. mem_mb/runtime are what the SLURM and Kubernetes
    jobs request, asserted there."""
    config = {
        "dataset": DATASET,
        "n_chunks": N_CHUNKS,
        "input": {"path": corpus},
        "resources": {"embed": {"threads": 1, "mem_mb": 1000, "mem_mb_per_attempt": 500, "runtime": 10}},
    }
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def real_args(workdir: Path, config: Path, *targets: str) -> list[str]:
    """Snakemake arguments for the repo's Snakefile in `workdir` with `config`, to
    `targets` (default TARGET)."""
    return ["-s", str(REPO / "Snakefile"), "-d", str(workdir), *(targets or (TARGET,)), "--configfile", str(config)]


def run_real(workdir: Path, config: Path, *args: str, **kwargs) -> Run:
    """The repo's Snakefile, run in `workdir` to TARGET with `config`."""
    return run_snakemake(workdir, *real_args(workdir, config), *args, **kwargs)


def hashes(root: Path, rels: list[str]) -> dict[str, str]:
    return {rel: sha256_bytes((root / rel).read_bytes()) for rel in rels}


def workflow_checkout(dest: Path) -> Path:
    """A copy of the real workflow's sources (working tree) as a git checkout of its own.

    For executors without a shared filesystem (Kubernetes), Snakemake uploads the
    sources to the default storage and each pod unpacks them. It takes only files below
    the working directory ("Ignoring source file ../..."), so `-s REPO/Snakefile -d
    tmp` cannot work there: the run starts from a checkout, as `snakemake --profile eks`
    does from the repository root. Besides the Snakefile, includes, scripts, conda envs
    and config files, the upload takes the files `git ls-files` lists -- that is how
    config/config.schema.yaml (read by shardflow, unknown to Snakemake) reaches the pods.
    The shardflow package is not copied: the pods import it from the venv, which plays
    the container image."""
    dest.mkdir(parents=True)
    shutil.copy(REPO / "Snakefile", dest / "Snakefile")
    for folder in ("rules", "scripts", "config", "envs"):
        shutil.copytree(REPO / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__"))
    for cmd in (["git", "init", "-q"], ["git", "add", "-A"]):  # a private repository in dest
        subprocess.run(cmd, cwd=dest, check=True, capture_output=True, timeout=60)
    return dest


@dataclass
class RealRun:
    workdir: Path
    hashes: dict[str, str]  # MERGED + CHUNKS


def once_per_session(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder `build` fills once per test session, whichever pytest-xdist worker asks
    first (the workers share the session's base folder; a file lock orders them): the
    cluster test files go to both workers, and the local reference run took 30 s on each."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = root / name
    with FileLock(str(root / f"{name}.lock")):
        if not (folder / ".built").exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            build(folder)
            (folder / ".built").touch()
    return folder


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    """30 real documents (stdlib docstrings) as JSONL."""
    from shardflow.corpus.demo import DemoParams, build_demo_corpus

    def build(folder: Path) -> None:
        build_demo_corpus(str(folder / "corpus.jsonl"), DemoParams(max_docs=CORPUS_DOCS))

    path = once_per_session(tmp_path_factory, "corpus", build) / "corpus.jsonl"
    assert len(path.read_text().splitlines()) == CORPUS_DOCS
    return path


@pytest.fixture(scope="session")
def real_local_started(tmp_path_factory, corpus_file) -> Callable[[], RealRun]:
    """The local reference run (`real_local`), started in a background thread: returns a
    function that waits for it and returns it (raising what the run raised). For a test
    whose own run of the real workflow needs no reference until it ends (the SLURM run):
    the reference is made while that run waits on the scheduler, not before it starts."""

    def build(wd: Path) -> None:
        run = run_real(wd, write_real_config(wd / "config.yaml", str(corpus_file)), "--cores", "2", timeout_s=300)
        assert run.returncode == 0, describe(run)

    result: dict[str, object] = {}

    def make() -> None:
        try:
            wd = once_per_session(tmp_path_factory, "real-local", build)
            result["run"] = RealRun(wd, hashes(wd, MERGED + CHUNKS))
        except BaseException as e:  # noqa: BLE001 - re-raised in the test that waits for it
            result["error"] = e

    thread = threading.Thread(target=make, name="real-local", daemon=True)
    thread.start()

    def wait() -> RealRun:
        thread.join()
        if "error" in result:
            raise result["error"]
        return result["run"]

    yield wait
    thread.join()  # never left running past the session


@pytest.fixture(scope="session")
def real_local(real_local_started) -> RealRun:
    """The real workflow run locally: the reference for every cluster path (read only)."""
    return real_local_started()


def check_bucket_outputs(objects: dict[str, bytes], prefix: str, reference: dict[str, str]) -> None:
    """A real run whose results live in S3: same bytes as the local reference run, a
    passing verification, and job logs stored too (one torch thread, as the reference)."""
    got = {rel: sha256_bytes(objects[f"{prefix}/{rel}"]) for rel in MERGED + CHUNKS}
    assert got == reference
    verification = json.loads(objects[f"{prefix}/{TARGET}"])
    assert verification["ok"] and verification["rows"] == CORPUS_DOCS
    for i in range(N_CHUNKS):
        assert b" threads 1 " in objects[f"{prefix}/logs/embed/{DATASET}/chunk_{i}.log"]


class Helpers:
    """What the test modules need from here (handed out by the `sm` fixture, since test
    modules should not import conftest)."""

    OUTPUTS = OUTPUTS
    REPO = REPO
    DATASET, N_CHUNKS, CORPUS_DOCS, TARGET = DATASET, N_CHUNKS, CORPUS_DOCS, TARGET
    MERGED, CHUNKS, CORPUS_KEY = MERGED, CHUNKS, CORPUS_KEY
    run = staticmethod(run_snakemake)
    start = staticmethod(start_snakemake)
    run_real = staticmethod(run_real)
    real_args = staticmethod(real_args)
    real_config = staticmethod(write_real_config)
    checkout = staticmethod(workflow_checkout)
    hashes = staticmethod(hashes)
    describe = staticmethod(describe)
    env = staticmethod(clean_env)
    sha256 = staticmethod(sha256_bytes)
    check_bucket_outputs = staticmethod(check_bucket_outputs)


@pytest.fixture(scope="session")
def sm() -> Helpers:
    return Helpers()


@pytest.fixture(scope="session")
def tiny_local(tmp_path_factory):
    """tiny_local(*config) -> the tiny workflow run locally, uninterrupted, with `config`
    (`--config` items): sha256 of each file under embeddings/ and merged/, by relative
    path. The reference for fault tests; each config runs once per session (about 2 s:
    `run:` blocks in threads, not one Snakemake process per job)."""
    done: dict[tuple[str, ...], dict[str, str]] = {}

    def reference(*config: str) -> dict[str, str]:
        if config not in done:
            wd = tmp_path_factory.mktemp("tiny-local")
            shutil.copy(WORKFLOW / "Snakefile", wd / "Snakefile")
            extra = ["--config", *config] if config else []
            run = run_snakemake(wd, "--cores", "2", "--force-use-threads", *extra, timeout_s=120)
            assert run.returncode == 0, describe(run)
            files = [p.relative_to(wd).as_posix() for d in ("embeddings", "merged") for p in (wd / d).rglob("*")]
            done[config] = hashes(wd, sorted(files))
        return done[config]

    return reference


@pytest.fixture
def workflow_dir(tmp_path) -> Path:
    """A private copy of the tiny test workflow (outside git, so nothing leaks between runs)."""
    wd = tmp_path / "wf"
    wd.mkdir()
    shutil.copy(WORKFLOW / "Snakefile", wd / "Snakefile")
    return wd


# ---- SLURM --------------------------------------------------------------------------------


def _slurm_usable() -> bool:
    if not shutil.which("sinfo"):
        return False
    probe = subprocess.run([str(SLURM_SH), "status"], capture_output=True, text=True, timeout=60, check=False)
    return probe.returncode == 0


@pytest.fixture(scope="module")
def slurm_cluster():
    """A one-node SLURM cluster with 4 fake GPUs, partition `ci` (.ci/slurm.sh).

    Started (and installed with apt, if needed) when not already up; stopped again
    at the end of the module (test_slurm.py holds every SLURM test) only if this module
    started it. At the session's end instead, the daemons' shutdown (5 to 8 s) was the
    last thing its pytest-xdist worker did, at the end of the run."""
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


@pytest.fixture(scope="session")
def s3_corpus(s3, corpus_file) -> str:
    """The corpus uploaded to the bucket (outside every test's prefix); its s3:// URI."""
    s3.client().put_object(Bucket=s3.bucket, Key=CORPUS_KEY, Body=corpus_file.read_bytes())
    return f"s3://{s3.bucket}/{CORPUS_KEY}"


@pytest.fixture
def s3_prefix(request) -> str:
    """A fresh folder in the bucket for one test."""
    return "tests/" + re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")

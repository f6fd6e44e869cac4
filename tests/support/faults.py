"""Fault injection for the real workflow: SIGKILL jobs (or the whole Snakemake) at seeded
random points, rerun, and account for what was tried.

A watcher thread polls the process tree of a running `snakemake` every 20 ms. A job is
known by its process: a `script:` job runs Snakemake's copy of the script, whose preamble
holds the pickled `snakemake` object (its `.rule`); the one `shell:` rule runs a known
module. A job's time starts when Snakemake starts its process. In `observe` mode the
watcher records how long each rule's first job ran; in a fault run it kills each planned
rule's first job at the planned delay (a seeded fraction of the observed duration),
together with everything the job started.

`controller` faults kill Snakemake itself with its jobs (the machine or the login node
going away): Snakemake's lock then stays behind, and the rerun must say how to clear it.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import pickle
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.helpers import REPO, SNAKEMAKE, offline_env
from tests.support.compare_revisions import fingerprint

POLL_S = 0.02
_PREAMBLE = b"snakemake = pickle.loads("
_SHELL_RULES = {"shardflow.train.launch": "train"}  # module a shell rule runs -> rule


def script_rule(path: str) -> str | None:
    """The rule of a Snakemake `script:` job, from the `snakemake` object Snakemake
    pickles into the job's copy of the script (.snakemake/scripts/tmp*.py)."""
    try:
        head = Path(path).read_bytes()[:1_000_000]
    except OSError:
        return None
    start = head.find(_PREAMBLE)
    if start < 0:
        return None
    i = start + len(_PREAMBLE) + 1  # past the b of the bytes literal
    quote, j = head[i : i + 1], i + 1
    while j < len(head) and head[j : j + 1] != quote:
        j += 2 if head[j : j + 1] == b"\\" else 1
    try:
        return pickle.loads(ast.literal_eval("b" + head[i : j + 1].decode("latin-1"))).rule
    except Exception:  # noqa: BLE001 - a script being written: try again on the next poll
        return None


def rule_of(cmdline: list[str], cache: dict[str, str | None]) -> str | None:
    """The matrix's name for the rule of the job whose process runs `cmdline`: "split" for
    every split_<dataset> (but not split_source, chunking.by: source's per-source jobs);
    a shell rule's module names its rule, the sweep's copy when its `--out` folder is a
    sweep job's (sweep_train runs the train rule's shell under results/sweeps/)."""
    for i, arg in enumerate(cmdline):
        if "/.snakemake/scripts/tmp" in arg and arg.endswith(".py"):
            if cache.get(arg) is None:
                cache[arg] = script_rule(arg)
            rule = cache[arg]
            return "split" if rule and rule.startswith("split_") and rule != "split_source" else rule
        if arg in _SHELL_RULES:
            out = cmdline[cmdline.index("--out", i) + 1] if "--out" in cmdline[i:-1] else ""
            return f"sweep_{_SHELL_RULES[arg]}" if out.startswith("results/sweeps/") else _SHELL_RULES[arg]
    return None


@dataclass
class Fault:
    rule: str
    mode: str  # "job" or "controller"
    delay_s: float
    injected: bool = False
    killed_pids: list[int] = field(default_factory=list)


class Watcher(threading.Thread):
    """Observes (faults={}) or kills the jobs of one Snakemake process."""

    def __init__(self, proc: subprocess.Popen, faults: dict[str, Fault] | None = None):
        super().__init__(daemon=True)
        self.proc = proc
        self.faults = faults or {}
        self.started: dict[int, tuple[str, float]] = {}  # job root pid -> (rule, start, unix time)
        self.durations: dict[str, float] = {}  # rule -> seconds its shortest job ran
        self._scripts: dict[str, str | None] = {}
        # job root pid -> (rule, the processes from the root down to the one that named
        # the rule), as the last poll found them
        self._chains: dict[int, tuple[str, list[psutil.Process]]] = {}
        self._ended: set[int] = set()
        self.stop = threading.Event()

    @staticmethod
    def _chain_stands(chain: list[psutil.Process]) -> bool:
        """Each process of `chain` still running (the same process: psutil compares its
        start time; not a zombie, whose cmdline a listing could not read) and still the
        child of the one before it."""
        try:
            return all(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in chain) and all(
                child.ppid() == parent.pid for parent, child in zip(chain, chain[1:], strict=False)
            )
        except psutil.Error:
            return False

    def _jobs(self) -> dict[int, tuple[str, float]]:
        """{job root pid (the controller's child): (rule, start time)} of running jobs.

        A job whose process that named its rule is still below its root (the chain of
        parents between them unbroken) is found again without listing the root's
        descendants: each listing reads every process's /proc entry, and with two jobs
        running that took most of the watcher's CPU time (polled every 20 ms, beside the
        jobs themselves on a 2-core machine)."""
        found = {}
        try:
            controller = psutil.Process(self.proc.pid)
            roots = controller.children()
        except psutil.NoSuchProcess:
            return found
        chains = {}
        for root in roots:
            known = self._chains.get(root.pid)
            if known and known[1][0] == root and self._chain_stands(known[1]):
                found[root.pid] = (known[0], root.create_time())
                chains[root.pid] = known
                continue
            try:
                below = {root.pid: root}
                for proc in (root, *root.children(recursive=True)):
                    below[proc.pid] = proc
                    rule = rule_of(proc.cmdline(), self._scripts)
                    if rule:
                        found[root.pid] = (rule, root.create_time())
                        with contextlib.suppress(psutil.Error, KeyError):  # not kept: listed again next time
                            chain = [proc]
                            while chain[-1].pid != root.pid:
                                chain.append(below[chain[-1].ppid()])
                            chains[root.pid] = (rule, chain[::-1])
                        break
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        self._chains = chains
        return found

    @staticmethod
    def _job_tree(pid: int) -> list[psutil.Process]:
        """A job's root process and everything below it."""
        try:
            root = psutil.Process(pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def _kill(self, fault: Fault, pid: int) -> None:
        if fault.mode == "controller":
            victims = [psutil.Process(self.proc.pid), *psutil.Process(self.proc.pid).children(recursive=True)]
        else:
            victims = self._job_tree(pid)
        for victim in victims:
            try:
                victim.send_signal(signal.SIGKILL)
                fault.killed_pids.append(victim.pid)
            except psutil.NoSuchProcess:
                pass
        fault.injected = bool(fault.killed_pids)

    def run(self) -> None:
        while not self.stop.is_set() and self.proc.poll() is None:
            jobs = self._jobs()
            now = time.time()
            self.started.update({pid: job for pid, job in jobs.items() if pid not in self.started})
            for pid, (rule, start) in list(self.started.items()):
                if pid not in jobs and pid not in self._ended:
                    self._ended.add(pid)
                    self.durations[rule] = min(now - start, self.durations.get(rule, float("inf")))
                fault = self.faults.get(rule)
                if fault and not fault.injected and pid in jobs and now - start >= fault.delay_s:
                    self._kill(fault, pid)
                    if fault.mode == "controller":
                        return
            time.sleep(POLL_S)


def snakemake_cmd(workdir: Path, config: Path, *args: str) -> list[str]:
    return [SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-d", str(workdir), "--configfile", str(config),
            "--cores", "2", *args]


def run_watched(workdir: Path, config: Path, *args: str, faults: dict[str, Fault] | None = None,
                timeout_s: float = 600) -> tuple[subprocess.CompletedProcess, Watcher]:
    cmd = snakemake_cmd(workdir, config, *args)
    proc = subprocess.Popen(cmd, cwd=workdir, env=offline_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    watcher = Watcher(proc, faults)
    watcher.start()
    try:
        out, _ = proc.communicate(timeout=timeout_s)
    finally:
        watcher.stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    watcher.join(5)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, ""), watcher


def kill_job_when(cmd: list[str], cwd: Path, env: dict, rule: str, ready, *, what: str,
                  timeout_s: float = 180) -> tuple[str, int]:
    """Run Snakemake `cmd`; once `ready()` holds, SIGKILL the running job of `rule` with
    everything it started; return Snakemake's output and exit status once it has
    finished (the rule's retry included). `what` names the awaited condition in a timeout's message."""
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + timeout_s
        while not ready():
            if proc.poll() is not None:
                raise AssertionError(f"Snakemake ended before {what}:\n{proc.communicate()[0][-4000:]}")
            assert time.monotonic() < deadline, f"no {what} within {timeout_s} s"
            time.sleep(POLL_S)
        watcher = Watcher(proc)
        jobs = [pid for pid, (job_rule, _) in watcher._jobs().items() if job_rule == rule]
        assert jobs, f"no running {rule} job found"
        for victim in watcher._job_tree(jobs[0]):
            with contextlib.suppress(psutil.NoSuchProcess):
                victim.send_signal(signal.SIGKILL)
        out, _ = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return out, proc.returncode


# ------------------------------------------------------------------- the outputs


def results(workdir: Path) -> dict[str, object]:
    """Every finished output under results/ -> its fingerprint (compare_revisions: bytes,
    or JSON content; None for files that record when they ran). Resume state and the
    temporary files of atomic writes are not outputs."""
    out = {}
    for path in sorted((workdir / "results").rglob("*")):
        rel = path.relative_to(workdir).as_posix()
        if not path.is_file() or "/.resume/" in rel or ".tmp-" in path.name:
            continue
        out[rel] = fingerprint(path)
    return out


def leftovers(workdir: Path) -> list[str]:
    """Temporary files of atomic writes still lying around (results/ and logs/)."""
    return sorted(p.relative_to(workdir).as_posix() for p in workdir.rglob("*.tmp-*")
                  if ".snakemake" not in p.parts)


def compare(reference: dict[str, object], got: dict[str, object], *, complete: bool,
            volatile: tuple[str, ...]) -> list[str]:
    """Problems: a file that exists but differs from the reference (a corrupt or partial
    output left standing), or, when `complete`, a reference file missing."""
    problems = []
    for rel, fp in got.items():
        if rel not in reference:
            problems.append(f"{rel}: not written by the uninterrupted run")
        elif fp is not None and not rel.endswith(volatile) and fp != reference[rel]:
            problems.append(f"{rel}: differs from the uninterrupted run")
    if complete:
        problems += [f"{rel}: missing" for rel in reference if rel not in got]
    return problems


def job_rule(rule: str, dataset: str = "fm") -> str:
    """The Snakemake rule name of a matrix rule ("split" is split_<dataset>)."""
    return f"split_{dataset}" if rule == "split" else rule


def plan_faults(durations: dict[str, float], rules: list[str], seed: int, controller_share: float) -> dict[str, Fault]:
    """One fault per rule at a seeded point within the shortest run of its jobs in the
    uninterrupted run (5% to 75% of it; a job that ends sooner this time is a miss);
    round(controller_share x rules) of them, seeded, kill Snakemake itself (at least one
    when the share is above 0)."""
    rng = random.Random(seed)
    n_controller = max(round(controller_share * len(rules)), 1 if controller_share > 0 else 0)
    controller = set(rng.sample(rules, n_controller))
    return {
        rule: Fault(rule, "controller" if rule in controller else "job", durations[rule] * rng.uniform(0.05, 0.75))
        for rule in rules
    }


def digest(obj: object) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:12]

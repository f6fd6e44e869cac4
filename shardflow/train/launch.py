"""`python -m shardflow.train.launch`: the train rule's job, on the CPU, one GPU or N GPUs.

    python -m shardflow.train.launch --gpus 2 --gpu-jobs '{"device": "auto", ...}' --threads 4 \\
        -- --data results/x/shards --out results/x/train --params '{"n_layer": 4}'

Everything after `--` is passed to `python -m shardflow.train`. The launcher first
decides where the job runs exactly as every GPU script does
(`shardflow.core.gpujob.pin_job_gpus`): a job scheduled with gpu=0 runs on the CPU
and takes no GPU slot; a job with gpu=N takes N slots at once on a local multi-GPU
host (or keeps what SLURM or Kubernetes gave it), before anything initialises CUDA.
Then one process trains in this one (so a SIGKILL of the job kills the trainer
itself, and Snakemake's retry resumes from its last checkpoint), and N > 1 processes
run as `torchrun --standalone --nproc_per_node N -m shardflow.train ...` (one node,
one process per GPU, data parallel). The slots stay held by this process while
torchrun runs; its workers inherit CUDA_VISIBLE_DEVICES, and torchrun and its workers
are killed if this process dies (`run_ranks`). Asked to stop while torchrun runs
(SIGTERM: a SLURM scancel or preemption signals every process of the job; SIGINT; SIGHUP,
a closed terminal, which torchrun's own session never gets; on
EKS a pod's main process is a shell, which passes nothing on), this process passes the signal to torchrun, which passes it
to the ranks: they save the step they reached (shardflow.train.trainer) and end, and
this process then ends by the same signal, as it ended before (core.signals). Later
signals to this process are ignored, and torchrun, in a session of its own, gets no
terminal's Ctrl-C: it survives two signals, not three (docs/reliability.md). A third
(SLURM signals torchrun too: a second scancel, a preemption's second SIGTERM) ends
torchrun but not the ranks saving their step, which unbind themselves from it; this
process adopts them and ends after them (`run_ranks`). A job of one process trains in
this process, where the trainer holds the signal itself.

The launcher also notes which Snakemake runs the job (shardflow.core.controller) for
the trainer, which stops without outputs, its checkpoint kept, if that process goes
(a SIGKILLed controller would otherwise leave a train job publishing unrecorded outputs).

A retry does not repeat an input or config error (shardflow.core.failures, as the
script rules): before it pins GPUs, an attempt > 1 that finds `<resume dir>.failure.json`
with the same trainer arguments, the same files under `--data` and `--tokenizer` and
the same shardflow code stops at once, naming the earlier attempt's error. An attempt
records its failure there where it ended on a deterministic error: in this process for
one process (CPU, one GPU: the trainer runs here), or, under torchrun, where the ranks'
reports show one (`failures.rank_failure`), after a stop signal too (a rank the signal
ended reports nothing that is recorded). The attempt comes in `--gpu-jobs` (`attempt`, from the rule's
untracked `gpu_jobs` param: the command's text stays as it was); without it, or without
`--resume-dir`, nothing is checked or recorded; without a folder for the ranks' reports,
the ranks run unguarded. Pinning's errors are the host's state: never recorded.

An attempt that runs out of GPU memory in a training step (one process, or any rank)
records that too, with its micro-batch and GPU (kind `out_of_memory`, which stops no
retry and stays for later runs); the next attempt passes it to the trainer
(`--out-of-memory`), which on that GPU type trains with a smaller micro-batch and more
micro-steps: the same global batch (shardflow.train.trainer).

Logging goes to stderr, which the rule sends to its log, torchrun's ranks included.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from shardflow.core import controller, failures
from shardflow.core.gpujob import pin_job_gpus
from shardflow.core.runlog import configure_logging
from shardflow.core.signals import Held

log = logging.getLogger("shardflow.train.launch")


def processes(device: str, gpus: int) -> int:
    """Training processes: one per GPU the job got; one on the CPU."""
    return 1 if device == "cpu" else max(gpus, 1)


def option(rest: list[str], flag: str) -> str | None:
    """The value the trainer reads for `flag` in its arguments `rest` (the last one given,
    as argparse takes it), or None."""
    value = None
    for i, arg in enumerate(rest):
        if arg == flag and i + 1 < len(rest):
            value = rest[i + 1]
        elif arg.startswith(flag + "="):
            value = arg[len(flag) + 1 :]
    return value


def retry_guard(settings: dict, rest: list[str], job: str, run: str | None) -> failures.Guard | None:
    """Stop this attempt where it repeats a deterministic failure its job's earlier
    attempt recorded (failures.RepeatedFailureError), else the guard that records its
    own: beside the resume folder (which every attempt shares; Snakemake deletes only
    declared outputs), signed with the trainer's arguments and the files under its
    `--data` and `--tokenizer`. None without `attempt` in the gpu_jobs settings or a
    `--resume-dir` (a run by hand)."""
    attempt, resume = settings.get("attempt"), option(rest, "--resume-dir")
    if attempt is None or not resume:
        return None
    data = option(rest, "--data")
    inputs = [p for p in (data, option(rest, "--tokenizer")) if p]
    if data and os.path.isfile(data):  # metadata.json: the shards lie beside it
        inputs[0] = os.path.dirname(data) or "."
    return failures.start_guard(failures.record_path(resume.rstrip("/")), int(attempt), inputs, rest, job, log, run)


def check_gpu_count(device: str, gpus: int, rest: list[str]) -> None:
    """A GPU job must get the GPUs train.gpus asks for: the global batch is batch_size x
    grad_accum x processes, so with fewer it would train another run than the one its
    params record. Snakemake caps a job's gpu resource at what the profile or host
    offers, silently. (The workflow records train.gpus in `--params` where it is not 1.)
    A CPU job (gpu=0, or gpu_jobs.device cpu) trains in one process, which trains the
    micro-batches of all train.gpus processes in turn (the trainer's `processes`): the
    same global batch, said in the log."""
    given = option(rest, "--params")  # the trainer's value: the last one, `--params=...` too
    wanted = int(json.loads(given).get("gpus", 1)) if given is not None else 1
    if device == "cpu":
        if wanted > 1:
            log.info(
                "train.gpus is %d but this job runs on the CPU: one process trains the micro-batches of all %d "
                "in turn, the same global batch (batch_size x grad_accum x %d)",
                wanted,
                wanted,
                wanted,
            )
        return
    if max(gpus, 1) != wanted:
        raise SystemExit(
            f"train.gpus is {wanted} but this job was given {gpus} GPU(s) (the profile's or the host's gpu limit "
            f"caps the job's request): with {max(gpus, 1)} process(es) the global batch would differ from the "
            f"recorded run. Set train.gpus to {max(gpus, 1)}, or give the job {wanted} GPUs"
        )


def trainer_args(
    rest: list[str], device: str, nproc: int, threads: int | None, out_of_memory: dict | None = None
) -> list[str]:
    """The trainer's arguments: the caller's, then the device and per-process threads
    this launcher decided (later flags win in argparse), and the out-of-memory details an
    earlier attempt recorded (the trainer picks its micro-batch from them)."""
    args = list(rest)
    if out_of_memory is not None:
        args += ["--out-of-memory", json.dumps(out_of_memory, sort_keys=True)]
    if device == "cpu":
        args += ["--device", "cpu"]
    elif nproc > 1 or not device.startswith("cuda"):
        args += ["--device", "auto" if device == "auto" else "cuda"]  # each rank takes cuda:LOCAL_RANK
    else:
        args += ["--device", device]
    if threads:
        args += ["--threads", str(max(1, threads // nproc))]
    return args


def torchrun_command(nproc: int, args: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        "-m",
        "shardflow.train",
        *args,
    ]


# How long the launcher waits, after a stop signal, for ranks that outlived torchrun to
# finish their checkpoint (trainer: the write, then at most STOP_WAIT at the barrier).
ORPHAN_WAIT = 600


def run_ranks(cmd: list[str], reports: str | None = None, held: Held | None = None) -> int:
    """Run torchrun (`cmd`) and return its status. torchrun gets SIGKILL when this
    process dies, and its ranks when torchrun does (each binds itself:
    controller.bind_to_launcher), so a SIGKILLed job leaves nothing running. `reports`:
    the folder where each rank writes the error that ended it (failures.RANK_REPORTS_ENV).
    `held`: this process's stop signals, passed on to torchrun.

    torchrun runs in a session of its own, so a terminal's Ctrl-C reaches this process
    alone, which passes on the first: torchrun survives two SIGINTs or SIGTERMs and
    ends at the third (torch's agent `run`), and in this process's group it got each
    Ctrl-C besides this process's copy. Under SLURM, which signals every process of the
    job, a second scancel or a preemption's second SIGTERM is that third signal: ranks
    saving their step no longer die with torchrun (controller.unbind_from_launcher), and
    this process, which adopts them (controller.adopt_orphans), returns once they have
    ended (after a stop signal, for at most ORPHAN_WAIT seconds)."""
    me = controller.this_process()
    env = dict(os.environ)
    if me is not None:
        env[controller.LAUNCHER_ENV] = me.to_env()
    if reports is not None:
        env[failures.RANK_REPORTS_ENV] = reports
    controller.adopt_orphans()
    with subprocess.Popen(cmd, preexec_fn=controller.die_with_parent, start_new_session=True, env=env) as proc:
        if held is not None:
            held.pass_to(proc.send_signal)
        rc = proc.wait()
    # A rank that torchrun left writing its checkpoint: were this process to end now, the
    # job would end while it writes (Snakemake's retry starting beside it, rank 0 still
    # holding the resume lock; a SLURM job ending what is left of it). Only after a stop
    # signal (no rank outlives torchrun otherwise), and for a bounded time.
    if held is not None and held.received is not None:
        if not controller.wait_for_children(ORPHAN_WAIT):
            log.warning("processes torchrun left were still running %d s after it ended: ending without them",
                        ORPHAN_WAIT)
    return rc


def rank_reports_folder() -> str | None:
    """A fresh folder for the ranks' reports (failures.RANK_REPORTS_ENV), or None where
    none can be made (a full or read-only temporary folder): the ranks then run
    unguarded, as a job without a signature does, never failing on the guard."""
    try:
        return tempfile.mkdtemp(prefix="shardflow-ranks-")
    except OSError as exc:
        log.warning("no failure record for this attempt (no folder for the ranks' reports: %s)", exc)
        return None


def record_ranks(guard: failures.Guard, reports: str) -> None:
    """After torchrun failed: record the ranks' failure where it is deterministic
    (failures.rank_failure), and say why a retry runs where it is not."""
    found = failures.rank_reports(reports)
    cause = failures.rank_failure(found)
    oom = failures.rank_out_of_memory(found) if cause is None else None
    if oom is not None:
        details = oom[failures.OUT_OF_MEMORY]
        if guard.record(
            oom.get("error", "OutOfMemoryError"), f"rank {oom.get('rank')}: {oom.get('message', '')}", log, details
        ):
            guard.say_recorded(oom.get("error", "OutOfMemoryError"), log, details)
        return
    if cause is None:
        ended = ", ".join(f"rank {r.get('rank', '?')}: {r.get('error', 'unreadable report')}" for r in found)
        log.info(
            "a retry runs: the ranks' failure was not an input or config error alone (%s)",
            ended or "no rank reported an error: killed, or stopped by torchrun",
        )
        return
    message = f"rank {cause.get('rank')}: {cause.get('message', '')}"
    if guard.record(cause["error"], message, log):
        guard.say_recorded(cause["error"], log)


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    if "--" in argv:
        cut = argv.index("--")
        own, rest = argv[:cut], argv[cut + 1 :]
    else:
        own, rest = argv, []
    ap = argparse.ArgumentParser(prog="python -m shardflow.train.launch", description=__doc__.split("\n")[0])
    ap.add_argument("--gpus", type=int, required=True, help="GPUs the job was scheduled with (0: a CPU job)")
    ap.add_argument("--gpu-jobs", required=True, help="JSON of the gpu_jobs settings: device, pinning, devices")
    ap.add_argument("--threads", type=int, help="CPU threads of the job, shared by its processes")
    ap.add_argument("--job", default="train", help="name written into the GPU lock files")
    return ap.parse_args(own), rest


def main(argv: list[str] | None = None) -> int:
    args, rest = parse_args(sys.argv[1:] if argv is None else argv)
    settings = json.loads(args.gpu_jobs)
    configure_logging(
        None,
        "shardflow.train.launch",
        {"gpus": args.gpus, "gpu_jobs": settings, "threads": args.threads, "trainer": rest},
    )
    found = controller.find()
    guard = retry_guard(settings, rest, args.job, found.to_env() if found else None)  # before GPUs are pinned
    # per_rank: N > 1 GPUs run as N ranks, each on cuda:LOCAL_RANK (trainer_args), whatever cuda:N says.
    device, _visible = pin_job_gpus(settings, args.gpus, job=args.job, per_rank=True)
    check_gpu_count(device, args.gpus, rest)
    nproc = processes(device, args.gpus)
    learned = guard.out_of_memory if guard is not None else None
    targs = trainer_args(rest, device, nproc, args.threads, learned[failures.OUT_OF_MEMORY] if learned else None)
    if found is not None:
        os.environ[controller.ENV] = found.to_env()  # the trainer's processes inherit it
    log.info("controller: %s", f"Snakemake pid {found.pid}" if found else "none found (no check for orphaning)")
    # Only the trainer's errors are recorded, after the GPUs are pinned (as start_gpu_job
    # records only after pinning): a pool smaller than the job is the host's state.
    if nproc == 1:  # CPU or one GPU: the trainer runs in this process, its error is ours
        from shardflow.train.__main__ import main as train_main

        try:
            train_main(targs)
        except BaseException as exc:
            if guard is not None and guard.record_exception(exc, log):
                guard.say_recorded(type(exc).__name__, log, failures.out_of_memory_details(exc))
            raise
        return 0
    cmd = torchrun_command(nproc, targs)
    log.info("running %d processes: %s", nproc, " ".join(cmd))
    reports = rank_reports_folder() if guard is not None else None
    # Held from before torchrun starts until its reports are removed; a signal held is
    # raised again as the block ends. A signal before that point finds no step to save.
    stop_note = (
        "passed to torchrun, whose ranks save the step they reach, then ending "
        "(a second signal is ignored; kill -9 ends at once)"
    )
    with Held(stop_note) as held:
        try:
            rc = run_ranks(cmd, reports, held)
            if held.received is not None:
                name = signal.Signals(held.received).name
                log.warning("%s: passed to torchrun, which ended with status %d; ending by %s", name, rc, name)
            elif rc != 0:
                log.critical("failed: torchrun exited with status %d (the ranks' errors are above)", rc)
            # Also after a signal: a rank may have failed in the step it was finishing (out
            # of memory: the retry needs the smaller micro-batch). A rank the signal ended
            # reports nothing (SIGTERM) or a KeyboardInterrupt, which records nothing.
            if rc != 0 and guard is not None and reports is not None:
                record_ranks(guard, reports)
        finally:
            if reports is not None:
                shutil.rmtree(reports, ignore_errors=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())

"""Where a run stands (`python -m shardflow.cli status`, `make status`): per data set and
GPU stage, its jobs done, running, stalled, failed, retrying and waiting out of those the
run plans, the records done, the rate, the time left, and the GPU-hours and cost so far.

The companion of `make estimate` (shardflow.workflow.estimate), and planned as it is:
the config read as the workflow reads it, the data sets, chunk counts, sweeps and the
rules that run on the CPU from the parse-time functions the rules use (workflow.plan),
each job as (rule, wildcards) (plan.chunk_jobs), and its files from the rule's own
output, log and benchmark patterns as rules/*.smk declare them (`rule_files`). It runs
no job, reads no output, downloads nothing: it stats the jobs' files and reads small
ones (a finished job's stats JSON, the resume folders' attempt records, a log without
output back from its end to its failed line, 64 KiB at a time and 16 MiB at most, the
Snakemake logs of the runs since a failed job's log), so `watch make status` on
thousands of chunks is cheap.

A job is
- done: every output of its rule exists (a temp() one, chunk_vectors' .npy under
  embedding.keep_chunk_vectors: false, may be gone once merge has read it);
- failed: its last attempt left an error: `<log>.failure.json` (shardflow.core.failures:
  an input or config error, which a retry stops on; a train job's out-of-memory record
  is none: its retry runs with a smaller micro-batch), else its log ends on the line
  `failed: <error>` (core.runlog; any error, the out-of-memory ones included), else the
  Snakemake run that ran it logged its attempt's error (or a restart, or its next attempt
  started) after its log was last written: killed without logging one (`KILLED`: an
  out-of-memory killer, a time limit, preemption), not running;
- retrying: failed on its log's last line alone, where the Snakemake run that ran it
  runs it again: its log (SNAKEMAKE_LOGS, `mark_retrying`) says "Trying to restart job"
  after that failure, or names the next attempt started (on SLURM it may wait in the
  queue), and the run has not ended. A job whose retries are spent (its error logged with
  no restart after it) stays failed, and so does one with a failure record, whose retry
  stops at once, and one whose run has stopped before its next attempt ran (below);
- running: it has resume parts (core.parts: each attempt's record names the job's output
  and counts the records of the parts it saved) or a log, and no output. Whether its
  process is alive cannot be known from here (it may run on another host), so one whose
  newest part (or log line, before its first part) is older than STALE_INTERVALS typical
  part intervals is reported as stalled instead: "no progress for <t>";
- stopped (counted stalled; a retry due: failed): the Snakemake run that ran it was
  killed (SIGKILL, a closed terminal or lost session, a power loss), which leaves no end
  in its log and its locks in .snakemake/locks: the run logged no end, its header names
  this host, and no Snakemake process here holds its log open (core.controller; a live
  run does until it ends). A job it sent to a cluster ("rule", not "localrule") may run
  on there and is judged as before; so is every job of a run on another host or where
  /proc is not there, and where a log without an end is another user's (a shared
  folder: their process's open files cannot be read). A note names the run and what
  to do (`--unlock`, rerun);
- waiting: none of that (not started, or its log removed).

A file status cannot read (a stats file that is no JSON object or holds a non-number
where a number belongs, a benchmark cut short or zeroed, whose job's time is then its
stats' own, a split manifest whose chunks are not records, an attempt record that is no
object) is named in a note, and status goes on without it.

A train job keeps checkpoints, not parts: while it runs, status says how far it got is
in its log, does not check it for stalling, and shows its GPU-hours as "-" (its metrics
count them when it ends), as it does after an attempt on GPUs failed (that time is in
the checkpoint). Once it ends, its GPU-hours are its last attempt's benchmark and the
training seconds of the attempts before, which its metrics' train_seconds_total holds
(core.jobs.earlier_train_seconds; a training sweep's cost.json counts them alike). A
train sweep job's failure record is beside its resume folder (plan.sweep_train_resume),
as the main train job's is (plan.train_resume).

A sweep job (point x seed) is counted as one: done, failed, running or waiting from its
metrics JSON and its log folder. An embed or summarise sweep job runs the main data set's
chunks as jobs of its own (rules/sweep.smk), found from their rule's patterns as a data
set's are and judged the same way over the sweep's chunk jobs: the sweep job is stalled
where one of them is (`judge_sweep_chunks`).

The rate is one job's: records per second over the finished jobs' stats and the running
jobs' parts (their records over the time from the attempt's start to its last part; not
an attempt whose clock was set back while it ran, its last part before its start). The
time left: every job not done, each its records left at that rate (plus the model loading
the finished jobs' benchmarks measured, for a job not yet started), longest first on the
run's concurrency (estimate.makespan): the GPUs as `make estimate` counts them, or --gpus
N; a stage on the CPU at the number of its jobs running now. A stage is on the CPU where
the config puts it there (plan.gpu_rules_on_cpu) or its jobs' own records (stats,
attempt records) say they ran there: never from this host's GPUs, for status may run
where the jobs do not (a SLURM login node). GPU-hours so far: the
finished jobs' (core.jobs: their last attempt and the killed ones before it), and the
attempts of the jobs not done up to their last part (a lower bound), priced with
core.jobs.priced. A job holds the GPUs its stats record (a training run's world_size),
else, as `make estimate` counts them, resources.<rule>.gpu of the config status reads
(plan.job_gpus; core.jobs.gpus_held): an embed, embed_queries, embed_search_queries,
summarise, retrieval_evaluate or search job given two is billed for two.

A retrieval run (retrieval.path set) lists its corpus's embed jobs as a data set of their
own, then its one-job GPU stages, in queries (`query_stages`, RETRIEVAL_STAGES):
embed_queries, judged as an embed chunk job is (its parts lie under the data set's resume
root), and retrieval_evaluate, which saves no parts: running while its log is there and
its outputs are not, never stalled (no part interval to judge it by) and its time left not
estimated; its GPU-hours are its benchmark's seconds where its metrics say it searched on
CUDA. So the run reads finished only once retrieval_evaluate has written metrics.json.
Their patterns name the data set by rules/common.smk's RETRIEVAL (`CONFIG_NAMES`). Task
search (rules/search.smk) adds the same two stages to the main data set, after its embed
jobs (SEARCH_STAGES, by the wildcard `dataset`): embed_search_queries, judged as
embed_queries is, and search, as retrieval_evaluate is (its record: search.stats.json,
whose `queries` it counts). search_queries, a CPU job, is no stage here.

An s3:// glob input is not listed (plan.unlisted: no S3 settings here): the split's
manifest counts where the objects it recorded are the glob's (plan.matches_sources).

A run whose files are in S3 (the default storage of the eks profile: outputs, logs and
parts under the storage prefix) is read with `--storage-prefix s3://<bucket>/<prefix>`
(`make status STORAGE=...`): status then reads a local copy of what it needs of the
objects (shardflow.workflow.mirror: records, benchmarks and logs whole, a long log's
tail, every other object by its size only), kept between calls. No failure record is
in the bucket: a script job's stays on its pod's disk, gone with the pod, and a train
job's lies on the pods' volume (gpu_jobs.resume_dir), which status cannot read, else on
the pod's disk too. A failed job's log, which its pod stores in the bucket, names the
record: status says the error is an input or config error and where the record lies
(`mark_logged_records`). Without --storage-prefix, status reads the local files only,
and where the run looks like one in S3 it says so rather than report an empty run.
"""

from __future__ import annotations

import ast
import functools
import os
import platform
import re
import statistics
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from shardflow.core import controller
from shardflow.core.failures import OUT_OF_MEMORY, record_path
from shardflow.core.files import read_json
from shardflow.core.jobs import (
    earlier_attempt_costs,
    finished_job_gpu_hours,
    money,
    priced,
    read_benchmark,
    significant,
)
from shardflow.core.parts import ATTEMPT_PREFIX, PartStore, attempt_totals
from shardflow.core.runlog import FAILED, LOG_SCAN  # how far back log_error looks for the failed line
from shardflow.corpus.chunks import SOURCE_PART
from shardflow.sweep.paths import job_dir, job_metrics
from shardflow.sweep.shared import set_folder
from shardflow.workflow import estimate, mirror, plan

REPO = estimate.REPO
RULES = REPO / "rules"
# A running job whose newest part is older than this many typical part intervals (the
# median over the finished jobs' and the running attempts') is reported as stalled.
STALE_INTERVALS = 3
LOG_TAIL = 64 * 1024  # bytes read at a time from the end of a log without output, for its error
SHOWN = 8  # jobs listed per stage and state in the table (--json has them all)
DONE, RUNNING, STALLED, FAILED_STATE, WAITING = "done", "running", "stalled", "failed", "waiting"
RETRYING = "retrying"  # its last attempt failed and Snakemake runs it again (`mark_retrying`)
STATES = (DONE, RUNNING, STALLED, FAILED_STATE, RETRYING, WAITING)
# The rule of each GPU stage, and its output that holds the job's record (stats, metrics).
STAGE_RULES = {
    "embed": ("embed", "stats"),
    "summarise": ("summarise", "stats"),
    "neighbours": ("neighbours", "stats"),
    "train": ("train", "metrics"),
    "embed_queries": ("embed_queries", "stats"),
    "retrieval_evaluate": ("retrieval_evaluate", "metrics"),
    "embed_search_queries": ("embed_search_queries", "stats"),
    "search": ("search", "stats"),
}
# The one-job GPU stages of a data set's tasks, after its corpus's embed jobs, in the order
# they run, and the key of each one's record that counts the queries it did (`_stats`):
# first the queries' embed job, then their search (`query_stages`). A retrieval data set's
# (rules/retrieval.smk), and the main data set's under task search (rules/search.smk).
RETRIEVAL_STAGES = {"embed_queries": "items", "retrieval_evaluate": "n_queries"}
SEARCH_STAGES = {"embed_search_queries": "items", "search": "queries"}


class StatusError(ValueError):
    pass


# ------------------------------------------------------------------ rule files


@dataclass(frozen=True)
class RuleFiles:
    """A rule's output (by name; a positional one by its index), log and benchmark
    patterns, as its rules file declares them; `temp`: the outputs flagged temp() or
    chunk_vectors() (temp() under embedding.keep_chunk_vectors: false), by the flag."""

    rule: str
    where: str
    outputs: dict[str, str]
    log: str | None
    benchmark: str | None
    temp: dict[str, str] = field(default_factory=dict)

    def of(self, wildcards: dict) -> tuple[dict[str, str], str | None, str | None]:
        """The files of one job: outputs by name, log, benchmark."""
        outputs = {name: expand(p, wildcards) for name, p in self.outputs.items()}
        return outputs, self.log and expand(self.log, wildcards), self.benchmark and expand(self.benchmark, wildcards)


# A rule, at the top or inside an `if` block: `rule <name>:`, or `use rule <base> as
# <name> with:` (the sweep rules), whose directives not given are its base rule's.
_RULE = re.compile(r"^( *)(?:rule (\w+)|use rule (\w+) as (\w+) with):\s*$")
# A name the rules files set to a string (`SWEEP_LOG = "..."`) or a pattern (`_string`:
# `CORPUS = shared_embeddings(...)`), which their f-string patterns use; and one set to
# rules/common.smk's stage_sweep_job(<stage>), which is SWEEP_JOB with its {sweep}
# constrained to that stage's sweeps.
_NAME = re.compile(r"^ *([A-Z][A-Z0-9_]*) = (.+)$")
_WILDCARD = re.compile(r"\{(\w+)(?:,[^{}]*)?\}")
# Names rules/common.smk sets from the config at parse time, which f-string patterns use
# (retrieval.smk's `f"results/{RETRIEVAL}/retrieval/queries.npy"`): read as a wildcard of
# that name, which the job sets (`{"RETRIEVAL": <the retrieval data set>}`).
CONFIG_NAMES = ("RETRIEVAL",)
# rules/common.smk's functions that build a pattern from plain strings (rules/sweep.smk's
# `shared_embeddings("logs", "corpus", "{settings}/merge.log")`), read as they build it:
# through the package function each calls, CONFIG_NAMES as wildcards.
PATTERN_FUNCTIONS = {
    "shared_embeddings": lambda root, kind, key: set_folder(root, "{RETRIEVAL}", kind, key),
}
# Snakemake's flags around a file pattern: the pattern is their first argument; and
# rules/common.smk's chunk_vectors, which flags it temp() or not by config.
_FLAGS = {"report", "directory", "temp", "protected", "touch", "ensure", "chunk_vectors"}
_TEMP_FLAGS = ("temp", "chunk_vectors")


def expand(pattern: str, wildcards: dict) -> str:
    """`pattern` with its wildcards set (a `{name,regex}` constraint dropped)."""
    try:
        return _WILDCARD.sub(lambda m: str(wildcards[m.group(1)]), pattern)
    except KeyError as exc:
        raise StatusError(f"pattern {pattern!r} has wildcard {exc}, which the job does not set") from None


@functools.cache
def smk_names(rules_dir: str = str(RULES)) -> dict[str, str]:
    """The names the rules files set to a string pattern (see `_NAME`)."""
    names, sweep_jobs = {}, []
    for path in sorted(Path(rules_dir).glob("*.smk")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if not (m := _NAME.match(line)):
                continue
            if m.group(2).startswith("stage_sweep_job("):
                sweep_jobs.append(m.group(1))
                continue
            try:
                value = _string(ast.parse(m.group(2), mode="eval").body, names)
            except SyntaxError:
                continue
            if value is not None:
                names[m.group(1)] = value
    return names | {name: names["SWEEP_JOB"] for name in sweep_jobs if "SWEEP_JOB" in names}


def smk_constant(name: str, rules_dir: str = str(RULES)) -> str:
    """The string pattern a rules file sets `name` to (`smk_names`: `SWEEP_LOG = "..."`)."""
    names = smk_names(rules_dir)
    if name not in names:
        raise StatusError(f"{rules_dir}/*.smk: none sets {name} to a string")
    return names[name]


def _string(node: ast.expr, names: dict[str, str]) -> str | None:
    """A plain string, an f-string of plain text, `names` and CONFIG_NAMES (each a
    wildcard of its name), or a call of PATTERN_FUNCTIONS on plain strings; None:
    anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in PATTERN_FUNCTIONS:
        args = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in node.args]
        if None in args or node.keywords:
            return None
        try:
            return PATTERN_FUNCTIONS[node.func.id](*args)
        except TypeError:  # called with another number of arguments
            return None
    if not isinstance(node, ast.JoinedStr):
        return None
    text = []
    for part in node.values:
        if isinstance(part, ast.Constant) and isinstance(part.value, str):
            text.append(part.value)  # `{{chunk}}` is the text {chunk}: a wildcard
        elif (
            isinstance(part, ast.FormattedValue)
            and isinstance(part.value, ast.Name)
            and (part.value.id in names or part.value.id in CONFIG_NAMES)
            and part.conversion == -1
            and part.format_spec is None
        ):
            text.append(names.get(part.value.id, f"{{{part.value.id}}}"))
        else:
            return None
    return "".join(text)


def _pattern(node: ast.expr, names: dict[str, str]) -> tuple[str | None, list[str]]:
    """The pattern of a file argument and the flags around it."""
    flags = []
    while isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FLAGS and node.args:
        flags.append(node.func.id)
        node = node.args[0]
    return _string(node, names), flags


def _directive(
    path: Path, lineno: int, rule: str, name: str, text: str, names: dict[str, str]
) -> tuple[dict[str, str], dict[str, str]]:
    """A file directive's body (Python call arguments, as Snakemake reads it): its
    patterns, and the temp flag (`_TEMP_FLAGS`) of those that have one."""
    try:
        call = ast.parse(f"f(\n{text}\n)", mode="eval").body
    except SyntaxError as exc:
        raise StatusError(f"{path}:{lineno}: rule {rule}'s {name}: not readable ({exc.msg})") from None
    found = {str(i): a for i, a in enumerate(call.args)} | {k.arg: k.value for k in call.keywords if k.arg}
    out, temp = {}, {}
    for key, node in found.items():
        value, flags = _pattern(node, names)
        if value is None:
            raise StatusError(
                f"{path}:{lineno}: rule {rule}'s {name} {key!r} is no plain pattern: status reads the patterns as written"
            )
        out[key] = value
        flag = next((f for f in flags if f in _TEMP_FLAGS), None)
        if flag:
            temp[key] = flag
    return out, temp


@functools.cache
def rule_files(rule: str, rules_dir: str = str(RULES)) -> RuleFiles:
    """The output, log and benchmark patterns of `rule` (a `rule <name>:` of
    rules/*.smk, or a `use rule <base> as <name> with:`, whose directives not given are
    its base rule's), read from its directives: the rules are the truth of where each
    job's files are, and this reads a few small files instead of parsing the workflow.
    A pattern is a string, an f-string of the names the rules files set (`smk_names`)
    and of CONFIG_NAMES, wildcards of the job's, or a call of PATTERN_FUNCTIONS."""
    for path in sorted(Path(rules_dir).glob("*.smk")):
        lines = path.read_text(encoding="utf-8").splitlines()
        found = (
            (i, m) for i, line in enumerate(lines) if (m := _RULE.match(line)) and rule in (m.group(2), m.group(4))
        )
        start, match = next(found, (None, None))
        if start is None:
            continue
        indent, base = " " * (len(match.group(1)) + 4), match.group(3)
        body: dict[str, tuple[int, list[str]]] = {}
        current = None
        for i in range(start + 1, len(lines)):
            line = lines[i]
            if line.strip() and not line.startswith(indent):
                break  # the rule's block ends
            directive = re.match(rf"^{indent}(\w+):(.*)$", line)
            if directive:
                current = directive.group(1)
                body[current] = (i + 1, [directive.group(2)])
            elif current is not None:
                body[current][1].append(line)
        names = smk_names(rules_dir)
        files = {
            name: _directive(path, body[name][0], rule, name, "\n".join(body[name][1]), names)
            for name in ("output", "log", "benchmark")
            if name in body
        }
        inherited = rule_files(base, rules_dir) if base else None
        if inherited and "output" not in files:
            files["output"] = (inherited.outputs, inherited.temp)
        outputs, temp = files.get("output", ({}, {}))
        logs, benches = list(files.get("log", ({}, {}))[0].values()), list(files.get("benchmark", ({}, {}))[0].values())
        where = os.path.relpath(path, REPO) if path.is_relative_to(REPO) else str(path)
        return RuleFiles(
            rule,
            f"{where}:{start + 1}",
            outputs,
            logs[0] if logs else (inherited.log if inherited and "log" not in files else None),
            benches[0] if benches else (inherited.benchmark if inherited and "benchmark" not in files else None),
            temp,
        )
    raise StatusError(f"rule {rule}: no `rule {rule}:` in {rules_dir}/*.smk")


# ------------------------------------------------------------------------ jobs


@dataclass
class Job:
    """One job of a stage, and what its files say of it."""

    name: str  # "chunk 3"; "" for a stage of one job
    outputs: dict[str, str]
    log: str | None
    benchmark: str | None
    records: int | None = None  # planned: the chunk's records (the split's manifest)
    state: str = WAITING
    records_done: int = 0
    stats: dict | None = None  # a finished job's record (its stats or metrics output)
    bench: dict = field(default_factory=dict)
    attempts: list[dict] = field(default_factory=list)  # its resume folder's attempt records
    folder: str = ""  # its resume folder
    last_activity: float | None = None  # unix time of its newest part, else of its log
    error: str = ""
    error_file: str = ""
    attempt: int | None = None  # retrying: the attempt that failed, where Snakemake's log names it
    retry_log: str = ""  # retrying: the Snakemake log that says it runs the job again
    stopped_run: str = ""  # the log of the Snakemake run that ran it and has stopped (killed)
    # Read from a storage prefix: the failure record its log names, which is not here
    # (`mark_logged_records`), and where it lies: "pod" (the pod's own disk) or "volume".
    record: str = ""
    record_on: str = ""


def _blocks_back(path: str) -> Iterator[str]:
    """A log's text from its end backward, LOG_TAIL bytes at a time and LOG_SCAN at most,
    each block whole lines: a read's first line, which may begin in the read before, is
    joined to that one, so a line is matched whole (never its end alone: a reason cut
    short) and memory holds at most LOG_SCAN bytes, whatever the log's size. Raises
    OSError where the log cannot be read."""
    with open(path, "rb") as fh:
        end = os.fstat(fh.fileno()).st_size
        stop = max(0, end - LOG_SCAN)
        head = b""  # the start of the line the read after this one began inside of
        while end > stop:
            start = max(stop, end - LOG_TAIL)
            fh.seek(start)
            block = fh.read(end - start) + head
            end = start
            cut = re.search(rb"[\r\n]", block) if start > stop else None
            if start > stop and cut is None:
                head = block  # one line, begun further back
                continue
            head, block = (block[: cut.end()], block[cut.end() :]) if cut else (b"", block)
            yield block.decode("utf-8", "replace")


def log_error(path: str) -> str | None:
    """The error a failed attempt's log ends on: the first line of core.runlog's
    `failed: <type>: <message>`, the last such line in the log's last LOG_SCAN bytes
    (`_blocks_back`); None where there is none or the log cannot be read."""
    try:
        for block in _blocks_back(path):
            if " CRITICAL " in block and (error := _failed_line(block)):
                return error
    except OSError:
        return None
    return None


def _failed_line(text: str) -> str | None:
    """The error of the last line of `text` that is core.runlog's failed line, or None."""
    for line in reversed(text.splitlines()):
        level = line.find(" CRITICAL ")
        at = line.find(": " + FAILED, level)
        if level >= 0 and at >= 0:
            return line[at + 2 + len(FAILED) :].strip()
    return None


def failure_record(path: Path) -> tuple[str, str] | None:
    """(error, file) of a failure record (core.failures), the message's first line; None
    for an out-of-memory record (a train job's smaller micro-batch: its retry runs)."""
    if not path.is_file():
        return None
    try:
        record = read_json(path)
        if record.get("kind") == OUT_OF_MEMORY:
            return None
        message = str(record.get("message", "")).strip().splitlines()
        error = str(record.get("error", "error"))
        return (f"{error}: {message[0]}" if message else error), str(path)
    except (OSError, ValueError, AttributeError):
        return "unreadable failure record", str(path)


# How a GPU job's log names the failure record its attempt wrote (core.failures): the note
# after an input or config error (Guard.say_recorded), and the error of a retry that
# stopped on the record (RepeatedFailureError), which quotes the recorded error.
_SAID_RECORDED = re.compile(
    r" is an error a rerun on the same inputs and params repeats: recorded in (.+?), so a retry "
)
_STOPPED_ON = re.compile(r", remove (.+?\.failure\.json)\)")
_REPEATED = "RepeatedFailureError: "
_QUOTED = re.compile(r" failed with (.+?)(?: -- attempt \d+ would read |$)")


def logged_record(path: str) -> str | None:
    """The failure record a job's log (back from its end to LOG_SCAN bytes, as log_error
    reads it) says its attempt wrote or stopped on, the last one named, or None."""
    try:
        for block in _blocks_back(path):
            found = [m for pattern in (_SAID_RECORDED, _STOPPED_ON) for m in pattern.finditer(block)]
            if found:
                return max(found, key=lambda m: m.start()).group(1)
    except OSError:
        return None
    return None


def mark_logged_records(stage: Stage, volume: str | None) -> None:
    """Read from a storage prefix (an EKS run), where no failure record is in the bucket:
    a script job's lies beside its log's local copy on its pod's disk, gone with the pod
    (a resubmission in a new pod does not see it and runs again), and a train job's
    beside its resume folder, on the pods' volume where gpu_jobs.resume_dir (`volume`)
    is one (a retry stops on it), else on the pod's disk too. The log, which the pod
    stores in the bucket when the job fails, names it. A job failed on its log's error
    whose log names a record gets it as `record`, where it lies as `record_on`, the
    error its retry stopped on in place of RepeatedFailureError's text, and, for a
    record on the volume, that record as its error file: it stays failed, as a job whose
    record status reads does (`mark_retrying`)."""
    for job in stage.jobs:
        if job.state != FAILED_STATE or not job.log or job.error_file != job.log:
            continue
        record = logged_record(job.log)
        if record is None:
            continue
        if job.error.startswith(_REPEATED) and (quoted := _QUOTED.search(job.error)):
            job.error = quoted.group(1)
        job.record = record
        on_volume = bool(volume) and os.path.normpath(record).startswith(os.path.normpath(volume).rstrip("/") + "/")
        job.record_on = "volume" if on_volume else "pod"
        if on_volume:
            job.error_file = record


def _recorded(job: Job, retrying: bool = False) -> str:
    """Where the failure record a job's log names lies, and what a retry does with it."""
    if job.record_on == "volume":
        return (
            f"an input or config error, recorded in {job.record} on the pods' volume (gpu_jobs.resume_dir), which "
            "this host cannot read: a retry stops at once on it; fix it and rerun"
        )
    return (
        f"an input or config error, recorded on its pod's disk ({job.record}), gone with the pod: a resubmission "
        f"in a new pod runs it again{', which' if retrying else ' and'} fails the same way; fix it and rerun"
    )


def scan_resume(root: str) -> tuple[dict[str, tuple[str, list[dict]]], list[str], list[str]]:
    """The resume folders under `root` (local): {job (its output's logical path, as the
    attempt records name it): (folder, its attempt records, oldest first)}, the newest
    folder of a job where there are several (another config's); the folders whose
    records name no job (written before the records named it); and those whose attempt
    records are not readable, each with why."""
    if root.startswith("s3://") or not os.path.isdir(root):
        return {}, [], []
    found: dict[str, tuple[str, list[dict]]] = {}
    anonymous: list[str] = []
    unreadable: list[str] = []
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if not entry.is_dir():
            continue
        try:
            records = PartStore(entry.path, {}).earlier_attempts()
            if not all(isinstance(r, dict) and isinstance(r.get("start_unix"), (int, float)) for r in records):
                raise ValueError("an attempt record is no JSON object with its start_unix")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            unreadable.append(f"{entry.path} ({exc})")
            continue
        jobs = [r["job"] for r in records if r.get("job")]
        if not jobs:
            if records or any(n.startswith(ATTEMPT_PREFIX) for n in os.listdir(entry.path)):
                anonymous.append(entry.path)
            continue
        seen = found.get(jobs[-1])
        if seen is None or records[-1]["start_unix"] > seen[1][-1]["start_unix"]:
            found[jobs[-1]] = (entry.path, records)
    return found, anonymous, unreadable


def _newest_part(attempts: list[dict]) -> float | None:
    times = [a.get("last_part_unix") or a.get("start_unix") for a in attempts]
    return max((t for t in times if t), default=None)


def _mtime(path: str | None) -> float | None:
    try:
        return os.path.getmtime(path) if path else None
    except OSError:
        return None


def outputs_done(outputs: dict[str, str], deleted: Iterable[str] = ()) -> bool:
    """Whether a job with `outputs` (by name) is done: every one exists, but those that
    Snakemake has deleted as temp() once read (`deleted`: `deleted_temp`)."""
    kept = [p for name, p in outputs.items() if name not in deleted]
    return bool(kept) and all(os.path.exists(p) for p in kept)


def jobs_done(cfg: dict, rule: str, group: dict, n_chunks: int | None = None) -> list[bool]:
    """Whether each job of `rule` in `group` (a data set's wildcards, {"dataset": ...}, or
    a sweep job's, {"sweep", "point", "seed"}) is done (`outputs_done`): its chunks'
    jobs, in chunk order, or its one job where `n_chunks` is None (make estimate's jobs left)."""
    files, deleted = rule_files(rule), deleted_temp(cfg, rule, group)
    each = [group] if n_chunks is None else [{**group, "chunk": i} for i in range(n_chunks)]
    return [outputs_done(files.of(wildcards)[0], deleted) for wildcards in each]


def classify(
    job: Job, resume: dict[str, tuple[str, list[dict]]], record_file: Path | None, deleted: Iterable[str] = ()
) -> Job:
    """Set `job`'s state from its files (see the module docstring); `deleted`: its outputs
    that Snakemake has deleted as temp() once read (`deleted_temp`), not needed for done."""
    if outputs_done(job.outputs, deleted):
        job.state = DONE
        return job
    failed = failure_record(record_file) if record_file else None
    if failed is None and job.log and os.path.isfile(job.log):
        error = log_error(job.log)
        failed = (error, job.log) if error else None
    folder = next((resume[p] for p in job.outputs.values() if p in resume), None)
    if folder:
        job.folder, job.attempts = folder
        job.records_done = sum(int(a.get("items_saved") or 0) for a in job.attempts)
        if job.records is None:  # no split manifest here: the parts' own count
            try:
                n_texts = read_json(os.path.join(job.folder, "manifest.json")).get("n_texts")
                job.records = n_texts if isinstance(n_texts, int) and not isinstance(n_texts, bool) else None
            except (OSError, ValueError, AttributeError):
                pass
    if failed:
        job.state, (job.error, job.error_file) = FAILED_STATE, failed
    elif folder or (job.log and os.path.isfile(job.log)):
        job.state = RUNNING
        times = [t for t in (_newest_part(job.attempts), _mtime(job.log)) if t]
        job.last_activity = max(times) if times else None
    return job


# ------------------------------------------------------------- retries


# Snakemake's own log of each run (the main process's, where the run was started; a job's
# Snakemake, in a SLURM job or a pod, writes none), and how it says what became of a job
# (snakemake 9.27, logging.DefaultFormatter and scheduling.job_scheduler): a job started
# ("[<asctime>]", then "rule <name>:" or "localrule <name>:", its log and jobid, and its
# resources, which for a GPU rule hold `attempt`), an attempt failed ("Error in rule
# <name>:", its jobid and log), the next attempt to come ("Trying to restart job <jobid>."),
# and the run's end ("Complete log(s): ...", also after a SIGINT or SIGTERM). Its header
# names the host it runs on ("  Host: <platform.node()>", workflow.info_header); a job
# it runs in its own process tree (the local executor, a localrule) starts as
# "localrule <name>:", one it sends to a cluster as "rule <name>:" (jobs.is_local).
SNAKEMAKE_LOGS = ".snakemake/log"
_SM_STAMP = re.compile(r"^\[(\w{3} \w{3} [ \d]\d \d\d:\d\d:\d\d \d{4})\]$")
_SM_JOB = re.compile(r"^(local)?(?:rule|checkpoint) \w+:$")
_SM_HOST = re.compile(r"^  Host: (.+)$")
_SM_ERROR = re.compile(r"^Error in rule \w+:$")
_SM_RESTART = re.compile(r"^Trying to restart job (\d+)\.$")
_SM_END = re.compile(r"^Complete log\(s\): ")
# The lines that begin an event or the run's end. An error block ends only at one of them
# until its jobid is read: an executor's message comes before the jobid and may run over
# several lines, blank ones too (the slurm plugin's when sbatch refuses a job).
_SM_EVENTS = (_SM_STAMP, _SM_JOB, _SM_ERROR, _SM_RESTART, _SM_END)
_SM_ITEM = re.compile(r"^    ([\w-]+):(?: (.*))?$")
_SM_ATTEMPT = re.compile(r"(?:^|, )attempt=(\d+)(?:,|$)")
_SM_CHECK = " (check log file(s) for error details)"  # after an error's logs
_SM_ANNOTATION = re.compile(r" \([^()]*\)$")  # after a file in storage: "(send to storage)"
# A Snakemake log written this long before a job's log may still be the one that
# reported that job's failure (the two files' clocks may differ: a shared filesystem).
SM_LOG_SLACK_S = 60.0


@dataclass
class SnakemakeRun:
    """What one Snakemake log says of each job, by the job's log path: its last event
    (`start`, `error` or `restart`), the attempt that event was about (None: the rule
    has no `attempt` resource) and when the job last started (unix time, or None);
    `local`: whether it last started in the run's own process tree ("localrule"), not
    sent to a cluster; `ended`: the run has ended, so no restart it announced will come;
    `host`: the host it ran on, from its header (None: no header, `--quiet host`)."""

    path: str
    last: dict[str, tuple[str, int | None, float | None]] = field(default_factory=dict)
    local: dict[str, bool] = field(default_factory=dict)
    ended: bool = False
    host: str | None = None


def read_snakemake_log(path: str, prefix: str = "") -> SnakemakeRun:
    """The events of one Snakemake log (see SNAKEMAKE_LOGS); `prefix`: a storage prefix
    (s3://bucket/prefix) the job logs are named under, removed so that they are the
    paths status knows them by."""
    run = SnakemakeRun(path)
    logs_of: dict[str, list[str]] = {}  # jobid: the job's logs
    attempt_of: dict[str, int | None] = {}
    started_at: dict[str, float | None] = {}
    local_of: dict[str, bool] = {}
    stamp: float | None = None
    kind, items, local = "", {}, False

    def job_logs(value: str) -> list[str]:
        out = []
        value = value.strip().removesuffix(_SM_CHECK)
        for item in value.split(", "):
            item = _SM_ANNOTATION.sub("", item.strip())
            if prefix and item.startswith(prefix.rstrip("/") + "/"):
                item = item[len(prefix.rstrip("/")) + 1 :]
            out.append(item)
        return out

    def close() -> None:
        jobid = items.get("jobid", "").strip()
        if not kind or not jobid:
            return
        if kind == "start":
            logs_of[jobid] = job_logs(items["log"]) if "log" in items else []
            found = _SM_ATTEMPT.search(items.get("resources", ""))
            attempt_of[jobid] = int(found.group(1)) if found else None
            started_at[jobid] = stamp
            local_of[jobid] = local
        for log in logs_of.get(jobid) or (job_logs(items["log"]) if "log" in items else []):
            run.last[log] = (kind, attempt_of.get(jobid), started_at.get(jobid))
            run.local[log] = local_of.get(jobid, False)

    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                line = line.rstrip("\n")
                if kind and (item := _SM_ITEM.match(line)):
                    items.setdefault(item.group(1), item.group(2) or "")
                    continue
                if kind and line.startswith("     "):
                    continue  # a deeper line of the block (a shell command)
                if kind == "error" and "jobid" not in items and not any(p.match(line) for p in _SM_EVENTS):
                    continue  # a further line of its message, which comes before the jobid (an executor's)
                close()
                kind, items = "", {}
                if found := _SM_STAMP.match(line):
                    try:
                        stamp = time.mktime(time.strptime(found.group(1), "%a %b %d %H:%M:%S %Y"))
                    except ValueError:
                        stamp = None
                elif found := _SM_JOB.match(line):
                    kind, local = "start", bool(found.group(1))
                elif _SM_ERROR.match(line):
                    kind = "error"
                elif found := _SM_RESTART.match(line):
                    jobid = found.group(1)
                    for log in logs_of.get(jobid, []):
                        run.last[log] = ("restart", attempt_of.get(jobid), started_at.get(jobid))
                elif _SM_END.match(line):
                    run.ended = True
                elif run.host is None and not logs_of and (found := _SM_HOST.match(line)):
                    run.host = found.group(1).strip()
            close()
    except OSError:
        pass
    return run


class SnakemakeLogs:
    """The Snakemake logs in `folder` (SNAKEMAKE_LOGS), newest first, each read once."""

    def __init__(self, folder: str | os.PathLike = SNAKEMAKE_LOGS, prefix: str = ""):
        self.prefix = prefix
        try:
            found = [(e.stat().st_mtime, e.path) for e in os.scandir(folder) if e.name.endswith(".snakemake.log")]
        except OSError:
            found = []
        self.logs = sorted(found, reverse=True)
        self._read: dict[str, SnakemakeRun] = {}
        self._open: set[str] | None | bool = False  # controller.snakemake_open_files, once read

    def run(self, path: str) -> SnakemakeRun:
        if path not in self._read:
            self._read[path] = read_snakemake_log(path, self.prefix)
        return self._read[path]

    def live_here(self) -> bool | None:
        """Whether a Snakemake process on this host holds one of these logs open: a run
        goes on here (None: not known, off Linux, or where a log without an end is another
        user's, whose process's open files cannot be read: controller.unseen_writer)."""
        if self._open is False:
            self._open = controller.snakemake_open_files()
        if self._open is None:
            return None
        if any(os.path.realpath(path) in self._open for _, path in self.logs):
            return True
        if any(controller.unseen_writer(path) and not self.run(path).ended for _, path in self.logs):
            return None
        return False

    def stopped(self, run: SnakemakeRun) -> bool:
        """Whether `run` has stopped without ending (SIGKILL, a closed terminal or lost
        session, a power loss: it logs no end then, and its locks remain): it logged no
        end, it ran on this host (its header's Host), and no Snakemake process here holds
        its log, or another run's, open (a run started since, still at its DAG, runs its
        jobs again). Where that cannot be told (another host or none named, no /proc, a
        log without an end that is another user's), False: the run is taken to go on, as
        before."""
        if run.ended or run.host is None or run.host != platform.node():
            return False
        return self.live_here() is False

    def stopped_run(self) -> SnakemakeRun | None:
        """The newest run that started jobs (the logs of runs that started none,
        `--unlock` or one refused by the lock, are passed over), where it has stopped."""
        run = next((r for r in (self.run(path) for _, path in self.logs) if r.last), None)
        return run if run is not None and self.stopped(run) else None

    def latest(self, job_log: str) -> tuple[SnakemakeRun, tuple[str, int | None, float | None]] | None:
        """The newest run whose log names `job_log` (a job's log), and its last event for
        that job; only logs written since the job's log was (less SM_LOG_SLACK_S) are
        read: an older run cannot have reported its last attempt."""
        since = _mtime(job_log)
        if since is None:
            return None
        for mtime, path in self.logs:
            if mtime < since - SM_LOG_SLACK_S:
                break
            run = self.run(path)
            if job_log in run.last:
                return run, run.last[job_log]
        return None


def controller_logs() -> Path:
    """The Snakemake logs of the runs started here (SNAKEMAKE_LOGS): Snakemake writes them
    where the run was started, and a storage prefix's copy, status's working directory
    then, lies below that folder's .snakemake/shardflow-status/ (mirror.default_folder)."""
    for parent in Path.cwd().parents:
        if parent.name == "shardflow-status" and parent.parent.name == ".snakemake":
            return parent.parent / "log"
    return Path(SNAKEMAKE_LOGS)


# The error of an attempt that Snakemake reported failed and whose log ends on no error:
# its process was killed before it could log one (`mark_retrying`).
KILLED = (
    "killed without logging an error, as Snakemake reported (out of memory on the host, a time limit, "
    "preemption, a signal: the scheduler's record of the job says which)"
)


def mark_retrying(stage: Stage, logs: SnakemakeLogs) -> None:
    """A job failed on its log's last line alone (no failure record: no input or config
    error, which a retry would stop on) is retrying where the Snakemake run that ran it
    will run it again: the run's log says "Trying to restart job" after the failure, or
    has started the next attempt (submitted: on SLURM it may wait in the queue, its log
    still the failed attempt's until it runs), and has not ended. A job whose attempts
    are all spent stays failed: Snakemake logged its error and no restart. So does one
    whose run has stopped (`SnakemakeLogs.stopped`: killed) before its next attempt ran,
    unless that attempt went to a cluster, where it may still run (`stopped_run` names
    the run: nothing runs it again but a rerun).

    A job that looks running (its parts or log, no output) is failed (`KILLED`), and judged
    so, where that run's log says its attempt ended: an error, a restart, or a later
    attempt started before the job's log was written again. Its process was killed
    without logging an error (the kernel's or a cgroup's out-of-memory killer, a SLURM
    time limit, a preempted node: SIGKILL), so its log holds no failed line, and its
    parts would only show it stalled some part intervals later, never where no part
    interval is known yet (every job still loading its model)."""
    for job in stage.jobs:
        running = job.state in (RUNNING, STALLED)
        if not job.log or not (running or (job.state == FAILED_STATE and job.error_file == job.log)):
            continue
        found = logs.latest(job.log)
        if found is None:
            continue
        run, (event, attempt, started) = found
        # The job's log predates the attempt's start (asctime: whole seconds), so it is an
        # earlier attempt's: this one has not run its script yet (queued).
        queued = event == "start" and started is not None and (_mtime(job.log) or 0.0) < started + 1.0
        if running:
            # A log's mtime is the file server's clock: one behind the controller's makes a
            # running attempt's log read as written before its start. Its folder's records
            # (the node's clock) say it has begun.
            begun = started is not None and (_newest_part(job.attempts) or 0.0) >= started
            if not (event in ("error", "restart") or (queued and not begun and attempt and attempt > 1)):
                continue
            job.state, job.error, job.error_file = FAILED_STATE, KILLED, job.log
        if run.ended:
            continue
        if (event == "restart" or (event == "start" and run.local.get(job.log))) and logs.stopped(run):
            job.stopped_run = run.path
            continue
        if event == "restart":
            job.attempt = attempt
        elif queued:
            job.attempt = attempt - 1 if attempt and attempt > 1 else None
        else:
            continue  # its error logged and no restart: its attempts are spent
        job.state, job.retry_log = RETRYING, run.path


def mark_stopped(stage: Stage, logs: SnakemakeLogs) -> None:
    """A running job whose Snakemake run has stopped (`SnakemakeLogs.stopped_run`: killed)
    is stalled, `stopped_run` naming the run: no Snakemake will record its outputs, and a
    process of it still here stops without them (shardflow.core.controller). Not one the
    run sent to a cluster ("rule", not "localrule", its last event its start), which may
    run on there and is judged by its parts as before."""
    run = logs.stopped_run()
    if run is None:
        return
    for job in stage.jobs:
        if job.state != RUNNING or not job.log or job.log not in run.last:
            continue
        if run.last[job.log][0] == "start" and not run.local.get(job.log):
            continue
        job.state, job.stopped_run = STALLED, run.path


# ---------------------------------------------------------------------- stages


@dataclass
class Stage:
    """One GPU stage of one data set, or one sweep (`sweep`: jobs counted only)."""

    dataset: str
    stage: str
    jobs: list[Job]
    gpus: int  # per job; 0: on the CPU
    unit: str = "records"
    sweep: bool = False
    rate: float | None = None  # records per second of one job
    rate_source: str = ""
    overhead_s: float = 0.0
    part_interval: float | None = None
    slots: int | None = None  # jobs at once for the time left
    left_s: float | None = None
    left_gpu_hours: float | None = None  # to finish the jobs not done, at the rate (None: not estimated)
    left_cost: float | None = None
    gpu_hours: float | None = 0.0  # None: not known (a training run while it runs)
    cost: float | None = 0.0
    notes: list[str] = field(default_factory=list)
    saves_parts: bool = True  # False: a killed job starts again (retrieval_evaluate, search)
    # Where a job's records come from, said where they are not known yet.
    records_from: str = "no split manifest for these inputs yet"

    def count(self, state: str) -> int:
        return sum(1 for j in self.jobs if j.state == state)

    @property
    def label(self) -> str:
        return f"{self.stage} {self.dataset}"

    @property
    def records_total(self) -> int | None:
        known = [j.records for j in self.jobs]
        return None if None in known or self.sweep else sum(known)

    @property
    def records_done(self) -> int:
        return sum(j.records_done for j in self.jobs)


# The numbers status reads from a finished job's stats (or a train job's metrics).
NUMERIC_STATS = (
    "items",
    "items_embedded",
    "items_generated",
    "seconds",
    "wall_seconds",
    "parts",
    "steps",
    "tokens_per_step",
    "train_seconds_total",
    "n_queries",
    "queries",
)


def _stats(job: Job, record: str, count: str = "items") -> str | None:
    """A finished job's record (stats, metrics) and benchmark; its records (the record's
    `count`). None, or what makes one unreadable, naming the file (status goes on: the
    job stays done). An unreadable benchmark leaves the record counted, the job's time
    then the record's own (`_benchmark`)."""
    path = job.outputs[record]
    try:
        s = read_json(path)
        if not isinstance(s, dict):
            raise ValueError(f"holds a {type(s).__name__}, not a JSON object")
        for key in NUMERIC_STATS:
            if key in s and (isinstance(s[key], bool) or not isinstance(s[key], (int, float))):
                raise ValueError(f"{key} is {s[key]!r}, not a number")
        devices = s.get("earlier_attempt_devices") or {}
        if not isinstance(devices, dict) or not all(isinstance(t, (int, float)) for t in devices.values()):
            raise ValueError(f"earlier_attempt_devices is {devices!r}, not seconds by device")
    except (OSError, ValueError, KeyError) as exc:
        job.stats, job.error = None, f"{path} is not readable ({exc}): its job is counted done, its {record} not"
        return job.error
    job.stats = s
    if "tokens_per_step" in s:  # a training run: tokens
        job.records = job.records_done = int(s.get("steps", 0)) * int(s["tokens_per_step"])
    else:
        job.records_done = int(s.get(count, job.records or 0))
        job.records = job.records if job.records is not None else job.records_done
    return _benchmark(job, record)


def _benchmark(job: Job, record: str) -> str | None:
    """A finished job's benchmark into `job.bench` ({} where there is none); None, or what
    makes it unreadable (core.jobs.read_benchmark: cut short, zeroed), naming it. Without
    it, the job's time is its record's own (`finish`), its model loading not known."""
    job.bench = {}
    if not job.benchmark or not os.path.isfile(job.benchmark):
        return None
    try:
        bench = read_benchmark(job.benchmark)
    except (OSError, ValueError) as exc:
        why = str(exc).removeprefix(f"{job.benchmark}: ")
        return f"{job.benchmark} is not readable ({why}): its job's time is taken from its {record}"
    job.bench = bench
    return None


def _part_seconds(attempt: dict) -> float:
    """An attempt's seconds from opening its folder to its last saved part (the one count:
    core.parts.attempt_totals)."""
    return attempt_totals([attempt])["earlier_attempt_seconds"]


def measure(stage: Stage) -> None:
    """The stage's rate per job, model loading per job and typical part interval, from
    the finished jobs' stats and benchmarks and the running jobs' parts."""
    done = [j for j in stage.jobs if j.state == DONE and j.stats and "tokens_per_step" not in j.stats]
    # An attempt whose host's clock was set back while it ran (NTP stepping it) saved its
    # last part "before" its start: its time is not known, and read as 0 s it would count
    # its records in no time and its parts at no interval (a rate too high, and running
    # jobs stalled too soon). Its records still count, in records_done.
    parted = [
        a for j in stage.jobs if j.state != DONE for a in j.attempts if a.get("parts_saved") and _part_seconds(a) > 0
    ]
    # The attempts' records and seconds read as a job's stats (estimate.run_rate).
    run = estimate.Run(
        "",
        [j.stats for j in done] + [{"items": a.get("items_saved", 0), "seconds": _part_seconds(a)} for a in parted],
        [j.bench for j in done] + [{} for _ in parted],
    )
    measured = estimate.run_rate(run)
    if measured:
        stage.rate, overhead = measured
        stage.overhead_s = overhead or 0.0
        stage.rate_source = (
            f"{estimate.readable(stage.rate)} {stage.unit}/s per job, over {len(done)} finished job(s)' stats and "
            f"{len(parted)} running attempt(s)' parts"
        )
    intervals = [s["seconds"] / s["parts"] for j in done if (s := j.stats).get("parts") and s.get("seconds")]
    intervals += [_part_seconds(a) / a["parts_saved"] for a in parted]
    stage.part_interval = statistics.median(intervals) if intervals else None


def mark_stalled(stage: Stage, now: float) -> None:
    """A running job with no part (or, before its first, no log line) for STALE_INTERVALS
    typical part intervals (plus a job's model loading, before its first part) is stalled."""
    if stage.part_interval is None:
        return
    for job in stage.jobs:
        if job.state != RUNNING or job.last_activity is None:
            continue
        # Loading its model: the current attempt (the newest record) has saved no part yet;
        # records_done also counts earlier attempts' parts, which a retry loads past.
        loading = not job.attempts or not job.attempts[-1].get("parts_saved")
        limit = STALE_INTERVALS * stage.part_interval + (stage.overhead_s if loading else 0.0)
        if now - job.last_activity > limit:
            job.state = STALLED


def seconds_left(left: list[tuple[float, bool]], rate: float, overhead_s: float) -> list[float]:
    """Each job's seconds to finish, for jobs with `left` (records left, started) at `rate`
    records per second, a job not started also loading its model (`overhead_s`)."""
    return [n / rate + (0.0 if started else overhead_s) for n, started in left]


def time_left(
    left: list[tuple[float, bool]], rate: float, overhead_s: float, gpus_per_job: int, slots: int
) -> float | None:
    """Wall seconds to finish jobs with `left` (records left, started) at `rate` records
    per second each (`seconds_left`), on `slots` jobs at once (estimate.makespan: longest
    first onto the slot free first)."""
    if not left:
        return 0.0
    return estimate.makespan(seconds_left(left, rate, overhead_s), gpus_per_job, slots * gpus_per_job)


def finish(stage: Stage, n_gpus: int, price: float, now: float) -> Stage:
    """The stage's rate, stalled jobs, time left on `n_gpus` GPUs, GPU-hours and cost so far."""
    measure(stage)
    mark_stalled(stage, now)
    rest = [j for j in stage.jobs if j.state != DONE]
    if stage.gpus:
        stage.slots = max(1, n_gpus // stage.gpus)
    else:  # on the CPU: as many at once as run now
        stage.slots = max(1, stage.count(RUNNING))
    unknown = [j for j in rest if j.records is None]
    if stage.rate and not unknown and stage.stage != "train":
        left = [(max(0, j.records - j.records_done), bool(j.attempts)) for j in rest]
        stage.left_s = time_left(left, stage.rate, stage.overhead_s, max(1, stage.gpus), stage.slots)
        if stage.gpus:  # on the CPU: no GPU-hours to come
            stage.left_gpu_hours = sum(seconds_left(left, stage.rate, stage.overhead_s)) * stage.gpus / 3600
        else:
            stage.left_gpu_hours = 0.0
        stage.left_cost = priced(stage.left_gpu_hours, price)["estimated_cost"]
    elif unknown and stage.stage != "train" and stage.saves_parts:
        stage.notes.append(
            f"time left not estimated: the records of {len(unknown)} job(s) are not known here ({stage.records_from})"
        )
    # GPU-hours: the finished jobs' last attempts and the killed ones before them; the
    # attempts of the jobs not done, to their last part.
    # A job holds the GPUs its stats record, else the stage's a job (core.jobs.gpus_held).
    done = [(j.stats, j.bench) for j in stage.jobs if j.state == DONE and j.stats]
    gpus = max(1, stage.gpus)
    hours = sum(
        finished_job_gpu_hours(stats, float(bench.get("s", stats.get("seconds", stats.get("wall_seconds", 0)))), gpus)
        for stats, bench in done
    )
    attempts = [
        {"earlier_attempt_devices": attempt_totals(j.attempts)["earlier_attempt_devices"]} for j in rest if j.attempts
    ]
    stage.gpu_hours = (
        hours
        + earlier_attempt_costs([stats for stats, _ in done], gpus)["earlier_attempt_gpu_hours"]
        + earlier_attempt_costs(attempts, gpus)["earlier_attempt_gpu_hours"]
    )
    stage.cost = priced(stage.gpu_hours, price)["estimated_cost"]
    failed = stage.gpus and (stage.count(FAILED_STATE) or stage.count(RETRYING))
    if stage.unit == "tokens" and (stage.count(RUNNING) or stage.count(STALLED) or failed):
        # A training run keeps checkpoints, not parts with attempt records: its GPU time
        # is known from its metrics once it ends, not while it runs (or once it stopped),
        # nor after an attempt on GPUs failed (its time is in the checkpoint, which status
        # does not read: 0 would read as none spent).
        stage.gpu_hours = stage.cost = None
    return stage


def source_parts(ds: plan.DataSet) -> list[int | None]:
    """chunking.by: source: each chunk's records from the part manifest its split_source
    job wrote, where that job split this source (its name, and not changed since), so
    that a chunk's count is known once its own split ran, before the collector's
    manifest (which waits for every source's); None for the others."""
    counts: list[int | None] = []
    for i, source in enumerate(ds.sources):
        path = SOURCE_PART.format(dataset=ds.name, chunk=i) + ".json"
        try:
            part = read_json(path)
            fresh = part["sources"] == [source] and not (
                os.path.isfile(source) and os.path.getmtime(source) > os.path.getmtime(path)
            )
            counts.append(int(part["total_records"]) if fresh else None)
        except (OSError, ValueError, KeyError, TypeError):
            counts.append(None)
    return counts


def chunk_records(ds: plan.DataSet, split: dict | None) -> list[int | None] | None:
    """Each chunk's records: the split's manifest, else (by source) the sources' parts."""
    if split:
        return [int(c["items"]) for c in split["chunks"]]
    return source_parts(ds) if ds.by == "source" else None


# The rule whose job reads a stage rule's temp() outputs: Snakemake deletes them once it ran.
TEMP_READERS = {"embed": "merge", "sweep_embed_chunk": "sweep_embed_merge"}


def deleted_temp(cfg: dict, rule: str, wildcards: dict) -> frozenset[str]:
    """The outputs of `rule`'s jobs of a data set or sweep job (`wildcards`: its
    dataset, or its sweep, point and seed) that Snakemake has deleted as temp(): those
    flagged so (chunk_vectors' .npy under embedding.keep_chunk_vectors: false), once the
    job that reads them (merge) has written its outputs. A job without them is done."""
    files, reader = rule_files(rule), TEMP_READERS.get(rule)
    keep = cfg["embedding"]["keep_chunk_vectors"]
    temp = frozenset(name for name, flag in files.temp.items() if flag == "temp" or not keep)
    if not temp or reader is None:
        return frozenset()
    outputs, _, _ = rule_files(reader).of(wildcards)
    return temp if all(os.path.exists(p) for p in outputs.values()) else frozenset()


def chunk_stage(
    ds: plan.DataSet,
    stage: str,
    gpus: int,
    resume: dict,
    per_chunk: list[int | None] | None,
    deleted: frozenset[str] = frozenset(),
) -> Stage:
    """The jobs of a per-chunk stage (embed, summarise) of data set `ds`; `per_chunk`:
    chunk_records; `deleted`: deleted_temp."""
    rule, record = STAGE_RULES[stage]
    files = rule_files(rule)
    jobs, notes = [], []
    for _, wildcards in plan.chunk_jobs(rule, ds):
        outputs, log, bench = files.of(wildcards)
        job = Job(
            f"chunk {wildcards['chunk']}", outputs, log, bench, per_chunk[wildcards["chunk"]] if per_chunk else None
        )
        classify(job, resume, record_path(log) if log else None, deleted)
        if job.state == DONE and (error := _stats(job, record)):
            notes.append(error)
        jobs.append(job)
    return Stage(ds.name, stage, jobs, gpus, notes=notes)


def train_stage(cfg: dict, ds: plan.DataSet, gpus: int) -> Stage:
    """The train job of data set `ds`, holding `gpus` (0: on the CPU); its failure record
    lies beside its resume folder (rules/train_common.smk train_resume: train/ under the
    data set's local resume root). Its tokens are train.gpus' global batch on any device,
    as make estimate plans them: on the CPU one process trains the micro-batches of all
    train.gpus processes (shardflow.train.trainer, `processes`)."""
    rule, record = STAGE_RULES["train"]
    outputs, log, bench = rule_files(rule).of({"dataset": ds.name})
    job = Job("", outputs, log, bench, estimate.train_tokens(cfg, plan.train_gpus(cfg)))
    classify(job, {}, record_path(plan.train_resume(cfg["gpu_jobs"]["resume_dir"], ds.name)))
    error = _stats(job, record) if job.state == DONE else None
    out = Stage(ds.name, "train", [job], gpus, unit="tokens", notes=[error] if error else [])
    out.notes.append("time left not estimated for training: its log says how far it got")
    return out


def train_unseen(volume: str | None, ds: plan.DataSet) -> str:
    """What a train job that nothing in the bucket shows may be doing: read from a storage
    prefix, its log arrives when it ends (never from a killed pod), and its checkpoints
    and failure record are not in the bucket (`volume`: gpu_jobs.resume_dir, else the
    pod's disk)."""
    if volume:
        folder = plan.train_resume(volume, ds.name)
        where = f"on the pods' volume ({folder}, {record_path(folder)}), which this host cannot read"
    else:
        where = "on its pod's disk"
    return (
        "waiting as far as the bucket shows: its log reaches the bucket when it ends, never where its pod was killed "
        f"first (out of memory, evicted, its node lost), and its checkpoints and failure record lie {where}"
    )


def query_stages(
    cfg: dict, ds: plan.DataSet, stages: dict[str, str], wildcards: dict, on_cpu: Iterable[str], resume: dict
) -> list[Stage]:
    """The one-job GPU stages `stages` of data set `ds` (RETRIEVAL_STAGES, SEARCH_STAGES),
    each job's files its rule's patterns with `wildcards`, judged as a chunk job is
    (`classify`, its failure record beside its log, its record `_stats`). The first embeds
    the queries by the embed rule's script (embed_queries, embed_search_queries), which
    keeps its resume parts under the data set's resume root, named by its output; the
    search after it keeps none (a killed search starts again). Their records are the
    queries: the embed job's stats (`items`), else the count its parts' manifest holds;
    the search's record (its key in `stages`), else the queries the embed job embeds.
    `on_cpu`: the GPU rules that run on the CPU; the others' jobs hold
    resources.<rule>.gpu GPUs (plan.job_gpus)."""
    out, queries = [], None
    for i, (name, count) in enumerate(stages.items()):
        rule, record = STAGE_RULES[name]
        outputs, log, bench = rule_files(rule).of(wildcards)
        job = Job("", outputs, log, bench, queries)
        classify(job, resume if i == 0 else {}, record_path(log) if log else None)
        error = _stats(job, record, count) if job.state == DONE else None
        queries = job.records
        gpus = 0 if rule in on_cpu else plan.job_gpus(cfg, rule)
        stage = Stage(ds.name, name, [job], gpus, unit="queries", notes=[error] if error else [])
        if i == 0:
            stage.records_from = "the queries are counted from its resume parts once it has started"
        else:
            stage.saves_parts = False
            if job.state != DONE:
                stage.notes.append("time left not estimated: the search saves no parts to measure its rate by")
        out.append(stage)
    return out


# The rule of a sweep stage's chunk jobs (rules/sweep.smk), whose parts show a sweep job
# stalled as a data set's chunk jobs do. A train sweep keeps checkpoints, as train does,
# and a retrieval sweep's embed jobs are its shared embeddings' (shardflow.sweep.shared),
# no point's own: neither is judged.
SWEEP_CHUNK_RULES = estimate.SWEEP_CHUNK_RULES


def sweep_stage(
    spec, cfg: dict, per_chunk: list[int | None] | None = None, n_chunks: int = 0, now: float | None = None
) -> Stage:
    """A sweep's jobs (points x seeds), counted: done where its metrics JSON exists,
    failed where its log folder holds a failure record, or, for a train sweep, where its
    train job's resume folder does (train.failure.json: plan.sweep_train_resume, as
    rules/common.smk passes it), or a log there ends on core.runlog's failed line (an
    out-of-memory error, as a chunk job's), running where its log folder holds a log,
    and stalled where one of its chunk jobs is (`judge_sweep_chunks`: the main data set's
    `n_chunks` chunks, of `per_chunk` records)."""
    resume_dir = cfg["gpu_jobs"]["resume_dir"]
    jobs = []
    for pid, seed in spec.jobs():
        logs = expand(smk_constant("SWEEP_LOG"), {"sweep": spec.folder, "point": pid, "seed": seed})
        name = job_dir(spec.folder, pid, seed)
        job = Job(name, {"metrics": job_metrics(spec.stage, spec.folder, pid, seed)}, logs, None)
        listed = sorted(os.listdir(logs)) if os.path.isdir(logs) else []
        records = [Path(logs, n) for n in listed if n.endswith(".failure.json")]
        if spec.stage == "train":
            records.append(record_path(plan.sweep_train_resume(resume_dir, name)))
        if os.path.exists(job.outputs["metrics"]):
            job.state = DONE
        else:
            failed = next(filter(None, map(failure_record, records)), None)
            logged = (str(Path(logs, n)) for n in listed if n.endswith(".log"))
            if failed is None and (ended := next(((e, p) for p in logged if (e := log_error(p))), None)):
                failed = ended
                job.log = ended[1]  # the job's log, named as a chunk job's is
            if failed:
                job.state, (job.error, job.error_file) = FAILED_STATE, failed
            elif os.path.isdir(logs):
                job.state = RUNNING
        jobs.append(job)
    stage = Stage(spec.name, f"sweep ({spec.stage})", jobs, 0, sweep=True)
    if spec.stage in SWEEP_CHUNK_RULES and n_chunks:
        judge_sweep_chunks(stage, spec, cfg, per_chunk, n_chunks, time.time() if now is None else now)
    return stage


def judge_sweep_chunks(stage: Stage, spec, cfg: dict, per_chunk: list[int | None] | None, n_chunks: int, now: float):
    """The chunk jobs of each running sweep job, found and judged as a data set's are
    (their rule's files, `classify`; `measure` and `mark_stalled` over all of the sweep's
    chunk jobs, for one typical part interval): a sweep job with a stalled chunk job is
    stalled, and one with a running chunk job shows its parts and log."""
    rule = SWEEP_CHUNK_RULES[spec.stage]
    files = rule_files(rule)
    own: dict[int, list[Job]] = {}
    for k, ((pid, seed), job) in enumerate(zip(spec.jobs(), stage.jobs, strict=True)):
        if job.state != RUNNING:
            continue
        wildcards = {"sweep": spec.folder, "point": pid, "seed": seed}
        resume, _, unreadable = scan_resume(plan.sweep_resume_root(cfg["gpu_jobs"]["resume_dir"], job.name))
        stage.notes += [f"resume folder {u} not readable: its parts are not counted" for u in unreadable]
        deleted = deleted_temp(cfg, rule, wildcards)
        own[k] = []
        for i in range(n_chunks):
            outputs, log, bench = files.of({**wildcards, "chunk": i})
            chunk = Job(f"chunk {i}", outputs, log, bench, per_chunk[i] if per_chunk else None)
            classify(chunk, resume, record_path(log) if log else None, deleted)
            if chunk.state == DONE and (error := _stats(chunk, "stats")):
                stage.notes.append(error)
            own[k].append(chunk)
    chunks = Stage(stage.dataset, spec.stage, [c for cs in own.values() for c in cs], 0)
    measure(chunks)
    mark_stalled(chunks, now)
    stage.part_interval = chunks.part_interval
    for k, cs in own.items():
        shown = next((c for c in cs if c.state == STALLED), None) or next((c for c in cs if c.state == RUNNING), None)
        if shown is not None:
            job = stage.jobs[k]
            job.state, job.log, job.folder, job.attempts = shown.state, shown.log, shown.folder, shown.attempts
            job.records, job.records_done, job.last_activity = shown.records, shown.records_done, shown.last_activity


# ------------------------------------------------------------------------ run


@dataclass
class Status:
    stages: list[Stage]
    n_gpus: int
    gpus_source: str
    price: float
    currency: str
    time: float
    notes: list[str] = field(default_factory=list)
    source: str = "the files here"  # where status read the run: here, or a storage prefix
    stopped: list[str] = field(default_factory=list)  # the logs of the Snakemake runs that stopped (killed)


def s3_notes(cfg: dict, data_sets: list[plan.DataSet], seen_anything: bool) -> list[str]:
    """What to say where the run's files may be in S3 and no --storage-prefix was given."""
    remote = [p for ds in data_sets for p in ds.sources if p.startswith("s3://")]
    bucket = os.environ.get("SHARDFLOW_S3_BUCKET")
    where = f"s3://{bucket}/{os.environ.get('SHARDFLOW_S3_PREFIX', '')}".rstrip("/") if bucket else ""
    if not (remote or where or not seen_anything):
        return []
    why = []
    if remote:
        why.append(f"the input is in S3 ({remote[0]})")
    if where:
        why.append(f"SHARDFLOW_S3_BUCKET is set (the eks profile's storage: {where})")
    if not seen_anything:
        why.append("no output, log or resume folder of this run is here")
    example = where or "s3://<bucket>/<prefix>"
    return [
        f"status read local files only ({'; '.join(why)}): a run with S3 as its default storage (profiles/eks) "
        "keeps its outputs, logs and resume parts under the storage prefix, which this status did not read. "
        f"Give that prefix: `make status STORAGE={example}` (--storage-prefix; S3 settings as the run's: "
        "SNAKEMAKE_STORAGE_S3_*, else boto3's own chain)"
    ]


def stopped_note(run: SnakemakeRun, stages: list[Stage]) -> str:
    """What to say of a Snakemake run that has stopped (SnakemakeLogs.stopped), and what
    to do: unlock where its locks remain (Snakemake refuses to run until then), and run
    the same command again."""
    jobs = [j for s in stages for j in s.jobs if j.stopped_run == run.path]
    locks = Path(run.path).parent.parent / "locks"
    locked = locks.is_dir() and any(locks.iterdir())
    remote = any(not local for local in run.local.values())
    return (
        f"Snakemake has stopped: its run {run.path} logged no end, and no Snakemake process on this host "
        f"({run.host}, where it ran) holds that log open, so it was killed (SIGKILL, a closed terminal or lost "
        f"session, a power loss). Nothing retries or records the {len(jobs)} job(s) it left (shown stalled, or "
        "failed where a retry was due)"
        + ("; jobs it sent to the cluster may still run there (squeue --me, kubectl get jobs)" if remote else "")
        + ". To go on: "
        + (f"`snakemake --unlock` with the run's options (its locks remain in {locks}), then " if locked else "")
        + "the same command again (the profiles set rerun-incomplete, which reruns the jobs it left "
        "incomplete; without a profile add --rerun-incomplete)"
    )


def ran_on_cpu(stage: Stage) -> bool:
    """Whether the stage's jobs ran on the CPU, as their own records say: the finished
    jobs' stats and the attempts' records (core.parts) name their device. Status may run
    on another host than the jobs (a SLURM login node without GPUs), so this host's GPUs
    say nothing of theirs; no record yet: not on the CPU (gpu_jobs.device decides)."""
    devices = [j.stats.get("device") for j in stage.jobs if j.stats] + [
        a.get("device") for j in stage.jobs for a in j.attempts
    ]
    kinds = {estimate.device_kind(d) for d in devices if d}
    return kinds == {"cpu"}


def changed_models(cfg: dict, data_sets: list[plan.DataSet], specs: dict) -> list[str]:
    """What the parse warns of, or stops on, for a model changed in place since done jobs
    that load it ran (plan.changed_model: their outputs are the former model's, and
    Snakemake reruns none of them for it), one note per model: so a status that counts
    those jobs done says so. The jobs are plan.model_jobs', the parse's, the retrieval
    sweeps' shared embedding sets included; their stats files the rules' own patterns
    (rule_files, which reads rules/common.smk shared_embeddings through
    shardflow.sweep.shared.set_folder, as the rules build them). A pattern status cannot
    read stops it, naming the rule, rather than leaving its jobs unchecked. Not with
    SHARDFLOW_SKIP_MODEL_CHECK=1, as the parse."""
    if os.environ.get("SHARDFLOW_SKIP_MODEL_CHECK", "") not in ("", "0"):
        return []
    retrieval = next((ds for ds in data_sets if ds.role == "retrieval"), None)
    shared = plan.retrieval_sweep_embeddings(cfg, data_sets, specs.values())
    jobs = plan.model_jobs(cfg, data_sets, specs.values(), shared)
    names = {"RETRIEVAL": retrieval.name} if retrieval is not None else {}

    def stats(key: str, name: str):
        for rule, wildcards in jobs[(key, name)]:
            pattern = rule_files(rule).outputs.get("stats")
            if pattern is not None:
                yield rule, expand(pattern, {**names, **wildcards})

    changed = [plan.changed_model(key, name, stats(key, name)) for key, name in jobs]
    errors, warnings = plan.changed_model_verdicts(c for c in changed if c is not None)
    return errors + warnings


def status(
    cfg: dict, n_gpus: int, gpus_source: str, now: float | None = None, storage: mirror.Mirrored | None = None
) -> Status:
    """Where the run of `cfg` (validated) stands, from the files in the working directory;
    `n_gpus`: the concurrency of the time left. A GPU rule is on the CPU where the config
    puts it there (plan.gpu_rules_on_cpu: gpu_jobs.device cpu, ...) or where its jobs'
    records say they ran there (`ran_on_cpu`), never from this host's GPUs.
    `storage`: the working directory is the local copy of a run's storage prefix
    (shardflow.workflow.mirror; `--storage-prefix`), which a note names."""
    now = time.time() if now is None else now
    data_sets = list(plan.datasets(cfg, list_s3=plan.unlisted).values())
    specs = estimate.sweeps(cfg)
    on_cpu = plan.gpu_rules_on_cpu(cfg, data_sets, specs.values())
    out = Status([], n_gpus, gpus_source, cfg["report"]["gpu_hour_price"], cfg["report"]["currency"], now)
    retries = SnakemakeLogs(controller_logs(), storage.prefix if storage is not None else "")
    resume_dir = cfg["gpu_jobs"]["resume_dir"]
    volume = resume_dir if resume_dir and not resume_dir.startswith("s3://") else None

    def judge(stage: Stage) -> None:
        """What the Snakemake runs and, read from a storage prefix, the jobs' logs say."""
        if storage is not None:
            mark_logged_records(stage, volume)
        mark_retrying(stage, retries)
        mark_stopped(stage, retries)

    seen = False
    for ds in data_sets:
        stages = estimate.gpu_stages(cfg, ds, specs.values())
        if not stages and not {"retrieval", "search"} & set(ds.tasks):
            continue
        root = plan.resume_root(cfg["gpu_jobs"]["resume_dir"], ds.name)
        if storage is not None and cfg["gpu_jobs"]["resume_dir"] and not root.startswith("s3://"):
            out.notes.append(
                f"the resume parts in {root} (gpu_jobs.resume_dir, a volume of the run's pods) are not under the "
                "storage prefix, and this host cannot read them: a running job shows as waiting until it ends and its "
                "pod stores its log in the bucket, and one whose pod was killed first (out of memory, evicted, its "
                "node lost) stores no log and stays waiting"
            )
        elif root.startswith("s3://"):
            out.notes.append(
                f"the resume parts in {root} are not read (status reads them on this host, or under the "
                "--storage-prefix it is given)"
            )
        resume, anonymous, unreadable = scan_resume(root)
        out.notes += [f"resume folder {u} not readable: its parts are not counted" for u in unreadable]
        seen = seen or bool(resume or anonymous or unreadable)
        split, why = estimate.split_manifest(ds)
        if split is None and why:
            out.notes.append(why)
        per_chunk = chunk_records(ds, split)
        built = []
        for name in stages:
            rule = STAGE_RULES[name][0]
            gpus = 0 if rule in on_cpu else plan.train_gpus(cfg) if name == "train" else plan.job_gpus(cfg, rule)
            if name == "train":
                stage = train_stage(cfg, ds, gpus)
                if storage is not None and stage.jobs[0].state == WAITING:
                    stage.notes.append(train_unseen(volume, ds))
            else:
                deleted = deleted_temp(cfg, STAGE_RULES[name][0], {"dataset": ds.name})
                stage = chunk_stage(ds, name, gpus, resume, per_chunk, deleted)
            built.append(stage)
        if "neighbours" in ds.tasks:  # after its corpus's embed jobs, a search a chunk
            gpus = 0 if "neighbours" in on_cpu else plan.job_gpus(cfg, "neighbours")
            built.append(chunk_stage(ds, "neighbours", gpus, resume, per_chunk))
        if "retrieval" in ds.tasks:  # after its corpus's embed jobs
            built += query_stages(cfg, ds, RETRIEVAL_STAGES, {"RETRIEVAL": ds.name}, on_cpu, resume)
        if "search" in ds.tasks:  # after its corpus's embed, merge and verify
            built += query_stages(cfg, ds, SEARCH_STAGES, {"dataset": ds.name}, on_cpu, resume)
        for stage in built:
            if stage.gpus and ran_on_cpu(stage):
                stage.gpus = 0
                stage.notes.append("on the CPU: its jobs' records say they ran there")
            judge(stage)
            out.stages.append(finish(stage, n_gpus, out.price, now))
            seen = seen or any(j.state != WAITING for j in stage.jobs)
        if anonymous:
            out.notes.append(
                f"{len(anonymous)} resume folder(s) under {root} name no job (written before attempt records named "
                "it): their parts are not counted"
            )
    # Embed and summarise sweeps run on the main data set's chunks (rules/sweep.smk).
    main = next((ds for ds in data_sets if ds.role == "main"), None)
    main_chunks = chunk_records(main, estimate.split_manifest(main)[0]) if main and specs else None
    for spec in specs.values():
        stage = sweep_stage(spec, cfg, main_chunks, main.n_chunks if main else 0, now)
        judge(stage)
        seen = seen or any(j.state != WAITING for j in stage.jobs)
        out.stages.append(stage)
    stopped = sorted({j.stopped_run for s in out.stages for j in s.jobs if j.stopped_run})
    out.stopped = stopped
    out.notes[:0] = [stopped_note(retries.run(path), out.stages) for path in stopped]
    if storage is not None:
        out.source = f"the files under {storage.prefix} (a local copy)"
        out.notes.append(storage.note())
    else:
        out.notes += s3_notes(cfg, data_sets, seen)
        out.notes += changed_models(cfg, data_sets, specs)
    return out


# --------------------------------------------------------------------- output


# The units of a count `compact` prints, each 1,000 of the one before: a train stage's
# tokens run to trillions.
COUNT_UNITS = ((1e3, "k"), (1e6, "M"), (1e9, "B"), (1e12, "T"))


def compact(n: float | None) -> str:
    """1,234; 12.3k; 8.1M; 2.5T; a fraction under 10 (a rate: 0.4 records/s per job) to
    two significant digits, not rounded to a whole number (0). A count goes in the first
    unit its rounded value is under 1,000 of (999,950 is 1.0M, not 1000.0k), past T in T."""
    if n is None:
        return "?"
    if abs(n) < 10 and n != int(n):
        return significant(n)
    if abs(float(f"{n:.0f}")) < 10_000:
        return f"{n:,.0f}"
    for div, unit in COUNT_UNITS:
        shown = f"{n / div:.1f}"
        if abs(float(shown)) < 1000 or unit == COUNT_UNITS[-1][1]:
            return shown + unit
    raise AssertionError


def _ago(seconds: float) -> str:
    return estimate.duration(max(0.0, seconds))


def stage_rate(stage: Stage) -> float | None:
    """The stage's records per second with its jobs at once (for the jobs left)."""
    if not stage.rate or not stage.slots:
        return None
    busy = min(stage.slots, max(1, sum(1 for j in stage.jobs if j.state != DONE)))
    return stage.rate * busy


def stage_line(stage: Stage, currency: str) -> str:
    total = len(stage.jobs)
    line = f"{stage.label}: {stage.count(DONE)}/{total} jobs"
    bad = [f"{stage.count(s)} {s}" for s in (STALLED, FAILED_STATE, RETRYING) if stage.count(s)]
    if stage.sweep:
        return line + (f"; {', '.join(bad)}" if bad else "")
    line += f", {compact(stage.records_done)}/{compact(stage.records_total)} {stage.unit}"
    rate = stage_rate(stage)
    if rate and stage.count(DONE) < total:
        line += f", {compact(rate)} {stage.unit}/s"
    if stage.count(DONE) == total:
        line += ", finished"
    elif stage.left_s is not None:
        line += f", about {estimate.duration(stage.left_s)} left"
    if stage.gpu_hours is None and (stage.count(RUNNING) or stage.count(STALLED)):
        line += "; GPU-h and cost not known while it trains"
    elif stage.gpu_hours is None:
        line += "; GPU-h and cost not known until it finishes (its attempts' time is in its checkpoint)"
    else:
        line += f"; {estimate.gpu_hours(stage.gpu_hours)} GPU-h, {money(stage.cost)} {currency} so far"
    if stage.left_gpu_hours and stage.count(DONE) < total:
        line += (
            f", about {estimate.gpu_hours(stage.left_gpu_hours)} GPU-h, {money(stage.left_cost)} {currency} to finish"
        )
    return line + (f"; {', '.join(bad)}" if bad else "")


def total_line(st: Status) -> str:
    if not st.stages:
        return "no GPU stage in this run"
    stopped = " | Snakemake has stopped (killed): nothing runs these jobs until you rerun it" if st.stopped else ""
    return " | ".join(stage_line(s, st.currency) for s in st.stages) + stopped


def _job_line(stage: Stage, job: Job, now: float) -> str:
    who = f"{stage.label}{' ' + job.name if job.name else ''}"
    if job.state == FAILED_STATE:
        if job.stopped_run:
            return (
                f"{who}: failed: {job.error} (log {job.log}); the Snakemake run that would retry it "
                f"({job.stopped_run}) has stopped: a rerun runs it"
            )
        if job.record:
            return f"{who}: failed: {job.error} (log {job.log}): {_recorded(job)}"
        if job.error_file == job.log:
            return f"{who}: failed: {job.error} (log {job.log})"
        return (
            f"{who}: failed: {job.error} (log {job.log}; {job.error_file}: an input or config error, fix it and rerun)"
        )
    if job.state == RETRYING:
        which = f"attempt {job.attempt}" if job.attempt else "its last attempt"
        again = f"attempt {job.attempt + 1}" if job.attempt else "it again"
        return (
            f"{who}: retrying: {which} failed: {job.error} (log {job.log}); Snakemake runs {again} "
            f"({job.retry_log}; should that Snakemake have stopped, rerun)"
        ) + (f"; {_recorded(job, retrying=True)}" if job.record else "")
    parts = (
        f"{compact(job.records_done)}/{compact(job.records)} {stage.unit} in parts ({job.folder})" if job.folder else ""
    )
    since = _ago(now - job.last_activity) if job.last_activity else "?"
    if job.state == STALLED and job.stopped_run:
        kept = "checkpoints" if stage.unit == "tokens" else "parts"
        return (
            f"{who}: stopped: the Snakemake run that started it ({job.stopped_run}) has stopped, so no Snakemake "
            f"records its outputs, and a process of it still running here stops without them; "
            f"{parts or f'log {job.log} written {since} ago'}. A rerun resumes from its {kept}"
        )
    if job.state == STALLED:
        typical = f"a part every {estimate.duration(stage.part_interval)} is typical" if stage.part_interval else ""
        return (
            f"{who}: no progress for {since} ({typical}); {parts or 'no part yet'}. Its process may be gone (killed, "
            "preempted, its node lost); a rerun resumes from its parts"
            + (f"; log {job.log}" if job.log and os.path.isfile(job.log) else "")  # a killed pod's never reached S3
        )
    if stage.unit == "tokens":
        return (
            f"{who}: running; training keeps checkpoints, not parts, so how far it got is in its log "
            f"{job.log} (written {since} ago); a stop shows here only where its Snakemake, on this host, was killed"
        )
    if job.folder and job.attempts and job.records_done:
        return f"{who}: running, {parts}, last part {since} ago"
    if not stage.saves_parts:
        return f"{who}: running (it saves no parts: a rerun searches again), log {job.log} written {since} ago"
    return f"{who}: running, no part yet, log {job.log} written {since} ago"


def table(st: Status) -> str:
    head = (
        "data set",
        "stage",
        "jobs",
        "done",
        "running",
        "stalled",
        "failed",
        "retrying",
        "waiting",
        "work",
        "rate/s",
        "left",
        "GPU-h",
        "cost",
    )
    body = []
    for s in st.stages:
        work = "-" if s.sweep else f"{compact(s.records_done)}/{compact(s.records_total)} {s.unit}"
        rate = stage_rate(s)
        finished = s.count(DONE) == len(s.jobs)
        left = "-" if s.sweep else ("done" if finished else ("?" if s.left_s is None else estimate.duration(s.left_s)))
        counts = [str(s.count(state)) for state in STATES]
        if s.sweep or s.gpu_hours is None:
            gpu_h = "-"
        else:
            gpu_h = "0 (CPU)" if s.gpus == 0 and not s.gpu_hours else estimate.gpu_hours(s.gpu_hours)
        body.append(
            (
                s.dataset,
                s.stage,
                str(len(s.jobs)),
                *counts,
                work,
                "-" if rate is None or finished else compact(rate),
                left,
                gpu_h,
                "-" if s.sweep or s.cost is None else money(s.cost),
            )
        )
    widths = [max(len(row[i]) for row in (head, *body)) for i in range(len(head))]
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(st.time))
    lines = [
        f"status at {stamp}, from {st.source} (outputs, logs, resume folders); runs no job",
        f"concurrency for the time left: {st.n_gpus} GPU(s) ({st.gpus_source}); a stage on the CPU: its jobs "
        f"running now; price: {st.price:g} {st.currency} per GPU-hour (report.gpu_hour_price)",
        "",
        "  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip(),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in body]
    details = []
    for s in st.stages:
        if s.rate_source:
            details.append(f"{s.label}: rate {s.rate_source}")
        if s.left_s and s.slots:
            rest = len(s.jobs) - s.count(DONE)
            details.append(
                f"{s.label}: time left: its {rest} job(s) not done (failed and stalled ones too: a rerun runs "
                f"them), longest first, {s.slots} at once"
            )
        details += [f"{s.label}: {n}" for n in s.notes]
        for state in (FAILED_STATE, RETRYING, STALLED, RUNNING):
            jobs = [j for j in s.jobs if j.state == state]
            details += [_job_line(s, j, st.time) for j in jobs[:SHOWN]]
            if len(jobs) > SHOWN:
                details.append(f"{s.label}: ... {len(jobs) - SHOWN} more {state} (--json lists them)")
    details += st.notes
    if details:
        lines += ["", *[f"  {d}" for d in details]]
    lines += ["", total_line(st)]
    return "\n".join(lines)


def as_json(st: Status) -> dict:
    def job(j: Job) -> dict:
        return {
            "name": j.name,
            "state": j.state,
            "output": next(iter(j.outputs.values()), None),
            "log": j.log,
            "records": j.records,
            "records_done": j.records_done,
            "last_activity": j.last_activity,
            "resume_folder": j.folder or None,
            "error": j.error or None,
            "error_file": j.error_file or None,
            "failed_attempt": j.attempt if j.state == RETRYING else None,
            "retry_log": j.retry_log or None,
            "stopped_run": j.stopped_run or None,
            "failure_record": j.record or None,
            "failure_record_on": j.record_on or None,
        }

    def stage(s: Stage) -> dict:
        return {
            "dataset": s.dataset,
            "stage": s.stage,
            "jobs": len(s.jobs),
            **{state: s.count(state) for state in STATES},
            "unit": s.unit,
            "records_done": None if s.sweep else s.records_done,
            "records_total": s.records_total,
            "rate_per_job": s.rate,
            "rate": stage_rate(s),
            "jobs_at_once": s.slots,
            "left_s": s.left_s,
            "left_gpu_hours": None if s.sweep else s.left_gpu_hours,
            "left_cost": None if s.sweep else s.left_cost,
            "gpus_per_job": s.gpus,
            "gpu_hours": None if s.sweep else s.gpu_hours,
            "cost": None if s.sweep else s.cost,
            "part_interval_s": s.part_interval,
            "notes": s.notes,
            "summary": stage_line(s, st.currency),
            "not_done": [job(j) for j in s.jobs if j.state not in (DONE, WAITING)],
        }

    return {
        "format": "shardflow.status/1",
        "time": st.time,
        "gpus": st.n_gpus,
        "gpus_source": st.gpus_source,
        "gpu_hour_price": st.price,
        "currency": st.currency,
        "stages": [stage(s) for s in st.stages],
        "notes": st.notes,
        "stopped_runs": st.stopped,
        "total": total_line(st),
    }

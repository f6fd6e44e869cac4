"""Site values a profile takes from the environment, checked before anything runs.

Snakemake expands `$NAME` in profile values and leaves an unset one literal: the eks
profile's bucket then fails deep in the storage plugin (an exception group about an
invalid bucket name "$SHARDFLOW_S3_BUCKET") and an unset image only in the kubelet.
`site_env` reads a profile's required variables in one go and stops with one line
naming every unset one; `unexpanded` finds literal `$NAME`s left in settings that
came from any profile (the workflow checks its storage prefix and default
resources with it at parse time). `gpu_request_warnings` names the profile values that
get a GPU, or a GPU node, for jobs that use none, as the executor plugins read them.
`snakemake_arguments` reads the run's settings as Snakemake's own parser makes them,
profiles applied, which the workflow otherwise gets only after the parse: what a run
forces (`forced_rules`) and what a profile's `config:` loses to a later `--config`
(`profile_config`).
"""

from __future__ import annotations

import ast
import contextlib
import io
import os
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

_VARIABLE = re.compile(r"\$(?:\{(\w+)\}|(\w+))")


def missing(names, environ: Mapping[str, str] | None = None) -> list[str]:
    """The names among `names` that are unset or empty in the environment."""
    env = os.environ if environ is None else environ
    return [n for n in names if not env.get(n)]


def site_env(profile: str, *names: str, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """{name: value} for a profile's required variables; exits with one line naming
    the unset ones (a SystemExit passes through Snakemake's profile templating)."""
    env = os.environ if environ is None else environ
    unset = missing(names, env)
    if unset:
        sys.exit(
            f"profile {profile}: set the environment variable{'s' if len(unset) > 1 else ''} "
            f"{', '.join(unset)} (profiles/README.md, '{profile}')"
        )
    return {n: env[n] for n in names}


def unexpanded(settings: Mapping[str, object], environ: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """{setting: [NAME, ...]} for string settings that still hold a literal `$NAME`
    whose variable is unset, i.e. a profile value Snakemake could not expand."""
    env = os.environ if environ is None else environ
    found: dict[str, list[str]] = {}
    for key, value in settings.items():
        if not isinstance(value, str):
            continue
        names = [a or b for a, b in _VARIABLE.findall(value)]
        unset = [n for n in dict.fromkeys(names) if n not in env]
        if unset:
            found[key] = unset
    return found


def unexpanded_message(found: Mapping[str, list[str]]) -> str:
    names = list(dict.fromkeys(n for ns in found.values() for n in ns))
    where = "; ".join(f"{key} uses ${', $'.join(ns)}" for key, ns in found.items())
    return f"unset environment variable{'s' if len(names) > 1 else ''} {', '.join(names)} in the profile ({where})"


# What the installed executor plugins make of the resources that can get a job a GPU:
# the SLURM plugin's sbatch (snakemake-executor-plugin-slurm 2.8, utils.set_gres_string:
# a `gres` naming gpu, a `gpu_model`, a `gpu`), its job step's srun inside the allocation
# (snakemake-executor-plugin-slurm-jobstep 0.6.1, get_gpu_setting: the first of `gpus`,
# `gpu`, `nvidia_gpu` that the job has) and the Kubernetes plugin's pod (0.5.1: `gpu`
# alone; it ignores the others). That plugin keys on `gpu` being there: at any value, 0
# included, the pod gets the toleration of the job's `gpu_manufacturer` (nvidia or amd:
# nvidia.com/gpu=present:NoSchedule) and a request of that many GPUs, and a job with a
# `gpu` but no manufacturer is refused at submission. Only that plugin reads
# `gpu_manufacturer`; the executor itself is not known while the Snakefile is parsed
# (Snakemake hands it to the workflow afterwards), so a `gpu` of 0 is named where the
# job has a manufacturer (without one, Kubernetes refuses the job: no silent toleration).
_STEP_GPUS = ("gpus", "gpu", "nvidia_gpu")
GPU_KEYS = ("gres", "gpu_model", "gpu", "gpus", "nvidia_gpu", "gpu_manufacturer")  # what gpu_asks reads

# The names that hold the job's values where Snakemake evaluates a profile's resource
# expression (snakemake.resources.Resource.cli_evaluator, Snakemake 9.27).
_JOB_NAMES = frozenset({"wildcards", "input", "attempt", "threads"})


def known_value(resource, rule: str | None = None) -> tuple[object, bool]:
    """(value, True) for a profile's resource value as every job of `rule` gets it, where
    the parse can know it; (None, False) where it cannot.

    Snakemake keeps a profile's resource value as a `Resource`: an integer as it is, any
    other text as an expression, evaluated per job with `$VARIABLES` expanded, where text
    that is no expression (`a100`, `gpu:1`) stays text. A YTE `?expression` in a profile
    is evaluated when the profile is read, so the parse gets its result. Here an
    expression that reads none of the job's values (_JOB_NAMES) is evaluated as Snakemake
    will evaluate it; one that does (`1 if attempt > 1 else 0`), one that fails and a
    function (the Python API's) are not known. A plain value (no `Resource`) is as given."""
    if not hasattr(resource, "is_evaluable"):
        return resource, True
    if not resource.is_evaluable():
        return resource.value, True
    value = _every_jobs(resource, rule)
    if value is None or value.is_evaluable() or not isinstance(value.value, (int, str)):
        return None, False
    return value.value, True


def _text(resource) -> str:
    """A profile's resource text as Snakemake evaluates it: `$VARIABLES` and `~` expanded."""
    return os.path.expanduser(os.path.expandvars(resource.raw))


def _every_jobs(resource, rule: str | None = None):
    """The `Resource` Snakemake makes, for every job of `rule`, of a profile's text that
    it evaluates (`resource.is_evaluable()`); None where that depends on the job (the text
    reads _JOB_NAMES), fails, or is no text (a function, the Python API's)."""
    if not isinstance(resource.raw, str):
        return None
    text = _text(resource)
    try:
        names = {node.id for node in ast.walk(ast.parse(text, mode="eval")) if isinstance(node, ast.Name)}
    except SyntaxError:
        names = set()  # Snakemake takes it as text
    if names & _JOB_NAMES:
        return None
    try:
        return resource.evaluate(None, input=(), attempt=1, threads=1, rulename=rule, async_run=None)
    except Exception:
        return None


def read_as_functions(settings: Mapping[str, object]) -> dict[str, tuple[str, str]]:
    """{setting: (text as given, text as evaluated)} for each profile resource value whose
    text Python reads as a function: a name such as `all`, `open` or `max` (a partition,
    an account) is a built-in there, and Snakemake 9.27 evaluates a profile's resource
    text as Python for every job, keeping the text only where that fails. Such a value is
    never a job's (`Resource.value` refuses it: "Resource must be evaluated within the
    context of a rule", naming neither the setting nor the job), so no job starts.
    `settings`: {name: `Resource`}, as rules/common.smk names them."""
    found = {}
    for key, resource in settings.items():
        if not hasattr(resource, "is_evaluable") or not resource.is_evaluable():
            continue
        value = _every_jobs(resource)
        if value is not None and value.is_evaluable():
            found[key] = (resource.raw, _text(resource))
    return found


def read_as_functions_message(found: Mapping[str, tuple[str, str]]) -> str:
    where = "; ".join(f"{key}={raw}" + (f" ({text})" if text != raw else "") for key, (raw, text) in found.items())
    # the key's name: `default-resources <name>` or `set-resources <rule>:<name>`
    quoted = ", ".join(f"{key.rpartition(' ')[2].rpartition(':')[2]}: \"'{raw}'\"" for key, (raw, _) in found.items())
    many = len(found) > 1
    return (
        f"profile resource value{'s' if many else ''} that Snakemake reads as Python function{'s' if many else ''}, "
        f"which no job can be given: {where}. Snakemake evaluates a profile's resource text as Python for every job, "
        f"and keeps it as text only where that fails; quote {'each' if many else 'it'} to make it text: {quoted} "
        "(profiles/README.md, slurm)"
    )


def _count(value) -> int | None:
    """A GPU count: an integer (the SLURM job step refuses any other)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def gpu_asks(resources: Mapping[str, object]) -> dict[str, str]:
    """{name: what the plugins ask for} for each resource among `resources` (a job's, as
    plain values) that gets the job a GPU, or a GPU node, as the plugins read them
    (above). A `gpu` of 0 asks for nothing but the Kubernetes toleration, where the job
    has a gpu_manufacturer; a count the job step reads after another one, for nothing."""
    asks = {}
    gres, model, gpu = resources.get("gres"), resources.get("gpu_model"), resources.get("gpu")
    if gres and "gpu" in str(gres).lower():
        asks["gres"] = f"the SLURM plugin asks sbatch for --gres={gres}"
    if model:  # a job without `gpu` counts 1
        asks["gpu_model"] = f"the SLURM plugin asks sbatch for --gpus={model}:{1 if gpu is None else gpu}"
    count = _count(gpu)
    manufacturer = str(resources.get("gpu_manufacturer") or "").lower()
    if count:
        asks["gpu"] = (
            f"the SLURM plugin asks sbatch for --gpus={f'{model}:' if model else ''}{count} "
            f"and the Kubernetes plugin requests {count} GPU{'s' if count > 1 else ''} for its pod"
        )
    elif count == 0 and manufacturer in ("nvidia", "amd"):
        asks["gpu"] = (
            f"the Kubernetes plugin gives its pod the {manufacturer}.com/gpu toleration (a GPU node may take it) "
            "and a request of 0 GPUs"
        )
    step = next((name for name in _STEP_GPUS if resources.get(name) is not None), None)
    count = _count(resources.get(step))
    if step in ("gpus", "nvidia_gpu") and count:
        asks[step] = f"the SLURM plugin's job step runs it with srun --gpus={count} (sbatch gets no GPU from {step})"
    return asks


def gpu_request_warnings(
    set_resources: Mapping[str, Mapping[str, object]],
    on_cpu: Mapping[str, str],
    cpu_rules: Iterable[str] = (),
    gpu_rules: Iterable[str] = (),
    default_resources: Mapping[str, object] | None = None,
    gpu: Mapping[str, int] | None = None,
) -> list[str]:
    """One line per profile value that gets a GPU, or a GPU node, for jobs that use none,
    naming the rule (or rules), key and value, what the executor plugins make of it and
    what to change; and one per value the parse cannot know (known_value), as not checked.

    Checked: every set-resources value of the GPU rules in `on_cpu` ({rule: why its jobs
    run on the CPU in this run}) and of `cpu_rules` (plan.cpu_rules); a set-resources
    `gpu` of 0 given to one of `gpu_rules` (the other GPU rules), which makes its jobs CPU
    jobs; and each default-resources value, for the jobs of those rules it reaches: those
    without the key in set-resources, and for `gpu` the CPU rules alone (a GPU rule sets
    its own, none where its jobs run on the CPU). `gpu` ({rule: count}, plan.GPU_ON_CPU)
    is the `gpu` a GPU rule's jobs keep on the CPU, train's 0 (its shell command hands the
    count to the launcher): with a gpu_manufacturer from the profile, that 0 gets their
    pods the Kubernetes toleration, named unless the rule's pods are pinned to an
    instance type (a machine_type, which the parse cannot tell from a GPU type)."""
    cpu_rules = [rule for rule in cpu_rules if rule not in on_cpu]
    gpu_rules = [rule for rule in gpu_rules if rule not in on_cpu and rule not in cpu_rules]
    why = {
        **{rule: (reason, "leave it out of the profile for this run") for rule, reason in on_cpu.items()},
        **dict.fromkeys(cpu_rules, ("not a GPU rule", "take it out of the profile")),
        **dict.fromkeys(gpu_rules, ("its gpu is 0", "take it out (gpu_jobs.device cpu runs the GPU rules on the CPU)")),
    }
    own_gpu = {rule: count for rule, count in (gpu or {}).items() if rule in on_cpu}
    defaults = {n: (v, known_value(v)) for n, v in (default_resources or {}).items() if n in GPU_KEYS}
    lines, from_defaults, unknown_defaults = [], {}, {}
    for rule in why:
        keys = ("gpu", "gpu_manufacturer") if rule in gpu_rules else GPU_KEYS
        given = {n: v for n, v in (set_resources.get(rule) or {}).items() if n in keys}
        if rule in gpu_rules and "gpu" not in given:
            continue  # its jobs get the GPUs resources.<rule>.gpu gives them
        values = {n: known_value(v, rule) for n, v in given.items()}
        # a default reaches the jobs where set-resources does not give the key; a GPU
        # rule sets its own gpu (none on the CPU)
        inherited = {
            n: d for n, d in defaults.items() if n in keys and n not in given and (n != "gpu" or rule in cpu_rules)
        }
        job = {n: v for n, (_, (v, ok)) in inherited.items() if ok} | {n: v for n, (v, ok) in values.items() if ok}
        if "gpu" in given and not values["gpu"][1]:
            job["gpu"] = "<gpu>"  # there all the same: a gpu_model asks for that many, the job step reads no other
        # the gpu the rule keeps on the CPU (train's 0), or a set-resources gpu equal to it,
        # which leaving out would not change
        own = {"gpu": own_gpu[rule]} if rule in own_gpu and job.get("gpu", own_gpu[rule]) == own_gpu[rule] else {}
        job |= own
        asks = gpu_asks(job)
        if rule in gpu_rules:
            asks = {n: ask for n, ask in asks.items() if n == "gpu" and _count(job["gpu"]) == 0}
        pinned = "machine_type" in (set_resources.get(rule) or {}) or "machine_type" in (default_resources or {})
        if own and pinned:
            asks.pop("gpu", None)  # on the instance type it names, toleration or not
        for name, ask in asks.items():
            if name in own:  # the rule's own gpu of 0, with a gpu_manufacturer
                lines.append(
                    _own_gpu_line(rule, on_cpu[rule], ask, job["gpu_manufacturer"], "gpu_manufacturer" in given)
                )
            elif name in inherited:  # one line per default, its asks in the order of the rules
                from_defaults.setdefault((name, job[name]), {}).setdefault(ask, []).append(rule)
            else:
                reason, change = why[rule]
                lines.append(
                    f"set-resources {rule}:{name}={job[name]}: {ask} for each {rule} job, which runs on the CPU "
                    f"({reason}) and uses no GPU; {change} (profiles/README.md, {_sites(name, ask)})"
                )
        # a gpu_manufacturer matters only to a job whose gpu is 0
        relevant = [
            n
            for n in (*values, *inherited)
            if n != "gpu_manufacturer" or (_count(job.get("gpu")) == 0 and not (own and pinned))
        ]
        for name in relevant:
            if name in values and not values[name][1]:
                lines.append(_not_checked(f"set-resources {rule}:{name}={_shown(given[name])}", f"{rule} jobs"))
            elif name in inherited and not inherited[name][1][1]:
                unknown_defaults.setdefault(name, []).append(rule)
    for (name, value), asks in from_defaults.items():
        rules = [rule for names in asks.values() for rule in names]
        lines.append(
            f"default-resources {name}={value}: "
            + "; ".join(f"{ask} for each job of {_rule_list(names, on_cpu)}" for ask, names in asks.items())
            + f", which use{'s' if len(rules) == 1 else ''} no GPU; take it out of default-resources: a GPU rule's "
            f"jobs get their GPUs from resources.<rule>.gpu"
            + ("" if name == "gpu" else f", a {name} goes to each GPU rule in set-resources")
            + f" (profiles/README.md, {_sites(name, ' '.join(asks))})"
        )
    for name, rules in unknown_defaults.items():
        lines.append(
            _not_checked(
                f"default-resources {name}={_shown(defaults[name][0])}", f"the jobs of {_rule_list(rules, on_cpu)}"
            )
        )
    return lines


def _own_gpu_line(rule: str, reason: str, ask: str, manufacturer: object, in_set_resources: bool) -> str:
    """The line for a gpu_manufacturer that the `gpu` of 0 a rule keeps on the CPU
    (train's) turns into the Kubernetes GPU toleration."""
    where = f"set-resources {rule}:" if in_set_resources else "default-resources "
    return (
        f"{where}gpu_manufacturer={manufacturer}: {ask} for each {rule} job, which runs on the CPU ({reason}) "
        f"and uses no GPU but keeps gpu=0, the count its shell command hands the launcher; pin {rule}'s pods to a "
        f"CPU instance type for this run, set-resources {rule}:machine_type=<type> (leaving out gpu_manufacturer "
        "does not help: the plugin refuses a job with a gpu and none) (profiles/README.md, eks)"
    )


def _not_checked(where: str, jobs: str) -> str:
    return (
        f"{where}: not checked: the parse cannot evaluate it (it reads the job's wildcards, input, attempt or "
        f"threads, is a function, or failed), so whether it gets {jobs} a GPU, or a GPU node, that they do not use "
        "is not known; give a plain value to have it checked (profiles/README.md)"
    )


def _rule_list(rules: Sequence[str], on_cpu: Mapping[str, str]) -> str:
    return ", ".join(f"{rule} ({on_cpu[rule]})" if rule in on_cpu else rule for rule in rules)


def _sites(name: str, ask: str) -> str:
    return "eks" if "toleration" in ask else "slurm, eks" if name == "gpu" else "slurm"


def _shown(resource) -> object:
    """A resource value as the profile gave it (a function has no text)."""
    if hasattr(resource, "is_evaluable"):
        return "<function>" if resource.raw is None else resource.raw
    return resource


def python_first_on_path(environ: dict | None = None, executable: str = sys.executable) -> bool:
    """Put the folder of the interpreter running the workflow first on PATH (where it has
    a `python`), so that a shell rule's `python` is that interpreter, as a script rule's
    is: a user may start `.venv/bin/snakemake` without activating the venv. Jobs inherit
    PATH; with a conda deployment the job's environment goes in front of it. Returns
    whether PATH changed."""
    env = os.environ if environ is None else environ
    folder = os.path.dirname(executable)
    path = env.get("PATH", "")
    if not os.path.exists(os.path.join(folder, "python")) or path.split(os.pathsep)[0] == folder:
        return False
    env["PATH"] = folder + (os.pathsep + path if path else "")
    return True


# Command-line modes in which Snakemake runs no job: they print the graph or lists, keep
# its books (--unlock, --touch, --cleanup-metadata) or read finished outputs (--report).
# Parse-time checks of what the jobs will load are skipped there: a model moved after a
# finished run must not block `--unlock` or `--report`.
NO_JOB_FLAGS = frozenset(
    {
        "--unlock",
        "--touch",
        "-t",
        "--report",
        "--lint",
        "--list-rules",
        "--list",
        "-l",
        "--list-target-rules",
        "--lt",
        "--summary",
        "-S",
        "--detailed-summary",
        "-D",
        "--list-changes",
        "--lc",
        "--dag",
        "--rulegraph",
        "--filegraph",
        "--d3dag",
        "--cleanup-metadata",
        "--cm",
        "--cleanup-shadow",
        "--delete-all-output",
        "--delete-temp-output",
        "--containerize",
        "--export-cwl",
        "--archive",
        "--generate-unit-tests",
        "--print-compilation",
        "--list-conda-envs",
        "--conda-cleanup-envs",
        "--conda-create-envs-only",
    }
)


def command_flags(argv: Sequence[str] | None = None) -> set[str]:
    """The options on Snakemake's command line (`--name`, `--name=value` as `--name`)."""
    args = sys.argv[1:] if argv is None else argv[1:]
    return {a.split("=", 1)[0] for a in args if a.startswith("-")}


def runs_no_jobs(argv: Sequence[str] | None = None) -> bool:
    """Whether this Snakemake was started in a mode that runs no job (NO_JOB_FLAGS)."""
    return bool(command_flags(argv) & NO_JOB_FLAGS)


def snakemake_arguments(argv: Sequence[str] | None = None) -> tuple[object, tuple[str, ...]] | None:
    """(settings, profile files) of this Snakemake run as Snakemake's own `parse_args`
    makes them: the command line with its profiles applied (`--profile`, the
    SNAKEMAKE_PROFILE variable, `--workflow-profile` or the default `profiles/default`;
    each key of a profile is a default that the same option on the command line, or in a
    profile read after it, replaces whole). The files are the profiles read, absolute, in
    the order Snakemake reads them. The workflow gets these settings only after the
    Snakefile is parsed, and a profile's only merged in, hence this second reading.

    Snakemake looks profiles up from the folder it was started in, and moves into
    `--directory` before the parse: where the settings have one, the folder in the
    shell's PWD is taken for the start where PWD joined with it is this folder; else
    the profiles are looked up from here. An absolute `--directory` is this folder
    from any start, so PWD is no evidence there (a program that starts Snakemake in
    another folder, `subprocess.run(..., cwd=run)` with `-d run`, leaves its own PWD):
    PWD is taken only where the profiles cannot be read from here (Snakemake read them
    from where it started), and where both read and differ in which profile files they
    find, the start is not known. None where they cannot be read again (a profile given
    by a path relative to a start folder not known here)."""
    args = list(sys.argv[1:] if argv is None else argv[1:])
    here = os.getcwd()
    parsed = _parsed_in(here, args)
    if parsed is not None and not parsed[0].directory:
        return parsed
    start = os.environ.get("PWD")
    if start and os.path.isdir(start) and not _same_folder(start, here):
        there = _parsed_in(start, args)
        if there is not None and there[0].directory and _same_folder(os.path.join(start, there[0].directory), here):
            if not os.path.isabs(there[0].directory) or parsed is None or parsed[1] == there[1]:
                return there
            return None  # started here or in PWD: either reads other profiles
    return parsed


def _parsed_in(folder: str, args: list[str]) -> tuple[object, tuple[str, ...]] | None:
    from snakemake.cli import parse_args

    here = os.getcwd()
    try:
        os.chdir(folder)
        # parse_args prints "Using profile ..." again, and a profile it cannot find
        with contextlib.redirect_stderr(io.StringIO()):
            parser, parsed = parse_args(args)
        # the profile files configargparse read its defaults from
        return parsed, tuple(os.path.abspath(f) for f in getattr(parser, "_default_config_files", ()))
    except (Exception, SystemExit):  # SystemExit: a profile not found, a line it does not read
        return None
    finally:
        os.chdir(here)


def _same_folder(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def forced_rules(argv: Sequence[str] | None = None) -> tuple[bool, frozenset[str]]:
    """(whether every job is remade, the rules whose jobs are) as this run asks
    (`--forceall`/`-F`, `--forcerun`/`-R`, or `forceall:`/`forcerun:` in a profile), read
    by Snakemake's own parser with its profiles (snakemake_arguments), so as Snakemake
    reads them: abbreviations, `-Rembed`, short options combined, the last `--forcerun`
    of several, a `--forcerun` on the command line replacing a profile's. Where the
    profiles cannot be read again, the command line alone (a profile's then unseen: the
    model check stops, naming the `--forcerun` that goes on). Called only where it
    decides something: it evaluates the profiles' YTE again."""
    parsed = snakemake_arguments(argv)
    if parsed is not None:
        return bool(parsed[0].forceall), frozenset(parsed[0].forcerun or ())
    from snakemake.cli import get_argument_parser

    args = list(sys.argv[1:] if argv is None else argv[1:])
    try:
        known, _ = get_argument_parser().parse_known_args(args)
    except SystemExit:  # not a line Snakemake reads (it would have stopped already)
        return False, frozenset()
    return bool(known.forceall), frozenset(known.forcerun or ())


# A `config:` key in a profile's text (at any indent: a YTE `?if` block may hold it), not
# the word in a comment or in another key: profiles/eks names "config" in its comments, and
# a profile without the key is not evaluated again (its YTE may run programs).
CONFIG_KEY = re.compile(r"^[ \t]*[\"']?config[\"']?[ \t]*:", re.MULTILINE)


def profile_config(argv: Sequence[str] | None = None) -> tuple[list[tuple[str, dict]], dict, bool]:
    """([(profile file, its `config:`), ...], the --config Snakemake goes with, whether
    the command line gives --config): each read as Snakemake reads `--config`
    (snakemake.cli.parse_config), for the profiles of this run that have a `config:`, in
    the order Snakemake reads them (snakemake_arguments). Snakemake reads one --config
    list, the last source's: the command line's, else the last of these profiles'
    (core.config.profile_config_problems). ([], {}, ...) where the profiles cannot be
    read again."""
    from snakemake.profiles import ProfileConfigFileParser

    on_command_line = bool(config_arguments(argv))
    if not on_command_line and not _two_profiles_possible(argv):
        return [], {}, False  # one profile's config: is the run's: nothing replaces it, nothing read again
    parsed = snakemake_arguments(argv)
    if parsed is None:
        return [], {}, on_command_line
    found = []
    for path in parsed[1]:
        try:
            with open(path) as stream:
                if not CONFIG_KEY.search(stream.read()):
                    continue  # no config: to read, and no YTE to evaluate again (profiles/local runs nvidia-smi)
                stream.seek(0)
                entries = ProfileConfigFileParser().parse(stream).get("config")
        except Exception:  # Snakemake has read it: here only if it changed since
            continue
        if entries is not None:
            found.append((path, _config_settings(entries if isinstance(entries, list) else [entries])))
    return found, _config_settings(parsed[0].config or []), on_command_line


def _two_profiles_possible(argv: Sequence[str] | None = None) -> bool:
    """Whether a second profile may be read after a first (whose config: it would replace):
    --profile given twice, a --workflow-profile (abbreviated too, as argparse takes it),
    or a profiles/default folder where Snakemake looks for one (the start folder, the
    Snakefile's). Cheap: profile_config reads no profile again where this says no."""
    args = [a.split("=", 1)[0] for a in (sys.argv[1:] if argv is None else argv[1:]) if a.startswith("--")]
    profiles = sum(1 for a in args if len(a) >= 6 and "--profile".startswith(a))
    workflow = any(len(a) >= 5 and "--workflow-profile".startswith(a) for a in args)
    folders = (Path.cwd(), Path(__file__).resolve().parents[2])  # this repository holds the Snakefile
    return profiles > 1 or workflow or any((f / "profiles" / "default").is_dir() for f in folders)


def _config_settings(entries: list) -> dict:
    from snakemake.cli import parse_config

    try:
        return parse_config([str(e) for e in entries])
    except Exception:  # not a --config Snakemake reads: each entry taken as a setting of its own
        return {str(e): None for e in entries}


def config_arguments(argv: Sequence[str] | None = None) -> list[list[str]]:
    """The `KEY=VALUE` entries of each `--config` (`-C`, `--config=KEY=VALUE`) on
    Snakemake's command line, one list per time it is given, in order: argparse keeps only
    the last list (shardflow.core.config.command_line_config_problems)."""
    args = list(sys.argv[1:] if argv is None else argv[1:])
    given: list[list[str]] = []
    for i, arg in enumerate(args):
        if arg in ("--config", "-C"):
            entries = []
            for value in args[i + 1 :]:
                if value.startswith("-"):
                    break
                entries.append(value)
            given.append(entries)
        elif arg.startswith("--config="):
            given.append([arg.split("=", 1)[1]])
        elif arg.startswith("-C") and not arg.startswith("--"):  # -Ca=1: the value attached
            given.append([arg[2:]])
    return given


def makes_report(argv: Sequence[str] | None = None) -> bool:
    """Whether this Snakemake was started to make the report (`--report`)."""
    return "--report" in command_flags(argv)

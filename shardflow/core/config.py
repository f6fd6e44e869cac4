"""Config validation with messages that name the key, and schema defaults filled in.

Snakemake's own `validate` prints the whole schema on error; a user with a
typo needs one line: which key, what is wrong, what is allowed.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema
import yaml

from shardflow.core.atomic import non_finite_paths
from shardflow.core.hashing import file_version


class ConfigError(ValueError):
    pass


# Keys of a stage's section that say how its jobs run, not what they compute: left out
# of the section's recorded params (Snakemake reruns a finished job whose recorded
# params changed); the rules that use one pass it `untracked`. checkpoint_interval:
# a resumed training run continues to the same losses as an uninterrupted one, from a
# checkpoint of any interval (shardflow.train.trainer.RESUMABLE_KEYS). keep_chunk_vectors
# reaches no job at all: it flags the embed rules' per-chunk .npy output temp() at parse
# time (rules/common.smk, chunk_vectors), and an output flag is no rerun trigger.
UNTRACKED_KEYS = ("compile_cache", "checkpoint_interval", "keep_chunk_vectors")
# Keys added to a section after outputs existed, each with the value at which jobs
# compute what they computed before the key was there: left out of the recorded params
# while they hold it, so that an upgrade reruns no finished job. The job's parameter
# object must default to the same value (tested). cuda_graphs' auto later turned graphs
# on for the BERT family on CUDA (stop 31): a speed-up within float rounding, like
# attention_bias' auto before it, so finished jobs stay valid and the key stays here
# (config/README.md's upgrade note). A change of meaning that changes results beyond
# rounding must take its key out of this table, so that finished jobs rerun.
# input.max_record_mb is older than its place here: it reached the summarisation scoring's
# params (shardflow.summarise.params.score_params) after their outputs existed, and 64 is
# the limit the scoring read with before (ScoreParams' default, in bytes).
# summarise.generation's sampling settings came after abstractive jobs recorded the
# generation section (a section of its own here: summarise.params.method_params); null
# leaves the model's value, as before them.
NEUTRAL_ADDED_KEYS = {
    ("embedding", "cuda_graphs"): "auto",
    ("input", "max_record_mb"): 64,
    ("summarise.generation", "temperature"): None,
    ("summarise.generation", "top_k"): None,
    ("summarise.generation", "top_p"): None,
}
_ABSENT = object()


def recorded(section: str, values: Mapping) -> dict:
    """config[section] (`values`) as its jobs' params record it: without UNTRACKED_KEYS,
    and without the NEUTRAL_ADDED_KEYS that hold their neutral value."""
    return {
        k: v
        for k, v in values.items()
        if k not in UNTRACKED_KEYS and NEUTRAL_ADDED_KEYS.get((section, k), _ABSENT) != v
    }


def canonical_order(config: dict, reference: Mapping | None, schema: Mapping) -> None:
    """Put the keys of every section the schema lists in one order, in place: the shipped
    config's (`reference`), then the schema's. Jobs record their section as a dict, and
    Snakemake compares params by repr, so the same values in another key order (a default
    written out, `--config 'embedding={seed: 0}'`, keys written in another order) reran
    every job that reads them. A run on the shipped config keeps the order it had: its
    keys come in that order, and the defaults are filled in the schema's."""
    props: dict = {}
    for branch in _branches(schema):
        props.update(branch.get("properties") or {})
    if not props:
        return  # a map of the user's (sweeps, resources.<rule> settings): their order stands
    reference = reference if isinstance(reference, Mapping) else {}
    rank = {k: i for i, k in enumerate([*reference, *(k for k in props if k not in reference)])}
    items = sorted(config.items(), key=lambda kv: rank.get(kv[0], len(rank)))  # stable: unknown keys keep theirs
    config.clear()
    config.update(items)
    for key, value in config.items():
        if isinstance(value, dict) and key in props:
            canonical_order(value, reference.get(key), props[key])


def _with_defaults(validator_class):
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = _copy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _copy(value):
    if isinstance(value, dict):
        return {k: _copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_copy(v) for v in value]
    return value


def _describe(error: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in error.absolute_path) or "<top level>"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed))
        where = f" in '{path}'" if error.absolute_path else ""
        return f"unknown config key{'s' if len(extra) > 1 else ''} {', '.join(map(repr, extra))}{where}; allowed: {', '.join(allowed)}"
    if error.validator == "oneOf":
        options = "; ".join(_schema_words(s) for s in error.validator_value)
        return f"config key '{path}': {error.instance!r} is not allowed (expected {options})"
    types = error.schema.get("type")
    if error.validator == "pattern" and isinstance(types, list) and "integer" in types:
        # An integer or a word (n_chunks: 4 or "auto"): the word's pattern alone misleads.
        words = " or ".join(repr(w) for w in error.validator_value.strip("^$()").split("|"))
        return f"config key '{path}': {error.instance!r} is neither an integer nor {words}"
    return f"config key '{path}': {error.message}"


def _schema_words(schema: dict) -> str:
    if "enum" in schema:
        return " or ".join(repr(v) for v in schema["enum"])
    return str(schema.get("type", "a value"))


# libyaml's parser where PyYAML has it (the lock's wheels do): the same YAML 1.1 values
# through the same safe constructor, read about 7x faster. Every Snakemake process of a
# run (each job on a cluster, each dry run) reads the schema and composes the config
# files at parse time: 27 KB of schema took 0.10 s of each parse, 0.014 s with libyaml.
FAST_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def read_yaml(path: str | os.PathLike, *, node: bool = False) -> Any:
    """The one YAML document of a UTF-8 file: its value as yaml.safe_load reads it, or with
    `node` its node (which keeps each key's line, and keys written twice).

    Read with FAST_SAFE_LOADER; what libyaml refuses is read again with PyYAML's own
    parser, which Snakemake's config loader uses, so that no file Snakemake reads is
    refused here: libyaml refuses an escaped UTF-16 surrogate ("\\ud83d\\ude80", as
    json.dump writes a character beyond U+FFFF) and a byte-order mark that starts a later
    line. A file neither reads raises PyYAML's error, naming the file and line."""
    if FAST_SAFE_LOADER is not yaml.SafeLoader:
        try:
            return _read_yaml_with(FAST_SAFE_LOADER, path, node)
        except yaml.YAMLError:
            pass  # read again with PyYAML's own parser, below
    return _read_yaml_with(yaml.SafeLoader, path, node)


def _read_yaml_with(loader_class: type, path: str | os.PathLike, node: bool) -> Any:
    with open(path, encoding="utf-8") as fh:
        loader = loader_class(fh)
        try:
            return loader.get_single_node() if node else loader.get_single_data()
        finally:
            loader.dispose()


def load_schema(path: str | os.PathLike) -> dict:
    return read_yaml(path)


# Keys that moved when the embedding section was split into what the stage computes
# (embedding), where GPU jobs run (gpu_jobs) and what each job needs (resources).
MOVED_KEYS = {
    "embedding.device": "gpu_jobs.device",
    "embedding.gpu_pinning": "gpu_jobs.pinning",
    "embedding.gpu_devices": "gpu_jobs.devices",
    "embedding.resume_dir": "gpu_jobs.resume_dir",
    "embedding.threads": "resources.embed.threads (and resources.embed_queries / resources.retrieval_evaluate)",
    "embedding.mem_mb": "resources.embed.mem_mb (and resources.embed_queries / resources.retrieval_evaluate)",
    "embedding.mem_mb_per_attempt": "resources.embed.mem_mb_per_attempt (and the other GPU rules)",
    "embedding.runtime": "resources.embed.runtime (and resources.embed_queries / resources.retrieval_evaluate)",
}


def moved_keys(config: dict) -> list[str]:
    """One line per key of an older config layout, naming where it lives now."""
    lines = []
    for old, new in MOVED_KEYS.items():
        section, key = old.split(".")
        if isinstance(config.get(section), dict) and key in config[section]:
            lines.append(f"config key '{old}' has moved: set '{new}' instead")
    return lines


def yaml11_switches(config: dict, schema: dict) -> None:
    """YAML 1.1 (PyYAML, Snakemake's loader) reads an unquoted on/off as True/False.
    Where a key's schema offers the word ("on"/"off"; in its enum or a oneOf/anyOf
    branch's), the boolean becomes that word, in place: `pinning: off` means "off",
    not an error. The schema lists words only; this is the one place they are read."""
    for name, sub in schema.get("properties", {}).items():
        value = config.get(name)
        if isinstance(value, dict):
            yaml11_switches(value, sub)
        elif isinstance(value, bool):
            word = "on" if value else "off"
            if any(word in branch.get("enum", []) for branch in _branches(sub)):
                config[name] = word


# YAML 1.1 (PyYAML, Snakemake's loader) reads a float in exponent notation without a
# dot (`3e-4`, `1e6`) as a string.
YAML11_FLOAT = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+")


def _branches(sub: Mapping) -> list[Mapping]:
    """A key's schema and its oneOf/anyOf branches: the alternatives a value may match."""
    return [sub, *sub.get("oneOf", []), *sub.get("anyOf", [])]


def _types(sub: Mapping) -> set[str]:
    """The JSON types a key's schema takes, its oneOf/anyOf branches included."""
    out: set[str] = set()
    for branch in _branches(sub):
        kind = branch.get("type")
        out |= {kind} if isinstance(kind, str) else set(kind or ())
        if any(isinstance(v, str) for v in branch.get("enum", [])) or isinstance(branch.get("const"), str):
            out.add("string")
    return out


def yaml11_floats(config: dict, schema: dict) -> None:
    """YAML 1.1 leaves `lr: 3e-4` a string. Where a key's schema takes a number and no
    string, such a string becomes the number, in place (an integer key's `5e3` becomes
    5000), so a config file means what it says."""
    for name, sub in schema.get("properties", {}).items():
        value = config.get(name)
        if isinstance(value, dict):
            yaml11_floats(value, sub)
        elif isinstance(value, str) and YAML11_FLOAT.fullmatch(value.strip()):
            types = _types(sub)
            if "string" in types:
                continue
            number = float(value)
            if "number" in types:
                config[name] = number
            elif "integer" in types and number.is_integer():
                config[name] = int(number)


_NOT_READ = object()


def _yaml_value(text: str):
    """What a config file would hold for `text`: YAML's value (PyYAML, Snakemake's loader),
    or a float where YAML 1.1 leaves one such as '1e-3' a string; _NOT_READ if unreadable."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return _NOT_READ
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return _NOT_READ
    return value


def _yaml_typed(value):
    """A string, or a list of strings, as a config file would hold it (else _NOT_READ)."""
    if isinstance(value, str):
        return _yaml_value(value)
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        items = [_yaml_value(v) for v in value]
        return _NOT_READ if _NOT_READ in items else items
    return _NOT_READ


def _given(mapping, path: Sequence[str], missing: Any = None):
    """The value at `path` in a nested mapping (the --config one, a config layer), or
    `missing` where it has none."""
    node = mapping
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return missing
        node = node[key]
    return node


def user_sets(layer: Mapping, path: Sequence[str]) -> bool:
    """Whether `layer`, the run's own config (Snakemake's overwrite_config: the
    --configfile files, a profile's `config:` and --config, merged), holds the key at
    `path`: a value the user chose, not config/config.yaml's or the schema's default."""
    return _given(layer, path, _ABSENT) is not _ABSENT


def command_line_strings(config: dict, schema: dict, command_line: Mapping) -> None:
    """Snakemake reads a value nested in `--config` (`train={max_iters: 10}`) with YAML's
    BaseLoader, which leaves every scalar a string ('10', 'null'). Each such string (one
    given in `command_line`, Snakemake's --config mapping, and still in `config`) becomes
    what YAML makes of it in a config file (10, true, null, 0.5, a list of integers), in
    place, unless its key's schema takes the string and not that value (a prompt given as
    123 stays the text "123"). Where neither fits, YAML's value stays, so the error reads
    as it would for a config file ("-5 is less than the minimum of 1"). Config files are
    read with YAML's types already, so a quoted "4" there stays an error."""
    validator = jsonschema.Draft202012Validator(schema)
    for path, text in _leaves(command_line):
        value = _yaml_typed(text)
        parent = _given(config, path[:-1])
        if value is _NOT_READ or not isinstance(parent, dict) or parent.get(path[-1]) != text:
            continue
        parent[path[-1]] = value
        if _fails_at(validator, config, path):
            parent[path[-1]] = text
            if _fails_at(validator, config, path):
                parent[path[-1]] = value


def _leaves(node: Mapping, path: tuple = (), every: bool = False):
    """(path, value) of every string, or list, under a --config mapping; with `every`,
    of every value that is not a mapping (an empty mapping sets nothing: merged, it leaves
    what is there)."""
    for key, value in node.items():
        if isinstance(value, Mapping):
            yield from _leaves(value, (*path, key), every)
        elif every or isinstance(value, (str, list)):
            yield [*path, key], value


def _fails_at(validator, config: dict, path: list) -> bool:
    """Whether the schema rejects the value at `path` (or inside it)."""
    return any(list(e.absolute_path)[: len(path)] == path for e in validator.iter_errors(config))


def validate_config(config: dict, schema: dict, command_line: Mapping | None = None) -> dict:
    """Fill defaults into `config` in place; raise ConfigError listing every problem.
    `command_line`: Snakemake's --config mapping (see command_line_strings)."""
    moved = moved_keys(config)
    if moved:
        raise ConfigError("invalid configuration:\n  - " + "\n  - ".join(moved))
    yaml11_switches(config, schema)
    yaml11_floats(config, schema)
    if command_line:
        command_line_strings(config, schema, command_line)
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    lines = [_describe(e) for e in errors] + non_finite_numbers(config)
    if lines:
        raise ConfigError("invalid configuration:\n  - " + "\n  - ".join(dict.fromkeys(lines)))
    return config


_REPEATED = (
    "is written again (first at line {first}): YAML keeps the last and drops the first without a word; write it once"
)


def repeated_keys(paths: Sequence[str | os.PathLike]) -> list[str]:
    """Keys written twice in one mapping of the config files (Snakemake's
    `workflow.configfiles`), one `<file>:<line>: <where>: key ...` line each. YAML keeps
    the last of two equal keys and drops the first without a word: a second `embedding:`
    section replaced the first whole, a grid line pasted below the one it extends lost its
    values (files read by `config_file_nodes`)."""
    found: list[str] = []
    for path, root in config_file_nodes(paths):
        found += _repeated_in(root, "", str(path))
    return found


def command_line_config_problems(given: Sequence[Sequence[str]]) -> list[str]:
    """What Snakemake's `--config` drops without a word, one line each (`given`: the
    entries of each `--config`, site.config_arguments): every `--config` but the last,
    which argparse replaces (`--config n_chunks=8 ... --config dataset=x` runs without
    n_chunks), a key written twice in one entry's YAML value (`sweeps={a: ..., a: ...}`
    keeps the last a), as repeated_keys finds them in the config files, and a setting two
    entries of the --config set (`n_chunks=4 n_chunks=8`, `'train={lr: 1}' 'train={lr: 2}'`:
    merged in order, the last wins; `'train={lr: 1}' 'train={n_layer: 2}'` sets both)."""
    problems = []
    if len(given) > 1:
        dropped = " ".join(e for entries in given[:-1] for e in entries) or "(no entries)"
        problems.append(
            f"--config is given {len(given)} times, and Snakemake reads only the last one's entries "
            f"({', '.join(e.partition('=')[0] for e in given[-1]) or 'none'}): {dropped} would be dropped. "
            "Give every entry after one --config"
        )
    set_by: dict[tuple[str, ...], str] = {}  # each setting's path -> the entry that set it
    for entry in given[-1] if given else ():
        key, _, value = entry.partition("=")
        try:
            node = yaml.compose(value, Loader=FAST_SAFE_LOADER) if value else None
        except yaml.YAMLError:
            node = None  # Snakemake reads it as a string: no mapping to repeat a key in
        # Snakemake reads the value with YAML's BaseLoader (snakemake.cli.parse_config):
        # a key is its text, so `1` and `0x1` are two keys there, and `1` and '1' one.
        problems += _repeated_in(node, key, "--config", as_text=True)
        # Entries are merged in order (update_config): one that sets what an earlier one
        # set, or replaces a mapping of it with a value, or a value with a mapping, drops it.
        for path in dict.fromkeys(_setting_paths(node, (key,))):
            earlier = next((p for p in set_by if p[: len(path)] == path or path[: len(p)] == p), None)
            if earlier is not None:
                problems.append(
                    f"--config sets {'.'.join(earlier)} in {set_by[earlier]!r} and again in {entry!r}: Snakemake "
                    "keeps the last and drops the first without a word; set it once"
                )
            set_by.setdefault(path, entry)
    return problems


def profile_config_problems(profiles: Sequence[tuple[str, Mapping]], given: Mapping, command_line: bool,
                            actual: Mapping | None = None) -> list[str]:
    """What Snakemake drops of a profile's `config:` without a word, one line a profile
    (`profiles`: (file, its config: read as --config is read) for each profile that has
    one, in the order Snakemake reads them; `given`: the --config it goes with;
    `command_line`: whether that came from the command line; site.profile_config).
    Snakemake makes a profile's keys defaults of its options, so a `--config` on the
    command line replaces the whole of every profile's `config:`, and a later profile's
    `config:` an earlier one's: `snakemake --profile p --config n_chunks=8` runs without
    p's `dataset=x`. A setting `given` sets too (at its key, or a mapping above or below
    it) is no matter: there the later value was asked for, as merged key by key. `actual`:
    the --config the run goes with (workflow.config_settings.config); where it is not
    `given`, the command line read again is not this run's (Snakemake started through its
    Python API, or by a program with a command line of its own), and nothing is said."""
    if actual is not None and dict(actual) != dict(given):
        return []
    kept = [tuple(path) for path, _ in _leaves(given, every=True)]
    problems = []
    for file, settings in profiles:
        dropped = [
            f"{'.'.join(map(str, path))}={_entry_text(value)}"
            for path, value in _leaves(settings, every=True)
            if not any(k[: len(path)] == tuple(path) or tuple(path[: len(k)]) == k for k in kept)
        ]
        if not dropped:
            continue
        if command_line:
            by, keep = "the command line's --config replaces", "add them to the command line's --config"
        else:
            by, keep = f"the config: of profile {profiles[-1][0]}, read after it, replaces", "add them to that one"
        problems.append(
            f"profile {file}: its config: sets {', '.join(dropped)}, which Snakemake would drop without a word: "
            f"{by} a profile's whole config: (Snakemake reads one list of --config entries, the last given). "
            f"Keep them: {keep}, or put them in a --configfile"
        )
    return problems


def _entry_text(value: Any) -> str:
    """A --config value as it would be written on the command line."""
    if value is None:
        return ""
    if isinstance(value, list):
        return "[" + ", ".join(map(_entry_text, value)) + "]"
    return str(value)


def _setting_paths(node: Any, prefix: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The key paths of a --config value's settings: a mapping's leaves, keys as text (an
    empty mapping sets nothing: merged, it leaves what is there)."""
    if isinstance(node, yaml.MappingNode):
        return [p for k, v in node.value for p in _setting_paths(v, (*prefix, str(getattr(k, "value", k))))]
    return [prefix]


def config_file_nodes(paths: Sequence[str | os.PathLike]) -> list[tuple[str | os.PathLike, Any]]:
    """(path, YAML node of its document) of each config file, each file once (by its real
    path), in order; a file that cannot be read or parsed here is passed over, left to
    Snakemake's loader, which has read it already (a JSON config is YAML too). The nodes
    keep what the loaded config does not: each key's line, and keys written twice."""
    nodes = []
    seen: set[str] = set()
    for path in paths:
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        try:
            nodes.append((path, _config_node(real, *file_version(real)[1:])))
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue
    return nodes


@functools.lru_cache(maxsize=32)
def _config_node(real: str, size: int, mtime_ns: int) -> Any:
    """A config file's node, composed once per process while the file is unchanged (its
    size and time, core.hashing.file_version): the parse reads the run's config files for
    repeated_keys and for sweep.spec.sweeps_in_files. The nodes are only read."""
    return read_yaml(real, node=True)


def _repeated_in(
    node: Any, where: str, path: str, seen: set[int] | None = None, *, as_text: bool = False
) -> list[str]:
    """Keys are compared as the loaded config holds them (`_loaded_key`); merge keys (`<<`,
    however many) are passed over, as the loader merges every one; a node an alias names
    again is read once, where it is written. `as_text`: as YAML's BaseLoader holds them
    (a --config value), each scalar key its text, `<<` an ordinary key."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return []
    seen.add(id(node))
    found: list[str] = []
    if isinstance(node, yaml.MappingNode):
        first: dict[Any, int] = {}
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            if name is not None and (as_text or key.tag != _MERGE_TAG):
                line = key.start_mark.line + 1
                same = name if as_text else _loaded_key(key)
                if same in first:
                    found.append(f"{path}:{line}: {where + ': ' if where else ''}key {name!r} "
                                 + _REPEATED.format(first=first[same]))
                first.setdefault(same, line)
            found += _repeated_in(value, f"{where}.{name}" if where else str(name), path, seen, as_text=as_text)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found += _repeated_in(item, f"{where}[{i}]", path, seen, as_text=as_text)
    return found


_MERGE_TAG = "tag:yaml.org,2002:merge"


def _loaded_key(key: yaml.ScalarNode) -> Any:
    """A scalar key as the loaded config's dict holds it: `1` and `'1'` are two keys, `1`
    and `0x1` one (Snakemake loads with PyYAML's safe constructors). A key those cannot
    read is compared by its tag and text."""
    try:
        value = yaml.constructor.SafeConstructor().construct_object(key)
        hash(value)
        return value
    except Exception:  # noqa: BLE001 - an unusual key is still compared, as written
        return (key.tag, key.value)


def non_finite_numbers(config: Any) -> list[str]:
    """One line per `.nan`, `.inf` or `-.inf` in the config (sweep values included). The
    schema's bounds let them through (NaN compares false with every bound), but every
    value is recorded in strict JSON (provenance.json, a sweep's spec.json and
    points.json, a train job's config.json), which has no NaN or Infinity."""
    return [
        f"config key '{path}': {value} is not a finite number (the records the workflow writes are strict "
        "JSON, which has no NaN or Infinity)"
        for path, value in non_finite_paths(config)
    ]

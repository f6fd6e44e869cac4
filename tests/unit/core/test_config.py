"""What a stage's params record (core.config.recorded): Snakemake reruns a finished job
whose recorded params changed."""

from __future__ import annotations

import copy

import pytest

from shardflow.core.config import NEUTRAL_ADDED_KEYS, ConfigError, load_schema, recorded, user_sets, validate_config
from shardflow.sweep.spec import SweepError, parse_sweeps
from tests.helpers import REPO


def test_neutral_added_keys_are_left_out_of_the_recorded_params_at_their_neutral_value_only():
    schema = load_schema(REPO / "config" / "config.schema.yaml")
    assert NEUTRAL_ADDED_KEYS
    for (section, key), value in NEUTRAL_ADDED_KEYS.items():
        # The schema fills the default into every config: it must be the neutral value,
        # or an upgrade would record the key after all.
        node = schema
        for part in section.split("."):  # summarise.generation: a section inside one
            node = node["properties"][part]
        assert node["properties"][key]["default"] == value
        assert recorded(section, {key: value, "window": 8}) == {"window": 8}
        assert recorded(section, {key: "on", "window": 8}) == {key: "on", "window": 8}
        assert recorded("another", {key: value}) == {key: value}  # another section's key of that name


def test_untracked_keys_are_never_recorded():
    assert recorded("embedding", {"compile_cache": "/c", "window": 8}) == {"window": 8}
    assert recorded("train", {"compile_cache": None, "lr": 0.1}) == {"lr": 0.1}
    # A resumed run continues to the same losses from a checkpoint of any interval.
    assert recorded("train", {"checkpoint_interval": 7, "lr": 0.1}) == {"lr": 0.1}
    # An output flag (temp) at parse time, no job's input: toggling it reruns nothing.
    assert recorded("embedding", {"keep_chunk_vectors": False, "window": 8}) == {"window": 8}


def test_every_schema_property_holds_schema_keywords_only():
    """An unquoted comma in a flow-style description (`{..., description: a, b.}`) makes YAML
    end the description there and read ` b.` as another key: the description is cut short
    and a stray key sits in the schema, unnoticed by jsonschema."""
    keywords = {
        "type", "description", "default", "enum", "const", "minimum", "maximum", "exclusiveMinimum",
        "exclusiveMaximum", "minLength", "maxLength", "pattern", "items", "minItems", "maxItems", "uniqueItems",
        "properties", "additionalProperties", "required", "oneOf", "anyOf", "allOf", "not", "propertyNames", "$ref",
        "$defs",
    }
    schema = load_schema(REPO / "config" / "config.schema.yaml")
    stray = []

    def walk(node: dict, path: str) -> None:
        for name, sub in (node.get("properties") or {}).items():
            stray.extend(f"{path}{name}: {key!r}" for key in sub if key not in keywords)
            walk(sub, f"{path}{name}.")
        for branch in (*node.get("oneOf", []), *node.get("anyOf", [])):
            walk(branch, path)

    walk(schema, "")
    assert not stray, stray


def test_a_float_in_exponent_notation_means_a_number_in_a_config_file(shipped_config):
    """PyYAML (YAML 1.1) reads `lr: 3e-4` as the string '3e-4': a number key takes it as
    the number, an integer key a whole one; a key that takes strings keeps the string."""
    import copy

    import yaml

    from shardflow.core.config import ConfigError, validate_config

    schema = load_schema(REPO / "config" / "config.schema.yaml")
    config = copy.deepcopy(shipped_config)
    overlay = yaml.safe_load("train: {lr: 3e-4, max_iters: 5e3}\ndataset: 1e3\n")
    assert overlay["train"]["lr"] == "3e-4" and overlay["dataset"] == "1e3"
    config["train"].update(overlay["train"])
    config["dataset"] = overlay["dataset"]
    validate_config(config, schema)
    assert config["train"]["lr"] == 0.0003 and config["train"]["max_iters"] == 5000
    assert type(config["train"]["max_iters"]) is int and config["dataset"] == "1e3"
    config["train"]["max_iters"] = "2.55e1"  # not whole: stays a string, and the error names it
    try:
        validate_config(config, schema)
    except ConfigError as exc:
        assert "config key 'train.max_iters': '2.55e1' is not of type 'integer'" in str(exc)
    else:
        raise AssertionError("a fractional max_iters was accepted")



def test_a_whole_float_for_an_int_field_becomes_the_int_where_params_are_built():
    """JSON Schema's "integer" takes 128.0, and the jobs failed on it (the embed engine
    counts with max_length, lead slices sentences[:k]); the config keeps it as written, so
    recorded params and sweep point ids do not change."""
    from shardflow.embed.params import EmbedParams
    from shardflow.summarise.generate_params import GenerateParams
    from shardflow.summarise.params import SummariseParams

    embed = EmbedParams(model="default", max_length=128.0, token_budget=4096.0)
    assert (type(embed.max_length), type(embed.token_budget)) == (int, int) and embed.max_length == 128
    assert type(SummariseParams(k=2.0).k) is int
    assert type(GenerateParams(model="m", max_input_length=512.0).max_input_length) is int
    assert SummariseParams(mmr_lambda=1.0).mmr_lambda == 1.0  # a float field keeps its float
    assert type(SummariseParams(mmr_lambda=1.0).mmr_lambda) is float


def test_sections_are_put_in_the_shipped_configs_key_order_then_the_schemas():
    """Jobs record their section as a dict, compared by repr: one order for the same
    values, whatever order they were written in. Maps of the user's keep theirs."""
    from shardflow.core.config import canonical_order

    schema = {"properties": {
        "embedding": {"type": "object", "properties": {"model": {}, "dtype": {}, "seed": {}, "max_length": {}}},
        "sweeps": {"type": "object", "additionalProperties": {"type": "object"}},
    }}
    shipped = {"embedding": {"model": "default", "dtype": "auto"}}
    config = {"sweeps": {"b": {}, "a": {}},
              "embedding": {"seed": 0, "max_length": None, "dtype": "auto", "model": "default"}}
    canonical_order(config, shipped, schema)
    assert list(config) == ["embedding", "sweeps"]
    assert list(config["embedding"]) == ["model", "dtype", "seed", "max_length"]  # shipped, then the schema's
    assert list(config["sweeps"]) == ["b", "a"]
    # A config in the order a run of the shipped one has (its keys, then the defaults the
    # validator fills in the schema's order) keeps it: such runs rerun nothing.
    default_run = {"embedding": {"model": "m", "dtype": "auto", "seed": 0, "max_length": None}}
    canonical_order(default_run, shipped, schema)
    assert list(default_run["embedding"]) == ["model", "dtype", "seed", "max_length"]


def test_user_sets_a_key_only_where_the_runs_own_config_holds_it():
    # Snakemake's overwrite_config: --configfile files and --config (nested values as strings).
    given = {"resources": {"summarise": {"mem_mb": "9000"}}, "summarise": {"method": "lead"}}
    assert user_sets(given, ("resources", "summarise", "mem_mb"))
    assert not user_sets(given, ("resources", "summarise", "runtime"))
    assert not user_sets(given, ("resources", "embed", "mem_mb"))
    assert not user_sets(given, ("summarise", "method", "x"))  # a value, not a section
    assert not user_sets({}, ("resources",))


def test_a_number_that_is_not_finite_stops_the_parse_naming_its_key(shipped_config):
    """The schema's bounds let .nan and .inf through (NaN compares false with every bound),
    and a sweep's grid is not typed at all; every value is recorded in strict JSON
    (provenance.json, spec.json, points.json), which has no NaN or Infinity."""
    import copy

    import pytest
    import yaml

    from shardflow.core.config import ConfigError, validate_config

    schema = load_schema(REPO / "config" / "config.schema.yaml")
    config = copy.deepcopy(shipped_config)
    overlay = yaml.safe_load("train: {grad_clip: .inf}\nreport: {gpu_hour_price: .nan}\n"
                             "sweeps: {s: {stage: train, grid: {train.lr: [1.0e-3, -.inf]}}}\n")
    for section in ("train", "report"):
        config[section].update(overlay[section])
    config["sweeps"] = overlay["sweeps"]
    with pytest.raises(ConfigError) as exc:
        validate_config(config, schema)
    lines = str(exc.value).splitlines()[1:]
    assert sorted(line.split(":")[0] for line in lines) == [
        "  - config key 'report.gpu_hour_price'", "  - config key 'sweeps.s.grid.train.lr[1]'",
        "  - config key 'train.grad_clip'",
    ]
    assert "config key 'train.grad_clip': inf is not a finite number" in str(exc.value)
    assert "config key 'report.gpu_hour_price': nan is not a finite number" in str(exc.value)


def test_a_key_written_twice_anywhere_in_a_config_file_is_named_with_both_lines(tmp_path):
    """A second `embedding:` section replaced the first whole, and a key written twice
    within a section lost its first value, without a word (YAML keeps the last); the
    shipped files hold none."""
    from shardflow.core.config import repeated_keys

    path = tmp_path / "my.yaml"
    path.write_text("embedding:\n  model: a\n  model: b\nn_chunks: 4\nembedding:\n  dtype: float32\n")
    assert repeated_keys([path, str(path)]) == [  # each file once
        f"{path}:3: embedding: key 'model' is written again (first at line 2): YAML keeps the last and drops "
        "the first without a word; write it once",
        f"{path}:5: key 'embedding' is written again (first at line 1): YAML keeps the last and drops the first "
        "without a word; write it once",
    ]
    shipped = sorted(str(p) for p in (REPO / "config").rglob("*.yaml"))
    assert shipped and repeated_keys(shipped) == []


def test_repeated_keys_are_keys_the_loaded_config_holds_once(tmp_path):
    """Keys compared as the loaded config holds them: YAML merge keys (`<<`, one or two
    in a mapping) merge every mapping named and drop nothing; `1` and `'1'` are two keys;
    `1` and `0x1` are one. Keys of an anchored mapping are reported once, where written."""
    from shardflow.core.config import repeated_keys

    path = tmp_path / "my.yaml"
    path.write_text(
        "base: &base\n  a: 1\n  b: 2\n"
        "x:\n  <<: *base\n  a: 3\n"
        "y:\n  <<: *base\n  <<: {c: 1}\n"
        "z:\n  1: one\n  '1': uno\n"
    )
    assert repeated_keys([path]) == []
    path.write_text("base: &base\n  a: 1\n  a: 2\nx:\n  <<: *base\nz:\n  1: one\n  0x1: uno\n")
    assert repeated_keys([path]) == [
        f"{path}:3: base: key 'a' is written again (first at line 2): YAML keeps the last and drops the first "
        "without a word; write it once",
        f"{path}:8: z: key '0x1' is written again (first at line 7): YAML keeps the last and drops the first "
        "without a word; write it once",
    ]


def _keys_and_lines(node, where=""):
    """Every key of a YAML node tree with the line it is written on, in order."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        return [item for key, value in node.value for item in [(f"{where}.{key.value}", key.start_mark.line)]
                + _keys_and_lines(value, f"{where}.{key.value}")]
    if isinstance(node, yaml.SequenceNode):
        return [item for i, value in enumerate(node.value) for item in _keys_and_lines(value, f"{where}[{i}]")]
    return []


def test_config_files_are_read_as_pyyamls_own_parser_reads_them(tmp_path):
    """The config files, the schema and sweep base files are parsed with libyaml where
    PyYAML has it (core.config.read_yaml): the same values and key lines as PyYAML's own
    parser, which Snakemake's config loader uses. A file libyaml refuses and PyYAML reads
    is read with PyYAML's: json.dump writes a character beyond U+FFFF as an escaped
    surrogate pair, which libyaml refuses; such a config file's repeated keys and sweeps
    went unchecked (the file was passed over), and a sweep base file stopped the parse."""
    import json

    import yaml

    from shardflow.core.config import read_yaml, repeated_keys

    texts = {
        "merge.yaml": "base: &b\n  x: 1\n  y: 1e-3\nc:\n  <<: *b\n  x: 1.0e-3\n  x: 3\n",
        "bom.yaml": "\ufeffembedding: {model: a}\r\nclé: [on, 0x1F]\r\nembedding: {}\r\n",
        "long.yaml": "a: '" + "é" * 200_000 + "'\nb: |\n  x\n\n  y\n" + "c: 1\n" * 2,
        "empty.yaml": "",
        "json.json": '{\n "summarise": ' + json.dumps({"prompt": "go \U0001f680"}) + ',\n "n_chunks": 2,\n "n_chunks": 4\n}\n',
    }
    paths = sorted((REPO / "config").rglob("*.yaml"))
    for name, text in texts.items():
        (tmp_path / name).write_text(text, encoding="utf-8", newline="")
        paths.append(tmp_path / name)
    for path in paths:
        with open(path, encoding="utf-8") as fh:
            value = yaml.safe_load(fh)
        with open(path, encoding="utf-8") as fh:
            node = yaml.SafeLoader(fh).get_single_node()
        assert read_yaml(str(path)) == value, path
        assert _keys_and_lines(read_yaml(path, node=True)) == _keys_and_lines(node), path
    path = tmp_path / "json.json"
    assert repeated_keys([path]) == [f"{path}:4: key 'n_chunks' is written again (first at line 3): YAML keeps the "
                                     "last and drops the first without a word; write it once"]


def test_the_parse_composes_each_config_file_once_until_it_changes(tmp_path, monkeypatch):
    """repeated_keys and sweep.spec.sweeps_in_files both read the run's config files at
    every parse; the second read the same bytes again."""
    import os

    from shardflow.core import config as cfg
    from shardflow.core.config import repeated_keys
    from shardflow.sweep.spec import sweeps_in_files

    reads = []
    real_read = cfg.read_yaml
    monkeypatch.setattr(cfg, "read_yaml", lambda path, **kw: reads.append(path) or real_read(path, **kw))
    path = tmp_path / "c.yaml"
    path.write_text("sweeps:\n  lr: {stage: train}\nn_chunks: 2\n")
    assert repeated_keys([path]) == [] and sweeps_in_files([path]) == []
    assert len(reads) == 1
    path.write_text("n_chunks: 2\nn_chunks: 3\n")
    os.utime(path, ns=(1, 1))  # another version even within the clock's resolution
    assert repeated_keys([path]) == [f"{path}:2: key 'n_chunks' " + cfg._REPEATED.format(first=1)]
    assert len(reads) == 2


def test_what_the_command_lines_config_drops_is_named():
    """Snakemake keeps only the last --config's entries (argparse replaces the list), and
    a YAML value keeps the last of a key written twice: both without a word."""
    from shardflow.core.config import command_line_config_problems

    assert command_line_config_problems([]) == []
    assert command_line_config_problems([["n_chunks=2", "embedding={model: x, max_length: 64}", "dataset="]]) == []
    assert command_line_config_problems([["n_chunks=8", "tasks=[embedding]"], ["dataset=x"]]) == [
        "--config is given 2 times, and Snakemake reads only the last one's entries (dataset): n_chunks=8 "
        "tasks=[embedding] would be dropped. Give every entry after one --config"
    ]
    sweeps = "sweeps={a: {seeds: [0]}, b: {grid: {x: [1], x: [2]}}, a: {seeds: [1]}}"
    assert command_line_config_problems([["n_chunks=2", sweeps, "bad={unclosed"]]) == [
        "--config:1: sweeps.b.grid: key 'x' is written again (first at line 1): YAML keeps the last and drops the "
        "first without a word; write it once",
        "--config:1: sweeps: key 'a' is written again (first at line 1): YAML keeps the last and drops the first "
        "without a word; write it once",
    ]


def test_what_a_later_config_drops_of_a_profiles_config_is_named():
    """A profile's config: is replaced whole (site.profile_config reads it with Snakemake's
    parser): each of its settings that the --config Snakemake goes with does not set, at its
    key or a mapping above or below it, is named; one it sets (same value or another) is not,
    and an empty mapping sets nothing."""
    from shardflow.core.config import profile_config_problems

    profile = {
        "dataset": "x",
        "n_chunks": 8,
        "tasks": ["embedding", "training"],
        "embedding": {"dtype": "f", "pin": None},
        "train": {"lr": "1"},
        "report": {},
    }
    given = {"n_chunks": 4, "embedding": {"dtype": "f"}, "train": 5}
    assert profile_config_problems([("p.yaml", profile)], given, True) == [
        "profile p.yaml: its config: sets dataset=x, tasks=[embedding, training], embedding.pin=, which Snakemake "
        "would drop without a word: the command line's --config replaces a profile's whole config: (Snakemake reads "
        "one list of --config entries, the last given). Keep them: add them to the command line's --config, or put "
        "them in a --configfile"
    ]
    other = {"train": {"lr": "2", "n_layer": "4"}}  # another value, asked for
    assert profile_config_problems([("p.yaml", {"train": {"lr": "1"}})], other, True) == []
    assert profile_config_problems([("p.yaml", profile)], profile, False) == []
    assert profile_config_problems([], {"n_chunks": 4}, True) == []
    # The run's own --config (workflow.config_settings.config) unlike the one read again from
    # sys.argv: that command line is not this run's (Snakemake started through its Python
    # API, or by another program), so nothing is said of profiles it may never have read.
    assert profile_config_problems([("p.yaml", profile)], given, True, actual={"n_chunks": 2}) == []
    assert len(profile_config_problems([("p.yaml", profile)], given, True, actual=dict(given))) == 1


def test_a_config_values_keys_are_compared_as_snakemake_reads_them():
    """Snakemake reads a --config value with YAML's BaseLoader (snakemake.cli.parse_config):
    every key is its text. `1` and `0x1`, `yes` and `true`, `null` and `~` are two keys there,
    both kept: no stop. `1` and `'1'` are one, the first dropped: named."""
    from snakemake.cli import parse_config

    from shardflow.core.config import command_line_config_problems

    for two in ("sweeps={1: a, 0x1: b}", "sweeps={yes: a, true: b}", "sweeps={null: a, ~: b}", "sweeps={1: a, 1.0: b}"):
        assert len(parse_config([two])["sweeps"]) == 2
        assert command_line_config_problems([[two]]) == []
    one = "sweeps={1: a, '1': b}"
    assert parse_config([one])["sweeps"] == {"1": "b"}
    assert command_line_config_problems([[one]]) == [
        "--config:1: sweeps: key '1' is written again (first at line 1): YAML keeps the last and drops the first "
        "without a word; write it once"
    ]


def test_a_setting_two_entries_of_the_command_lines_config_set_is_named():
    """Snakemake merges a --config's entries in order (update_config): a setting given
    twice keeps the last, and a value in place of a mapping drops the mapping; mappings
    of different keys merge, and an empty one sets nothing."""
    from shardflow.core.config import command_line_config_problems

    assert command_line_config_problems([["train={lr: 1}", "train={n_layer: 2}", "report={}", "report={x: 1}"]]) == []
    assert command_line_config_problems([["n_chunks=4", "dataset=x", "n_chunks=8", "train={lr: 1}", "train=5"]]) == [
        "--config sets n_chunks in 'n_chunks=4' and again in 'n_chunks=8': Snakemake keeps the last and drops the "
        "first without a word; set it once",
        "--config sets train.lr in 'train={lr: 1}' and again in 'train=5': Snakemake keeps the last and drops the "
        "first without a word; set it once",
    ]


@pytest.mark.parametrize("key, top", [("train.seed", 2**64 - 2), ("embedding.seed", 2**64 - 1)])
def test_a_seed_torch_cannot_take_stops_the_parse_naming_its_key(shipped_config, key, top):
    """torch.manual_seed and torch.Generator.manual_seed take -2**63 .. 2**64 - 1, and the
    trainer seeds its validation windows with train.seed + 1: a seed past that passed the
    parse and failed inside torch ("Overflow when unpacking long long"). A sweep's seeds
    are the stage's seed key's values, held in its tables' int64 columns: one past
    2**63 - 1 is refused by that narrower bound, naming the seed."""
    schema = load_schema(REPO / "config" / "config.schema.yaml")
    section, name = key.split(".")
    config = copy.deepcopy(shipped_config)
    for seed in (top, -(2**63)):
        config[section][name] = seed
        validate_config(config, schema)
    for seed, bound in ((top + 1, f"greater than the maximum of {top}"), (-(2**63) - 1, "less than the minimum of")):
        config[section][name] = seed
        with pytest.raises(ConfigError) as exc:
            validate_config(config, schema)
        assert f"config key '{key}': {seed} is {bound}" in str(exc.value)
    config[section][name] = 0
    stage, grid, metric = {
        "train": ("train", {"train.lr": [1e-3]}, "best_val_loss"),
        "embedding": ("embed", {"embedding.window": [64]}, "items_per_s"),
    }[section]
    sweep = {"stage": stage, "grid": grid, "seeds": [0, top + 1], "metrics": {metric: "max"}}
    with pytest.raises(SweepError, match=f"seed {top + 1}: an integer outside the signed 64-bit range"):
        parse_sweeps({"s": sweep}, validate_config(config, schema), lambda c: validate_config(c, schema))

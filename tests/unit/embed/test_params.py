"""EmbedParams and the output identity (resume keys), without a model: a ModelSpec is
built over a folder holding config.json alone, so nothing loads weights. The identity
of real tiny models, and what each speed-up resolves to, are in test_engine.py,
test_accel.py and test_graphs.py."""

from __future__ import annotations

import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")

from shardflow.core import parts  # noqa: E402
from shardflow.core.batching import LEAD_FRACTION  # noqa: E402
from shardflow.embed.accel import Choice  # noqa: E402
from shardflow.embed.params import (  # noqa: E402
    ATTENTION_BIAS_ON,
    AUTO_TOKEN_BUDGET,
    COMPILE_MODES,
    PADDING_MASK_SKIPPED,
    EmbedParams,
    attention_identity,
    output_identity,
    resolve_token_budget,
    resume_key,
    speedup_identity,
)
from shardflow.embed.stconfig import ModelSpec  # noqa: E402

OFF, ON = Choice("off", "test"), Choice("on", "test")

# --------------------------------------------------------------------------- EmbedParams


def test_defaults():
    p = EmbedParams(model="m")
    assert dataclasses.asdict(p) == {
        "model": "m", "device": "auto", "dtype": "auto", "output_dtype": "float32", "token_budget": None,
        "max_batch_size": 512, "max_length": None, "prompt_name": None, "prompt": None, "compile": False,
        "window": 8192, "seed": 0, "threads": None, "length_buckets": "auto", "compile_mode": "auto",
        "packing": "auto", "kernels": "auto", "padding_mask": "auto", "cudnn_attention": "auto",
        "attention_bias": "auto", "cuda_graphs": "auto", "compile_cache": None,
    }  # fmt: skip


def test_a_model_is_required():
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'model'"):
        EmbedParams()


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"device": "GPU"}, "device 'GPU': expected auto, cpu, cuda or cuda:N"),
        ({"device": "cuda:"}, "device 'cuda:': expected auto, cpu, cuda or cuda:N"),
        ({"device": "cuda:-1"}, "device 'cuda:-1': expected auto, cpu, cuda or cuda:N"),
        ({"device": None}, "device None: expected auto, cpu, cuda or cuda:N"),  # not an AttributeError
        ({"dtype": "fp16"}, "dtype 'fp16': expected auto or one of ['bfloat16', 'float16', 'float32']"),
        ({"dtype": None}, "dtype None: expected auto or one of ['bfloat16', 'float16', 'float32']"),
        # A Python caller's list or dict: one error naming the field, not "unhashable type: 'list'".
        ({"dtype": [1]}, "dtype [1]: expected auto or one of ['bfloat16', 'float16', 'float32']"),
        ({"dtype": {"a": 1}}, "dtype {'a': 1}: expected auto or one of ['bfloat16', 'float16', 'float32']"),
        ({"output_dtype": "bfloat16"}, "output_dtype 'bfloat16': expected one of ('float32', 'float16')"),
        ({"output_dtype": "auto"}, "output_dtype 'auto': expected one of ('float32', 'float16')"),
        ({"compile_mode": "fast"}, f"compile_mode 'fast': expected one of {COMPILE_MODES}"),
        ({"compile_mode": None}, f"compile_mode None: expected one of {COMPILE_MODES}"),
        ({"packing": "yes"}, "packing 'yes': expected one of ('auto', 'off', 'on')"),
        ({"kernels": "on"}, "kernels 'on': expected one of ('auto', 'off', 'liger')"),
        ({"kernels": True}, "kernels True: expected one of ('auto', 'off', 'liger')"),  # on is no kernels value
        ({"padding_mask": "skip"}, "padding_mask 'skip': expected one of ('auto', 'on', 'off')"),
        ({"cudnn_attention": "ON"}, "cudnn_attention 'ON': expected one of ('auto', 'on', 'off')"),
        ({"attention_bias": "4d"}, "attention_bias '4d': expected one of ('auto', 'on', 'off')"),
        ({"cuda_graphs": "always"}, "cuda_graphs 'always': expected one of ('auto', 'on', 'off')"),
        ({"length_buckets": "some"}, "length_buckets 'some': expected auto, on, off or a list of widths"),
        ({"length_buckets": []}, "length_buckets: a non-empty list of widths >= 1, auto, on or off"),
        ({"length_buckets": [16, 0]}, "length_buckets: a non-empty list of widths >= 1, auto, on or off"),
        ({"length_buckets": [-16]}, "length_buckets: a non-empty list of widths >= 1, auto, on or off"),
        ({"max_batch_size": 0}, "max_batch_size must be >= 1"),
        ({"window": 0}, "window must be >= 1"),
        ({"token_budget": 0}, "token_budget must be >= 1 or None"),
        ({"token_budget": -5}, "token_budget must be >= 1 or None"),
        ({"max_length": 0}, "max_length must be >= 1 or None"),
        ({"threads": 0}, "threads must be >= 1 or None"),
        ({"prompt": "q: ", "prompt_name": "query"}, "give either prompt or prompt_name, not both"),
        ({"prompt": "", "prompt_name": ""}, "give either prompt or prompt_name, not both"),  # set, even if empty
    ],
)
def test_bad_values_name_the_key_and_value(kw, message):
    with pytest.raises(ValueError) as info:
        EmbedParams(model="m", **kw)
    assert str(info.value) == message


# One case a field that check_field_types reads (a bool is an int in Python, so True
# passed `max_batch_size >= 1`); the choice fields above name their words instead.
WRONG_TYPES = [
    ({"model": None}, "model None: expected a string"),
    ({"token_budget": "8"}, "token_budget '8': expected an integer or None"),
    ({"max_batch_size": None}, "max_batch_size None: expected an integer"),
    ({"max_length": 12.5}, "max_length 12.5: expected an integer or None"),
    ({"prompt_name": 1}, "prompt_name 1: expected a string or None"),
    ({"prompt": 5}, "prompt 5: expected a string or None"),
    ({"compile": 1}, "compile 1: expected a bool"),
    ({"window": "64"}, "window '64': expected an integer"),
    ({"seed": None}, "seed None: expected an integer"),
    ({"threads": True}, "threads True: expected an integer or None"),
    ({"length_buckets": [16, 64.5]}, "length_buckets [16, 64.5]: expected a string or a list of integers"),
    ({"compile_cache": 5}, "compile_cache 5: expected a string or None"),
]


@pytest.mark.parametrize(("kw", "message"), WRONG_TYPES)
def test_a_wrong_python_type_is_one_error_naming_the_field_value_and_type(kw, message):
    with pytest.raises(TypeError) as info:
        EmbedParams(**{"model": "m", **kw})
    assert str(info.value) == message


@pytest.mark.parametrize("widths", [[True, 16], ["64"], (16.5,)])
def test_length_buckets_take_integer_widths_only(widths):
    """int() made True a width of 1, "64" one of 64 and 16.5 one of 16."""
    with pytest.raises(TypeError, match=r"^length_buckets .*: expected a string or a list of integers$"):
        EmbedParams(model="m", length_buckets=widths)


def test_bounds_are_inclusive():
    p = EmbedParams(model="m", max_batch_size=1, window=1, token_budget=1, max_length=1, threads=1, device="cuda:0")
    assert (p.max_batch_size, p.window, p.token_budget, p.max_length, p.threads) == (1, 1, 1, 1, 1)
    assert EmbedParams(model="m", length_buckets=[1]).length_buckets == (1,)


@pytest.mark.parametrize("name", ["length_buckets", "packing", "padding_mask", "cudnn_attention", "attention_bias",
                                  "cuda_graphs"])  # fmt: skip
def test_a_yaml_boolean_switch_is_the_word(name):
    assert getattr(EmbedParams(model="m", **{name: True}), name) == "on"
    assert getattr(EmbedParams(model="m", **{name: False}), name) == "off"


def test_kernels_false_is_off():
    assert EmbedParams(model="m", kernels=False).kernels == "off"


def test_length_buckets_become_a_tuple_of_ints_as_given():
    """A list from YAML: hashable (params are dict keys and set members), order kept
    (accel.resolve_buckets sorts and dedupes), whole floats made ints."""
    p = EmbedParams(model="m", length_buckets=[64, 16.0, 16])
    assert p.length_buckets == (64, 16, 16) and [type(b) for b in p.length_buckets] == [int, int, int]
    assert hash(p) == hash(EmbedParams(model="m", length_buckets=(64, 16, 16)))
    assert EmbedParams(model="m", length_buckets=(32,)) == EmbedParams(model="m", length_buckets=[32])


def test_whole_floats_become_ints():
    p = EmbedParams(model="m", max_batch_size=64.0, window=256.0, seed=3.0, threads=2.0)
    assert [(v, type(v)) for v in (p.max_batch_size, p.window, p.seed, p.threads)] == [
        (64, int), (256, int), (3, int), (2, int)
    ]  # fmt: skip


def test_an_unknown_key_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="unexpected keyword argument 'batch_size'"):
        EmbedParams(model="m", batch_size=8)


def test_a_unicode_prompt_is_kept_as_written():
    assert EmbedParams(model="m", prompt="requête : 查询 ").prompt == "requête : 查询 "


# --------------------------------------------------------------------------- token budget


@pytest.mark.parametrize(
    ("budget", "device", "want"),
    [(None, "cpu", 1024), (None, "cuda", 32768), (None, "mps", 32768), (7, "cpu", 7), (7, "cuda", 7)],
)
def test_token_budget_is_the_given_one_else_the_devices_default(budget, device, want):
    assert AUTO_TOKEN_BUDGET == {"cpu": 1024, "cuda": 32768}
    assert resolve_token_budget(EmbedParams(model="m", token_budget=budget), torch.device(device)) == want


# --------------------------------------------------------------------------- identity entries


def test_attention_identity_names_only_what_leaves_the_plain_path():
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert attention_identity(cpu, OFF, OFF, OFF) == {}  # the CPU has no cuDNN kernel to turn off
    assert attention_identity(cpu, OFF, ON, OFF) == {}
    assert attention_identity(cuda, OFF, ON, OFF) == {}
    assert attention_identity(cuda, OFF, OFF, OFF) == {"cudnn_attention": "off"}
    assert attention_identity(cpu, ON, ON, ON) == {
        "padding_mask": PADDING_MASK_SKIPPED,
        "attention_bias": ATTENTION_BIAS_ON,
    }
    assert (PADDING_MASK_SKIPPED, ATTENTION_BIAS_ON) == (
        "skipped: causal, right padding",
        "[rows, 1, 1, width] bool mask",
    )


def test_speedup_identity_of_the_plain_path_is_empty():
    assert speedup_identity(EmbedParams(model="m"), OFF, OFF, OFF) == {}
    assert speedup_identity(EmbedParams(model="m", length_buckets="off"), OFF, OFF, OFF) == {}


def test_speedup_identity_names_packing_buckets_and_graphs():
    assert speedup_identity(EmbedParams(model="m"), Choice("sdpa", "t"), OFF, OFF) == {"packing": "sdpa"}
    buckets = EmbedParams(model="m", length_buckets=[32, 16])
    assert speedup_identity(buckets, OFF, OFF, OFF) == {"length_buckets": (32, 16)}  # the option as given
    assert speedup_identity(EmbedParams(model="m", length_buckets="on"), OFF, OFF, OFF) == {"length_buckets": "on"}
    # auto with graphs on: the graph widths, named by the option.
    assert speedup_identity(EmbedParams(model="m"), OFF, ON, OFF) == {"cuda_graphs": "on", "length_buckets": "auto"}
    # Graphs without bucket widths run no graph (Encoder.setup_accel turns them off): nothing named.
    assert speedup_identity(EmbedParams(model="m", length_buckets="off"), OFF, ON, OFF) == {}


def test_speedup_identity_names_the_liger_version(monkeypatch):
    from shardflow.embed import accel

    monkeypatch.setattr(accel, "liger_version", lambda: "0.5.9")
    assert speedup_identity(EmbedParams(model="m"), OFF, OFF, Choice("liger", "t")) == {"kernels": "liger-kernel 0.5.9"}


# --------------------------------------------------------------------------- output identity and resume key


@pytest.fixture
def spec(tmp_path) -> ModelSpec:
    """A BERT model's spec over its config.json alone (output_identity hashes the folder's
    files and reads config.json: no weights, no tokenizer)."""
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", "num_hidden_layers": 1}))
    return ModelSpec(source=str(folder), folder=folder, transformer_folder=folder, prompts=(("query", "query: "),))


def cpu_params(spec, **kw) -> EmbedParams:
    return EmbedParams(model=spec.source, device="cpu", **kw)


def test_the_identity_on_the_cpu_holds_exactly_these_keys(spec):
    identity = output_identity(cpu_params(spec, threads=3), spec)
    assert list(identity) == [
        "format", "model", "device", "hardware", "dtype", "prompt", "torch", "transformers", "output_dtype",
        "token_budget", "max_batch_size", "max_length", "compile", "window", "seed", "sort_groups", "threads",
    ]  # fmt: skip
    assert (identity["format"], identity["device"], identity["dtype"], identity["prompt"]) == (
        parts.FORMAT_VERSION, "cpu", "float32", ""
    )  # fmt: skip
    assert (identity["token_budget"], identity["threads"]) == (1024, 3)  # resolved, not None
    assert identity["sort_groups"] == f"longest 1/{LEAD_FRACTION} of characters, then the rest"


def test_threads_left_to_torch_are_recorded_as_torchs_count(spec, monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 5)
    assert output_identity(cpu_params(spec), spec)["threads"] == 5


def test_what_decides_no_output_byte_is_not_in_the_identity(spec):
    plain = output_identity(cpu_params(spec), spec)
    assert output_identity(cpu_params(spec, compile_cache="/cache"), spec) == plain
    # The accelerations at auto or off resolve to the plain path on the CPU.
    off = dict(packing="off", kernels="off", padding_mask="off", cudnn_attention="off", cuda_graphs="off")
    assert output_identity(cpu_params(spec, length_buckets="off", **off), spec) == plain
    # The prompt is recorded by its text, whichever way it was named.
    by_name = output_identity(cpu_params(spec, prompt_name="query"), spec)
    assert by_name == output_identity(cpu_params(spec, prompt="query: "), spec) and by_name["prompt"] == "query: "


def test_what_decides_output_bytes_changes_the_identity(spec, monkeypatch):
    monkeypatch.setattr(torch, "get_num_threads", lambda: 5)  # threads: 2 differs from torch's own
    plain = output_identity(cpu_params(spec), spec)
    for kw in ({"token_budget": 512}, {"max_length": 64}, {"window": 100}, {"seed": 1}, {"output_dtype": "float16"},
               {"max_batch_size": 8}, {"threads": 2}, {"prompt": "requête : "}):  # fmt: skip
        changed = output_identity(cpu_params(spec, **kw), spec)
        assert changed != plain, kw
    assert output_identity(cpu_params(spec, prompt="requête : "), spec)["prompt"] == "requête : "


def test_truncate_dim_and_pooling_are_recorded_only_where_they_apply(spec):
    assert "truncate_dim" not in output_identity(cpu_params(spec), spec)
    assert output_identity(cpu_params(spec), dataclasses.replace(spec, truncate_dim=6))["truncate_dim"] == 6
    # A folder without sentence-transformers files: its pooling is recorded unless the mean.
    assert "pooling" not in output_identity(cpu_params(spec), dataclasses.replace(spec, has_st_config=False))
    causal = dataclasses.replace(spec, has_st_config=False, pooling=("lasttoken",))
    assert output_identity(cpu_params(spec), causal)["pooling"] == ["lasttoken"]
    # With sentence-transformers files the pooling is in those files, and so in the model's hash.
    assert "pooling" not in output_identity(cpu_params(spec), dataclasses.replace(spec, pooling=("cls",)))


def test_an_unknown_prompt_name_names_the_models_prompts(spec):
    with pytest.raises(ValueError) as info:
        output_identity(cpu_params(spec, prompt_name="passage"), spec)
    assert str(info.value) == "prompt_name 'passage' is not among the model's prompts ['query']"


def test_the_model_files_are_in_the_identity(spec):
    before = output_identity(cpu_params(spec), spec)
    (spec.folder / "config.json").write_text(json.dumps({"model_type": "bert", "num_hidden_layers": 2}))
    assert output_identity(cpu_params(spec), spec)["model"] != before["model"]


def test_resume_key_with_an_identity_given_loads_no_model(tmp_path):
    chunk = tmp_path / "chunk_0.jsonl"
    chunk.write_text('{"id": "a", "text": "x"}\n')
    params = EmbedParams(model=str(tmp_path / "no-such-model"))  # would fail if it were loaded
    identity = {"format": parts.FORMAT_VERSION, "seed": 0}
    key = resume_key(chunk, params, identity)
    assert key == parts.resume_key(chunk, identity)
    assert resume_key(chunk, params, {**identity, "seed": 1}) != key
    assert resume_key(chunk, params, {}) == parts.resume_key(chunk, {})  # an empty identity is still the one given

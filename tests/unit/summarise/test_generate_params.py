"""GenerateParams and the layering of generation settings, without a model: configs are
built in memory (or written as config.json alone), so nothing loads weights. The
engine's use of them, on tiny models, is in test_generate.py."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from types import SimpleNamespace

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from transformers import BartConfig, GenerationConfig, GPT2Config, T5Config  # noqa: E402

from shardflow.summarise.generate_params import (  # noqa: E402
    AUTO_TOKEN_BUDGET,
    GENERATION_FIELDS,
    NEWLINE_SYMBOL,
    T5_PREFIX,
    GenerateParams,
    base_generation_config,
    default_prefix,
    effective,
    merge_generation_config,
    newline_symbol,
    params_from_dict,
    resolve_token_budget,
    task_generation_params,
)

# --------------------------------------------------------------------------- GenerateParams


def test_defaults_leave_every_generation_setting_to_the_model():
    p = GenerateParams(model="m")
    assert (p.device, p.dtype, p.token_budget, p.max_batch_size, p.window, p.seed) == (
        "auto",
        "auto",
        None,
        64,
        1024,
        None,
    )
    assert (p.prefix, p.prompt, p.max_input_length, p.threads) == (None, None, None, None)
    assert p.overrides() == {}


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"device": "gpu"}, "device 'gpu': expected auto, cpu, cuda or cuda:N"),
        ({"device": "cuda:x"}, "device 'cuda:x': expected auto, cpu, cuda or cuda:N"),
        ({"dtype": "int8"}, "dtype 'int8': expected auto or one of ['bfloat16', 'float16', 'float32']"),
        ({"dtype": "fp16"}, "dtype 'fp16': expected auto or one of ['bfloat16', 'float16', 'float32']"),
        # A Python caller's list: one error naming the field, not "unhashable type: 'list'".
        ({"dtype": [1]}, "dtype [1]: expected auto or one of ['bfloat16', 'float16', 'float32']"),
        ({"max_batch_size": 0}, "max_batch_size must be >= 1"),
        ({"window": -3}, "window must be >= 1"),
        ({"token_budget": 0}, "token_budget must be >= 1 or None"),
        ({"max_input_length": 0}, "max_input_length must be >= 1 or None"),
        ({"num_beams": 0}, "num_beams must be >= 1 or None"),
        ({"max_new_tokens": -1}, "max_new_tokens must be >= 1 or None"),
        ({"threads": 0}, "threads must be >= 1 or None"),
        ({"min_length": -1}, "min_length must be >= 0 or None"),
        ({"min_new_tokens": -5}, "min_new_tokens must be >= 0 or None"),
        ({"no_repeat_ngram_size": -1}, "no_repeat_ngram_size must be >= 0 or None"),
        ({"early_stopping": "always"}, "early_stopping 'always': expected true, false or 'never'"),
        ({"early_stopping": "Never"}, "early_stopping 'Never': expected true, false or 'never'"),
        # 1 == True and 0 == False, so `in (None, True, False, "never")` took them.
        ({"early_stopping": 1}, "early_stopping 1: expected true, false or 'never'"),
        ({"early_stopping": 0}, "early_stopping 0: expected true, false or 'never'"),
        ({"device": None}, "device None: expected auto, cpu, cuda or cuda:N"),  # not an AttributeError
        (
            {"do_sample": True},
            "do_sample: true needs a seed, so that a rerun (or a resumed job) gives the same summaries",
        ),
    ],
)
def test_bad_values_name_the_key_and_value(kw, message):
    with pytest.raises(ValueError) as info:
        GenerateParams(model="m", **kw)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("kw", "message"),
    [  # one case a field (a bool is an int in Python, so True passed `num_beams >= 1`)
        ({"model": None}, "model None: expected a string"),
        ({"token_budget": "8"}, "token_budget '8': expected an integer or None"),
        ({"max_batch_size": None}, "max_batch_size None: expected an integer"),
        ({"max_input_length": 512.5}, "max_input_length 512.5: expected an integer or None"),
        ({"prefix": 3}, "prefix 3: expected a string or None"),
        ({"prompt": ["p"]}, "prompt ['p']: expected a string or None"),
        ({"num_beams": True}, "num_beams True: expected an integer or None"),
        ({"max_new_tokens": "60"}, "max_new_tokens '60': expected an integer or None"),
        ({"min_length": 2.5}, "min_length 2.5: expected an integer or None"),
        ({"min_new_tokens": False}, "min_new_tokens False: expected an integer or None"),
        ({"length_penalty": True}, "length_penalty True: expected a number or None"),
        ({"no_repeat_ngram_size": "3"}, "no_repeat_ngram_size '3': expected an integer or None"),
        ({"do_sample": 1, "seed": 0}, "do_sample 1: expected a bool or None"),
        ({"seed": "3"}, "seed '3': expected an integer or None"),
        ({"window": None}, "window None: expected an integer"),
        ({"threads": 2.5}, "threads 2.5: expected an integer or None"),
    ],
)
def test_a_wrong_python_type_is_one_error_naming_the_field_value_and_type(kw, message):
    with pytest.raises(TypeError) as info:
        GenerateParams(**{"model": "m", **kw})
    assert str(info.value) == message


def test_an_integer_length_penalty_is_a_number():
    assert GenerateParams(model="m", length_penalty=1).overrides() == {"length_penalty": 1}


def test_bounds_are_inclusive_and_zero_is_allowed_where_it_means_none():
    p = GenerateParams(model="m", num_beams=1, max_new_tokens=1, min_length=0, min_new_tokens=0, no_repeat_ngram_size=0)
    assert p.overrides() == {
        "num_beams": 1,
        "max_new_tokens": 1,
        "min_length": 0,
        "min_new_tokens": 0,
        "no_repeat_ngram_size": 0,
    }
    assert GenerateParams(model="m", max_batch_size=1, window=1, token_budget=1, threads=1).window == 1
    assert GenerateParams(model="m", device="cuda:12").device == "cuda:12"


def test_early_stopping_takes_true_false_and_never():
    for value in (True, False, "never", None):
        assert GenerateParams(model="m", early_stopping=value).early_stopping == value
    assert GenerateParams(model="m", early_stopping=False).overrides() == {"early_stopping": False}


def test_sampling_needs_a_seed_and_seed_zero_is_one():
    assert GenerateParams(model="m", do_sample=True, seed=0).overrides() == {"do_sample": True}
    # Not sampling (or leaving it to the model) needs none here; merge_generation_config checks the model's.
    assert GenerateParams(model="m", do_sample=False).overrides() == {"do_sample": False}


def test_whole_floats_become_ints_and_length_penalty_stays_a_float():
    p = GenerateParams(model="m", num_beams=4.0, max_new_tokens=60.0, window=16.0, length_penalty=2.0)
    assert [(v, type(v)) for v in (p.num_beams, p.max_new_tokens, p.window)] == [(4, int), (60, int), (16, int)]
    assert (p.length_penalty, type(p.length_penalty)) == (2.0, float)


def test_overrides_are_the_set_generation_fields_in_their_order():
    every = dict(
        num_beams=2, max_new_tokens=9, min_length=1, min_new_tokens=2, length_penalty=-0.5,
        no_repeat_ngram_size=3, early_stopping="never", do_sample=True, temperature=0.7, top_k=50, top_p=0.9,
    )  # fmt: skip
    p = GenerateParams(model="m", seed=1, prefix="x: ", max_input_length=5, **every)
    assert list(p.overrides()) == list(GENERATION_FIELDS)
    assert p.overrides() == every  # seed, prefix and max_input_length are no generation settings


def test_params_from_dict_names_every_unknown_key_sorted():
    with pytest.raises(TypeError) as info:
        params_from_dict({"model": "m", "temp": 0.7, "beams": 2, "num_beams": 2})
    known = sorted(f.name for f in dataclasses.fields(GenerateParams))
    assert str(info.value) == f"unknown summarise parameter(s) ['beams', 'temp']; known: {known}"


def test_params_from_dict_without_a_model_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="missing 1 required positional argument: 'model'"):
        params_from_dict({"num_beams": 2})


def test_params_from_dict_validates_as_the_constructor_does():
    assert params_from_dict({"model": "m", "window": 8.0}).window == 8
    with pytest.raises(ValueError, match=r"^num_beams must be >= 1 or None$"):
        params_from_dict({"model": "m", "num_beams": 0})


# --------------------------------------------------------------------------- token budget


@pytest.mark.parametrize(
    ("budget", "device", "want"),
    [
        (None, "cpu", AUTO_TOKEN_BUDGET["cpu"]),
        (None, "cuda", AUTO_TOKEN_BUDGET["cuda"]),
        (None, "mps", AUTO_TOKEN_BUDGET["cuda"]),  # any other accelerator: the GPU default
        (123, "cpu", 123),
        (123, "cuda", 123),
    ],
)
def test_token_budget_is_the_given_one_else_the_devices_default(budget, device, want):
    assert AUTO_TOKEN_BUDGET == {"cpu": 4096, "cuda": 65536}
    assert resolve_token_budget(GenerateParams(model="m", token_budget=budget), torch.device(device)) == want


# --------------------------------------------------------------------------- the model's settings


def _seq2seq(folder="/models/bart", **kw):
    config = BartConfig(**kw)
    config._name_or_path = folder  # as from_pretrained sets it: the model folder
    return config


def test_task_settings_are_split_from_the_other_keys_prefix_aside():
    config = _seq2seq(
        task_specific_params={
            "summarization": {"prefix": "summarize: ", "num_beams": 4, "max_length": 200, "early_stopping": True,
                              "no_such_setting": 1},
            "translation_en_to_de": {"num_beams": 9},
        }
    )  # fmt: skip
    settings, other = task_generation_params(config)
    assert settings == {"num_beams": 4, "max_length": 200, "early_stopping": True}
    assert other == {"no_such_setting": 1}  # logged as not used, not dropped silently


@pytest.mark.parametrize(
    "task", [None, {}, {"translation_en_to_fr": {"num_beams": 4}}, {"summarization": None}, {"summarization": {}}]
)
def test_no_summarization_task_is_no_settings(task):
    assert task_generation_params(_seq2seq(task_specific_params=task)) == ({}, {})


def test_a_decoder_only_models_task_settings_are_not_read():
    """transformers 4's summarization pipeline refused decoder-only models: no task layer."""
    config = GPT2Config(task_specific_params={"summarization": {"num_beams": 4, "prefix": "x"}})
    assert task_generation_params(config) == ({}, {})


@pytest.mark.parametrize(("value", "kind"), [("beam", "str"), ([4], "list"), (3, "int")])
def test_a_summarization_task_that_is_no_mapping_names_config_json(value, kind):
    """The prefix is read from it too (a string's "prefix" in it was a substring test)."""
    config = _seq2seq(task_specific_params={"summarization": value})
    for read in (task_generation_params, default_prefix):
        with pytest.raises(ValueError) as info:
            read(config)
        assert str(info.value) == (
            f"/models/bart/config.json: task_specific_params.summarization is {kind}, "
            "not a mapping of generation settings"
        )


def _generation(**fields):
    config = GenerationConfig()
    config.update(**fields)
    return config


def test_layers_are_the_model_then_the_task_then_the_overrides():
    base = _generation(num_beams=2, max_length=20, no_repeat_ngram_size=3)
    task = {"num_beams": 4, "max_length": 200, "length_penalty": 2.0}
    params = GenerateParams(model="m", num_beams=1, max_new_tokens=5)
    merged = merge_generation_config(base, params, task)
    assert (merged.num_beams, merged.max_length, merged.length_penalty) == (1, 200, 2.0)
    assert (merged.max_new_tokens, merged.no_repeat_ngram_size) == (5, 3)
    # The model's own config is left as it was (the engine logs it as a layer).
    assert (base.num_beams, base.max_length, base.length_penalty, base.max_new_tokens) == (2, 20, None, None)


def test_an_unset_field_keeps_transformers_default_only_in_the_effective_copy():
    merged = merge_generation_config(GenerationConfig(), GenerateParams(model="m"))
    assert (merged.num_beams, merged.max_length, merged.do_sample) == (None, None, None)  # generate fills them in
    eff = effective(merged)
    assert (eff.num_beams, eff.max_length, eff.do_sample, eff.num_return_sequences) == (1, 20, False, 1)
    assert merged.num_beams is None  # effective copies


@pytest.mark.parametrize(
    ("base", "task"),
    [({"do_sample": True}, None), ({}, {"do_sample": True}), ({"do_sample": True, "top_k": 5}, {})],
)
def test_sampling_from_the_model_or_its_task_needs_a_seed(base, task):
    with pytest.raises(ValueError) as info:
        merge_generation_config(_generation(**base), GenerateParams(model="/models/m"), task)
    assert str(info.value) == (
        "/models/m: the generation config samples (do_sample: true); set do_sample: false, or a seed"
    )
    assert merge_generation_config(_generation(**base), GenerateParams(model="m", seed=0), task).do_sample is True
    assert (
        merge_generation_config(_generation(**base), GenerateParams(model="m", do_sample=False), task).do_sample
        is False
    )


def test_more_than_one_returned_sequence_is_refused_naming_the_model():
    with pytest.raises(ValueError) as info:
        merge_generation_config(
            _generation(num_beams=4), GenerateParams(model="/models/m"), {"num_return_sequences": 2}
        )
    assert str(info.value) == "/models/m: num_return_sequences=2; one summary per text only"


def test_base_config_is_generation_config_json_when_the_folder_has_one(tmp_path):
    BartConfig(forced_eos_token_id=5).save_pretrained(tmp_path)  # config.json alone: no weights
    (tmp_path / "generation_config.json").write_text(json.dumps({"num_beams": 3, "max_length": 40}))
    base = base_generation_config(tmp_path)
    assert (base.num_beams, base.max_length, base.forced_eos_token_id) == (3, 40, None)  # config.json's 5 not read


def test_base_config_without_generation_config_json_reads_config_json(tmp_path):
    BartConfig(forced_eos_token_id=5, decoder_start_token_id=3).save_pretrained(tmp_path)
    assert not (tmp_path / "generation_config.json").exists()
    base = base_generation_config(tmp_path)
    assert (base.forced_eos_token_id, base.decoder_start_token_id) == (5, 3)
    # A config already loaded is used as it is, not read again.
    assert base_generation_config(tmp_path, BartConfig(forced_eos_token_id=9)).forced_eos_token_id == 9


def test_base_config_of_a_folder_without_either_file_names_the_folder(tmp_path):
    with pytest.raises(ValueError, match=re.escape(f"Unrecognized model in {tmp_path}.")):
        base_generation_config(tmp_path)


# --------------------------------------------------------------------------- prefix and newline symbol


def test_prefix_is_the_tasks_else_t5s_else_none():
    assert default_prefix(_seq2seq(task_specific_params={"summarization": {"prefix": "sum: "}})) == "sum: "
    assert default_prefix(_seq2seq()) == ""
    assert default_prefix(T5Config()) == T5_PREFIX == "summarize: "
    for family in ("mt5", "umt5", "longt5"):
        assert default_prefix(SimpleNamespace(model_type=family, task_specific_params=None)) == T5_PREFIX
    # A task prefix, even an empty one, goes over the family's.
    assert default_prefix(T5Config(task_specific_params={"summarization": {"prefix": ""}})) == ""
    assert default_prefix(T5Config(task_specific_params={"summarization": {"num_beams": 4}})) == T5_PREFIX
    assert default_prefix(T5Config(task_specific_params={"translation_en_to_de": {"prefix": "x"}})) == T5_PREFIX


def test_a_unicode_prefix_is_kept_as_written():
    prefix = "Résumé — 要約: "
    assert default_prefix(_seq2seq(task_specific_params={"summarization": {"prefix": prefix}})) == prefix


def test_newline_symbol_is_pegasus_families_only():
    assert NEWLINE_SYMBOL == "<n>"
    for family in ("pegasus", "pegasus_x"):
        assert newline_symbol(SimpleNamespace(model_type=family)) == "<n>"
    for family in ("bart", "t5", "gpt2", "Pegasus", ""):
        assert newline_symbol(SimpleNamespace(model_type=family)) is None


def test_a_null_task_prefix_is_no_prefix_as_the_summarization_pipeline_read_it():
    """transformers 4's pipeline put the task's settings on the model config and read a
    prefix of None as "". default_prefix returned the None, and the engine's first batch
    (prefix + text) stopped with a bare TypeError naming neither the model nor the key."""
    for config in (_seq2seq(), T5Config()):
        config.task_specific_params = {"summarization": {"prefix": None, "num_beams": 4}}
        assert default_prefix(config) == ""


@pytest.mark.parametrize(("value", "kind"), [(5, "int"), (["summarize: "], "list"), (True, "bool")])
def test_a_task_prefix_that_is_no_string_names_config_json_and_the_key(value, kind):
    config = _seq2seq(task_specific_params={"summarization": {"prefix": value}})
    with pytest.raises(ValueError) as info:
        default_prefix(config)
    assert (
        str(info.value)
        == f"/models/bart/config.json: task_specific_params.summarization.prefix is {kind}, not a string"
    )


@pytest.mark.parametrize(("value", "kind"), [(["summarization"], "list"), ("summarization", "str")])
def test_task_specific_params_that_are_no_mapping_name_config_json(value, kind):
    """Read for the settings when the model loads, and for the prefix: each stopped with
    "'list' object has no attribute 'get'", naming neither the file nor the key."""
    config = _seq2seq(task_specific_params=value)
    message = f"/models/bart/config.json: task_specific_params is {kind}, not a mapping of task settings"
    for read in (task_generation_params, default_prefix):
        with pytest.raises(ValueError) as info:
            read(config)
        assert str(info.value) == message


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"temperature": 0}, "temperature 0: expected a number above 0 or None"),
        ({"temperature": -1.5}, "temperature -1.5: expected a number above 0 or None"),
        ({"top_p": 0}, "top_p 0: expected a number above 0 and at most 1, or None"),
        ({"top_p": 1.5}, "top_p 1.5: expected a number above 0 and at most 1, or None"),
        ({"top_k": -1}, "top_k must be >= 0 or None"),
    ],
)
def test_sampling_settings_are_checked_where_transformers_would_fail_or_ignore_them(kw, message):
    with pytest.raises(ValueError) as info:
        GenerateParams(model="m", do_sample=True, seed=0, **kw)
    assert str(info.value) == message


def test_sampling_settings_override_the_models_and_need_sampling():
    """temperature, top_k and top_p (summarise.generation) override the model's own; set
    where the run does not sample (do_sample false here, in the model or its task, or
    unset) they would change nothing, silently (transformers warns at most): an error
    naming summarise.generation.do_sample."""
    base = _generation(do_sample=True, top_k=5, temperature=1.0)
    params = GenerateParams(model="m", seed=0, temperature=0.7, top_k=0, top_p=0.95)
    merged = merge_generation_config(base, params)
    assert (merged.temperature, merged.top_k, merged.top_p, merged.do_sample) == (0.7, 0, 0.95, True)
    for base, do_sample in ((_generation(), None), (_generation(do_sample=True), False)):
        with pytest.raises(ValueError) as info:
            merge_generation_config(base, GenerateParams(model="/models/m", seed=0, do_sample=do_sample, top_p=0.9))
        assert str(info.value) == (
            "/models/m: summarise.generation sets top_p, which only sampling reads, but the generation config "
            "does not sample: set summarise.generation.do_sample: true, or leave top_p out"
        )

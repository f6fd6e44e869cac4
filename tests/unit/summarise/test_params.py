"""SummariseParams and ScoreParams: defaults, bounds and bad values, and the helpers that
say which `summarise.*` keys a method reads (the method dispatch and the ROUGE scores
themselves are tested in test_extractive.py, test_evaluate.py and test_rouge.py)."""

import dataclasses

import pandas as pd
import pytest

from shardflow.corpus.readers import DEFAULT_MAX_RECORD_BYTES
from shardflow.summarise.params import (
    METHOD_KEYS,
    ScoreParams,
    SummariseParams,
    ignored_by,
    score_params,
    without_effect,
)
from shardflow.summarise.rouge import system_means

# --------------------------------------------------------------------------- SummariseParams


def test_summarise_defaults_are_lead_3_with_the_punctuation_splitter():
    assert dataclasses.asdict(SummariseParams()) == {
        "method": "lead",
        "k": 3,
        "mmr_lambda": 0.7,
        "splitter": "punctuation",
        "window": 1024,
    }


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"method": "abstractive"}, "method 'abstractive': expected one of ('lead', 'extractive')"),
        ({"method": "stored"}, "method 'stored': expected one of ('lead', 'extractive')"),
        ({"method": "Lead"}, "method 'Lead': expected one of ('lead', 'extractive')"),
        ({"k": 0}, "k must be >= 1, got 0"),
        ({"k": -2}, "k must be >= 1, got -2"),
        ({"mmr_lambda": -0.01}, "mmr_lambda must be in [0, 1], got -0.01"),
        ({"mmr_lambda": 1.0001}, "mmr_lambda must be in [0, 1], got 1.0001"),
        ({"mmr_lambda": float("nan")}, "mmr_lambda nan: expected a finite number"),  # core.fields
        ({"splitter": "spacy"}, "splitter 'spacy': expected one of ('punctuation', 'prose')"),
        ({"splitter": ""}, "splitter '': expected one of ('punctuation', 'prose')"),
        ({"window": 0}, "window must be >= 1, got 0"),
        ({"window": -1}, "window must be >= 1, got -1"),
    ],
)
def test_summarise_bad_values_name_the_key_and_value(kw, message):
    with pytest.raises(ValueError) as info:
        SummariseParams(**kw)
    assert str(info.value) == message


def test_summarise_bounds_are_inclusive():
    assert SummariseParams(k=1).k == 1
    assert SummariseParams(mmr_lambda=0.0).mmr_lambda == 0.0
    assert SummariseParams(mmr_lambda=1.0).mmr_lambda == 1.0
    assert SummariseParams(window=1).window == 1
    assert SummariseParams(method="extractive", splitter="prose").splitter == "prose"


def test_summarise_whole_floats_become_ints_and_others_are_refused_by_their_bound():
    p = SummariseParams(k=2.0, window=8.0)
    assert (p.k, type(p.k), p.window, type(p.window)) == (2, int, 8, int)
    with pytest.raises(ValueError) as info:
        SummariseParams(k=0.0)  # made 0 first, then refused as 0
    assert str(info.value) == "k must be >= 1, got 0"


@pytest.mark.parametrize(
    ("kw", "message"),
    [  # one case a field; each was accepted (True a k of 1, 8.5 a window) or raised Python's bare '<' TypeError
        ({"k": "3"}, "k '3': expected an integer"),
        ({"k": True}, "k True: expected an integer"),
        ({"mmr_lambda": "0.5"}, "mmr_lambda '0.5': expected a number"),
        ({"window": None}, "window None: expected an integer"),
        ({"window": 8.5}, "window 8.5: expected an integer"),
    ],
)
def test_summarise_a_wrong_python_type_is_one_error_naming_the_field(kw, message):
    with pytest.raises(TypeError) as info:
        SummariseParams(**kw)
    assert str(info.value) == message


def test_summarise_an_unknown_key_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="unexpected keyword argument 'lambda'"):
        SummariseParams(**{"lambda": 0.5})


def test_summarise_params_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SummariseParams().k = 5


# --------------------------------------------------------------------------- ScoreParams


def test_score_defaults():
    assert dataclasses.asdict(ScoreParams()) == {
        "reference_format": "prose",
        "summary_format": "prose",
        "resamples": 1000,
        "seed": 0,
        "level": 0.95,
        "id_field": "id",
        "reference_field": "highlights",
        "on_bad_record": "error",
        "max_record_bytes": DEFAULT_MAX_RECORD_BYTES,
    }


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"reference_format": "tokenized"}, "reference_format 'tokenized': expected one of ('prose', 'tokenised')"),
        ({"summary_format": None}, "summary_format None: expected one of ('prose', 'tokenised')"),
        ({"resamples": 0}, "resamples must be >= 1, got 0"),
        ({"resamples": -100}, "resamples must be >= 1, got -100"),
        ({"level": 0.0}, "level must be in (0, 1), got 0.0"),
        ({"level": 1.0}, "level must be in (0, 1), got 1.0"),
        ({"level": 95}, "level must be in (0, 1), got 95"),
        ({"level": float("nan")}, "level nan: expected a finite number"),  # core.fields
        ({"on_bad_record": "warn"}, "on_bad_record 'warn': expected 'error' or 'skip'"),
        ({"max_record_bytes": 0}, "max_record_bytes must be >= 1, got 0"),
    ],
)
def test_score_bad_values_name_the_key_and_value(kw, message):
    with pytest.raises(ValueError) as info:
        ScoreParams(**kw)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("kw", "message"),
    [  # one case a field; a seed of '0' was kept (numpy's bootstrap refused it after the scoring), None a bare '<'
        ({"resamples": "1000"}, "resamples '1000': expected an integer"),
        ({"seed": "0"}, "seed '0': expected an integer"),
        ({"level": None}, "level None: expected a number"),
        ({"id_field": 5}, "id_field 5: expected a string or None"),
        ({"reference_field": ["highlights"]}, "reference_field ['highlights']: expected a string or None"),
        ({"max_record_bytes": True}, "max_record_bytes True: expected an integer"),
    ],
)
def test_score_a_wrong_python_type_is_one_error_naming_the_field(kw, message):
    with pytest.raises(TypeError) as info:
        ScoreParams(**kw)
    assert str(info.value) == message


def test_score_formats_are_checked_each_on_its_own():
    assert ScoreParams(reference_format="tokenised").summary_format == "prose"
    with pytest.raises(ValueError, match=r"^summary_format 'Tokenised': "):
        ScoreParams(reference_format="tokenised", summary_format="Tokenised")


def test_a_whole_float_resamples_count_bootstraps_as_its_int():
    """summarise.bootstrap_resamples: 1000.0 passes the schema's "integer" (as
    embedding.max_length: 128.0 does), and the scoring jobs passed it on to numpy, which
    stopped with a bare "'float' object cannot be interpreted as an integer"."""
    params = ScoreParams(resamples=200.0, max_record_bytes=4096.0)
    assert (params.resamples, type(params.resamples)) == (200, int)
    assert (params.max_record_bytes, type(params.max_record_bytes)) == (4096, int)
    assert ScoreParams(level=1 / 2).level == 0.5  # a float field keeps its float
    scores = pd.DataFrame(
        {"id": ["a", "b"], "system": ["s", "s"], "rouge1": [10.0, 30.0], "rouge2": [0.0, 0.0],
         "rougeL": [5.0, 5.0], "rougeLsum": [5.0, 5.0]}
    )  # fmt: skip
    got = system_means(scores, params)
    assert got.equals(system_means(scores, ScoreParams(resamples=200)))
    assert got.loc[got["metric"] == "rouge1", "mean"].tolist() == [20.0]


def test_score_params_from_the_config_build_score_params():
    config = {
        "input": {"id_field": None, "on_bad_record": "skip", "max_record_mb": 64},
        "summarise": {
            "method": "stored",
            "reference_field": "gold",
            "reference_format": "tokenised",
            "stored_format": None,
            "bootstrap_resamples": 10,
        },
    }
    params = score_params(config)
    # Stored system outputs are read with the references' format; no record limit away from 64.
    assert params == {
        "id_field": None,
        "reference_field": "gold",
        "reference_format": "tokenised",
        "summary_format": "tokenised",
        "resamples": 10,
        "on_bad_record": "skip",
    }
    assert ScoreParams(**params).summary_format == "tokenised"
    config["summarise"]["method"] = "lead"  # the workflow's own summaries: prose, one sentence a line
    assert score_params(config)["summary_format"] == "prose"


# --------------------------------------------------------------------------- which keys a method reads


def test_ignored_by_names_the_keys_a_method_does_not_read():
    keys = ["summarise.k", "summarise.mmr_lambda", "summarise.encoder", "summarise.generation.num_beams", "input.x"]
    assert ignored_by("lead", keys) == ["summarise.mmr_lambda", "summarise.encoder", "summarise.generation.num_beams"]
    assert ignored_by("extractive", keys) == ["summarise.generation.num_beams"]
    assert ignored_by("abstractive", keys) == ["summarise.k", "summarise.mmr_lambda", "summarise.encoder"]
    # stored runs no summarise job (its sweeps are refused elsewhere); an unknown method likewise reads no table.
    assert ignored_by("stored", keys) == []
    assert ignored_by("nonsense", keys) == []
    assert ignored_by("lead", []) == []


def test_without_effect_names_window_for_lead_and_extractive_only():
    keys = ["summarise.window", "summarise.k", "summarise.window.x", "embedding.window"]
    assert without_effect("lead", keys) == ["summarise.window", "summarise.window.x"]
    assert without_effect("extractive", keys) == ["summarise.window", "summarise.window.x"]
    assert without_effect("abstractive", keys) == []  # a window's batches can move last bits
    assert without_effect("stored", keys) == []


def test_every_lead_and_extractive_key_is_a_summarise_params_field():
    """The job's params hold METHOD_KEYS (summarise.py builds SummariseParams from them,
    encoder aside): a name here that is no field would be dropped from the identity."""
    names = {f.name for f in dataclasses.fields(SummariseParams)}
    assert set(METHOD_KEYS["lead"]) <= names
    assert set(METHOD_KEYS["extractive"]) - names == {"encoder"}


def test_an_abstractive_jobs_params_record_the_sampling_settings_only_where_set():
    """temperature, top_k and top_p joined summarise.generation after abstractive jobs had
    recorded it: at null they stay out of the job's params, which are then those of a
    job that finished before them (the eight keys below), so an upgrade reruns no finished
    summarise job; a set value is recorded and reruns the job."""
    from shardflow.core.config import load_schema, read_yaml, validate_config
    from shardflow.summarise.params import method_params
    from tests.helpers import REPO

    schema = load_schema(REPO / "config" / "config.schema.yaml")
    config = validate_config(read_yaml(REPO / "config" / "config.yaml"), schema)
    config["summarise"].update(method="abstractive", model="/models/bart")
    params = method_params(config["summarise"])
    assert params["generation"] == {
        "num_beams": None, "max_new_tokens": None, "min_length": None, "min_new_tokens": None,
        "length_penalty": None, "no_repeat_ngram_size": None, "early_stopping": None, "do_sample": None,
    }  # fmt: skip
    config["summarise"]["generation"].update(do_sample=True, temperature=0.7)
    assert method_params(config["summarise"])["generation"]["temperature"] == 0.7
    assert "top_p" not in method_params(config["summarise"])["generation"]
    config["summarise"]["method"] = "lead"
    assert "generation" not in method_params(config["summarise"])

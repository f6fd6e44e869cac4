"""Reading a model folder as sentence-transformers 6 reads it (shardflow.embed.stconfig).

The comparisons of whole embeddings with sentence-transformers are in test_engine.py;
these check the description of a folder alone, without loading weights.
"""

from __future__ import annotations

import json
import re

import pytest

from shardflow.embed.stconfig import UnsupportedModelError, load_model_spec, output_dim


def plain_folder(path, **config):
    """A folder without modules.json: a config.json of a 32-wide model and `config`."""
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 32, **config}))
    return path


def st_folder(path):
    """A folder sentence-transformers saved: a plain folder, Transformer and mean Pooling in
    modules.json (it reads config_sentence_transformers.json only beside one)."""
    plain_folder(path)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "1_Pooling").mkdir()
    (path / "1_Pooling" / "config.json").write_text(json.dumps({"pooling_mode": "mean"}))
    return path


@pytest.mark.parametrize(
    ("config", "pooling"),
    [
        ({"architectures": ["Qwen3ForCausalLM"]}, "lasttoken"),
        ({"architectures": ["LlamaForCausalLM"], "is_causal": True}, "lasttoken"),
        ({"architectures": ["Qwen3ForCausalLM"], "is_causal": False}, "mean"),  # a bidirectional decoder
        ({"architectures": ["Qwen3Model"]}, "mean"),
        ({"architectures": ["BertModel", "Qwen3ForCausalLM"]}, "mean"),  # the first architecture decides
        ({"architectures": []}, "mean"),
        ({}, "mean"),
    ],
)
def test_a_folder_without_modules_json_pools_as_sentence_transformers_would(tmp_path, config, pooling):
    spec = load_model_spec(plain_folder(tmp_path / "m", **config))
    assert spec.pooling == (pooling,) and not spec.has_st_config and not spec.normalize
    assert spec.notes == (
        f"no modules.json: {pooling} pooling{' (a causal language model)' if pooling == 'lasttoken' else ''}"
        ", no normalisation (as sentence-transformers does)",
    )


@pytest.mark.parametrize("value", [0, -4, 8.0, "8", True, [8]])
def test_a_truncate_dim_that_is_not_a_positive_integer_names_the_file(tmp_path, value):
    folder = st_folder(tmp_path / "m")
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"truncate_dim": value}))
    with pytest.raises(
        UnsupportedModelError, match=r"config_sentence_transformers\.json: truncate_dim .* is not a positive integer"
    ):
        load_model_spec(folder)


def test_truncate_dim_null_is_no_truncation(tmp_path):
    folder = st_folder(tmp_path / "m")
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"truncate_dim": None}))
    spec = load_model_spec(folder)
    assert spec.truncate_dim is None and output_dim(spec) == 32


def test_a_normalize_module_followed_by_a_dense_does_not_make_unit_norm_vectors(tmp_path):
    """Modules run as modules.json lists them, so a Dense may follow Normalize: its
    vectors are no longer unit-norm, yet `normalize` said they were, and rule verify
    checked their norms and failed a correct run. Normalize last (after a Dense too) still is."""
    from shardflow.embed.stconfig import DenseSpec, ModelSpec, NormalizeSpec

    dense = DenseSpec(tmp_path, 8, 4, True, "torch.nn.modules.linear.Identity")
    spec = ModelSpec(source="m", folder=tmp_path, transformer_folder=tmp_path, head=(NormalizeSpec(), dense))
    assert not spec.normalize
    assert ModelSpec(source="m", folder=tmp_path, transformer_folder=tmp_path, head=(dense, NormalizeSpec())).normalize
    assert ModelSpec(source="m", folder=tmp_path, transformer_folder=tmp_path, head=(NormalizeSpec(),)).normalize


# DistilBERT's config.json names its width `dim` and its feed-forward width `hidden_dim`;
# GPT-2's names the width `n_embd`. Neither has a `hidden_size` key, so every such model
# (msmarco-distilbert-base-tas-b, multi-qa-distilbert-*, distiluse-base-multilingual-*)
# was refused: "config.json has no hidden_size or d_model".
DISTILBERT = {"model_type": "distilbert", "architectures": ["DistilBertModel"], "dim": 24, "hidden_dim": 96}


@pytest.mark.parametrize("key", ["word_embedding_dimension", "embedding_dimension"])
def test_the_width_is_the_pooling_configs_as_sentence_transformers_reads_it(tmp_path, key):
    """sentence-transformers' Pooling gives its config's width (`embedding_dimension`,
    `word_embedding_dimension` in saves before 6) times its modes: config.json is not read."""
    folder = st_folder(tmp_path / "m")
    (folder / "config.json").write_text(json.dumps(DISTILBERT))
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({key: 24, "pooling_mode": ["cls", "mean"]}))
    assert output_dim(load_model_spec(folder)) == 48


@pytest.mark.parametrize(
    ("config", "width"),
    [(DISTILBERT, 24), ({"model_type": "gpt2", "n_embd": 40}, 40), ({"model_type": "t5", "d_model": 16}, 16)],
)
def test_a_folder_without_a_pooling_config_has_the_width_transformers_reads(tmp_path, config, width):
    """No modules.json: sentence-transformers pools the transformer's `hidden_size`, which
    transformers' config classes map to `dim`, `n_embd` or `d_model`."""
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    assert output_dim(load_model_spec(folder)) == width


def test_a_config_json_transformers_cannot_read_names_the_folder(tmp_path):
    folder = plain_folder(tmp_path / "m", model_type="no-such-model")
    with pytest.raises(UnsupportedModelError, match=f"^{re.escape(str(folder))}: no embedding width: transformers"):
        output_dim(load_model_spec(folder))


@pytest.mark.parametrize("value", [0, "24", 24.0, True])
def test_a_pooling_width_that_is_not_a_positive_integer_names_the_file(tmp_path, value):
    folder = st_folder(tmp_path / "m")
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": value}))
    with pytest.raises(
        UnsupportedModelError, match=r"1_Pooling/config\.json: embedding_dimension .* is not a positive"
    ):
        load_model_spec(folder)

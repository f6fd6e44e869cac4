"""Reading a model folder as sentence-transformers 6 reads it (shardflow.embed.stconfig).

The comparisons of whole embeddings with sentence-transformers are in test_engine.py;
these check the description of a folder alone, without loading weights.
"""

from __future__ import annotations

import json

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

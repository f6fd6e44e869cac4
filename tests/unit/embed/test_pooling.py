"""pool, exclude_prompt and the head on hand-made tensors: which tokens count, whichever
side the padding is on, and rows with nothing to pool. (test_engine compares whole
encodes with sentence-transformers; these pin the edge rows it never builds.)"""

from __future__ import annotations

import pytest
import torch

from shardflow.embed.pooling import build_head, exclude_prompt, pool
from shardflow.embed.stconfig import DenseSpec, NormalizeSpec

# Two rows of three real tokens (values 1, 2, 3 in every dimension), one padded right, one left.
HIDDEN = torch.tensor([[1.0, 2.0, 3.0, 9.0], [9.0, 1.0, 2.0, 3.0]]).unsqueeze(-1).repeat(1, 1, 2)
MASK = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 1]])


@pytest.mark.parametrize(
    "mode, expected",
    [("mean", 2.0), ("max", 3.0), ("cls", 1.0), ("lasttoken", 3.0), ("mean_sqrt_len_tokens", 6 / 3**0.5),
     ("weightedmean", (1 * 1 + 2 * 2 + 3 * 3) / 6)],
)
def test_every_mode_reads_real_tokens_whichever_side_the_padding_is_on(mode, expected):
    out = pool(HIDDEN, MASK, (mode,))
    assert out.dtype == torch.float32 and out.shape == (2, 2)
    assert out.flatten().tolist() == pytest.approx([expected] * 4)


def test_modes_are_concatenated_in_the_order_given():
    out = pool(HIDDEN, MASK, ("cls", "max"))
    assert out.tolist() == [[1.0, 1.0, 3.0, 3.0]] * 2


def test_excluding_the_prompt_counts_from_the_first_real_token_not_position_zero():
    mask = exclude_prompt(MASK, 1)
    assert mask.tolist() == [[0, 1, 1, 0], [0, 0, 1, 1]]
    assert pool(HIDDEN, MASK, ("mean",), prompt_length=1).tolist() == [[2.5, 2.5]] * 2
    # weights still count from the first real token, prompt included (as sentence-transformers)
    assert pool(HIDDEN, MASK, ("weightedmean",), prompt_length=1)[:, 0].tolist() == pytest.approx([(4 + 9) / 5] * 2)


@pytest.mark.parametrize("mode", ["mean", "mean_sqrt_len_tokens", "weightedmean", "lasttoken"])
def test_an_all_padding_row_pools_to_zeros_not_nan(mode):
    mask = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0]])
    out = pool(HIDDEN, mask, (mode,))
    assert torch.isfinite(out).all() and out[1].tolist() == [0.0, 0.0]
    assert out[0].tolist() == pool(HIDDEN[:1], mask[:1], (mode,))[0].tolist()  # the other row is untouched


def test_half_precision_states_are_summed_in_float32():
    # 1 + 2**-7 is exact in bf16; the sum of 300 of them is not (bf16 holds 302, not 302.34).
    hidden = torch.full((1, 300, 1), 1 + 2**-7, dtype=torch.bfloat16)
    out = pool(hidden, torch.ones(1, 300, dtype=torch.long), ("mean",))
    assert out.dtype == torch.float32 and out.item() == 1 + 2**-7


def test_an_unknown_mode_is_named():
    with pytest.raises(ValueError, match="unknown pooling mode 'avg'"):
        pool(HIDDEN, MASK, ("avg",))


def test_normalize_leaves_a_zero_vector_zero_and_truncation_comes_after_it():
    head = build_head((NormalizeSpec(),), truncate_dim=1)
    out = head(torch.tensor([[0.0, 0.0], [3.0, 4.0]]))
    assert out.tolist() == [[0.0], [pytest.approx(0.6)]]  # the kept dimension is not renormalised


def test_a_dense_module_without_weights_or_with_a_non_module_activation_is_named(tmp_path):
    spec = DenseSpec(tmp_path, 2, 2, True, "torch.nn.Tanh")
    with pytest.raises(FileNotFoundError, match=f"Dense module {tmp_path}: no model.safetensors"):
        build_head((spec,))
    with pytest.raises(TypeError, match="'torch.tanh' is not a torch.nn.Module class"):
        build_head((DenseSpec(tmp_path, 2, 2, True, "torch.tanh"),))

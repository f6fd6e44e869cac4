"""The GPT of shardflow.train.model: shapes, causality, sampling, FLOPs, Hugging Face export."""

from __future__ import annotations

import math

import pytest
import torch

from shardflow.train.hf_export import export_gpt2
from shardflow.train.model import GPT, GPTConfig

TINY = GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=32)


@pytest.fixture(autouse=True)
def one_thread():
    # The CI machine's cores are shared; one thread keeps tiny matmuls fast and results stable.
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def tiny(**overrides) -> GPT:
    torch.manual_seed(0)
    cfg = GPTConfig(**{**TINY.to_dict(), **overrides})
    return GPT(cfg).eval()


def test_shapes_and_initial_loss():
    model = tiny()
    idx = torch.randint(0, 50, (3, 16))
    logits, loss = model(idx, torch.randint(0, 50, (3, 16)))
    assert logits.shape == (3, 16, 50)
    assert loss.shape == ()
    # Small init: predictions start near uniform, loss near ln(vocab).
    assert abs(loss.item() - math.log(50)) < 0.2
    logits, loss = model(idx[:, :5])
    assert logits.shape == (3, 5, 50) and loss is None
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 17, dtype=torch.long))


def test_head_is_tied_to_embedding():
    model = tiny()
    assert model.lm_head.weight is model.transformer.wte.weight
    # The tied tensor counts once.
    assert model.num_params(non_embedding=False) == sum(p.numel() for p in model.parameters())


def test_future_tokens_do_not_change_past_logits():
    model = tiny()
    idx = torch.randint(0, 50, (2, 16))
    changed = idx.clone()
    changed[:, 9] = (changed[:, 9] + 7) % 50
    a, _ = model(idx)
    b, _ = model(changed)
    assert torch.allclose(a[:, :9], b[:, :9], atol=1e-6, rtol=0)
    assert not torch.allclose(a[:, 9:], b[:, 9:], atol=1e-3)


def test_generate_is_deterministic_given_a_generator():
    model = tiny()
    start = torch.zeros(1, 1, dtype=torch.long)

    def run(seed, **kw):
        return model.generate(start, 30, generator=torch.Generator().manual_seed(seed), **kw)

    a, b = run(1, top_k=10), run(1, top_k=10)
    assert a.shape == (1, 31) and torch.equal(a, b)
    assert not torch.equal(a, run(2, top_k=10))
    # Longer than block_size: the context is cropped, not an error.
    greedy = run(0, temperature=0)
    assert torch.equal(greedy, run(5, temperature=0))


def test_flops_per_token_formula():
    model = tiny()
    n = model.num_params(non_embedding=True)
    assert n == model.num_params(non_embedding=False) - 16 * 32
    assert model.flops_per_token() == 6 * n + 12 * 2 * 32 * 16
    assert model.flops_per_token(8) == 6 * n + 12 * 2 * 32 * 8


def test_config_rejects_heads_that_do_not_divide_width():
    with pytest.raises(ValueError, match="multiple of n_head"):
        GPTConfig(n_embd=30, n_head=4)


@pytest.mark.parametrize("bias", [True, False])
def test_hf_export_loads_offline_with_equal_logits(tmp_path, monkeypatch, bias):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModelForCausalLM

    model = tiny(bias=bias)
    with torch.no_grad():  # non-zero biases and gains, so a misplaced one would show
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    export_gpt2(model, tmp_path / "hf", eot_id=49)
    hf = AutoModelForCausalLM.from_pretrained(tmp_path / "hf", local_files_only=True).eval()
    assert type(hf).__name__ == "GPT2LMHeadModel"
    assert hf.config.n_positions == 16 and hf.config.vocab_size == 50
    idx = torch.randint(0, 50, (2, 16))
    with torch.no_grad():
        ours, _ = model(idx)
        theirs = hf(idx).logits
    torch.testing.assert_close(theirs, ours, atol=1e-5, rtol=0)

"""Helpers of the benchmark scripts in benchmarks/ that can be checked without timing
anything (the scripts themselves are run by hand: README.md, Benchmarks)."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import torch

REPO = Path(__file__).resolve().parents[2]


def load_benchmark(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TinyModel(torch.nn.Module):
    """An embedding table (not counted) and one 8 x 8 linear layer (72 weights, counted)."""

    def __init__(self, **config):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(10, 8)
        self.proj = torch.nn.Linear(8, 8)
        self.config = SimpleNamespace(num_hidden_layers=2, hidden_size=8, **config)


def test_model_flops_counts_attention_over_the_heads_width_where_it_differs_from_hidden():
    """Qwen3-0.6B has 16 heads of 128 (2,048 wide) over a hidden size of 1,024: QK^T and AV
    run at the heads' width, as PaLM's 2N + 4 x layers x (heads x head_dim) x seq per token."""
    bench = load_benchmark("bench_engine")
    lengths = [3, 5]
    model = TinyModel(num_attention_heads=4, head_dim=4)  # 16 wide, hidden 8
    assert bench.model_flops(model, lengths) == 2 * 72 * 8 + 4 * 2 * 16 * (9 + 25)


def test_model_flops_takes_the_hidden_size_where_the_config_has_no_head_dim():
    """BERT's config has no head_dim: its heads split the hidden size."""
    bench = load_benchmark("bench_engine")
    model = TinyModel(num_attention_heads=2)
    assert bench.model_flops(model, [4]) == 2 * 72 * 4 + 4 * 2 * 8 * 16


def test_the_neighbours_benchmark_finds_what_numpy_brute_force_finds():
    """Its two searches agree on every document's neighbours (else its ratio compares
    different work), and the planted noisy copies come out as near-duplicate pairs."""
    bench = load_benchmark("bench_neighbours")
    result = bench.main(["--docs", "300", "--chunks", "3", "--twins", "30", "--threads", "1"])
    assert result["agreeing_documents"] == 300
    assert result["near_duplicate_pairs"] >= 30 and result["groups"] >= 1

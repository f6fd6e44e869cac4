"""Helpers of the benchmark scripts in benchmarks/ that can be checked without timing
anything (the scripts themselves are run by hand: README.md, Benchmarks)."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import numpy as np
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


def test_the_search_benchmark_finds_what_numpy_brute_force_finds_over_several_passes():
    """Its two searches agree on every query's hits (else its ratio compares different
    work), the planted noisy copies find their row first, and --slice-bytes makes the
    job pass over the corpus several times, the module's budget put back after."""
    from shardflow.retrieval import search

    budget = search.SLICE_BYTES["cpu"]
    bench = load_benchmark("bench_search")
    result = bench.main(["--docs", "500", "--queries", "2100", "--dim", "32", "--planted", "50",
                         "--slice-bytes", "1", "--threads", "1"])
    assert result["agreeing_queries"] == 2100 and result["disagreeing_queries"] == 0
    assert result["planted_ranked_first"] == 50
    assert result["passes"] == 3  # slices of one query block, 1,024
    assert search.SLICE_BYTES["cpu"] == budget


def test_the_search_benchmark_tells_a_tie_from_a_wrong_hit():
    """Rows swapped where the baseline's scores are within 1e-6 (here the k-th and the
    (k+1)-th) are a tie; another row in a tied place with another score, or in an
    untied place even with the same score, is a disagreement."""
    bench = load_benchmark("bench_search")
    rows = np.array([[5, 6, 7]] * 4)
    scores = np.array([[0.9, 0.5, 0.5 - 1e-7]] * 4, dtype=np.float32)
    got = np.array([[5, 6], [5, 7], [5, 9], [8, 6]])
    got_s = np.array([[0.9, 0.5], [0.9, 0.5 - 1e-7], [0.9, 0.3], [0.9, 0.5]], dtype=np.float32)
    assert bench.compare(got, got_s, rows, scores) == (1, 1, 2)

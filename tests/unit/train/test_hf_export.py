"""The train job's hf/ folder as a user loads it with transformers, offline: the weights
and the shards' tokenizer behave as the model that was trained.

Built the way `trainer.write_outputs` builds it (`export_gpt2` of the best weights, then
the tokenizer's `save_for_transformers` with block_size), with tiny models: for every
tokenizer kind, a model without biases and a block size that is not a power of two.
"""

from __future__ import annotations

import json
import warnings

import pytest
import torch
from safetensors import safe_open

from shardflow.train.hf_export import export_gpt2
from shardflow.train.model import GPT, GPTConfig
from shardflow.train.tokenizer import CharTokenizer, UnknownCharacterError, load_pretrained, train_bpe

TEXTS = ["First Citizen:\nBefore we proceed any further, hear me speak.", "All:\nSpeak, speak. Ünïcödé 🎉 ok"] * 20
BLOCK = 24  # not a power of two


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    previous = torch.get_num_threads()  # the CI machine's cores are shared
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def pretrained_with_a_template(folder):
    """A tokenizer.json as a pretrained model ships it: a post-processor that puts
    end-of-text before every text (as a BOS), truncation and padding. The shards hold
    none of them, so neither may the export."""
    from tokenizers import processors

    tk = train_bpe(TEXTS, 300, 1)._tk
    tk.post_processor = processors.TemplateProcessing(single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", 0)])
    tk.enable_truncation(8)
    tk.enable_padding(length=16)
    folder.mkdir()
    tk.save(str(folder / "tokenizer.json"))
    return load_pretrained(folder / "tokenizer.json")


def tokenizer(kind, tmp_path):
    if kind == "char":
        return CharTokenizer.train(TEXTS)
    if kind == "bpe":
        return train_bpe(TEXTS, 300, 1)
    if kind == "default":
        return load_pretrained("default")  # MiniLM's WordPiece; end-of-text is [SEP]
    return pretrained_with_a_template(tmp_path / "source")


def export(folder, tok, **overrides):
    """Our model with random non-zero biases and gains, and its hf/ folder as the train job writes it."""
    torch.manual_seed(0)
    cfg = dict(vocab_size=tok.vocab_size, block_size=BLOCK, n_layer=2, n_head=2, n_embd=32, dropout=0.1, bias=False)
    model = GPT(GPTConfig(**{**cfg, **overrides})).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.1)
    export_gpt2(model, folder, eot_id=tok.eot_id)
    tok.save_for_transformers(folder, model.config.block_size)
    return model


def load_model(folder):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder, local_files_only=True).eval()


def load(folder):
    from transformers import AutoTokenizer

    return load_model(folder), AutoTokenizer.from_pretrained(folder, local_files_only=True)


@pytest.mark.parametrize("kind", ["char", "bpe", "default", "pretrained"])
@pytest.mark.parametrize("bias", [False, True])
def test_every_tokenizer_kind_loads_with_our_ids_logits_and_end_of_text(tmp_path, kind, bias):
    """AutoTokenizer encodes a text to the ids the shards hold with its defaults (no BOS,
    EOS or [CLS]/[SEP] added: add_special_tokens=True changes nothing), the model gives our
    logits on them, and end-of-text is eos and bos in the config, the generation config
    and the tokenizer."""
    tok = tokenizer(kind, tmp_path)
    model = export(tmp_path / "hf", tok, bias=bias)
    hf, auto = load(tmp_path / "hf")
    assert type(hf).__name__ == "GPT2LMHeadModel" and hf.config.vocab_size == tok.vocab_size
    for text in (TEXTS[0], TEXTS[1][:20], "  two spaces\n\nand lines "):
        ids = tok.encode(text)
        assert auto(text)["input_ids"] == auto.encode(text) == ids, text
        assert auto.decode(ids) == tok.decode(ids)
    ids = torch.tensor([tok.encode(" ".join(TEXTS[:4]))[:BLOCK], tok.encode(" ".join(TEXTS[1:5]))[:BLOCK]])
    with torch.no_grad():
        theirs = hf(ids).logits
    torch.testing.assert_close(theirs, model(ids)[0], atol=1e-5, rtol=0)
    eot = tok.eot_id
    assert hf.config.eos_token_id == hf.config.bos_token_id == eot
    assert hf.generation_config.eos_token_id == hf.generation_config.bos_token_id == eot
    assert auto.eos_token_id == auto.bos_token_id == eot and auto.model_max_length == BLOCK
    assert hf.config.pad_token_id is None and auto.pad_token is None  # as GPT-2: generate pads with eos


def test_generate_and_the_pipeline_continue_as_ours_and_stop_at_end_of_text(tmp_path, caplog):
    """Greedy decoding gives our greedy tokens, stops at end-of-text (id 0 for bpe: a
    falsy id must still stop it) and warns of nothing; pipeline('text-generation')
    returns the prompt and our decoding of the tokens before end-of-text."""
    import transformers
    from transformers import pipeline

    tok = train_bpe(TEXTS, 300, 1)
    assert tok.eot_id == 0
    model = export(tmp_path / "hf", tok, bias=True)
    hf, auto = load(tmp_path / "hf")
    prompt = "Before we"
    start = torch.tensor([tok.encode(prompt)])
    ours = model.generate(start, 6, temperature=0)[0].tolist()
    assert tok.eot_id not in ours  # the random model runs on, past any end-of-text
    transformers.logging.enable_propagation()  # its warnings reach caplog
    try:
        with warnings.catch_warnings(), caplog.at_level("WARNING"):
            warnings.simplefilter("error")
            theirs = hf.generate(**auto(prompt, return_tensors="pt"), max_new_tokens=6, do_sample=False)
    finally:
        transformers.logging.disable_propagation()
    assert theirs[0].tolist() == ours
    assert caplog.records == []  # no pad_token_id or other warning

    with torch.no_grad():  # now end-of-text is the likeliest next token everywhere
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.copy_(model.transformer.wte.weight[tok.eot_id] * 100)
    export_gpt2(model, tmp_path / "hf", eot_id=tok.eot_id)
    hf, auto = load(tmp_path / "hf")
    out = hf.generate(**auto(prompt, return_tensors="pt"), max_new_tokens=6, do_sample=False)
    assert out[0].tolist() == tok.encode(prompt) + [tok.eot_id]
    generate = pipeline("text-generation", model=str(tmp_path / "hf"))
    assert generate(prompt, max_new_tokens=6, do_sample=False) == [{"generated_text": prompt}]


@pytest.mark.filterwarnings("ignore:Using the model-agnostic default `max_length`")
def test_generation_is_bounded_by_block_size_as_gpt2s(tmp_path):
    """n_positions is block_size: without a length given, generation stops there; asked
    for more, it fails as GPT-2 past 1024 does (transformers warns that the call "has
    exceeded the model's predefined maximum length (24)", then an IndexError on the
    position table), where our own sampler crops the context to block_size."""
    tok = CharTokenizer.train(TEXTS)
    export(tmp_path / "hf", tok)
    hf, auto = load(tmp_path / "hf")
    assert hf.config.n_positions == BLOCK
    prompt = auto("First Citizen", return_tensors="pt")
    assert hf.generate(**prompt, do_sample=False).shape[1] == BLOCK
    with pytest.raises(IndexError):
        hf.generate(**prompt, max_new_tokens=BLOCK, do_sample=False)


def test_an_unknown_character_is_refused_by_the_exported_char_tokenizer_too(tmp_path):
    """Ours names the character; the export has no unknown token either, so it fails
    (tokenizers' message) rather than map the character to a stand-in."""
    tok = CharTokenizer.train(TEXTS)
    tok.save_for_transformers(tmp_path, BLOCK)
    from transformers import AutoTokenizer

    auto = AutoTokenizer.from_pretrained(tmp_path, local_files_only=True)
    with pytest.raises(UnknownCharacterError, match="'Z'"):
        tok.encode("Zed")
    with pytest.raises(Exception, match="Missing \\[UNK\\] token"):
        auto("Zed")


def test_dropout_tying_and_dtype_survive_export_and_save_pretrained(tmp_path):
    """The trained dropout is GPT-2's three rates (embeddings, attention, residual and
    MLP); the head is tied to wte, not stored, and stays tied through save_pretrained and
    from_pretrained; weights of a model held in bf16 are written and loaded as fp32 (the
    trainer's master weights are fp32: bf16 is autocast only)."""
    tok = CharTokenizer.train(TEXTS)
    model = export(tmp_path / "hf", tok, dropout=0.2).to(torch.bfloat16)
    export_gpt2(model, tmp_path / "hf", eot_id=tok.eot_id)
    config = json.loads((tmp_path / "hf/config.json").read_text())
    assert config["resid_pdrop"] == config["embd_pdrop"] == config["attn_pdrop"] == 0.2
    with safe_open(tmp_path / "hf/model.safetensors", "pt") as f:
        assert "lm_head.weight" not in f.keys() and {f.get_slice(k).get_dtype() for k in f.keys()} == {"F32"}
    hf = load_model(tmp_path / "hf")
    block = hf.transformer.h[0]
    rates = [hf.transformer.drop.p, block.attn.attn_dropout.p, block.attn.resid_dropout.p, block.mlp.dropout.p]
    assert rates == [0.2] * 4
    assert hf.dtype == torch.float32 and hf.lm_head.weight.data_ptr() == hf.transformer.wte.weight.data_ptr()
    ids = torch.tensor([tok.encode(TEXTS[0])[:BLOCK]])
    with torch.no_grad():
        torch.testing.assert_close(hf(ids).logits, model.float()(ids)[0], atol=1e-5, rtol=0)
        hf.save_pretrained(tmp_path / "again")
        again = load_model(tmp_path / "again")
        assert again.lm_head.weight.data_ptr() == again.transformer.wte.weight.data_ptr()
        assert torch.equal(again(ids).logits, hf(ids).logits)

"""Tiny random text generators (T5, BART, PEGASUS, GPT-2), built offline in about a second each.

Each builder saves a complete model folder, as a user's would look: weights,
`config.json`, tokenizer files and a `generation_config.json`. Nothing touches a
model hub: T5 uses the byte-level `ByT5Tokenizer` (no files needed), BART and
GPT-2 get a byte-level BPE trained in-process on stdlib docstrings
(`tiny_models.corpus_lines`). Weights are random, from a fixed seed.

Random weights alone make poor test subjects: near-uniform logits (every text
gives the same summary) and an end-of-sequence token that is never chosen (every
summary runs to the length limit). Two nudges keep the outputs informative:

- a larger init range, so different inputs give clearly different summaries;
- a bias towards EOS, so that summaries end at different lengths and batched
  rows finish at different steps (the padding of finished rows is then tested).

`sizes` lets the benchmark build the same shapes larger.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.tiny_models import corpus_lines

SMALL = {"d_model": 32, "layers": 2, "heads": 4, "ffn": 64}
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _bpe(specials: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus_lines(), trainer)
    return tok


def _nudge_eos(model, eos_id: int, bias: float) -> None:
    """Raise EOS's logit by `bias` through the output embedding row (works tied or untied)."""
    import torch

    with torch.no_grad():
        head = model.get_output_embeddings()
        if getattr(head, "bias", None) is not None:
            head.bias[eos_id] += bias
        elif hasattr(model, "final_logits_bias"):  # BART
            model.final_logits_bias[0, eos_id] += bias
        elif hasattr(model, "transformer"):  # GPT-2: a constant unit in the final norm's bias, read by EOS only
            model.transformer.ln_f.bias[0] = 1.0
            head.weight[:, 0] = 0.0
            head.weight[eos_id, 0] = bias
        else:  # T5 (no bias anywhere): scale EOS's row, so its logit swings wider with the input
            head.weight[eos_id] *= bias


def _save(model, tokenizer, gen_config: dict, out: Path) -> Path:
    from transformers import GenerationConfig

    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    # Overwrite what save_pretrained derived: exactly the settings the tests rely on.
    GenerationConfig(**gen_config).save_pretrained(out)
    return out


def build_t5(root: Path, sizes: dict | None = None, seed: int = 0, **generation) -> Path:
    """T5 (relative positions, no position limit) + ByT5's byte tokenizer, limited to 256 tokens."""
    import torch
    from transformers import ByT5Tokenizer, T5Config, T5ForConditionalGeneration

    s = {**SMALL, **(sizes or {})}
    tok = ByT5Tokenizer(model_max_length=256)
    torch.manual_seed(seed)
    cfg = T5Config(
        vocab_size=len(tok),  # 384: the byte vocabulary plus 128 extra ids (tok.vocab_size says 256)
        d_model=s["d_model"],
        d_kv=s["d_model"] // s["heads"],
        d_ff=s["ffn"],
        num_layers=s["layers"],
        num_decoder_layers=s["layers"],
        num_heads=s["heads"],
        initializer_factor=4.0,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        decoder_start_token_id=tok.pad_token_id,
    )
    model = T5ForConditionalGeneration(cfg).eval()
    _nudge_eos(model, tok.eos_token_id, 3.0)
    gen = {
        "decoder_start_token_id": tok.pad_token_id,
        "eos_token_id": tok.eos_token_id,
        "pad_token_id": tok.pad_token_id,
        "max_length": 24,
        **generation,
    }
    return _save(model, tok, gen, Path(root) / f"t5-{s['d_model']}")


def build_bart(root: Path, sizes: dict | None = None, seed: int = 0, **generation) -> Path:
    """BART (learned positions, 128 of them) + a byte-level BPE with <s> text </s>."""
    import torch
    from tokenizers import processors
    from transformers import BartConfig, BartForConditionalGeneration, PreTrainedTokenizerFast

    s = {**SMALL, **(sizes or {})}
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    raw = _bpe(specials, vocab_size=800)
    raw.post_processor = processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 2)])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token="<s>",
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        mask_token="<mask>",
        model_max_length=s.get("positions", 128),
    )
    torch.manual_seed(seed)
    cfg = BartConfig(
        vocab_size=len(tok),
        d_model=s["d_model"],
        encoder_layers=s["layers"],
        decoder_layers=s["layers"],
        encoder_attention_heads=s["heads"],
        decoder_attention_heads=s["heads"],
        encoder_ffn_dim=s["ffn"],
        decoder_ffn_dim=s["ffn"],
        max_position_embeddings=s.get("positions", 128),
        init_std=0.2,
        bos_token_id=0,
        pad_token_id=1,
        eos_token_id=2,
        decoder_start_token_id=2,
        forced_bos_token_id=0,
    )
    model = BartForConditionalGeneration(cfg).eval()
    _nudge_eos(model, 2, 2.0)
    gen = {
        "bos_token_id": 0,
        "decoder_start_token_id": 2,
        "eos_token_id": 2,
        "pad_token_id": 1,
        "forced_bos_token_id": 0,
        "forced_eos_token_id": 2,
        "max_length": 20,
        "num_beams": 2,
        "no_repeat_ngram_size": 3,
        **generation,
    }
    return _save(model, tok, gen, Path(root) / f"bart-{s['d_model']}")


def build_pegasus(root: Path, sizes: dict | None = None, seed: int = 0, **generation) -> Path:
    """PEGASUS (sinusoidal positions, 128 of them) + a byte-level BPE with text </s>, and
    "<n>", PEGASUS's newline, as an ordinary token that decoding keeps.

    Pre-norm layers take a wider init (and no embedding scale) than BART's to make
    summaries differ by input; "<n>" is nudged so that a few summaries hold it between
    other tokens. No summary ends before the length limit: the tests here need none to.
    """
    import torch
    from tokenizers import processors
    from transformers import PegasusConfig, PegasusForConditionalGeneration, PreTrainedTokenizerFast

    s = {**SMALL, **(sizes or {})}
    raw = _bpe(["<pad>", "</s>", "<unk>"], vocab_size=800)
    raw.add_tokens(["<n>"])  # not special: decode(skip_special_tokens=True) keeps it, as PEGASUS's does
    raw.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 1)])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw, pad_token="<pad>", eos_token="</s>", unk_token="<unk>", model_max_length=128
    )
    torch.manual_seed(seed)
    cfg = PegasusConfig(
        vocab_size=len(tok),
        d_model=s["d_model"],
        encoder_layers=s["layers"],
        decoder_layers=s["layers"],
        encoder_attention_heads=s["heads"],
        decoder_attention_heads=s["heads"],
        encoder_ffn_dim=s["ffn"],
        decoder_ffn_dim=s["ffn"],
        max_position_embeddings=128,
        init_std=1.0,
        scale_embedding=False,
        pad_token_id=0,
        eos_token_id=1,
        decoder_start_token_id=0,
    )
    model = PegasusForConditionalGeneration(cfg).eval()
    _nudge_eos(model, tok.convert_tokens_to_ids("<n>"), 8.0)  # raises any token's logit, not only EOS's
    gen = {"decoder_start_token_id": 0, "eos_token_id": 1, "pad_token_id": 0, "max_length": 24, **generation}
    return _save(model, tok, gen, Path(root) / f"pegasus-{s['d_model']}")


def build_gpt2(root: Path, sizes: dict | None = None, seed: int = 0, chat: bool = True, **generation) -> Path:
    """GPT-2 (learned positions, 256 of them) + a byte-level BPE, left padding, a chat template."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    s = {**SMALL, **(sizes or {})}
    eos = "<|endoftext|>"
    raw = _bpe([eos, "<|user|>", "<|assistant|>"], vocab_size=800)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=raw,
        bos_token=eos,
        eos_token=eos,
        pad_token=eos,
        padding_side="left",
        model_max_length=s.get("positions", 256),
    )
    if chat:
        tok.chat_template = CHAT_TEMPLATE
    eos_id = tok.convert_tokens_to_ids(eos)
    torch.manual_seed(seed)
    cfg = GPT2Config(
        vocab_size=len(tok),
        n_embd=s["d_model"],
        n_layer=s["layers"],
        n_head=s["heads"],
        n_inner=s["ffn"],
        n_positions=s.get("positions", 256),
        initializer_range=0.2,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        tie_word_embeddings=False,
    )
    model = GPT2LMHeadModel(cfg).eval()
    _nudge_eos(model, eos_id, 1.3)
    gen = {"bos_token_id": eos_id, "eos_token_id": eos_id, "pad_token_id": eos_id, "max_new_tokens": 16, **generation}
    name = f"gpt2-{s['d_model']}" + ("" if chat else "-plain")
    return _save(model, tok, gen, Path(root) / name)


def read_generation_config(folder: Path) -> dict:
    return json.loads((Path(folder) / "generation_config.json").read_text())

"""Tiny random sentence-transformers models, built offline in a second or two.

Nothing here touches a model hub: tokenizers are trained in-process with
`tokenizers` on docstrings of a few stdlib modules (read with `ast`, never
imported), weights are random (seeded), and each model is saved the way a user
would save one: `SentenceTransformer(modules=[...]).save(path)`.

Three shapes cover the pooling paths the engine implements:

- `build_bert_mean`  WordPiece + BERT, mean pooling, Normalize (MiniLM's shape).
- `build_bert_cls`   the same backbone, CLS pooling, a Dense head, lower-casing.
- `build_qwen_last`  byte-level BPE + Qwen3, last-token pooling, left padding,
                     an EOS appended by the tokenizer and prompts in the config
                     (Qwen3-Embedding's shape).

`build_roberta_mean` adds the RoBERTa family's position numbering (from the pad id
plus one, as XLM-R and multilingual-e5 number theirs), for the paths that pass
position ids themselves (packing). `build_distilbert_mean` adds a config that names its
width `dim` (no `hidden_size` in config.json) and a model that takes no token_type_ids
(msmarco-distilbert, multi-qa-distilbert, distiluse).

Weights use a larger init range than the library default so different texts give
clearly different embeddings: a wrong pooling or a lost prompt must show up as a
cosine well below 1, not hide in the noise of near-constant outputs.
"""

from __future__ import annotations

import ast
import sysconfig
from pathlib import Path

# Modules whose docstrings make the tokenizer corpus: plain English, stable across 3.x.
_CORPUS_MODULES = ("argparse", "textwrap", "json/__init__", "csv", "shutil", "subprocess", "pathlib")
_INIT_RANGE = 0.2


def corpus_lines() -> list[str]:
    """Docstring paragraphs of a few stdlib modules, in a fixed order."""
    root = Path(sysconfig.get_paths()["stdlib"])
    lines: list[str] = []
    for name in _CORPUS_MODULES:
        tree = ast.parse((root / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node)
                if doc:
                    lines.extend(p.strip() for p in doc.split("\n\n") if p.strip())
    return lines


def sample_texts(n: int = 40) -> list[str]:
    """Texts that exercise the edges: empty, whitespace, case, unicode, over-long."""
    base = corpus_lines()
    edge = [
        "",
        "   padded with spaces   ",
        "UPPER case Text",
        "naïve café — unicode ✓",
        " ".join(base[:40]),  # far longer than any max_seq_length used here
        "x",
    ]
    step = max(1, len(base) // n)
    return edge + base[::step][: max(0, n - len(edge))]


def _wordpiece_tokenizer(model_max_length: int):
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    special = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    # Cased on purpose, so `do_lower_case` in the ST config changes the ids.
    tok.normalizer = normalizers.BertNormalizer(lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(corpus_lines(), trainers.WordPieceTrainer(vocab_size=600, special_tokens=special))
    cls_id, sep_id = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    tok.decoder = decoders.WordPiece()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        unk_token="[UNK]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        model_max_length=model_max_length,
    )


def _bpe_tokenizer(model_max_length: int):
    from tokenizers import (
        Tokenizer,
        decoders,
        models,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    eos = "<|endoftext|>"
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=700, special_tokens=[eos], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(corpus_lines(), trainer)
    # Like Qwen3-Embedding: every text ends in EOS, whose state last-token pooling reads.
    tok.post_processor = processors.TemplateProcessing(single=f"$A {eos}", special_tokens=[(eos, tok.token_to_id(eos))])
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=eos,
        pad_token=eos,
        padding_side="left",
        model_max_length=model_max_length,
    )


def _bert(vocab_size: int, hidden: int, layers: int, max_positions: int, seed: int):
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    cfg = BertConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        intermediate_size=2 * hidden,
        max_position_embeddings=max_positions,
        initializer_range=_INIT_RANGE,
    )
    return BertModel(cfg)


def _save_st(hf_dir: Path, out: Path, modules_after, max_seq_length: int, do_lower_case: bool, **st_kwargs) -> Path:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer import modules as models

    transformer = models.Transformer(str(hf_dir), max_seq_length=max_seq_length, do_lower_case=do_lower_case)
    dim = transformer.get_embedding_dimension()
    st = SentenceTransformer(modules=[transformer, *modules_after(dim)], device="cpu", **st_kwargs)
    st.save(str(out))
    return out


def build_bert_mean(root: Path, *, hidden: int = 32, layers: int = 2, max_seq_length: int = 48, seed: int = 0) -> Path:
    """BERT + WordPiece, mean pooling, Normalize; prompts in the config, none by default."""
    from sentence_transformers.sentence_transformer import modules as models

    root = Path(root)
    hf = root / "bert_hf"
    tok = _wordpiece_tokenizer(512)
    _bert(len(tok), hidden, layers, 128, seed).save_pretrained(hf)
    tok.save_pretrained(hf)
    return _save_st(
        hf,
        root / "bert_mean",
        lambda dim: [models.Pooling(dim, pooling_mode="mean"), models.Normalize()],
        max_seq_length=max_seq_length,
        do_lower_case=False,
        prompts={"query": "query: ", "passage": "passage: "},
    )


def build_bert_cls(root: Path, *, seed: int = 1) -> Path:
    """BERT + WordPiece, CLS pooling, Dense(32->16, Tanh), Normalize, do_lower_case."""
    import torch
    from sentence_transformers.sentence_transformer import modules as models

    root = Path(root)
    hf = root / "bert_cls_hf"
    tok = _wordpiece_tokenizer(512)
    _bert(len(tok), 32, 2, 128, seed).save_pretrained(hf)
    tok.save_pretrained(hf)

    def head(dim: int):
        torch.manual_seed(seed)
        return [
            models.Pooling(dim, pooling_mode="cls"),
            models.Dense(dim, 16, activation_function=torch.nn.Tanh()),
            models.Normalize(),
        ]

    return _save_st(hf, root / "bert_cls", head, max_seq_length=40, do_lower_case=True)


def build_qwen_last(root: Path, *, seed: int = 2) -> Path:
    """Qwen3 decoder + byte-level BPE, last-token pooling, left padding, default prompt."""
    import torch
    from sentence_transformers.sentence_transformer import modules as models
    from transformers import Qwen3Config, Qwen3Model

    root = Path(root)
    hf = root / "qwen_hf"
    tok = _bpe_tokenizer(512)
    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(tok),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=8,
        max_position_embeddings=256,
        initializer_range=_INIT_RANGE,
        # No pad_token_id: it would zero the EOS embedding (EOS doubles as pad), and
        # last-token pooling reads the EOS state.
        pad_token_id=None,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
    )
    Qwen3Model(cfg).save_pretrained(hf)
    tok.save_pretrained(hf)
    return _save_st(
        hf,
        root / "qwen_last",
        lambda dim: [models.Pooling(dim, pooling_mode="lasttoken"), models.Normalize()],
        max_seq_length=64,
        do_lower_case=False,
        prompts={"query": "Instruct: find the passage\nQuery: ", "document": ""},
        default_prompt_name="query",
    )


def build_roberta_mean(root: Path, *, seed: int = 3) -> Path:
    """RoBERTa + WordPiece, mean pooling, Normalize: a text's positions start at
    pad_token_id + 1, not 0 (the RoBERTa family's numbering: XLM-R, CamemBERT)."""
    import torch
    from sentence_transformers.sentence_transformer import modules as models
    from transformers import RobertaConfig, RobertaModel

    root = Path(root)
    hf = root / "roberta_hf"
    tok = _wordpiece_tokenizer(512)
    torch.manual_seed(seed)
    cfg = RobertaConfig(
        vocab_size=len(tok),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=64,
        max_position_embeddings=128 + tok.pad_token_id + 1,
        initializer_range=_INIT_RANGE,
        pad_token_id=tok.pad_token_id,
        type_vocab_size=1,
    )
    RobertaModel(cfg).save_pretrained(hf)
    tok.save_pretrained(hf)
    return _save_st(
        hf,
        root / "roberta_mean",
        lambda dim: [models.Pooling(dim, pooling_mode="mean"), models.Normalize()],
        max_seq_length=48,
        do_lower_case=False,
    )


def build_distilbert_mean(root: Path, *, seed: int = 4) -> Path:
    """DistilBERT + WordPiece, mean pooling, Normalize. Its config.json names the width
    `dim` and the feed-forward width `hidden_dim` (here twice `dim`, so reading the one
    for the other shows)."""
    import torch
    from sentence_transformers.sentence_transformer import modules as models
    from transformers import DistilBertConfig, DistilBertModel

    root = Path(root)
    hf = root / "distilbert_hf"
    tok = _wordpiece_tokenizer(512)
    torch.manual_seed(seed)
    cfg = DistilBertConfig(
        vocab_size=len(tok),
        dim=32,
        hidden_dim=64,
        n_layers=2,
        n_heads=4,
        max_position_embeddings=128,
        initializer_range=_INIT_RANGE,
        pad_token_id=tok.pad_token_id,
    )
    DistilBertModel(cfg).save_pretrained(hf)
    tok.save_pretrained(hf)
    return _save_st(
        hf,
        root / "distilbert_mean",
        lambda dim: [models.Pooling(dim, pooling_mode="mean"), models.Normalize()],
        max_seq_length=48,
        do_lower_case=False,
    )

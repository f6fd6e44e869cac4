"""Abstractive summaries from any local Hugging Face model folder (or a hub name in the local
cache: core.models.model_folder, as the embedding engine finds its model), batched for throughput.

    gen = load_generator(GenerateParams(model="path/to/bart-large-cnn"))
    records = gen.summarise(texts)   # [{summary, input_tokens, output_tokens, truncated}, ...]

Seq2seq models (BART, PEGASUS, T5 with its "summarize: " prefix) read the text;
decoder-only models read an instruction plus the text through their chat template
and continue it. Either way the summary of a text is exactly what
`model.generate(**tokenizer(input), <same settings>)` gives for that text alone,
greedy or beam search, while the texts travel in batches. It is decoded without
special tokens and stripped; a PEGASUS model's "<n>" becomes the newline it stands
for, as PEGASUS's own decoder writes it (`generate_params.NEWLINE_SYMBOL`), so that
its sentences are lines, as lead and extractive summaries' are.

1. A window of texts is tokenized once, sorted by token count (longest first) and
   cut into batches by a token budget (`shardflow.core.batching`): little padding,
   and roughly constant memory per batch. Padding is on the right for encoders,
   on the left for decoder-only models (`generate` derives their position ids
   from the attention mask, so a left-padded row sees the positions it sees alone).
2. Generation settings are the model's `GenerationConfig`, then (seq2seq) its
   `task_specific_params.summarization`, then the overrides in `GenerateParams`,
   handed to `generate` as one config (see `generate_params`).
3. Batching must not change what a row's settings mean. Some settings count the
   padding of a batched input: for decoder-only models `max_length` and
   `min_length` measure the prompt too (padding included), and the `encoder_*`
   penalties read pad tokens as input tokens. A batch then only holds rows for
   which the padding makes no difference: rows with the same number of new
   tokens allowed and required, or, for the penalties, rows of the same length.
   (`max_new_tokens` and `min_new_tokens` are padding-free: setting them keeps
   batches full. `repetition_penalty` is too: transformers 5 skips left padding.)
4. Inputs longer than the model's limit are truncated (the text, never the
   instruction or the chat template's generation prompt) and counted in the
   `truncated` field and the run's statistics. The cut keeps the text's start,
   whatever side the tokenizer's config truncates, and whole characters.
5. On CUDA, out-of-memory splits the batch and halves the budget for the rest of
   the run (`shardflow.core.oom`); a text that does not fit alone fails, named.
6. With a resume folder, each finished window is saved as a records part
   (`shardflow.core.parts`) and a restarted run skips it.

Exactness: greedy and beam search pick tokens by comparing scores, so a batched
row matches its solo run as long as padding changes no comparison. In exact
arithmetic it changes none (masked positions weigh exactly zero); in floating
point a batch can move the last bits of a logit (other kernel blocking), which
flips a choice only on a near-tie. The tests check token-for-token equality in
fp32 on CPU; bf16 on CUDA is more exposed to near-ties. Sampling (which needs a
seed) draws each document's tokens from the document's own random stream, so a
sampled summary is, likewise, the one its text gets alone with that stream.

Sampling's streams: each document draws from a torch generator seeded with a hash of
(seed, the chunk's texts, its position in the chunk) (`document_seed`), so that the
streams of other seeds, other chunks and other documents are unrelated, while a rerun
or a resumed window draws the same. `generate` picks a row's next token (its beams'
candidates, for beam sampling) from the distribution it computed, with all the
model's processors and warpers applied; only the random numbers are the row's own
(`_DocumentStreams`: Gumbel-top-k, a draw without replacement). So the batch a
document travels in, and an out-of-memory back-off that splits it, change no sample.
Until 2026-11-29 each window drew from one stream (torch seeded with a hash of seed,
texts and window index): the halves of a split batch drew other numbers than the
whole, so a job that backed off wrote other samples than its rerun. (Before that,
seed + window index made seed 1's window 0 seed 0's window 1.) The scheme is part of
a sampled run's identity (`SAMPLING_STREAMS`), so parts drawn another way are never
resumed; a greedy or beam run draws nothing, and its identity, parts and output are
as they were.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shardflow.core import controller
from shardflow.core.batching import Batch, collate, length_order, plan_batches, split_batch
from shardflow.core.devices import dtype_name, kernel_hardware, peak_memory, reset_peak_memory, runtime
from shardflow.core.hashing import digest, model_identity, texts_fingerprint
from shardflow.core.jobs import EngineCounters
from shardflow.core.models import NO_LIMIT, load_for_inference, model_folder
from shardflow.core.oom import OomBackoff, TooLargeError
from shardflow.core.parts import (
    FORMAT_VERSION,
    JobIdentity,
    PartStore,
    configured,
    job_identity,
    remove_job_parts,
    resume_folder,
    resume_key,
)
from shardflow.core.s3 import logical_path
from shardflow.corpus.chunks import naming_records, read_chunk
from shardflow.summarise.generate_params import (
    DEFAULT_PROMPT,
    PLAIN_TEMPLATE,
    GenerateParams,
    base_generation_config,
    default_prefix,
    effective,
    merge_generation_config,
    newline_symbol,
    params_from_dict,
    resolve_token_budget,
    task_generation_params,
)
from shardflow.summarise.records import write_summaries

__all__ = [
    "GenerateParams",
    "Generator",
    "SamplingError",
    "SummariseStats",
    "TooLargeError",
    "load_generator",
    "params_from_dict",
    "summarise_chunk",
]

log = logging.getLogger(__name__)

PROGRESS_EVERY_S = 10.0
# transformers' default when neither max_length nor max_new_tokens is set: 20 new tokens.
DEFAULT_NEW_TOKENS = 20
# How a sampled run draws (`document_seed`, `_DocumentStreams`), in its identity: a new
# scheme gets a new name, so that no job resumes parts that another scheme drew.
SAMPLING_STREAMS = "sha256(seed, texts, position) per document, gumbel top-k"
# What a text too large for the device alone can lower: its input, and the beams and new
# tokens each step holds keys and values for (core.oom's default names embedding's key).
TOO_LARGE_LOWER = (
    "lower summarise.max_input_length, summarise.generation.num_beams or max_new_tokens, "
    "or use a device with more memory"
)


@dataclass
class SummariseStats(EngineCounters):
    items: int = 0  # texts in the output
    items_generated: int = 0  # texts generated by this call (the rest came from resume parts)
    input_tokens: int = 0  # real input tokens of the generated texts, after truncation
    padded_input_tokens: int = 0
    output_tokens: int = 0  # generated tokens, up to and including the end-of-sequence token
    truncated: int = 0  # texts cut to the input limit (resumed ones included)

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["items_per_s"] = self.per_second(self.items_generated)
        d["output_tokens_per_s"] = self.per_second(self.output_tokens)
        d["padding_fraction"] = 1 - self.input_tokens / self.padded_input_tokens if self.padded_input_tokens else 0.0
        return d


def document_seed(seed: int, texts_sha256: str, position: int) -> int:
    """The seed of one document's sampling stream: 64 bits of a sha256 over the run's
    seed, the chunk (its texts' fingerprint, `texts_fingerprint`) and the document's
    position in the chunk.

    A hash, not a sum: seed + index would give seed 1 the streams of seed 0 shifted by
    one document, and every chunk the same streams. (Torch's CPU generator keeps the low
    32 bits of a seed, CUDA's all 64: two documents share a CPU stream only by a chance
    collision of those bits, never by a pattern.)
    """
    return int(digest({"seed": seed, "texts_sha256": texts_sha256, "position": position})[:16], 16)


class SamplingError(RuntimeError):
    """A document's probabilities at a sampling step are no distribution (inf, nan or an
    element < 0), which torch.multinomial refuses; `row`: the document's position in the
    texts summarised (the chunk's, in `summarise_chunk`, which names its id)."""

    def __init__(self, message: str, row: int):
        super().__init__(message)
        self.row = row


class _DocumentStreams:
    """`torch.multinomial` as `generate` calls it to sample (`_sample`: one token a row;
    beam sampling: a row's candidates, without replacement), each row's random numbers
    from its own generator, seeded by its document (`document_seed`). `rows`: each row's
    document, by its position in the texts summarised (default: 0, 1, ...), which a row
    that cannot be sampled is named by (SamplingError).

    Gumbel-top-k: the `num_samples` largest log p + Gumbel noise are a draw without
    replacement from p (one of them: a draw from p), the probabilities transformers
    computed left as they are. A row draws as many numbers at each step whatever the
    batch holds, so its stream, and its sample, are its own. A call of another shape
    is an error, not a draw from the global stream.
    """

    def __init__(self, seeds: Sequence[int], rows: Sequence[int] | None = None):
        self.seeds = [int(s) for s in seeds]
        self.rows = [int(r) for r in rows] if rows is not None else list(range(len(self.seeds)))
        self.generators: list[torch.Generator] | None = None  # on the device of the first draw
        self.calls = 0

    def multinomial(self, probs, num_samples, replacement=False, *, generator=None, out=None):
        if replacement or generator is not None or out is not None or probs.dim() != 2 or len(probs) != len(self.seeds):
            raise RuntimeError(
                f"sampling with one stream per document: an unexpected torch.multinomial call "
                f"(shape {tuple(probs.shape)}, {len(self.seeds)} documents, replacement={replacement})"
            )
        bad = (~torch.isfinite(probs) | (probs < 0)).any(dim=1)  # the rows torch.multinomial refuses
        if bad.any().item():
            where = bad.nonzero().flatten().tolist()  # each row is one document's (the shape check above)
            row = self.rows[where[0]]
            others = f"; {len(where) - 1} more of the batch's {len(bad)} texts too" if len(where) > 1 else ""
            raise SamplingError(
                f"text {row}: at sampling step {self.calls + 1} its probability tensor contains either `inf`, `nan` "
                f"or element < 0, which torch.multinomial refuses{others}",
                row=row,
            )
        if self.generators is None:
            self.generators = [torch.Generator(device=probs.device).manual_seed(s) for s in self.seeds]
        keys = torch.empty(probs.shape, dtype=torch.float64, device=probs.device)
        for row, g in zip(keys, self.generators, strict=True):
            row.uniform_(generator=g)
        keys.log_().neg_().log_().neg_()  # Gumbel(0, 1) noise, -log(-log u), in place
        keys.add_(probs.log())  # log p + noise; p = 0 stays -inf
        self.calls += 1
        return keys.topk(num_samples, dim=1).indices


@contextlib.contextmanager
def _drawing_from(streams: _DocumentStreams | None) -> Iterator[None]:
    """`generate` samples with `streams` inside (process-wide: one generate runs at a time)."""
    if streams is None:
        yield
        return
    original = torch.multinomial
    torch.multinomial = streams.multinomial
    try:
        yield
    finally:
        torch.multinomial = original


# --------------------------------------------------------------------------- loading


def _load_model(folder: Path, config, dtype: torch.dtype, device: torch.device, logger: logging.Logger):
    from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM

    cls = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    return load_for_inference(cls, folder, dtype=dtype, device=device, logger=logger)


def load_generator(
    params: GenerateParams,
    logger: logging.Logger | None = None,
    *,
    before_generate: Callable[[torch.Tensor], None] | None = None,
) -> Generator:
    """Load the model once; `Generator.summarise` then summarises any number of text lists.

    `before_generate(input_ids)` runs before every `generate` call: tests use it to
    raise `torch.OutOfMemoryError` on CPU and exercise the back-off.
    """
    from transformers import AutoConfig, AutoTokenizer

    logger = logger or log
    folder = model_folder(params.model)  # a folder, or a hub name's snapshot in the local cache
    # fp32 where the GPU has no native bf16 (a V100 or T4): T5-family models overflow in fp16
    device, dtype, described = runtime(params.device, params.dtype, params.threads, engine="summarise")
    config = AutoConfig.from_pretrained(folder)
    task, task_other = task_generation_params(config)
    generation_config = merge_generation_config(base_generation_config(folder, config), params, task)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = _load_model(folder, config, dtype, device, logger)
    gen = Generator(params, folder, tokenizer, model, generation_config, device, dtype, logger, before_generate)
    logger.info(
        "summarise params %s | %s | %s model, input limit %s, token budget %d, generation %s "
        "(the model's generation config, then config.json's task_specific_params.summarization %s, "
        "then summarise.generation %s)",
        asdict(params),
        described,
        "decoder-only" if gen.decoder_only else "seq2seq",
        gen.input_limit,
        gen.token_budget,
        generation_config.to_diff_dict(),
        task,
        params.overrides(),
    )
    if task_other:
        logger.info("task_specific_params.summarization keys that are no generation setting, not used: %s", task_other)
    if gen.padding_settings:
        logger.warning(
            "generation settings %s count the padding of a batch: batches hold only rows whose padding makes "
            "no difference, which can make them small (max_new_tokens / min_new_tokens batch freely)",
            gen.padding_settings,
        )
    return gen


# --------------------------------------------------------------------------- the engine


class Generator:
    """A loaded model, its tokenizer and resolved generation settings; see `load_generator`."""

    def __init__(self, params, folder, tokenizer, model, generation_config, device, dtype, logger, before_generate):
        self.params: GenerateParams = params
        self.folder: Path = folder
        self.tokenizer = tokenizer
        self.model = model
        self.config = model.config
        self.generation_config = generation_config  # model's config + overrides, passed to generate as is
        self.effective = effective(generation_config)  # the same with transformers' defaults filled in
        self.device: torch.device = device
        self.dtype: torch.dtype = dtype
        self.logger: logging.Logger = logger
        self.before_generate = before_generate
        self.decoder_only = not self.config.is_encoder_decoder
        self.tokenizer_truncation_side = tokenizer.truncation_side  # as its config says (seq2seq: set right below)
        self.left_pad = self.decoder_only
        pad = tokenizer.pad_token_id
        for candidate in (generation_config.pad_token_id, tokenizer.eos_token_id, 0):
            if pad is None and candidate is not None:
                pad = candidate[0] if isinstance(candidate, list) else candidate
        self.pad_id = int(pad)
        eos = self.effective.eos_token_id
        self.eos_ids = torch.tensor([] if eos is None else (eos if isinstance(eos, list) else [eos]), dtype=torch.long)
        self.max_positions = getattr(self.config, "max_position_embeddings", None)
        if self.decoder_only:
            if params.prefix:
                raise ValueError(f"{folder}: prefix is for seq2seq models; a decoder-only model takes a prompt")
            self.prefix = ""
            self.prompt = DEFAULT_PROMPT if params.prompt is None else params.prompt
            self.chat = bool(getattr(tokenizer, "chat_template", None))
        else:
            if params.prompt is not None:
                logger.warning("prompt is for decoder-only models: %s is seq2seq, the prompt is not used", folder)
            self.prefix = default_prefix(self.config) if params.prefix is None else params.prefix
            self.prompt = None
            self.chat = False
            # An over-long article is cut at its end, keeping its start (and the prefix
            # before it), whatever side the tokenizer's config says: with truncation_side
            # "left" it kept the last tokens, silently. (A call cannot say the side: the
            # tokenizer ignores a truncation_side argument.)
            tokenizer.truncation_side = "right"
        self.newline_symbol = newline_symbol(self.config)  # PEGASUS's "<n>": each becomes a newline
        self.input_limit = self._input_limit()
        self.same_length_only, self.padding_settings = self._padding_rules()
        self.token_budget = resolve_token_budget(params, device)
        # The back-off counts padded input tokens per batch (beams expand rows, so the
        # budget is shared by them); it halves on out-of-memory, for the Generator's lifetime.
        self.backoff = OomBackoff(max(1, self.token_budget // self.effective.num_beams), device, logger)
        self.identity = self._identity()
        # As configured (core.parts.configured): a killed attempt on another node type had the same.
        self.settings = configured(params, self.identity["model"])
        self.last_stats = SummariseStats()

    # ---- settings -------------------------------------------------------------------

    def _input_limit(self) -> int | None:
        """Most input tokens per text; None: no limit."""
        given = self.params.max_input_length
        if given and self.max_positions and given > self.max_positions and not self.decoder_only:
            # An encoder would fail on the first long text, with an index error naming no
            # key (a decoder-only model's input is cut to the room its positions leave, below).
            raise ValueError(
                f"summarise.max_input_length {given} is more than the {self.max_positions} positions of the model "
                f"{self.folder}: lower it, or leave it null for the model's own limit"
            )
        limits = []
        if self.tokenizer.model_max_length < NO_LIMIT:
            limits.append(int(self.tokenizer.model_max_length))
        if self.max_positions:
            limits.append(int(self.max_positions))
        limit = self.params.max_input_length or (min(limits) if limits else None)
        if self.decoder_only:
            # The prompt and its continuation share the positions (and max_length, when that is set).
            gc = self.generation_config
            if gc.max_new_tokens is not None:
                room = self.max_positions - gc.max_new_tokens if self.max_positions else None
            elif self._explicit_max_length():
                room = self.effective.max_length - 1
            else:
                room = self.max_positions - DEFAULT_NEW_TOKENS if self.max_positions else None
            if room is not None:
                limit = room if limit is None else min(limit, room)
            floor = len(self._prompt_ids(""))
            if limit is not None and limit <= floor:
                raise ValueError(
                    f"{self.folder}: the prompt alone takes {floor} tokens, the input limit is {limit} "
                    "(positions minus the tokens to generate): shorten the prompt or generate fewer tokens"
                )
        return limit

    def _padding_rules(self) -> tuple[bool, list[str]]:
        """(same_length_only, the settings that count padding), for `_batch_keys` and the log."""
        eff, gc = self.effective, self.generation_config
        # Processors that read the padded input ids as text. (repetition_penalty is not
        # one: transformers 5 skips a decoder-only row's left padding, by its attention mask.)
        penalties = []
        if eff.encoder_repetition_penalty != 1.0:
            penalties.append("encoder_repetition_penalty")
        if eff.encoder_no_repeat_ngram_size:
            penalties.append("encoder_no_repeat_ngram_size")
        lengths = []  # decoder-only limits that count the (padded) prompt
        if self.decoder_only and gc.max_new_tokens is None and self._explicit_max_length():
            lengths.append("max_length")
        if self.decoder_only and gc.min_new_tokens is None and eff.min_length:
            lengths.append("min_length")
        return bool(penalties), penalties + lengths

    def _explicit_max_length(self) -> bool:
        # As generate decides it: max_length set in the config passed or in the model's own.
        return self.generation_config.max_length is not None or self.model.generation_config.max_length is not None

    def _batch_keys(self, lengths: np.ndarray) -> np.ndarray | None:
        """Rows may share a batch only with rows of the same key (None: any rows may)."""
        eff, gc = self.effective, self.generation_config
        if self.same_length_only:
            return lengths  # pad tokens would be read as input tokens
        if not self.decoder_only:
            return None
        # Decoder-only: the new tokens allowed (hi) and required (lo) per row, as generate derives them alone.
        if gc.max_new_tokens is not None:
            hi = np.full_like(lengths, gc.max_new_tokens)
        elif self._explicit_max_length():
            hi = eff.max_length - lengths
        else:  # the default: 20 new tokens, within the positions
            total = lengths + eff.max_length
            hi = (np.minimum(total, self.max_positions) if self.max_positions else total) - lengths
        lo = np.zeros_like(lengths) if gc.min_new_tokens is not None else np.maximum(eff.min_length - lengths, 0)
        keys = hi * (1 << 32) + lo
        return None if len(keys) == 0 or (keys == keys[0]).all() else keys

    def _identity(self) -> dict[str, Any]:
        """Everything that decides the output for given texts (resume keys and manifests)."""
        import transformers

        identity = {
            "format": FORMAT_VERSION,
            "model": model_identity(self.folder),
            "device": self.device.type,
            # Parts made on other hardware hold other last bits, so greedy decoding can pick
            # other tokens: not resumed into this output (as the embed engine's identity).
            "hardware": kernel_hardware(self.device),
            "dtype": dtype_name(self.dtype),
            "generation": {k: v for k, v in self.generation_config.to_dict().items() if k != "transformers_version"},
            "prefix": self.prefix,
            "prompt": self.prompt,
            "chat_template": self.chat,
            "input_limit": self.input_limit,
            "token_budget": self.token_budget,
            "max_batch_size": self.params.max_batch_size,
            "window": self.params.window,  # the parts' bounds (and the batches: a window is batched alone)
            "seed": self.params.seed,
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        }
        if self.effective.do_sample:  # only here: greedy and beam runs keep their keys (and parts)
            identity["sampling_streams"] = SAMPLING_STREAMS
        if self.newline_symbol:  # only here: other models keep their keys; PEGASUS parts kept "<n>"
            identity["newline_symbol"] = self.newline_symbol
        if self.tokenizer_truncation_side != "right" and not self.decoder_only:
            identity["truncation_side"] = "right"  # only here: parts made before kept the article's end
        if self.decoder_only:  # parts made before could end a cut text in a U+FFFD (_text_head)
            identity["prompt_cut"] = "whole characters"
        if self.device.type == "cpu":  # CPU kernels split work by thread count, which can move the last bits
            identity["threads"] = self.params.threads or torch.get_num_threads()
        return identity

    # ---- tokenization ---------------------------------------------------------------

    def _render(self, text: str) -> str:
        if not self.chat:
            return PLAIN_TEMPLATE.format(prompt=self.prompt, text=text)
        message = {"role": "user", "content": f"{self.prompt}\n\n{text}"}
        return self.tokenizer.apply_chat_template([message], tokenize=False, add_generation_prompt=True)

    def _prompt_ids(self, text: str) -> list[int]:
        # A rendered chat template already holds its special tokens (BOS, ...): add none.
        return self.tokenizer(self._render(text), add_special_tokens=not self.chat)["input_ids"]

    def _fit_prompt(self, text: str) -> list[int]:
        """Prompt ids for `text` cut (by tokens, from the end) until the whole prompt fits the limit."""
        text_ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = self._prompt_ids(text)
        keep = len(text_ids) - (len(ids) - self.input_limit)
        for _ in range(16):  # re-tokenizing a cut can merge differently: a few rounds at most
            keep = max(0, keep)
            ids = self._prompt_ids(self._text_head(text, text_ids, keep))
            if len(ids) <= self.input_limit:
                return ids
            keep -= len(ids) - self.input_limit
        raise RuntimeError(f"could not fit a prompt into {self.input_limit} tokens")  # pragma: no cover

    def _text_head(self, text: str, text_ids: list[int], keep: int) -> str:
        """The start of `text` that its first `keep` tokens spell, in whole characters.

        A byte-level BPE token can hold part of a character (a CJK character, an accented
        letter, an emoji): cut there, the decoded head ends in U+FFFD, a character the
        article does not hold, which the model would read. It is dropped (one the text
        itself holds there stays).
        """
        head = self.tokenizer.decode(text_ids[:keep]) if keep else ""
        while head.endswith("\ufffd") and not text.startswith(head):
            head = head[:-1]
        return head

    def encode(self, texts: Sequence[str]) -> tuple[list[list[int]], list[bool]]:
        """Input ids per text (truncated to the input limit) and whether each was truncated.

        Seq2seq: `tokenizer(prefix + text, truncation=True, max_length=limit)`.
        Decoder-only: the rendered prompt; an over-long text is cut, the template kept.
        """
        limit = self.input_limit
        if self.decoder_only:
            ids = self.tokenizer([self._render(t) for t in texts], add_special_tokens=not self.chat)["input_ids"]
            truncated = [limit is not None and len(x) > limit for x in ids]
            for i in np.flatnonzero(truncated):
                ids[i] = self._fit_prompt(texts[i])
            return ids, truncated
        inputs = [self.prefix + t for t in texts]
        if limit is None:
            return self.tokenizer(inputs)["input_ids"], [False] * len(inputs)
        # One token over the limit tells a truncated text from one that fits exactly.
        ids = self.tokenizer(inputs, truncation=True, max_length=limit + 1)["input_ids"]
        truncated = [len(x) > limit for x in ids]
        long = np.flatnonzero(truncated)
        if len(long):
            cut = self.tokenizer([inputs[i] for i in long], truncation=True, max_length=limit)["input_ids"]
            for i, x in zip(long, cut, strict=True):
                ids[i] = x
        return ids, truncated

    # ---- generation -----------------------------------------------------------------

    def _generate(self, batch: Batch, seeds: Sequence[int] | None = None, row_offset: int = 0) -> list[list[int]]:
        """New tokens of each row of a batch, up to and including its end-of-sequence token.
        `seeds`: when sampling, each input's stream (`document_seed`), by index in `ids`;
        `row_offset + batch.rows[k]` names a row in errors (as core.oom's)."""
        input_ids = torch.from_numpy(batch.input_ids).to(self.device)
        attention_mask = torch.from_numpy(batch.attention_mask).to(self.device)
        if self.before_generate is not None:
            self.before_generate(input_ids)
        # Fresh generators for every call: the halves of a batch that ran out of memory
        # draw from the start of their documents' streams, as the whole batch did.
        streams = (
            _DocumentStreams([seeds[r] for r in batch.rows], [row_offset + int(r) for r in batch.rows])
            if seeds is not None
            else None
        )
        with _drawing_from(streams):
            out = self.model.generate(
                input_ids=input_ids, attention_mask=attention_mask, generation_config=self.generation_config
            )
        # Decoder-only output repeats the (padded) prompt; seq2seq output opens with the decoder start token.
        new = (out[:, input_ids.shape[1] :] if self.decoder_only else out[:, 1:]).cpu()
        if streams is not None and streams.calls == 0 and new.shape[1]:
            import transformers

            raise RuntimeError(
                f"transformers {transformers.__version__} sampled without torch.multinomial: "
                "the per-document streams were not used"
            )
        # A row that ended early is padded to the batch's longest: cut after its first EOS.
        width = new.shape[1]
        ends = torch.full((len(new),), width, dtype=torch.long)
        if len(self.eos_ids) and width:
            is_eos = torch.isin(new, self.eos_ids)
            has = is_eos.any(dim=1)
            ends[has] = is_eos[has].int().argmax(dim=1) + 1
        return [row[:end] for row, end in zip(new.tolist(), ends.tolist(), strict=True)]

    def _batches(self, ids: list[list[int]]) -> list[np.ndarray]:
        """Row groups, longest first, each within the token budget and of one batch key."""
        lengths = np.fromiter((len(x) for x in ids), dtype=np.int64, count=len(ids))
        order = length_order(lengths)
        keys = self._batch_keys(lengths)
        if keys is not None:  # group by key (stable: each group stays longest first)
            order = order[np.argsort(keys[order], kind="stable")]
            cuts = np.flatnonzero(np.diff(keys[order])) + 1
            groups = np.split(order, cuts)
        else:
            groups = [order]
        rows = []
        for group in groups:
            for s, e in plan_batches(lengths[group], self.backoff.token_budget, self.params.max_batch_size):
                rows.append(group[s:e])
        return rows

    def generate_ids(
        self,
        ids: list[list[int]],
        row_offset: int = 0,
        stats: SummariseStats | None = None,
        seeds: Sequence[int] | None = None,
    ) -> list[list[int]]:
        """Generated token ids for each input, in input order (see `_generate`). A sampled
        run needs `seeds`, one per input: its stream (`document_seed`)."""
        if self.effective.do_sample and (seeds is None or len(seeds) != len(ids)):
            raise ValueError(f"sampling needs one seed per input: {len(ids)} inputs, seeds {seeds!r:.60}")
        seeds = seeds if self.effective.do_sample else None
        stats = stats if stats is not None else SummariseStats()
        result: list[list[int] | None] = [None] * len(ids)
        backoffs = self.backoff.backoffs
        with torch.inference_mode():
            for rows in self._batches(ids):
                batch = collate(ids, rows, self.pad_id, self.left_pad)
                pieces = self.backoff.run(
                    batch,
                    lambda b: self._generate(b, seeds, row_offset),
                    lambda b, n: split_batch(b, n, self.left_pad),
                    row_offset=row_offset,
                    noun="text",
                    lower=TOO_LARGE_LOWER,
                )
                for piece, out in pieces:
                    for r, tokens in zip(piece.rows.tolist(), out, strict=True):
                        result[r] = tokens
                    stats.batches += 1
                    stats.input_tokens += int(piece.lengths.sum())
                    stats.padded_input_tokens += piece.padded_tokens
                    stats.output_tokens += sum(len(t) for t in out)
        stats.oom_backoffs += self.backoff.backoffs - backoffs
        return result  # type: ignore[return-value]

    def _summarise_window(self, texts: list[str], start: int, stats: SummariseStats, chunk_sha256: str) -> list[dict]:
        seeds = None
        if self.effective.do_sample:  # one stream per document: resumed windows draw the same
            seeds = [document_seed(self.params.seed, chunk_sha256, start + i) for i in range(len(texts))]
        ids, truncated = self.encode(texts)
        new = self.generate_ids(ids, row_offset=start, stats=stats, seeds=seeds)
        summaries = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        if self.newline_symbol:
            summaries = [s.replace(self.newline_symbol, "\n") for s in summaries]
        return [
            {"summary": s.strip(), "input_tokens": len(x), "output_tokens": len(n), "truncated": bool(t)}
            for s, x, n, t in zip(summaries, ids, new, truncated, strict=True)
        ]

    def summarise(
        self, texts: Sequence[str], resume_dir: str | Path | None = None, job: JobIdentity | str | None = None
    ) -> list[dict]:
        """Summarise `texts` -> one record per text, in input order:
        {"summary": str, "input_tokens": int, "output_tokens": int, "truncated": bool}.

        With `resume_dir`, each finished window of `window` texts is saved there and
        reused by a later call with the same texts and settings (the caller removes
        the folder once its output is safely written; `summarise_chunk` does); `job`,
        the output they are for (core.parts.PartStore), goes into the folder's attempt records.
        """
        texts = list(texts)
        for i, t in enumerate(texts):
            if not isinstance(t, str):
                raise TypeError(f"text {i} is {type(t).__name__}, not str")
        stats = SummariseStats(items=len(texts), start_unix=time.time())
        t0 = last_log = time.perf_counter()
        n, win = len(texts), self.params.window
        windows = [(w, a, min(a + win, n)) for w, a in enumerate(range(0, n, win))]
        stats.parts = len(windows)
        chunk_sha256 = texts_fingerprint(texts)  # the manifest's, and sampling's streams' (document_seed)
        store = None
        if resume_dir is not None:
            manifest = {
                "n_texts": n,
                "window": win,
                "texts_sha256": chunk_sha256,
                "identity": digest(self.identity),
            }
            store = PartStore(resume_dir, manifest, device=str(self.device), job=job).open()
        records: list[dict] = []
        for w, a, b in windows:
            part = store.load_records(w, b - a) if store is not None else None
            if part is not None:
                stats.resumed_parts += 1
            else:
                part = self._summarise_window(texts[a:b], a, stats, chunk_sha256)
                stats.items_generated += b - a
                if store is not None:
                    store.save_records(w, part)
            records.extend(part)
            now = time.perf_counter()
            if now - last_log >= PROGRESS_EVERY_S and b < n:
                last_log = now
                self.logger.info("summarised %d/%d texts, %.2f texts/s", b, n, stats.items_generated / (now - t0))
        if stats.resumed_parts:
            self.logger.info("resumed %d of %d parts from %s", stats.resumed_parts, len(windows), resume_dir)
        if store is not None:  # the killed attempts before this one (their records stay until the folder goes)
            for key, value in store.attempt_totals().items():
                setattr(stats, key, value)
        stats.truncated = sum(r["truncated"] for r in records)
        stats.seconds = time.perf_counter() - t0
        stats.end_unix = time.time()
        self.last_stats = stats
        s = stats.as_dict()
        self.logger.info(
            "summarised %d texts (%d generated, %d parts resumed) in %.1f s: %.2f texts/s, %.0f output tokens/s, "
            "%.1f%% input padding, %d batches, %d truncated, %d out-of-memory back-offs",
            n,
            stats.items_generated,
            stats.resumed_parts,
            stats.seconds,
            s["items_per_s"],
            s["output_tokens_per_s"],
            100 * s["padding_fraction"],
            stats.batches,
            stats.truncated,
            stats.oom_backoffs,
        )
        return records


# --------------------------------------------------------------------------- one chunk


def summarise_chunk(
    chunk_path: str | Path,
    out_path: str | Path,
    params: GenerateParams,
    resume_root: str | Path,
    logger: logging.Logger | None = None,
    *,
    generator: Generator | None = None,
) -> dict[str, Any]:
    """Summarise one chunk file into JSONL (id, summary, input_tokens, output_tokens,
    truncated; in chunk order), resumably; return run statistics (the job's peak GPU
    memory among them, model loading included: core.devices.peak_memory, null on the CPU).

    Resume state lives in `<resume_root>/<resume_key(chunk, identity)>` and is removed
    once the output is written, with the folders of its killed attempts on other
    hardware (the same output, run and settings: core.parts.remove_job_parts), whose
    attempts the stats count. `generator` reuses an already loaded model.
    """
    logger = logger or log
    started = time.time()  # a folder of this job worked in since is another attempt's, still running
    running = controller.find()  # the Snakemake that records this job's outputs
    reset_peak_memory(generator.device if generator is not None else params.device)  # the job's peak: loading included
    generator = generator or load_generator(params, logger)
    if generator.params != params:
        raise ValueError("generator was loaded with different params")
    ids, texts = read_chunk(chunk_path)
    folder = resume_folder(resume_root, resume_key(chunk_path, generator.identity))
    job = job_identity(out_path, chunk_path, generator.settings)
    with naming_records(chunk_path, ids, TooLargeError, SamplingError):
        records = generator.summarise(texts, resume_dir=folder, job=job)
    controller.stop_if_gone(running, f"the finished parts are kept in {folder}")
    write_summaries(out_path, ids, records)
    stats = generator.last_stats.as_dict()
    stats.update(remove_job_parts(folder, resume_root, job, started, stats))  # with killed attempts' on other hardware
    stats.update(device=str(generator.device), dtype=dtype_name(generator.dtype), chunk=logical_path(chunk_path))
    stats.update(peak_memory(generator.device))  # null on the CPU
    return stats

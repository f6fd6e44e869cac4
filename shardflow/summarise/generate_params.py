"""What decides an abstractive summary: `GenerateParams`, and the generation settings
it resolves to against a model folder.

Generation settings are layered as transformers' summarization pipeline layered
them (transformers 4; version 5 removed that pipeline, and `model.generate` never
read the task's settings): the model's own `GenerationConfig` (its
`generation_config.json`, or, without one, the generation fields of
`config.json`), then, for a seq2seq model, the generation fields of `config.json`'s
`task_specific_params.summarization` (T5's: beam search, 30 to 200 tokens), then
every override that is not None. Fields left unset in all three keep
transformers' global defaults (greedy, 20 new tokens), which `model.generate`
fills in at call time.

Nothing here loads weights.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from shardflow.core.fields import check_device, check_field_types, one_of, whole_floats_as_ints

# Decoder-only models get this instruction unless `prompt` is set.
DEFAULT_PROMPT = "Summarise the following text in a few sentences."
# Without a chat template, a decoder-only model sees "<prompt>\n\n<text>\n\nSummary:".
PLAIN_TEMPLATE = "{prompt}\n\n{text}\n\nSummary:"
# Encoder-decoder families trained with a task prefix (T5's "summarize: ").
T5_FAMILY = ("t5", "mt5", "umt5", "longt5")
T5_PREFIX = "summarize: "
# PEGASUS was trained with every newline of its targets written as "<n>" (its own
# decoder turns them back: google-research/pegasus, ops/public_parsing_ops.py), so
# its summaries hold "<n>" between sentences; newlines are what ROUGE-Lsum (and the
# sentence splitter) read as sentence breaks.
NEWLINE_SYMBOL_FAMILY = ("pegasus", "pegasus_x")
NEWLINE_SYMBOL = "<n>"
# Padded input tokens per batch, counted once per beam. Every decoding step costs
# per-step overhead, so generation wants larger batches than encoding (1024);
# 4096 measured best on CPU for a d_model-256 BART on the demo corpus (2048: more
# steps, 16384: more padding). GPUs want large batches.
AUTO_TOKEN_BUDGET = {"cpu": 4096, "cuda": 65536}
# GenerateParams fields that override the model's GenerationConfig, same names.
GENERATION_FIELDS = (
    "num_beams",
    "max_new_tokens",
    "min_length",
    "min_new_tokens",
    "length_penalty",
    "no_repeat_ngram_size",
    "early_stopping",
    "do_sample",
    "temperature",
    "top_k",
    "top_p",
)
# Of those, the ones only sampling reads (transformers' sampling warpers).
SAMPLING_FIELDS = ("temperature", "top_k", "top_p")


def unread_sampling(summarise: dict[str, Any]) -> str | None:
    """Why a config's `summarise` section (the config's own, or a sweep point's job's)
    cannot summarise: sampling settings beside do_sample false, which its job refuses
    (merge_generation_config) once it has its GPU; None where it can. Where do_sample is
    null the model's generation config decides: only the job can tell."""
    generation = summarise["generation"]
    sampling = [k for k in SAMPLING_FIELDS if generation.get(k) is not None]
    if summarise["method"] != "abstractive" or not sampling or generation.get("do_sample") is not False:
        return None
    return (
        f"summarise.generation sets {', '.join(sampling)}, which only sampling reads, but "
        "summarise.generation.do_sample is false: transformers would ignore them; set do_sample: true "
        "(and summarise.seed), or leave them out"
    )


@dataclass(frozen=True)
class GenerateParams:
    """Everything that decides how (and what) a chunk summarises to.

    model: a local Hugging Face model folder, seq2seq (BART, PEGASUS, T5) or
        decoder-only (anything `AutoModelForCausalLM` loads).
    device: auto, cpu, cuda or cuda:N. dtype: auto (bf16 on CUDA where the GPU runs
        it natively, else fp32), float32, bfloat16 or float16.
    token_budget: most padded input tokens (rows x longest row x num_beams) in one
        batch; None picks a per-device default (AUTO_TOKEN_BUDGET).
    max_batch_size: most texts in one batch, whatever the budget.
    max_input_length: truncate inputs to this many tokens; None means the model's
        limit (tokenizer `model_max_length`, position embeddings). Decoder-only
        models also keep room for the generated tokens inside their positions.
    prefix: text put before every input of a seq2seq model; None picks the
        model's own (`task_specific_params.summarization.prefix`, else
        "summarize: " for the T5 family, else nothing).
    prompt: the instruction for a decoder-only model; None means DEFAULT_PROMPT.
        It goes through the tokenizer's chat template as one user message,
        "<prompt>\\n\\n<text>", with the generation prompt added; a tokenizer without
        a chat template gets PLAIN_TEMPLATE instead.
    num_beams ... do_sample, temperature, top_k, top_p: generation overrides (None: the
        model's setting); the last three are read only when sampling (SAMPLING_FIELDS),
        and setting one where the merged config does not sample is an error.
    seed: required when sampling (do_sample here or in the model's config); each
        document draws from its own stream, seeded with a hash of (seed, the chunk's
        texts, its position in the chunk): `generate.document_seed`.
    window: texts per resumable part (and per length sort).
    threads: torch intra-op threads (None: leave torch's setting).
    """

    model: str
    device: str = "auto"
    dtype: str = "auto"
    token_budget: int | None = None
    max_batch_size: int = 64
    max_input_length: int | None = None
    prefix: str | None = None
    prompt: str | None = None
    num_beams: int | None = None
    max_new_tokens: int | None = None
    min_length: int | None = None
    min_new_tokens: int | None = None
    length_penalty: float | None = None
    no_repeat_ngram_size: int | None = None
    early_stopping: bool | str | None = None
    do_sample: bool | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    window: int = 1024
    threads: int | None = None

    def __post_init__(self) -> None:
        from shardflow.core.devices import DTYPES

        whole_floats_as_ints(self)  # max_input_length 512.0 (a sweep value)
        check_device(self.device)
        if self.dtype != "auto" and not one_of(self.dtype, DTYPES):  # a dict: a list is unhashable there
            raise ValueError(f"dtype {self.dtype!r}: expected auto or one of {sorted(DTYPES)}")
        # A bool itself: 1 and 0 equal True and False, so `in (None, True, False, "never")`
        # took them, and GenerationConfig got an int.
        if not (self.early_stopping is None or isinstance(self.early_stopping, bool) or self.early_stopping == "never"):
            raise ValueError(f"early_stopping {self.early_stopping!r}: expected true, false or 'never'")
        check_field_types(self)  # before the comparisons below: a string or None there is Python's bare TypeError
        for name in ("max_batch_size", "window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in ("token_budget", "max_input_length", "num_beams", "max_new_tokens", "threads"):
            value = getattr(self, name)
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1 or None")
        # transformers refuses a temperature or top_p outside these when it builds the
        # warpers, at the first batch; here, the value is named before the model loads.
        if self.temperature is not None and not self.temperature > 0:
            raise ValueError(f"temperature {self.temperature!r}: expected a number above 0 or None")
        if self.top_p is not None and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p {self.top_p!r}: expected a number above 0 and at most 1, or None")
        for name in ("min_length", "min_new_tokens", "no_repeat_ngram_size", "top_k"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must be >= 0 or None")
        if self.do_sample and self.seed is None:
            raise ValueError(
                "do_sample: true needs a seed, so that a rerun (or a resumed job) gives the same summaries"
            )

    def overrides(self) -> dict[str, Any]:
        """The generation overrides that are set, by GenerationConfig name."""
        return {name: getattr(self, name) for name in GENERATION_FIELDS if getattr(self, name) is not None}


def params_from_dict(values: dict[str, Any]) -> GenerateParams:
    """`GenerateParams(**values)`; an unknown key is a TypeError that names it."""
    known = {f.name for f in fields(GenerateParams)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise TypeError(f"unknown summarise parameter(s) {unknown}; known: {sorted(known)}")
    return GenerateParams(**values)


def base_generation_config(folder: str | Path, model_config=None):
    """The model's own GenerationConfig, as `from_pretrained` gives it to the model."""
    from transformers import AutoConfig, GenerationConfig

    folder = Path(folder)
    if (folder / "generation_config.json").is_file():
        return GenerationConfig.from_pretrained(folder)
    return GenerationConfig.from_model_config(model_config or AutoConfig.from_pretrained(folder))


def summarization_task(model_config) -> dict[str, Any]:
    """config.json's `task_specific_params.summarization` ({} where it has none); either
    level that is not a mapping is an error naming config.json (not a bare AttributeError)."""
    tasks = getattr(model_config, "task_specific_params", None) or {}
    if not isinstance(tasks, dict):
        raise ValueError(
            f"{model_config.name_or_path}/config.json: task_specific_params is {type(tasks).__name__}, "
            "not a mapping of task settings"
        )
    task = tasks.get("summarization") or {}
    if not isinstance(task, dict):
        raise ValueError(
            f"{model_config.name_or_path}/config.json: task_specific_params.summarization is "
            f"{type(task).__name__}, not a mapping of generation settings"
        )
    return task


def task_generation_params(model_config) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the generation settings, the other keys) of a seq2seq model's
    `task_specific_params.summarization`, prefix aside (`default_prefix` reads it).

    As transformers 4's summarization pipeline read them: the keys that are
    `GenerationConfig` fields, applied over the model's own config. Decoder-only
    models get none (that pipeline refused them).
    """
    from transformers import GenerationConfig

    if not model_config.is_encoder_decoder:
        return {}, {}
    task = summarization_task(model_config)
    probe = GenerationConfig()
    settings = {k: v for k, v in task.items() if k != "prefix" and hasattr(probe, k)}
    return settings, {k: v for k, v in task.items() if k != "prefix" and k not in settings}


def merge_generation_config(base, params: GenerateParams, task: dict[str, Any] | None = None):
    """base, then `task` (`task_generation_params`), then the overrides that are set.

    Raises ValueError when the result samples without a seed, or asks for more
    than one returned sequence (one summary per text).
    """
    merged = copy.deepcopy(base)
    unused = merged.update(**(task or {}))
    assert not unused, unused  # task_generation_params keeps GenerationConfig fields only
    unused = merged.update(**params.overrides())
    assert not unused, unused  # every override name is a GenerationConfig field
    eff = effective(merged)
    unread = [name for name in SAMPLING_FIELDS if getattr(params, name) is not None]
    if unread and not eff.do_sample:
        # transformers ignores them there (a warning at most): greedy or beam search
        # summaries under a config that reads as sampled ones.
        names = ", ".join(unread)
        raise ValueError(
            f"{params.model}: summarise.generation sets {names}, which only sampling reads, but the generation "
            f"config does not sample: set summarise.generation.do_sample: true, or leave {names} out"
        )
    if eff.do_sample and params.seed is None:
        raise ValueError(
            f"{params.model}: the generation config samples (do_sample: true); set do_sample: false, or a seed"
        )
    if eff.num_return_sequences != 1:
        raise ValueError(f"{params.model}: num_return_sequences={eff.num_return_sequences}; one summary per text only")
    return merged


def effective(config):
    """A copy with transformers' global defaults filled in where a field is unset (as generate does)."""
    eff = copy.deepcopy(config)
    eff.update(**config._get_default_generation_params(), defaults_only=True)
    return eff


def default_prefix(model_config) -> str:
    """`task_specific_params.summarization.prefix`, else T5_PREFIX for the T5 family, else
    nothing. A null prefix is none, as transformers 4's pipeline read it (`prefix if not
    None else ""`); one that is not a string is an error naming config.json."""
    task = summarization_task(model_config)
    if "prefix" not in task:
        return T5_PREFIX if model_config.model_type in T5_FAMILY else ""
    prefix = task["prefix"]
    if prefix is not None and not isinstance(prefix, str):
        raise ValueError(
            f"{model_config.name_or_path}/config.json: task_specific_params.summarization.prefix is "
            f"{type(prefix).__name__}, not a string"
        )
    return prefix or ""


def newline_symbol(model_config) -> str | None:
    """The token a model writes for a newline, which its summaries get back as one (None: none)."""
    return NEWLINE_SYMBOL if model_config.model_type in NEWLINE_SYMBOL_FAMILY else None


def resolve_token_budget(params: GenerateParams, device) -> int:
    return params.token_budget or AUTO_TOKEN_BUDGET.get(device.type, AUTO_TOKEN_BUDGET["cuda"])

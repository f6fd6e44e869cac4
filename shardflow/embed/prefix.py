"""Tokenize only the head of a long text: the part truncation keeps.

A document of 50,000 characters embedded with a 256-token limit keeps its first
~1,200 characters; tokenizing the rest is wasted host time, and the host is what
limits a small model on a GPU (20,000 synthetic texts, a third of them long: the
bundled MiniLM's tokenizer made 8.7M tokens to keep 2.0M).

The ids stay exactly those of the whole text. Tokenizers split text into words
(pre-tokens) before their model runs, and each word's tokens depend on that word
alone; so a text cut at a space between two letters tokenizes, up to the cut,
to the same ids as the whole text. When the head fills the limit with MARGIN
tokens to spare (so its last word, the one a cut could touch, is not kept),
truncation keeps the same ids either way; otherwise (a head of unusually long
words) the whole text is tokenized again. Where the premise could fail, nothing
is cut: a tokenizer without a pre-tokenizer, one that truncates from the left,
and one whose ids differ at the cuts of a probe (`premise_fails`, once per model
load).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Callable, Sequence

# A space with a letter on each side (letters of any script; not digits or "_").
_CUT = re.compile(r"(?<=[^\W\d_]) (?=[^\W\d_])")
SEARCH_CHARS = 4096  # how far past the limit a cut is looked for before giving up on it
MARGIN = 32  # tokens a head must hold past the limit
# Characters per token the cut allows for (limit + MARGIN tokens). MiniLM's tokenizer on
# ArguAna passages at a limit of 128: with 6, 4 of 3,923 heads fell short; with 5, 3,097
# of 5,172 (none with 6 on CNN/DailyMail articles or synthetic texts, at 128 or 256).
START_FACTOR = 6.0
MAX_FACTOR = 64.0
RETRY_SHARE = 0.02  # more heads than this fell short: cut further in (x1.5) from then on
# After a call without that many short heads, the factor comes down to the most characters
# a token any head has needed so far, times this: a corpus of denser text cuts its heads
# shorter. The bundled MiniLM (benchmarks/bench_tokenize.py, heads/heads@6): on the
# synthetic set, at most 4.78 characters a token, 5.46 learned, 0.946 the time; on codes
# and numbers (--texts dense), 1.53, 2.0 learned, 0.383 the time. Never below MIN_FACTOR.
# The price: prose after a dense stretch falls short once, and that call tokenizes its
# long texts whole (then the factor is back up to what the median short head needed: one
# head of mostly whitespace cannot push it up).
SAFETY = 1.15
MIN_FACTOR = 2.0


def prefix_end(text: str, limit: int) -> int | None:
    """Where to cut `text`: the first space between two letters at or after `limit`
    characters (None when the text is not longer, or has no such space in the next
    SEARCH_CHARS characters)."""
    if len(text) <= limit:
        return None
    m = _CUT.search(text, limit, limit + SEARCH_CHARS)
    return m.start() if m else None


class PrefixTokenizer:
    """`encode` (a list of texts -> `tokenizers` Encodings, truncated to `max_length`
    with `n_special` special tokens) run on the heads of long texts.

    The cut lies `factor * (max_length + MARGIN)` characters in. When more than
    RETRY_SHARE of a call's heads fall short (texts of long words), the factor grows for
    the calls after: by half, or to SAFETY times the characters a token of the median
    short head if that is more. Otherwise it comes down to SAFETY times the most
    characters a token any head has held so far (`chars_per_token`), if that is less:
    an outlier can only keep it up, never raise it. Either changes only the work done,
    never the ids. Counters: `cut` texts tokenized from a head, `retried` of them
    tokenized whole after all. Calls come from one thread."""

    def __init__(
        self, encode: Callable[[list[str]], list], max_length: int, n_special: int, factor: float = START_FACTOR
    ):
        self.encode = encode
        self.max_length = max_length
        self.n_special = n_special
        self.factor = factor
        self.cut = 0
        self.retried = 0
        self.chars_per_token = 0.0  # the most characters a token of any head so far

    def __call__(self, texts: Sequence[str]) -> list[list[int]]:
        return [e.ids for e in self.encodings(texts)]

    def encodings(self, texts: Sequence[str]) -> list:
        """The Encodings of `texts` (a head's, or the whole text's where the head fell
        short): what `__call__` takes the ids of. Turning ids into Python lists holds
        the interpreter's lock; a caller on another thread can leave that to its
        consumer and start the next call sooner (the engine's tokenizer thread does)."""
        limit = int(self.factor * (self.max_length + MARGIN))
        work, heads = list(texts), []
        for i, text in enumerate(texts):
            end = prefix_end(text, limit)
            if end is not None:
                work[i] = text[:end]
                heads.append(i)
        encodings = list(self.encode(work))
        short, short_density = [], []
        for i in heads:
            kept, cut = self._tokens(encodings[i])
            density = len(work[i]) / max(1, kept + cut)  # characters a token
            self.chars_per_token = max(self.chars_per_token, density)
            if cut < MARGIN:
                short.append(i)
                short_density.append(density)
        if short:
            for i, whole in zip(short, self.encode([texts[i] for i in short]), strict=True):
                encodings[i] = whole
        self.cut += len(heads)
        self.retried += len(short)
        if len(short) > RETRY_SHARE * len(heads):  # half again at least; what the median short head needed
            self.factor = min(MAX_FACTOR, max(self.factor * 1.5, SAFETY * statistics.median(short_density)))
        elif heads:
            self.factor = min(self.factor, max(MIN_FACTOR, SAFETY * self.chars_per_token))
        return encodings

    def _tokens(self, encoding) -> tuple[int, int]:
        """A head's text tokens: kept by truncation, and cut (the overflow pieces hold
        the tokens after the kept ones, at most max_length - n_special each, with the
        special tokens again; the engine truncates with stride 0). The head counts when
        MARGIN tokens or more were cut: its last word, which the cut could change, is
        then not kept."""
        cut = sum(len(piece.ids) - self.n_special for piece in encoding.overflowing)
        return len(encoding.ids) - self.n_special, cut


PROBE_PIECES = (
    "Zürich naïve café déjà-vu, co-operate; l'été don't it's O'Neill's",
    "3.14159 2,718 1e-9 v2.0.1 #42 @user https://example.org/a_b?c=d&e=f",
    "--- *** ... !!! ??? (nested [brackets {here}]) <tag attr=\"x\">text</tag>",
    "東京 北京 ソウル Москва Αθήνα القاهرة हिन्दी",
    "word\nword\n\nword\r\nword\ttab  two  spaces   three",
    "UPPER lower MiXeD CamelCase snake_case kebab-case ALLCAPS",
)


def premise_fails(backend, prompt: str = "", every: int = 5) -> str | None:
    """Whether cutting breaks this `tokenizers` backend: at many cuts of probe texts
    (punctuation runs, newlines, digits, apostrophes, hyphens, accents, other scripts,
    URLs, markup), the head's ids must begin the whole text's ids (no truncation, no
    special tokens). None if they all do; else the first cut where they do not.
    Leaves the backend without truncation or padding (the engine sets both per call)."""
    if backend.pre_tokenizer is None:
        return "the tokenizer has no pre-tokenizer (its tokens may cross spaces)"
    backend.no_truncation()
    backend.no_padding()
    texts = []
    for k in range(len(PROBE_PIECES)):
        text = prompt + " ".join(PROBE_PIECES[k:] + PROBE_PIECES[:k]) * 3
        texts += [text, text.replace(" ", "\n", 11)]
    cuts = [(k, m.start()) for k, text in enumerate(texts) for m in list(_CUT.finditer(text))[::every]]
    encode = getattr(backend, "encode_batch_fast", backend.encode_batch)
    whole = [e.ids for e in encode(texts, add_special_tokens=False)]
    heads = encode([texts[k][:end] for k, end in cuts], add_special_tokens=False)
    for (k, end), head in zip(cuts, heads, strict=True):
        if whole[k][: len(head.ids)] != head.ids:
            return f"a head's ids differ from the whole text's (cut after {texts[k][max(0, end - 20) : end]!r})"
    return None

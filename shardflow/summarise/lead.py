"""Lead-k: the first k sentences of the document, the standard news baseline.

CNN/DailyMail articles put the main facts first, so Lead-3 is hard to beat on
ROUGE; it only depends on the sentence splitter (see `sentences`).
"""

from __future__ import annotations

from shardflow.summarise.sentences import SPLITTERS


def lead_k(text: str, k: int = 3, splitter: str = "prose") -> list[str]:
    """The first `k` sentences of `text` (all of them when it has fewer)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    return SPLITTERS[splitter](text)[:k]

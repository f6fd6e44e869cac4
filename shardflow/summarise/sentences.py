"""A deterministic sentence splitter for English news prose, and one for
pre-tokenised text (CNN/DailyMail references and system outputs).

Lead-k summaries and ROUGE-Lsum both depend on where sentences end, so the
rules are spelled out here exactly; anyone can re-implement them and get the
same numbers.

`split_sentences(text)`:

1. Newlines are hard breaks: the text is cut into lines first, and no sentence
   spans two lines. Each line is stripped; blank lines yield nothing. A line ends
   at every line boundary `str.splitlines` knows (`\\n`, `\\r`, `\\x0b`, `\\x0c`,
   `\\x1c`-`\\x1e`, `\\x85`, U+2028, U+2029), or, with `newline_only=True`, at `\\n`
   alone, as rouge-score cuts a text into ROUGE-Lsum's sentences
   (`text.split("\\n")`; `rouge` splits so): the other boundaries are then
   whitespace inside a line, after which rules 2-4 can still end a sentence.
2. A candidate end is a run of sentence punctuation (`.`, `!`, `?`, `…`, any
   mix, so `...` and `?!` are one run), then optionally closing quotes and
   brackets (`"`, `'`, `”`, `’`, `)`, `]`, any number, so `''` counts), then
   whitespace. The sentence ends after the quotes/brackets, before the
   whitespace. Punctuation not followed by whitespace never ends a sentence:
   decimals (`3.5`), `U.S.-based`, `Yahoo!News`, and a line's final sentence
   simply runs to the end of the line.
3. Quote rule: if the closing run contains a quote (`"`, `'`, `”`, `’`), the
   sentence ends there, whatever comes next (`He said "Stop." Then`,
   `'Why?' asked Tom` are both two sentences); with rule 5, not after an
   abbreviation's period unless rule 4 holds, so `the U.S.' role` (a possessive),
   `the 'Dr.' brand` stay whole and `"I love the U.S." Then` is still two.
4. Otherwise (no closer, or brackets only) the sentence ends only if the first
   character after the whitespace is an uppercase letter (`str.isupper`), a
   digit, or an opening quote or bracket (`"`, `'`, `“`, `‘`, `` ` ``, `(`,
   `[`). So an ellipsis before a lowercase word (`and so... we left`) does not
   end a sentence, one before a capital does.
5. Abbreviations (the run is a single `.`, under rule 4, or under rule 3 before
   a character that rule 4 does not take as a start): the word before the
   period (text since the previous whitespace, with leading opening
   quotes/brackets removed) does not end a sentence if it is
   - in `ABBREVIATIONS`, compared case-insensitively without the final period
     (titles: Mr, Mrs, Ms, Dr, Prof, St, Jr, Sr, Gen, Gov, Sen, Rep, Lt, Col,
     Sgt, Capt, Rev; months: Jan, Feb, Mar, Apr, Jun, Jul, Aug, Sep, Sept, Oct,
     Nov, Dec; Latin and other: vs, etc, approx, e.g, i.e, cf; company:
     Inc, Ltd, Co, Corp),
   - a single uppercase letter (an initial: `J. K. Rowling`, `George W. Bush`),
   - or a dotted acronym, letters separated by periods (`U.S.`, `U.K.`,
     `D.C.`, `a.m.`, `p.m.`, `B.B.`).
   The price is that `... in the U.S. The next day` stays one sentence, as in
   most rule-based splitters.
6. Pieces are stripped of surrounding whitespace; no empty sentence is emitted.

`split_punctuation(text)` applies rules 1-4 and 6 without rule 5: the simple
punctuation splitter of the published Lead-3 comparisons. On the CNN/DailyMail
dev sample it reproduces the independent Lead-3 run of ../shared/data/README.md
(R-1 40.39, R-2 17.55); `split_sentences` keeps "U.S. Census Bureau" and
"B.B. King" whole and scores R-1 40.59, R-2 17.68 (benchmarks/summarise_reference.py).
`SPLITTERS` names both for configs (`summarise.splitter`: punctuation or prose).

`split_tokenised(text)` is for CNN/DailyMail's tokenised form (highlights are
joined with " . ", system outputs are PTB-tokenised and lower-cased, so capitals
cannot mark a start): a sentence ends after every whitespace-separated token
made only of `.`, `!` and `?`, except an ellipsis (two or more periods and
nothing else). The closing quotes and brackets right after it belong to that
sentence, as in rule 2: the tokens `''`, `'`, `”`, `’`, `)`, `]`, `-RRB-`,
`-RSB-`, `-RCB-` (any case), and so do further end tokens after them (the
" . " that joined a highlight ending in a quote to the next). So `He said ``
no . '' Next` is `He said `` no . ''` and `Next`, the lines of the same two
highlights untokenised (until 2026-11-29 the quote opened the next line, and
`-RRB-`, read by rouge-score as the word "rrb", counted in the wrong sentence).
A straight `"` is no closer here: in lower-cased outputs it opens sentences as
often as it closes them. A highlight that ends in a quote without punctuation
(`was a `` concern ''`, CNN/DailyMail adds no period after a quote) stays
joined to the next: its end looks like a quote inside a sentence (`` `` Weird Al
'' Yankovic ``). Newlines are hard breaks here too, as in rule 1.
"""

from __future__ import annotations

import re

ABBREVIATIONS = frozenset(
    # titles
    "mr mrs ms dr prof st jr sr gen gov sen rep lt col sgt capt rev "
    # months (May is a whole word)
    "jan feb mar apr jun jul aug sep sept oct nov dec "
    # Latin and other
    "vs etc approx e.g i.e cf "
    # companies
    "inc ltd co corp".split()
)

_SENT_PUNCT = ".!?…"
_CLOSERS = "\"'”’)]"
_QUOTES = "\"'”’"
_OPENERS = "\"'“‘`(["

# punctuation run, closing run, whitespace
_CANDIDATE = re.compile(rf"([{re.escape(_SENT_PUNCT)}]+)([{re.escape(_CLOSERS)}]*)\s+")
_INITIAL = re.compile(r"[A-Z]")
_DOTTED = re.compile(r"(?:[A-Za-z]\.)+[A-Za-z]")
# a standalone run of . ! ? that is not an ellipsis ("..." mid-highlight is not an end)
_END_TOKEN = r"(?!\.\.+(?!\S))[.!?]+(?!\S)"
# PTB closing quotes and brackets (-RRB- for ")"); no straight " (it opens as often)
_CLOSER_TOKEN = r"(?:''|'|”|’|\)|\]|-RRB-|-RSB-|-RCB-)(?!\S)"
_TOKEN_END = re.compile(rf"(?<!\S){_END_TOKEN}(?:\s+(?:{_CLOSER_TOKEN}|{_END_TOKEN}))*", re.IGNORECASE)


def split_sentences(text: str, *, newline_only: bool = False) -> list[str]:
    """Split English prose into sentences by the rules in the module docstring
    (`newline_only`: lines end at "\\n" alone, rule 1)."""
    out: list[str] = []
    for line in _lines(text, newline_only):
        out.extend(_split_line(line.strip(), abbreviations=True))
    return out


def split_punctuation(text: str) -> list[str]:
    """`split_sentences` without the abbreviation rule (rule 5)."""
    out: list[str] = []
    for line in text.splitlines():
        out.extend(_split_line(line.strip(), abbreviations=False))
    return out


def split_tokenised(text: str, *, newline_only: bool = False) -> list[str]:
    """Split tokenised text after each standalone `.`/`!`/`?` token and the closing
    quotes and brackets after it (see module docstring; `newline_only` as in
    `split_sentences`)."""
    out: list[str] = []
    for line in _lines(text, newline_only):
        start = 0
        for m in _TOKEN_END.finditer(line):
            out.append(line[start : m.end()].strip())
            start = m.end()
        out.append(line[start:].strip())
    return [s for s in out if s]


def _lines(text: str, newline_only: bool) -> list[str]:
    # Lead and extractive cut articles at every line boundary (rule 1); ROUGE-Lsum must cut
    # where rouge-score does, or a CR alone or a U+2028 between two sentences' words made two
    # sentences of what rouge-score reads as one, and a score rouge-score does not give.
    return text.split("\n") if newline_only else text.splitlines()


def _split_line(line: str, abbreviations: bool) -> list[str]:
    out: list[str] = []
    start = 0
    for m in _CANDIDATE.finditer(line):
        if m.end() < len(line) and _ends_sentence(line, m, abbreviations):
            out.append(line[start : m.end(2)].strip())
            start = m.end()
    out.append(line[start:].strip())
    return [s for s in out if s]


def _ends_sentence(line: str, m: re.Match, abbreviations: bool) -> bool:
    punct, closers = m.group(1), m.group(2)
    nxt = line[m.end()]
    starts = nxt.isupper() or nxt.isdigit() or nxt in _OPENERS
    abbreviation = punct == "." and abbreviations and _is_abbreviation(_word_before(line, m.start()))
    if any(c in _QUOTES for c in closers):
        # Rule 3, but an abbreviation's period, as in rule 5, is no end of a quotation
        # before a word that cannot start a sentence: `the U.S.' role` is a possessive.
        return starts or not abbreviation
    return starts and not abbreviation


def _word_before(line: str, end: int) -> str:
    start = end
    while start > 0 and not line[start - 1].isspace():
        start -= 1
    return line[start:end].lstrip(_OPENERS)


def _is_abbreviation(word: str) -> bool:
    return (
        word.lower() in ABBREVIATIONS
        or _INITIAL.fullmatch(word) is not None
        or _DOTTED.fullmatch(word) is not None
    )


# Splitters by their config name (summarise.splitter).
SPLITTERS = {"prose": split_sentences, "punctuation": split_punctuation}

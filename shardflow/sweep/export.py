"""A sweep's summary as a paper's table: Markdown and LaTeX (booktabs).

Parameters first (short names; a float parameter's values in one notation, value_labels),
then each metric of spec.metrics as "mean ± std" over
seeds with a fixed number of decimals (just the mean with one seed), an arrow saying
which way is better, and the best value of each metric in bold: every row whose
rounded mean equals the best rounded mean, since that is what a reader can compare.
A priced sweep's cost metrics say their currency in the header (cost.money_label), and
get the decimals that read none of their amounts as 0 and tell them apart (money_decimals).
A value some run of its point computed on a ranking shallower than the metric's k
(table.beyond_depth: retrieval.top_k 100 and all.recall_at_1000) is marked † and
footnoted: it is not the metric at k. A point that has no mean (a run of it wrote no
value: table.aggregate) reads – (-- in LaTeX), and a note below the table says why.
A retrieval sweep scored away from retrieval.relevance_level 1 (table.relevance_levels)
says its level in a note below the table; where its runs were scored at different
levels (runs kept from before the config's level changed), a `relevance level` column
after the parameters gives each point's. A sampled sweep's (spec `sample:`) says after
its caption that its points are a random sample, how many, the sample's seed and what each
parameter was drawn from and that its rows are sorted by parameter (sample_sentence), where
a grid's or a list's says nothing of its points. A sample's rows go by its parameters'
values (row_order), not in the order its points were drawn; a grid's and a list's keep
the spec's order.
"""

from __future__ import annotations

import math
import os
import string
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import pandas as pd

from shardflow.core.atomic import atomic_open
from shardflow.core.jobs import significant
from shardflow.sweep.cost import metric_currency, money_label
from shardflow.sweep.metrics import RETRIEVAL_LEVELLED
from shardflow.sweep.paths import format_value, plain
from shardflow.sweep.sample import drawn_range
from shardflow.sweep.spec import SweepSpec, value_key

_LATEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
    "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
    # OT1, LaTeX's default font encoding, prints these as other glyphs (| as a dash).
    "|": r"\textbar{}", "<": r"\textless{}", ">": r"\textgreater{}",
    # OT1 prints " as a closing quote (a string value's, and value_labels' quotes around
    # labels that read alike, read ”) and has no straight one: \textquotedbl alone is an
    # error there ("unavailable in encoding OT1"). The kernel declares T1 in every document,
    # so the glyph is taken from there, as the kernel takes \textless from OML under OT1;
    # under T1 this is \textquotedbl itself.
    '"': r"\UseTextSymbol{T1}{\textquotedbl}",
    # OT1 and T1 print ` as an opening quote, and join it with the character before into
    # another glyph: `` an opening double quote, !` and ?` an inverted ! and ?. The kernel
    # takes this glyph from TS1, under either encoding (from TU under XeLaTeX and LuaLaTeX).
    "`": r"\textasciigrave{}",
}
# Characters the fonts of OT1 and T1 join with one more of them into another glyph: -- and
# --- (en and em dashes), '' (a closing double quote) and, under T1, ,, (a low double
# quote). A `{}` after each that another follows keeps both as they are. (<< and >>, T1's
# guillemets, are escaped above, each \textless{} or \textgreater{} with its own `{}`.)
_LIGATURE_PAIRS = frozenset("-',")


def latex_escape(text: str) -> str:
    """`text` as LaTeX prints it: each special character escaped, and a character of
    _LIGATURE_PAIRS before another one like it followed by `{}`, since TeX sets -- as an
    en dash, --- as an em dash and '' as a closing quote (a Hugging Face cache folder,
    models--org--name, would not read as the value)."""
    return "".join(
        c + "{}" if c in _LIGATURE_PAIRS and text[i + 1 : i + 2] == c else _LATEX_SPECIAL.get(c, c)
        for i, c in enumerate(text)
    )


# What Markdown reads as markup inside a table cell: emphasis (* _), code (`), links ([ ]),
# raw HTML and entities (< &: "</s>" vanished, "&lt;" read "<"), strikethrough (~), the
# cell separator (|) and math ($: GitHub and other renderers with math read the text
# between two on one line as inline TeX, so report.currency "$" named in two cost headers
# garbled the header row). A backslash before each keeps it as written. An "_" between two
# letters or digits (max_length, all.ndcg_at_10) can neither open nor close emphasis
# (CommonMark's flanking rules), and a backslash is escaped only before ASCII punctuation,
# the one thing it escapes (a value "a\.b" read "a.b"; a line break's label "\n" reads
# as it is): those keep their bytes.
_MARKDOWN_SPECIAL = frozenset("`*_[]<&~|$")


def markdown_escape(text: str) -> str:
    """`text` for a Markdown table cell, each markup character in it escaped, so that the
    cell reads as written: a string value `*a*` or `__init__` read as emphasis, `</s>` as
    nothing at all."""
    out = []
    for i, c in enumerate(text):
        after = text[i + 1] if i + 1 < len(text) else ""
        if c == "\\":
            escape = after != "" and after in string.punctuation
        elif c == "_":
            escape = not (i > 0 and text[i - 1].isalnum() and after.isalnum())
        else:
            escape = c in _MARKDOWN_SPECIAL
        out.append(f"\\{c}" if escape else c)
    return "".join(out)


def value_label(value: Any) -> str:
    """One parameter value alone (the first page's best point): a string as written (its
    control characters as their escapes: an instruction prompt's line break as \\n, which
    would break a Markdown row in two), null, true, 1e-05. A table's or figure's column of
    values: value_labels."""
    if not isinstance(value, str):
        return format_value(value)
    return "".join(_ESCAPES.get(c, f"\\x{ord(c):02x}") if c < " " or c == "\x7f" else c for c in value)


_ESCAPES = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


# A float parameter's values read in scientific notation where one is below SMALL or from
# LARGE, or they span SPAN orders of magnitude (zero and infinities aside): a learning
# rate's 1e-5 ... 1e-3. Otherwise as plain decimals, their point-id spelling (0.1, 0.25).
SCIENTIFIC_SMALL, SCIENTIFIC_LARGE, SCIENTIFIC_SPAN = 1e-3, 1e6, 1e3


def scientific(x: float) -> str:
    """x with the shortest mantissa that reads back as x: 3e-4, 1.5e-5, 2e6; 0, inf."""
    if x == 0 or math.isinf(x):
        return "0" if x == 0 else format_value(x)
    text = next(t for t in (f"{x:.{d}e}" for d in range(17)) if float(t) == x)  # 17 digits always read back
    mantissa, exponent = text.split("e")
    return f"{mantissa}e{int(exponent)}"


def value_labels(values: Iterable[Any]) -> dict[str, str]:
    """{format_value(v): label} of one parameter's values in a sweep, as its table column
    and figure axes show them: the floats in one notation chosen from all of them
    (SCIENTIFIC_*), so a learning rate's column reads 1e-5, 3e-5, 1e-4 rather than
    repr's 1e-05, 3e-05, 0.0001. Either notation reads back as the float itself, so two
    floats never share a label; strings, integers, booleans and null read as value_label
    has them, and where a label would still read as another value's (a string "1e-3"
    beside the float 0.001; "query: " beside "query:", as tables and figures show no space
    at either end: _reads) the whole column falls back to value_label, quoting the strings
    that read alike; where quoted ones still do (a line break's "a\\n" beside a backslash
    and an n, written 'a\\n' in YAML), those read as _escaped_label has them."""
    distinct = {format_value(v): plain(v) for v in values}
    floats = [abs(v) for v in distinct.values() if isinstance(v, float) and v != 0 and not math.isinf(v)]
    sci = bool(floats) and (
        min(floats) < SCIENTIFIC_SMALL
        or max(floats) >= SCIENTIFIC_LARGE
        or max(floats) / min(floats) >= SCIENTIFIC_SPAN
    )
    labels = {k: scientific(v) if sci and isinstance(v, float) else value_label(v) for k, v in distinct.items()}
    if len({_reads(label) for label in labels.values()}) < len(labels):
        labels = {k: value_label(v) for k, v in distinct.items()}
        # A string that still reads as another value of the column (the string "null"
        # beside null, "true" beside true, "query: " beside "query:") is quoted.
        labels.update({k: f'"{labels[k]}"' for k in _clashing(labels, distinct)})
        # Each round escapes at least one more string: escaped labels of two strings differ,
        # and none reads as a number's, null's or a boolean's, so this ends.
        while clash := _clashing(labels, distinct):
            escaped = {k: _escaped_label(distinct[k]) for k in clash}
            if all(labels[k] == label for k, label in escaped.items()):
                break  # cannot happen (above); were it to, a shared label, not a hang
            labels.update(escaped)
    return labels


def _escaped_label(value: str) -> str:
    """`value` quoted, as a string literal reads: value_label's escapes, with each
    backslash and quote escaped too, so that no two strings read alike ("a\\n" a line
    break, "a\\\\n" a backslash and an n)."""
    return '"' + value_label(value.replace("\\", "\\\\").replace('"', '\\"')) + '"'


def _clashing(labels: Mapping[str, str], values: Mapping[str, Any]) -> set[str]:
    """The strings of `values` whose labels read as another value's (_reads)."""
    counts = Counter(_reads(label) for label in labels.values())
    return {k for k, v in values.items() if isinstance(v, str) and counts[_reads(labels[k])] > 1}


def _reads(label: str) -> str:
    """A label as a reader sees it: a Markdown cell is trimmed, LaTeX drops a space before
    `&` and a figure's tick label shows none at its ends."""
    return label.strip()


# The decimals of a metric's column (collect_sweep writes its tables with these), and the
# most it gets to tell its points apart.
TABLE_DECIMALS = 3
MOST_DECIMALS = 6


def metric_decimals(means: pd.Series, decimals: int, most: int = MOST_DECIMALS) -> int:
    """`decimals`, or more (up to `most`) where the points' means differ but every one
    would read the same, a column that tells nothing: cosines of 0.99962 and 0.99996 are
    both 1.000 at 3 decimals. A column where some means differ keeps `decimals` (two of
    them reading the same are a tie there, both bold), as does one whose means differ
    only beyond `most` decimals (a tie)."""
    values = {float(v) for v in means.dropna()}
    for d in range(decimals, max(decimals, most) + 1):
        if len({round(v, d) for v in values}) > 1:
            return d
    return decimals


def money_decimals(means: pd.Series, decimals: int, most: int = MOST_DECIMALS) -> int:
    """`decimals`, or more (up to `most`) where a column of money (a priced sweep's cost
    metrics) would read an amount that is not 0 as 0, or two amounts alike that differ at
    two significant digits (core.jobs.significant, as core.jobs.money prints a cost under
    half a cent): 0.0002 and 0.0004 USD both read 0.000 at 3 decimals, a tie in bold,
    though one costs twice the other. A column that reads its amounts so already keeps
    `decimals` (the same bytes as before), and amounts alike at two significant digits
    (0.0121, 0.0124) may read the same, a tie."""
    values = {float(v) for v in means.dropna()}
    for d in range(decimals, max(decimals, most) + 1):
        read: dict[float, set[str]] = {}
        for v in values:
            read.setdefault(round(v, d), set()).add(significant(v))
        if all(len(amounts) == 1 for amounts in read.values()) and all(round(v, d) != 0 for v in values if v):
            return d
    return max(decimals, most)


def column_decimals(means: pd.Series, decimals: int, money: bool = False) -> int:
    """The decimals of a metric's column whose points' means are `means`: metric_decimals,
    and for `money` (a cost metric with its currency: cost.metric_currency) money_decimals."""
    places = metric_decimals(means, decimals)
    return money_decimals(means, places) if money else places


def table_value(
    means: pd.Series, mean: float, std: float | None, decimals: int = TABLE_DECIMALS, money: bool = False
) -> str:
    """`mean` (and `std`, where there is one) of a metric whose points' means are `means`,
    as the tables print its cell: "0.9996 ± 0.0000" (column_decimals, fixed; `money`: a
    cost metric of a priced sweep, best.json's `currency`). The report's first page says a
    sweep's best value so, the number a reader finds in table.md."""
    places = column_decimals(means, decimals, money)
    return fixed(mean, places) + ("" if std is None else f" ± {fixed(std, places)}")


# What a retrieval sweep's relevance level (retrieval.relevance_level) did to its numbers,
# as the report's first page says it for the main run.
LEVEL_NOTE = ("Recall, precision, MRR and MAP count grades of {level} and above as relevant "
              "(retrieval.relevance_level), nDCG the grades themselves")
LEVELS_HEADER = "relevance level"
LEVELS_NOTE = (
    "Relevance level: the retrieval.relevance_level the point's runs were scored at (recall, precision, MRR and "
    "MAP count grades from it as relevant, nDCG the grades themselves); numbers scored at different levels do not "
    "compare: rerun the sweep's evaluations at one level"
)


def all_levels(levels: Mapping[str, Iterable[int]]) -> list[int]:
    """Every relevance level of a sweep's runs (table.relevance_levels), sorted; none where all were scored at 1."""
    return sorted({level for point in levels.values() for level in point})


def level_phrase(metric: str, levels: Mapping[str, Iterable[int]]) -> str | None:
    """How a retrieval sweep's figure names the relevance level of `metric`: "relevance >=
    2", "relevance >= 1 or 2, by point" where the runs differ; None where the level does
    not decide the metric (nDCG, another stage's) or every run was scored at 1."""
    found = all_levels(levels)
    if not found or metric.rsplit(".", 1)[-1].split("_at_", 1)[0] not in RETRIEVAL_LEVELLED:
        return None
    if len(found) == 1:
        return f"relevance >= {found[0]}"
    return f"relevance >= {' or '.join(map(str, found))}, by point"


def _level_column(levels: Mapping[str, Iterable[int]]) -> dict[str, str] | None:
    """{point: its levels, "1, 2"} where a sweep's runs were scored at more than one level."""
    if len(all_levels(levels)) < 2:
        return None
    return {pid: ", ".join(map(str, point)) for pid, point in levels.items()}


def _level_note(levels: Mapping[str, Iterable[int]]) -> str | None:
    found = all_levels(levels)
    if not found:
        return None
    return LEVEL_NOTE.format(level=found[0]) if len(found) == 1 else LEVELS_NOTE


# How a sampled sweep's tables and the report's first page say what a parameter was drawn from.
_RANGE_WORDS = {"uniform": "uniform between {} and {}", "log_uniform": "log-uniform between {} and {}",
                "int_uniform": "uniform over the integers {} to {}"}


def drawn_from(sample: Mapping[str, Any], key: str, name: str) -> str:
    """What parameter `key` (called `name`) of a sample's record was drawn from: "lr
    log-uniform between 1e-4 and 1e-2", "n_layer uniform over the integers 2 to 6",
    "dtype one of float32, bfloat16"; just `name` where a record from
    before the sample named its grid does not say. Bounds and values read as the tables'
    (value_labels)."""
    found = drawn_range(sample, key)
    if found is not None:
        labels = value_labels([found.low, found.high])
        low, high = labels[format_value(found.low)], labels[format_value(found.high)]
        return f"{name} {_RANGE_WORDS[found.kind].format(low, high)}"
    values = sample.get("grid", {}).get(key)
    if values is None:
        return name
    labels = value_labels(values)
    return f"{name} one of {', '.join(labels[format_value(v)] for v in values)}"


def sample_sentence(sample: Mapping[str, Any], names: Mapping[str, str]) -> str:
    """The sentences a sampled sweep's tables add after their caption: "The 20 points were
    drawn at random (sample seed 0): lr log-uniform between 1e-4 and 1e-2; dtype one of
    float32, bfloat16. Rows are sorted by lr, then dtype." (row_order) `names`: {dotted
    key: the name shown}, in the sweep's order."""
    drawn = "; ".join(drawn_from(sample, key, name) for key, name in names.items())
    return (f"The {sample['points']:,} points were drawn at random (sample seed {sample['seed']}): {drawn}. "
            f"Rows are sorted by {', then '.join(names.values())}.")


def row_order(spec: SweepSpec) -> list[str]:
    """The point ids in the order the tables list them. A grid's and a list's are the
    spec's, the order their author wrote. A sample's spec order is the draw's, which tells
    a reader nothing: its rows go by the parameters' values, the first parameter's first
    (_value_rank). runs, summary and points.json keep the draw's order, so that raising
    `points` appends to them."""
    if not spec.sample:
        return list(spec.ids)
    ranks = {key: _value_rank(spec.sample, key, [p[key] for p in spec.points]) for key in spec.params}
    return sorted(spec.ids, key=lambda pid: tuple(ranks[key](spec.by_id[pid][key]) for key in spec.params))


# The kinds of value (spec.value_key) in the order a list of them without a declared order sorts them.
_KIND_ORDER = {"NoneType": 0, "bool": 1, "number": 2, "str": 3}


def _value_rank(sample: Mapping[str, Any], key: str, values: Iterable[Any]) -> Callable[[Any], Any]:
    """How a sample's rows order the values of parameter `key` (of its points, `values`).
    Numbers (a range's, or a list of numbers whatever order it is written in)
    numerically. A list of other values as the grid lists them: the order its author
    chose, in which the caption names them (dtype one of float32, bfloat16), where their
    spelling's order would be arbitrary (bfloat16 before float32). Where the record holds
    no grid (one from before the sample named it) nothing declares an order: by kind
    (null, booleans, numbers, strings) and then value, strings by code point, the same on
    every machine (a locale's collation is not)."""
    if all(value_key(v)[0] == "number" for v in values):
        return lambda v: v
    listed = sample.get("grid", {}).get(key)
    if isinstance(listed, list):
        at = {value_key(v): i for i, v in enumerate(listed)}
        return lambda v: at[value_key(v)]
    return lambda v: (_KIND_ORDER[value_key(v)[0]], v)


DAGGER_NOTE = "computed on a ranking shallower than its k (retrieval.top_k): not the metric at k"
# A cell whose point has no mean (table.aggregate), and what the note below the table says of it.
NO_MEAN = "–"
NO_MEAN_NOTE = (
    "a run of this point wrote no value (null, NaN or Infinity: a diverged run's loss, a figure its device does "
    "not give), so it has no mean"
)


def fixed(value: float, decimals: int) -> str:
    """`value` at `decimals` places, as a table prints it: a value that rounds to zero from
    below reads 0.000, not -0.000 (a sign a reader takes for a result)."""
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def _cells(
    spec: SweepSpec,
    summary: pd.DataFrame,
    ids: Iterable[str],
    decimals: int,
    marked: Collection[tuple[str, str]] = (),
    currency: str | None = None,
):
    """A row per point of `ids` (row_order), in that order: (parameter labels, [(mean text,
    std text or None, bold, beyond depth)]); each metric's column with its own decimals
    (column_decimals: a cost metric of a sweep priced in `currency` as money); `marked`:
    the (point, metric) pairs some run of the point computed on a ranking shallower than
    its k. Bold goes by each cell's own mean, so it follows its point in any order."""
    by_point = summary.set_index("point")
    bold_means, places = {}, {}
    for m in spec.metrics:
        places[m] = column_decimals(by_point[f"{m}_mean"], decimals, metric_currency(m, currency) is not None)
        # Python's round, as the cells below and metric_decimals round, and as the text
        # reads: numpy's (Series.round) scales by 10**d first and can round a half the
        # other way (0.9705 -> 0.97, where the cell reads 0.971), bolding another row.
        means = [round(float(v), places[m]) for v in by_point[f"{m}_mean"].dropna()]
        bold_means[m] = (max(means) if spec.goals[m] == "max" else min(means)) if means else None
    labels = {p: value_labels(q[p] for q in spec.points) for p in spec.params}
    rows = []
    for pid in ids:
        point = spec.by_id[pid]
        cells = []
        for m in spec.metrics:
            mean, std = float(by_point.at[pid, f"{m}_mean"]), float(by_point.at[pid, f"{m}_std"])
            if math.isnan(mean):
                cells.append((NO_MEAN, None, False, False))
                continue
            d = places[m]
            bold = round(mean, d) == bold_means[m]
            cells.append((fixed(mean, d), None if math.isnan(std) else fixed(std, d), bold, (pid, m) in marked))
        rows.append(([labels[p][format_value(point[p])] for p in spec.params], cells))
    return rows


def _has_no_mean(rows) -> bool:
    """Whether some cell of `rows` (_cells) reads NO_MEAN."""
    return any(cell[0] == NO_MEAN for _, cells in rows for cell in cells)


def to_markdown(
    spec: SweepSpec,
    summary: pd.DataFrame,
    decimals: int = TABLE_DECIMALS,
    currency: str | None = None,
    marked: Collection[tuple[str, str]] = (),
    levels: Mapping[str, Iterable[int]] | None = None,
) -> str:
    """A GitHub-flavoured Markdown table of the summary; `currency`: a priced sweep's;
    `marked`: (point, metric) cells computed beyond their ranking's depth (_cells);
    `levels`: a retrieval sweep's relevance levels by point (table.relevance_levels)."""
    levels = levels or {}
    by_level = _level_column(levels)
    header = [markdown_escape(spec.names[p]) for p in spec.params] + ([LEVELS_HEADER] if by_level else [])
    header += [
        markdown_escape(f"{money_label(m, currency)} {'↑' if spec.goals[m] == 'max' else '↓'}") for m in spec.metrics
    ]
    rule = [":--"] * (len(spec.params) + bool(by_level)) + ["--:"] * len(spec.metrics)
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule) + " |"]
    ids = row_order(spec)
    rows = _cells(spec, summary, ids, decimals, marked, currency)
    for pid, (labels, cells) in zip(ids, rows, strict=True):
        texts = [markdown_escape(t) for t in labels] + ([by_level[pid]] if by_level else [])
        for mean, std, bold, beyond in cells:
            text = mean if std is None else f"{mean} ± {std}"
            texts.append((f"**{text}**" if bold else text) + ("†" if beyond else ""))
        lines.append("| " + " | ".join(texts) + " |")
    seeds = len(spec.seeds)
    note = f"mean ± sample std (n − 1) over {seeds} seeds" if seeds > 1 else "one seed"
    notes = f" {markdown_escape(sample_sentence(spec.sample, spec.names))}" if spec.sample else ""
    notes += f" † {DAGGER_NOTE}." if any(cell[3] for _, cells in rows for cell in cells) else ""
    notes += f" {NO_MEAN} {NO_MEAN_NOTE}." if _has_no_mean(rows) else ""
    level_note = _level_note(levels)
    notes += f" {level_note}." if level_note else ""
    return "\n".join(lines) + f"\n\n{markdown_escape(spec.name)} ({spec.stage}): {note}; best in bold.{notes}\n"


def to_latex(
    spec: SweepSpec,
    summary: pd.DataFrame,
    decimals: int = TABLE_DECIMALS,
    caption: str | None = None,
    label: str | None = None,
    currency: str | None = None,
    marked: Collection[tuple[str, str]] = (),
    levels: Mapping[str, Iterable[int]] | None = None,
) -> str:
    """A booktabs `table` of the summary (needs \\usepackage{booktabs}); `currency`: a
    priced sweep's; `marked` and `levels`: as to_markdown's, noted below the table."""
    levels = levels or {}
    by_level = _level_column(levels)
    seeds = len(spec.seeds)
    caption = caption if caption is not None else (
        f"{latex_escape(spec.name)}: " + (f"mean $\\pm$ sample std ($n-1$) over {seeds} seeds" if seeds > 1 else "one seed")
        + "; best in bold."
        + (f" {latex_escape(sample_sentence(spec.sample, spec.names))}" if spec.sample else "")
    )
    header = [latex_escape(spec.names[p]) for p in spec.params] + ([LEVELS_HEADER] if by_level else [])
    arrows = {"max": r"$\uparrow$", "min": r"$\downarrow$"}
    header += [f"{latex_escape(money_label(m, currency))} {arrows[spec.goals[m]]}" for m in spec.metrics]
    lines = [
        r"\begin{table}[t]",
        r"\centering",
        f"\\caption{{{caption}}}",
        f"\\label{{{label or 'tab:sweep-' + spec.name}}}",
        f"\\begin{{tabular}}{{{'l' * (len(spec.params) + bool(by_level))}{'r' * len(spec.metrics)}}}",
        r"\toprule",
        " & ".join(header) + r" \\",
        r"\midrule",
    ]
    ids = row_order(spec)
    rows = _cells(spec, summary, ids, decimals, marked, currency)
    for pid, (labels, cells) in zip(ids, rows, strict=True):
        texts = [latex_escape(t) for t in labels] + ([by_level[pid]] if by_level else [])
        for mean, std, bold, beyond in cells:
            body = mean if std is None else f"{mean} \\pm {std}"
            body = f"\\mathbf{{{body}}}" if bold else body
            body += "^{\\dagger}" if beyond else ""
            texts.append(f"${body}$" if mean != NO_MEAN else "--")
        lines.append(" & ".join(texts) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    if any(cell[3] for _, cells in rows for cell in cells):
        lines.append(f"\\par\\smallskip{{\\footnotesize $^{{\\dagger}}$ {latex_escape(DAGGER_NOTE)}.}}")
    if _has_no_mean(rows):
        lines.append(f"\\par\\smallskip{{\\footnotesize -- {latex_escape(NO_MEAN_NOTE)}.}}")
    level_note = _level_note(levels)
    if level_note:
        lines.append(f"\\par\\smallskip{{\\footnotesize {latex_escape(level_note)}.}}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def write_exports(
    spec: SweepSpec,
    summary: pd.DataFrame,
    markdown_path: str | os.PathLike,
    latex_path: str | os.PathLike,
    decimals: int = TABLE_DECIMALS,
    currency: str | None = None,
    marked: Collection[tuple[str, str]] = (),
    levels: Mapping[str, Iterable[int]] | None = None,
) -> None:
    """Both tables, each written atomically."""
    with atomic_open(markdown_path, "w", encoding="utf-8") as fh:
        fh.write(to_markdown(spec, summary, decimals, currency=currency, marked=marked, levels=levels))
    with atomic_open(latex_path, "w", encoding="utf-8") as fh:
        fh.write(to_latex(spec, summary, decimals, currency=currency, marked=marked, levels=levels))

"""The summary as a paper's table: Markdown and LaTeX, exactly."""

from __future__ import annotations

import dataclasses

import pandas as pd

from shardflow.sweep.export import latex_escape, to_latex, to_markdown, value_labels, write_exports
from shardflow.sweep.paths import format_value
from shardflow.sweep.report import points_record
from shardflow.sweep.table import RunResult, collect, summarise

from .conftest import parse, sweep

VALUES = {  # (loss, acc) per point and seed
    ("lr=0.001", 0): (1.0, 0.5), ("lr=0.001", 1): (1.2, 0.7),
    ("lr=0.0003", 0): (0.9, 0.8), ("lr=0.0003", 1): (0.9, 0.6),
}

MARKDOWN = """\
| lr | best_val_loss ↓ | acc ↑ |
| :-- | --: | --: |
| 1e-3 | 1.100 ± 0.141 | 0.600 ± 0.141 |
| 3e-4 | **0.900 ± 0.000** | **0.700 ± 0.141** |

tiny (train): mean ± sample std (n − 1) over 2 seeds; best in bold.
"""

LATEX = r"""\begin{table}[t]
\centering
\caption{tiny: mean $\pm$ sample std ($n-1$) over 2 seeds; best in bold.}
\label{tab:sweep-tiny}
\begin{tabular}{lrr}
\toprule
lr & best\_val\_loss $\downarrow$ & acc $\uparrow$ \\
\midrule
1e-3 & $1.100 \pm 0.141$ & $0.600 \pm 0.141$ \\
3e-4 & $\mathbf{0.900 \pm 0.000}$ & $\mathbf{0.700 \pm 0.141}$ \\
\bottomrule
\end{tabular}
\end{table}
"""


def tiny(seeds=(0, 1)):
    spec = parse({"tiny": sweep(grid={"train.lr": [0.001, 0.0003]}, seeds=list(seeds),
                                metrics={"best_val_loss": "min", "acc": "max"})})["tiny"]
    runs = collect(spec, [RunResult(p, s, {"best_val_loss": v[0], "acc": v[1]}) for (p, s), v in VALUES.items()
                          if s in seeds])
    return spec, summarise(spec, runs)


def test_markdown():
    assert to_markdown(*tiny()) == MARKDOWN


def test_latex():
    assert to_latex(*tiny()) == LATEX


def test_one_seed_shows_the_mean_alone_and_ties_are_all_bold():
    spec, summary = tiny(seeds=(0,))
    lines = to_markdown(spec, summary, decimals=1).splitlines()
    assert lines[2:4] == ["| 1e-3 | 1.0 | 0.5 |", "| 3e-4 | **0.9** | **0.8** |"]
    assert lines[-1] == "tiny (train): one seed; best in bold."
    summary.loc[0, "best_val_loss_mean"] = 0.9  # the same mean: a tie, both bold
    assert to_markdown(spec, summary, decimals=1).splitlines()[2] == "| 1e-3 | **0.9** | 0.5 |"
    assert "1e-3 & $\\mathbf{0.9}$ & $0.5$ \\\\" in to_latex(spec, summary, decimals=1, caption="c", label="t")


def test_a_column_whose_means_all_read_the_same_gets_the_decimals_that_tell_them_apart():
    """Cosines with the main run's vectors: 1.000 for every point at 3 decimals told a
    reader nothing; the column gets decimals until its means differ (at most 6)."""
    spec, summary = tiny(seeds=(0,))
    summary["best_val_loss_mean"] = [0.9, 0.8]  # already differ: stays at 1 decimal
    summary["acc_mean"] = [0.99962, 0.99996]
    lines = to_markdown(spec, summary, decimals=1).splitlines()
    assert lines[2:4] == ["| 1e-3 | 0.9 | 0.9996 |", "| 3e-4 | **0.8** | **1.0000** |"]
    summary["acc_mean"] = [1.0 - 1e-9, 1.0]  # beyond 6 decimals: a tie at the table's decimals
    assert to_markdown(spec, summary, decimals=1).splitlines()[2:4] == [
        "| 1e-3 | 0.9 | **1.0** |", "| 3e-4 | **0.8** | **1.0** |"]


def test_a_mean_that_rounds_to_zero_from_below_reads_0_not_minus_0():
    """A small negative mean (a loss difference, a correlation near 0) printed -0.000 at
    the table's decimals, a sign a reader takes for a result and a paper cannot print; it
    reads 0.000, as its value rounds. The bold mark follows the rounded value as before."""
    spec, summary = tiny(seeds=(0,))
    summary["best_val_loss_mean"] = [-0.0004, 0.2]
    summary["acc_mean"] = [-0.0004, -0.002]
    lines = to_markdown(spec, summary).splitlines()
    assert lines[2:4] == ["| 1e-3 | **0.000** | **0.000** |", "| 3e-4 | 0.200 | -0.002 |"]
    assert "1e-3 & $\\mathbf{0.000}$ & $\\mathbf{0.000}$ \\\\" in to_latex(spec, summary, caption="c", label="t")


def test_means_that_read_the_same_where_others_differ_are_a_tie():
    """Only a column where every mean reads the same gets more decimals: 0.94 and 0.9
    beside 0.5 read 0.9 at 1 decimal, a tie, both bold."""
    spec = parse({"t": sweep(grid={"train.lr": [0.001, 0.0003, 0.0001]}, seeds=[0],
                             metrics={"best_val_loss": "max"})})["t"]
    means = dict(zip(spec.ids, (0.94, 0.9, 0.5), strict=True))
    runs = collect(spec, [RunResult(pid, s, {"best_val_loss": means[pid]}) for pid, s in spec.jobs()])
    lines = to_markdown(spec, summarise(spec, runs), decimals=1).splitlines()
    assert lines[2:5] == ["| 1e-3 | **0.9** |", "| 3e-4 | **0.9** |", "| 1e-4 | 0.5 |"]


def test_latex_special_characters_are_escaped():
    assert latex_escape(r"a_b & 50% $x$ #1 {y} ~z ^w \v") == \
        r"a\_b \& 50\% \$x\$ \#1 \{y\} \textasciitilde{}z \textasciicircum{}w \textbackslash{}v"
    assert latex_escape("a|b <c>") == r"a\textbar{}b \textless{}c\textgreater{}"  # OT1 printed | as a dash


def test_a_double_quote_in_latex_is_a_straight_quote_under_ot1():
    """OT1, LaTeX's default font encoding (which the other escapes assume), prints " as a
    closing quote: a string value's quote, and the quotes value_labels puts around strings
    that read alike ("null " beside "null"), read ” in table.tex. \\textquotedbl alone is
    an error under OT1, so the glyph is taken from T1; <, >, ~ and ^ were escaped already."""
    quote = r"\UseTextSymbol{T1}{\textquotedbl}"
    assert latex_escape('say "hi"') == f"say {quote}hi{quote}"
    assert latex_escape("<a> ~b ^c") == r"\textless{}a\textgreater{} \textasciitilde{}b \textasciicircum{}c"
    spec = parse({"p": sweep(stage="embed", grid={"embedding.model": ['a "b"', "null ", "null"]}, seeds=[0],
                             metrics={"items_per_s": "max"})})["p"]
    runs = collect(spec, [RunResult(pid, s, {"items_per_s": 1.0 + i}) for i, (pid, s) in enumerate(spec.jobs())])
    latex = to_latex(spec, summarise(spec, runs)).splitlines()
    assert latex[8:11] == [f"a {quote}b{quote} & $1.000$ \\\\", f"{quote}null {quote} & $2.000$ \\\\",
                           f"{quote}null{quote} & $\\mathbf{{3.000}}$ \\\\"]


def test_latex_labels_keep_their_hyphens():
    """LaTeX sets -- as an en dash and --- as an em dash: a model folder from the Hugging
    Face cache, models--BAAI--bge-small-en-v1.5, read models–BAAI–bge-small-en-v1.5 in
    table.tex, not the value swept (table.md, which Markdown leaves alone, read it right).
    A brace between two hyphens keeps each one a hyphen; a lone hyphen is as before."""
    assert latex_escape("models--BAAI--bge-small") == "models-{}-BAAI-{}-bge-small"
    assert latex_escape("a---b -1e-5") == "a-{}-{}-b -1e-5"
    hub = "models--BAAI--bge-small-en-v1.5"
    spec = parse({"m": sweep(stage="embed", grid={"embedding.model": [hub, "default"]}, seeds=[0],
                             metrics={"items_per_s": "max"})})["m"]
    runs = collect(spec, [RunResult(pid, s, {"items_per_s": 1.0 + i}) for i, (pid, s) in enumerate(spec.jobs())])
    latex = to_latex(spec, summarise(spec, runs)).splitlines()
    assert "models-{}-BAAI-{}-bge-small-en-v1.5 & $1.000$ \\\\" in latex
    assert f"| {hub} | 1.000 |" in to_markdown(spec, summarise(spec, runs))


def test_latex_labels_print_no_ligature_of_quotes_and_commas():
    """OT1 and T1 print ` as an opening quote and join `` into an opening double quote,
    !` and ?` into an inverted ! and ?, and '' into a closing double quote; T1 joins ,,
    into a low double quote: a prompt holding a Markdown code span or '' read typeset
    quotes in table.tex, not the value swept. A backtick is the kernel's grave (TS1), and
    a brace after a quote or comma that another follows keeps both as they are; <<, >>
    (T1's guillemets) and -- were kept apart already. A lone quote or comma is as before."""
    grave = r"\textasciigrave{}"
    assert latex_escape("`x`") == f"{grave}x{grave}"
    assert latex_escape("``q'' !`a ?`b") == f"{grave}{grave}q'{{}}' !{grave}a ?{grave}b"
    assert latex_escape("a,,b ,,, '''") == "a,{},b ,{},{}, '{}'{}'"
    assert latex_escape("<<a>> a--b") == r"\textless{}\textless{}a\textgreater{}\textgreater{} a-{}-b"
    assert latex_escape("it's 1,2, 'a' !?") == "it's 1,2, 'a' !?"
    spec = parse({"q": sweep(stage="embed", grid={"embedding.model": ["say ``hi''", "a,,b"]}, seeds=[0],
                             metrics={"items_per_s": "max"})})["q"]
    runs = collect(spec, [RunResult(pid, s, {"items_per_s": 1.0 + i}) for i, (pid, s) in enumerate(spec.jobs())])
    latex = to_latex(spec, summarise(spec, runs)).splitlines()
    assert latex[8:10] == [f"say {grave}{grave}hi'{{}}' & $1.000$ \\\\", "a,{},b & $\\mathbf{2.000}$ \\\\"]


def test_markdown_escapes_pipes():
    spec = parse({"p": sweep(stage="embed", grid={"embedding.model": ["a|b", "m/x y"]},
                             metrics={"items_per_s": "max"})})["p"]
    runs = collect(spec, [RunResult(pid, s, {"items_per_s": 1.0 + s}) for pid, s in spec.jobs()])
    text = to_markdown(spec, summarise(spec, runs))
    assert "| a\\|b | **1.500 ± 0.707** |" in text and "| m/x y |" in text
    assert r"m/x y & $\mathbf{1.500 \pm 0.707}$" in to_latex(spec, summarise(spec, runs))


def test_markdown_cells_read_as_written():
    """Only `|` was escaped: a string value's `*fast*` or `__init__` read as emphasis, a
    stop token `</s>` as an HTML tag (nothing shown), `[x](y)` as a link, and a backslash
    before punctuation escaped it (`\\*` read `*`). Each is escaped now; an `_` inside a
    word and a backslash before a letter, which Markdown leaves alone, are as before."""
    values = ["*fast*", "__init__", "</s>", "[x](y)", "C:\\tmp\\*.\\_"]
    spec = parse({"p": sweep(stage="embed", grid={"embedding.model": values}, seeds=[0],
                             metrics={"items_per_s": "max"})})["p"]
    runs = collect(spec, [RunResult(pid, s, {"items_per_s": 1.0 + i}) for i, (pid, s) in enumerate(spec.jobs())])
    lines = to_markdown(spec, summarise(spec, runs)).splitlines()
    assert [line.split(" | ")[0] for line in lines[2:7]] == [
        "| \\*fast\\*", "| \\_\\_init\\_\\_", "| \\</s>", "| \\[x\\](y)", "| C:\\tmp\\\\\\*.\\\\\\_"]
    assert lines[0] == "| model | items_per_s ↑ |"


def test_markdown_cells_escape_dollars():
    """GitHub (and most renderers with math) read the text between two `$` on one line as
    inline TeX: a priced sweep in report.currency `$` named it in two cost headers, and a
    string value holding a price (`$5 / 1M`) beside another, so the row read as a formula.
    Each `$` is escaped; LaTeX's table escaped it already."""
    spec = parse({"p": sweep(stage="embed", grid={"embedding.model": ["$5 / 1M", "a\\$b"]}, seeds=[0],
                             metrics={"estimated_cost": "min", "estimated_cost_per_million_records": "min"})})["p"]
    runs = collect(spec, [RunResult(pid, s, {"estimated_cost": 1.0 + i, "estimated_cost_per_million_records": 2.0})
                          for i, (pid, s) in enumerate(spec.jobs())], currency="$")
    lines = to_markdown(spec, summarise(spec, runs), currency="$").splitlines()
    assert lines[0] == "| model | estimated_cost (\\$) ↓ | estimated_cost_per_million_records (\\$) ↓ |"
    assert lines[2].startswith("| \\$5 / 1M | ") and lines[3].startswith("| a\\\\\\$b | ")
    assert "estimated\\_cost (\\$) $\\downarrow$" in to_latex(spec, summarise(spec, runs), currency="$")


def test_exports_are_written(tmp_path):
    spec, summary = tiny()
    write_exports(spec, summary, tmp_path / "t.md", tmp_path / "t.tex")
    assert (tmp_path / "t.md").read_text() == MARKDOWN and (tmp_path / "t.tex").read_text() == LATEX


def test_a_priced_sweeps_cost_columns_name_their_currency():
    """An embed sweep's collection prices its runs (report.gpu_hour_price, in
    report.currency): the cost metrics' headers say the currency, the other metrics'
    headers stay as they are; no currency, no change."""
    spec = parse({"speed": sweep(stage="embed", grid={"embedding.max_length": [64, 128]}, seeds=[0],
                                 metrics={"estimated_cost": "min", "items_per_s": "max"})})["speed"]
    runs = collect(spec, [RunResult(p, s, {"estimated_cost": 1.0 + i, "items_per_s": 10.0})
                          for i, (p, s) in enumerate(spec.jobs())], currency="EUR")
    summary = summarise(spec, runs)
    assert to_markdown(spec, summary, currency="EUR").splitlines()[0] == (
        "| max_length | estimated_cost (EUR) ↓ | items_per_s ↑ |")
    assert r"max\_length & estimated\_cost (EUR) $\downarrow$ & items\_per\_s $\uparrow$ \\" in to_latex(
        spec, summary, currency="EUR").splitlines()
    assert to_markdown(spec, summary).splitlines()[0] == "| max_length | estimated_cost ↓ | items_per_s ↑ |"


def test_a_priced_sweeps_cost_columns_tell_amounts_apart():
    """Money read at the column's 3 decimals: costs of 0.0002 and 0.0004 USD (a few GPU
    seconds each) both read 0.000, a tie in bold, though one costs twice the other, and a
    non-zero cost read as free. A money column gets decimals until no amount reads 0 and
    amounts that differ at two significant digits read apart; one that reads so already is
    the same bytes, and so is every column of a sweep without a price."""
    spec = parse({"c": sweep(stage="embed", grid={"embedding.max_length": [64, 128, 256]}, seeds=[0],
                             metrics={"estimated_cost": "min", "estimated_cost_per_million_records": "min",
                                      "items_per_s": "max"})})["c"]
    costs = [(0.0002, 0.012, 0.0002), (0.0004, 0.49, 0.0004), (0.0049, 0.0121, 0.0049)]

    def rows(currency):
        runs = collect(spec, [RunResult(pid, s, dict(zip(spec.metrics, v, strict=True)))
                              for (pid, s), v in zip(spec.jobs(), costs, strict=True)], currency=currency)
        summary = summarise(spec, runs)
        return to_markdown(spec, summary, currency=currency).splitlines()[2:5], to_latex(spec, summary,
                                                                                           currency=currency)

    markdown, latex = rows("USD")
    assert markdown == ["| 64 | **0.0002** | **0.012** | 0.000 |", "| 128 | 0.0004 | 0.490 | 0.000 |",
                        "| 256 | 0.0049 | **0.012** | **0.005** |"]  # 0.012, 0.0121: alike at two digits
    assert "64 & $\\mathbf{0.0002}$ & $\\mathbf{0.012}$ & $0.000$ \\\\" in latex.splitlines()
    assert rows(None)[0][:2] == ["| 64 | **0.000** | **0.012** | 0.000 |", "| 128 | **0.000** | 0.490 | 0.000 |"]


def test_money_decimals():
    from shardflow.sweep.export import money_decimals

    def places(*means, decimals=3):
        return money_decimals(pd.Series(means), decimals)

    assert places(1.5, 0.25, 12.0) == 3 and places(0.0, 0.012) == 3  # read apart and not 0 already: as before
    assert places(0.0004, 0.0049) == 4  # 0.000 would read as free
    assert places(0.00041, 0.00044) == 5 and places(0.000412, 0.000414) == 4  # alike at two digits: a tie
    assert places(0.0049, 0.0051) == 4  # both 0.005 at 3
    assert places(1e-9, 2e-9) == 6 and places(float("nan"), 0.5) == 3  # at most 6 (MOST_DECIMALS)


def test_the_bold_value_is_the_best_as_the_table_reads_it():
    """Means on a half at the table's decimals (0.9705: two seeds of a rate over 200
    queries): the cell reads 0.971, and that row is the best one, bold; numpy's rounding
    (0.97) had bolded the 0.970 row instead."""
    spec, summary = tiny(seeds=(0,))
    summary["best_val_loss_mean"] = [0.9, 0.8]
    summary["acc_mean"] = [0.9705, 0.97]
    lines = to_markdown(spec, summary, decimals=3).splitlines()
    assert lines[2:4] == ["| 1e-3 | 0.900 | **0.971** |", "| 3e-4 | **0.800** | 0.970 |"]
    assert "1e-3 & $0.900$ & $\\mathbf{0.971}$ \\\\" in to_latex(spec, summary, decimals=3)


def test_a_mean_exactly_on_a_half_rounds_to_even():
    """config/README.md says so: a mean exactly on a half at the column's decimals (a rate
    over 16 queries: 1/16 = 0.0625, 3/16 = 0.1875) reads as Python prints it, half to
    even: 0.062 and 0.188, in both tables."""
    spec, summary = tiny(seeds=(0,))
    summary["best_val_loss_mean"] = [0.0625, 0.9]
    summary["acc_mean"] = [0.1875, 0.5]
    lines = to_markdown(spec, summary, decimals=3).splitlines()
    assert lines[2:4] == ["| 1e-3 | **0.062** | 0.188 |", "| 3e-4 | 0.900 | **0.500** |"]
    assert "1e-3 & $\\mathbf{0.062}$ & $0.188$ \\\\" in to_latex(spec, summary, decimals=3)


def test_a_point_without_a_mean_is_explained_below_the_table():
    """A point with a seed that has no value (a diverged run's null loss) has no mean and
    reads –; the tables said nothing of why, so a reader could not tell a diverged point
    from one the metric does not apply to. A note below says it, only where a cell is –."""
    spec, summary = tiny()
    summary.loc[0, ["acc_mean", "acc_std"]] = float("nan")
    note = ("– a run of this point wrote no value (null, NaN or Infinity: a diverged run's loss, a figure its device "
            "does not give), so it has no mean.")
    markdown = to_markdown(spec, summary).splitlines()
    assert markdown[2] == "| 1e-3 | 1.100 ± 0.141 | – |"
    assert markdown[-1] == f"tiny (train): mean ± sample std (n − 1) over 2 seeds; best in bold. {note}"
    latex = to_latex(spec, summary).splitlines()
    assert "1e-3 & $1.100 \\pm 0.141$ & -- \\\\" in latex
    assert latex[-2] == f"\\par\\smallskip{{\\footnotesize -- {note[2:]}}}"
    assert to_markdown(*tiny()) == MARKDOWN and to_latex(*tiny()) == LATEX  # every mean there: no note


def test_a_float_parameters_column_reads_in_one_notation():
    """A learning rate's column read 1e-05, 3e-05, 0.0001, 0.0003, 0.001 (repr, the point
    ids' spelling): two notations in one column. It reads in one, chosen from all its
    values; the point ids, and so the folders and the CSV/Parquet tables, keep repr's."""
    lrs = [1e-5, 3e-5, 1e-4, 3e-4, 1e-3]
    spec = parse({"lr": sweep(grid={"train.lr": lrs, "train.dropout": [0.1, 0.2, 0.5], "train.n_layer": [2]},
                              seeds=[0], metrics={"best_val_loss": "min"})})["lr"]
    assert list(spec.ids[:3]) == ["dropout=0.1__lr=1e-05__n_layer=2", "dropout=0.2__lr=1e-05__n_layer=2",
                            "dropout=0.5__lr=1e-05__n_layer=2"]
    runs = collect(spec, [RunResult(p, s, {"best_val_loss": 1.0 + i}) for i, (p, s) in enumerate(spec.jobs())])
    summary = summarise(spec, runs)
    rows = [line.split(" | ")[:3] for line in to_markdown(spec, summary).splitlines()[2:17]]
    assert [r[0] for r in rows[::3]] == ["| 1e-5", "| 3e-5", "| 1e-4", "| 3e-4", "| 1e-3"]
    assert [r[1] for r in rows[:3]] == ["0.1", "0.2", "0.5"]  # plain decimals where none is small
    assert {r[2] for r in rows} == {"2"}  # an integer stays one
    latex = to_latex(spec, summary).splitlines()
    assert [line.split(" & ")[:3] for line in latex[8:11]] == [["1e-5", "0.1", "2"], ["1e-5", "0.2", "2"],
                                                               ["1e-5", "0.5", "2"]]


def test_value_labels_choose_one_notation_and_keep_distinct_values_apart():
    def labels(values):
        return list(value_labels(values).values())

    assert labels([0.1, 0.25, 0.5, 1.0]) == ["0.1", "0.25", "0.5", "1.0"]
    assert labels([0.001, 0.01, 0.1]) == ["0.001", "0.01", "0.1"]  # less than 3 orders apart, none below 1e-3
    assert labels([0.0, 0.0003, 0.001]) == ["0", "3e-4", "1e-3"]  # zero decides nothing
    assert labels([0.01, 0.1, 1.0, 10.0]) == ["1e-2", "1e-1", "1e0", "1e1"]  # 3 orders apart
    assert labels([1e6, 2.5e6, float("inf")]) == ["1e6", "2.5e6", "inf"]
    # Two values never share a label: the shortest mantissa that reads back as the value.
    assert labels([1e-5, 1.5e-5]) == ["1e-5", "1.5e-5"]
    assert labels([0.1, 0.1000001]) == ["0.1", "0.1000001"]
    assert labels([1e-5, 0.1, 0.1000001]) == ["1e-5", "1e-1", "1.000001e-1"]
    assert labels([1e-4, 1e-4 + 1e-20]) == ["1e-4", "1.0000000000000002e-4"]
    # Other values read as before, and a label that would stand for two values (a string
    # beside the float it spells) leaves the column as before.
    assert labels(["a/b", None, True, 128, 3]) == ["a/b", "null", "true", "128", "3"]
    assert labels(["1e-4", 1e-4, 1e-5]) == ["1e-4", "0.0001", "1e-05"]
    assert value_labels([1e-5, 3e-5]) == {"1e-05": "1e-5", "3e-05": "3e-5"}  # keyed by the point ids' spelling


def test_a_string_value_with_a_line_break_or_one_that_reads_as_null_keeps_its_row_and_its_meaning():
    """An instruction-style prompt (Qwen3's "Instruct: ...\\nQuery: ") broke its Markdown row
    in two (the line break went into the table) and stood in LaTeX as a space; a string
    "null" beside a null read "null" twice. Control characters read as their escapes,
    and a string that reads as another value of its column is quoted."""
    prompts = ["Instruct: find the passage\nQuery: ", "query: "]
    # embedding.model stands in for embedding.prompt (this module's schema has no prompt key):
    # one string column, labelled alike.
    spec = parse({"p": sweep(stage="embed", grid={"embedding.model": prompts}, seeds=[0],
                             metrics={"items_per_s": "max"})})["p"]
    runs = collect(spec, [RunResult(pid, s, {"items_per_s": 1.0 + i}) for i, (pid, s) in enumerate(spec.jobs())])
    summary = summarise(spec, runs)
    lines = to_markdown(spec, summary).splitlines()
    assert lines[2:4] == ["| Instruct: find the passage\\nQuery:  | 1.000 |", "| query:  | **2.000** |"]
    latex = to_latex(spec, summary)
    assert r"Instruct: find the passage\textbackslash{}nQuery:  & $1.000$ \\" in latex
    assert list(value_labels(["a\tb\r", None, "null", "true"]).values()) == ["a\\tb\\r", "null", '"null"', "true"]
    assert list(value_labels(["null", "x"]).values()) == ["null", "x"]  # alone in its column: as written


def test_strings_that_differ_only_in_spaces_at_their_ends_are_quoted():
    """A prompt with its trailing space ("query: ", as E5 models take it) beside the same
    without it: Markdown trims a cell, LaTeX drops the space before `&`, a figure's tick
    shows none, so both rows read `query:`. Such strings are quoted, as a string that
    reads as another value is; a column without them reads as before."""
    spec = parse({"p": sweep(stage="embed", grid={"embedding.model": ["query: ", "query:", " x"]}, seeds=[0],
                             metrics={"items_per_s": "max"})})["p"]
    runs = collect(spec, [RunResult(pid, s, {"items_per_s": 1.0 + i}) for i, (pid, s) in enumerate(spec.jobs())])
    summary = summarise(spec, runs)
    lines = to_markdown(spec, summary).splitlines()
    assert lines[2:5] == ['| "query: " | 1.000 |', '| "query:" | 2.000 |', "|  x | **3.000** |"]
    quote = r"\UseTextSymbol{T1}{\textquotedbl}"  # a straight quote under OT1 too
    assert f"{quote}query: {quote} & $1.000$ \\\\" in to_latex(spec, summary)
    assert list(value_labels(["a\u00a0", "a", None, "null "]).values()) == ['"a\u00a0"', '"a"', "null", '"null "']
    assert list(value_labels(["query: ", "passage: "]).values()) == ["query: ", "passage: "]


def test_a_line_break_and_a_backslash_before_n_read_apart():
    """A prompt sweep over "Query:\\n" and 'Query:\\n' (YAML double and single quotes: a
    line break, and a backslash before an n) printed two rows, both "Query:\\n": the line
    break's escape is what the other writes. Labels that still read alike once quoted
    escape their backslashes and quotes too; a column whose labels differ (a Windows
    path's backslash) reads as before."""
    def labels(values):
        return list(value_labels(values).values())

    prompts = ["Query:\n", "Query:\\n"]
    assert labels(prompts) == ['"Query:\\n"', '"Query:\\\\n"']
    assert len(set(labels(["a\n", "a\\n"]))) == 2
    assert labels(["a\x01", "a\\x01", None]) == ['"a\\x01"', '"a\\\\x01"', "null"]
    # A string written as another's escaped label is escaped too: no label stands for two values.
    assert labels(["a\n", "a\\n", '"a\\\\n"']) == ['"a\\n"', '"a\\\\n"', '"\\"a\\\\\\\\n\\""']
    assert labels(["C:\\data", "D:\\data"]) == ["C:\\data", "D:\\data"]
    spec = parse({"p": sweep(stage="embed", grid={"embedding.model": prompts}, seeds=[0],
                             metrics={"items_per_s": "max"})})["p"]
    runs = collect(spec, [RunResult(pid, s, {"items_per_s": 1.0 + i}) for i, (pid, s) in enumerate(spec.jobs())])
    summary = summarise(spec, runs)
    # Markdown reads a backslash before punctuation as an escape: the second row's two
    # backslashes are written as three, and read as two.
    assert to_markdown(spec, summary).splitlines()[2:4] == ['| "Query:\\n" | 1.000 |',
                                                           '| "Query:\\\\\\n" | **2.000** |']
    rows = to_latex(spec, summary).splitlines()[8:10]
    assert [row.split(" & ")[0].count(r"\textbackslash{}") for row in rows] == [1, 2]


def test_a_retrieval_sweeps_relevance_level_is_named_below_its_tables():
    """Scored away from retrieval.relevance_level 1 (table.relevance_levels), recall,
    precision, MRR and MAP are not the numbers scored at 1: a note below both tables says
    the level. Runs scored at different levels (kept from before the config's level
    changed) get a column of each point's levels. At 1 everywhere (no levels) the tables
    are as before."""
    spec, summary = tiny()
    low, high = spec.ids
    assert to_markdown(spec, summary, levels={}) == MARKDOWN and to_latex(spec, summary, levels={}) == LATEX
    note = ("Recall, precision, MRR and MAP count grades of 2 and above as relevant (retrieval.relevance_level), "
            "nDCG the grades themselves.")
    markdown = to_markdown(spec, summary, levels={low: (2,), high: (2,)})
    assert markdown == MARKDOWN.replace("best in bold.", f"best in bold. {note}")
    latex = to_latex(spec, summary, levels={low: (2,), high: (2,)})
    assert latex == LATEX.replace("\\end{table}", "\\par\\smallskip{\\footnotesize "
                                  + note.replace("_", "\\_") + "}\n\\end{table}")
    mixed = {low: (1,), high: (1, 2)}
    lines = to_markdown(spec, summary, levels=mixed).splitlines()
    assert lines[:4] == [
        "| lr | relevance level | best_val_loss ↓ | acc ↑ |",
        "| :-- | :-- | --: | --: |",
        "| 1e-3 | 1 | 1.100 ± 0.141 | 0.600 ± 0.141 |",
        "| 3e-4 | 1, 2 | **0.900 ± 0.000** | **0.700 ± 0.141** |",
    ]
    assert "Relevance level: the retrieval.relevance_level the point's runs were scored at" in lines[-1]
    latex = to_latex(spec, summary, levels=mixed)
    assert "\\begin{tabular}{llrr}" in latex and "lr & relevance level & best\\_val\\_loss" in latex
    assert "3e-4 & 1, 2 & $\\mathbf{0.900 \\pm 0.000}$" in latex



def test_a_sampled_sweeps_tables_say_its_points_were_drawn_at_random():
    """After the caption, what a reader of a paper needs to know of a random search: how
    many points, the sample's seed and what each parameter was drawn from; a grid's and a
    list's tables say nothing of their points (MARKDOWN and LATEX above, byte for byte)."""
    grid = {"train.lr": {"log_uniform": [1.0e-4, 1.0e-2]}, "train.dropout": {"uniform": [0.0, 0.5]},
            "train.n_layer": {"int_uniform": [2, 8]}, "train.dtype": ["float32", "bfloat16"]}
    spec = parse({"lr_random": sweep(grid=grid, sample={"points": 6, "seed": 3}, seeds=[0])})["lr_random"]
    summary = summarise(spec, collect(spec, [RunResult(p, s, {"best_val_loss": 1.0 + i})
                                             for i, (p, s) in enumerate(spec.jobs())]))
    drawn = ("The 6 points were drawn at random (sample seed 3): lr log-uniform between 1e-4 and 1e-2; dropout "
             "uniform between 0.0 and 0.5; n_layer uniform over the integers 2 to 8; dtype one of float32, bfloat16. "
             "Rows are sorted by lr, then dropout, then n_layer, then dtype.")
    assert to_markdown(spec, summary).splitlines()[-1] == f"lr_random (train): one seed; best in bold. {drawn}"
    assert f"\\caption{{lr\\_random: one seed; best in bold. {latex_escape(drawn)}}}" in to_latex(spec, summary)
    assert "n\\_layer uniform over the integers 2 to 8" in to_latex(spec, summary)

    listed = parse({"l": sweep(grid=None, points=[{"train.lr": 0.1}, {"train.lr": 0.01}], seeds=[0])})["l"]
    summary = summarise(listed, collect(listed, [RunResult(p, s, {"best_val_loss": 1.0}) for p, s in listed.jobs()]))
    assert to_markdown(listed, summary).splitlines()[-1] == "l (train): one seed; best in bold."
    assert "\\caption{l: one seed; best in bold.}" in to_latex(listed, summary)


def sampled(grid, points, metric, seed=3):
    """A one-seed sampled sweep over `grid` and its summary, best_val_loss `metric(i)` at draw i."""
    spec = parse({"r": sweep(grid=grid, sample={"points": points, "seed": seed}, seeds=[0])})["r"]
    runs = collect(spec, [RunResult(p, 0, {"best_val_loss": metric(i)}) for i, p in enumerate(spec.ids)])
    return spec, summarise(spec, runs)


def markdown_rows(text: str) -> list[list[str]]:
    """The body of a Markdown table, each row's cells."""
    return [line.strip("| ").split(" | ") for line in text.splitlines()[2:] if line.startswith("| ")]


def latex_rows(text: str) -> list[list[str]]:
    """The body of a booktabs table, each row's cells."""
    lines = text.splitlines()
    body = lines[lines.index("\\midrule") + 1 : lines.index("\\bottomrule")]
    return [line.removesuffix(" \\\\").split(" & ") for line in body]


def test_a_sampled_sweeps_tables_list_its_points_by_parameter_not_in_draw_order():
    """Draw order tells a reader nothing: the rows go by the first parameter, then the
    next; a list's values as the grid lists them (float32 before bfloat16, as the caption
    names them), a range's numerically. The best point, drawn second, keeps its bold."""
    grid = {"train.dtype": ["float32", "bfloat16"], "train.lr": {"log_uniform": [1.0e-4, 1.0e-2]}}
    spec, summary = sampled(grid, 5, lambda i: 1.0 if i == 1 else 2.0)
    lr = value_labels(p["train.lr"] for p in spec.points)
    ordered = sorted(spec.points, key=lambda p: (p["train.dtype"] == "bfloat16", p["train.lr"]))
    assert ordered != list(spec.points)  # drawn in another order
    best = spec.by_id[spec.ids[1]]
    expected = [[p["train.dtype"], lr[format_value(p["train.lr"])],
                 "**1.000**" if p == best else "2.000"] for p in ordered]
    assert markdown_rows(to_markdown(spec, summary)) == expected
    tex = [[d, v, "$\\mathbf{1.000}$" if bold == "**1.000**" else "$2.000$"] for d, v, bold in expected]
    assert latex_rows(to_latex(spec, summary)) == tex
    # The machine tables keep draw order: raising `points` appends to them.
    assert list(summary["point"]) == list(spec.ids)
    assert [p["id"] for p in points_record(spec)["points"]] == list(spec.ids)


def test_a_sampled_sweeps_numbers_sort_numerically_and_ties_go_to_the_next_parameter():
    """A list of numbers sorts numerically whatever order the grid lists it in (8, 2, 4
    reads 2, 4, 8); points that share the first parameter's value go by the second's."""
    grid = {"train.n_layer": [8, 2, 4], "train.dtype": ["float32", "bfloat16"]}
    spec, summary = sampled(grid, 5, lambda i: 1.0 + i)
    ordered = sorted(spec.points, key=lambda p: (p["train.n_layer"], p["train.dtype"] == "bfloat16"))
    assert ordered != list(spec.points)
    assert [r[:2] for r in markdown_rows(to_markdown(spec, summary))] == [
        [str(p["train.n_layer"]), p["train.dtype"]] for p in ordered]


def test_a_sampled_sweep_without_its_grid_on_record_sorts_strings_lexically():
    """A sample's record from before it named its grid gives no order of a list's values:
    strings then go by their characters, the same on every machine (auto before bfloat16,
    where the draw and the grid list bfloat16 first)."""
    spec, summary = sampled({"train.dtype": ["float32", "bfloat16", "auto"]}, 2, lambda i: 1.0 + i, seed=2)
    assert [p["train.dtype"] for p in spec.points] == ["bfloat16", "auto"]
    spec = dataclasses.replace(spec, sample={"points": 2, "seed": 2})
    assert [r[0] for r in markdown_rows(to_markdown(spec, summary))] == ["auto", "bfloat16"]


def test_a_sampled_sweeps_tables_say_their_rows_are_sorted_by_parameter():
    grid = {"train.dtype": ["float32", "bfloat16"], "train.lr": {"log_uniform": [1.0e-4, 1.0e-2]}}
    spec, summary = sampled(grid, 3, lambda i: 1.0 + i)
    assert to_markdown(spec, summary).splitlines()[-1].endswith(" Rows are sorted by dtype, then lr.")
    assert "Rows are sorted by dtype, then lr.}" in to_latex(spec, summary)

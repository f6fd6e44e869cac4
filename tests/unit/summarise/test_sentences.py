"""The sentence splitters, rule by rule (see shardflow/summarise/sentences.py)."""

from __future__ import annotations

import pytest

from shardflow.summarise.lead import lead_k
from shardflow.summarise.sentences import split_punctuation, split_sentences, split_tokenised


@pytest.mark.parametrize(
    "text, expected",
    [
        ("One here. Two there! Three? Four", ["One here.", "Two there!", "Three?", "Four"]),
        ("Wait?! Yes.", ["Wait?!", "Yes."]),
        ("It rose 3.5 per cent. Then fell.", ["It rose 3.5 per cent.", "Then fell."]),
        ("He won in 2015. 2016 was worse.", ["He won in 2015.", "2016 was worse."]),
        ("lower. case stays together", ["lower. case stays together"]),
        ('He left. "Why?" she asked.', ["He left.", '"Why?"', "she asked."]),
        ("He left. (Nobody knew.) Then", ["He left.", "(Nobody knew.)", "Then"]),
    ],
)
def test_basic_ends(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    "text, expected",
    [
        ('He said "Stop." Then he left.', ['He said "Stop."', "Then he left."]),
        ("'Is it true?' asked Tom.", ["'Is it true?'", "asked Tom."]),
        ("She shouted “Run!” and ran.", ["She shouted “Run!”", "and ran."]),
        ("‘I’m done.’ He left.", ["‘I’m done.’", "He left."]),
        ("He said ``hi .'' Then", ["He said ``hi .''", "Then"]),
        ('"Fine," he said. Next', ['"Fine," he said.', "Next"]),  # a comma inside quotes ends nothing
    ],
)
def test_closing_quote_after_punctuation_ends_a_sentence(text, expected):
    assert split_sentences(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "Mr. Smith met Mrs. Jones and Dr. Who at St. Paul's.",
        "He moved to the U.S. Army base in Washington D.C. Later that year.",
        "Fruit, e.g. Apples and pears, i.e. Pome fruit.",
        "It opened in Jan. 2015 at 9 a.m. Sharp.",
        "J. K. Rowling and George W. Bush met.",
        "Apple Inc. Said so.",
    ],
)
def test_abbreviations_initials_and_acronyms_do_not_end_sentences(text):
    assert split_sentences(text) == [text]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("The U.S.' role grew. Then it fell.", ["The U.S.' role grew.", "Then it fell."]),
        ("The U.N.’ envoy left. Talks ended.", ["The U.N.’ envoy left.", "Talks ended."]),
        ("Sales of the so-called 'Dr.' brand rose.", ["Sales of the so-called 'Dr.' brand rose."]),
        # Before a capital the quote rule still ends the sentence, abbreviation or not.
        ('He said "I love the U.S." Then he left.', ['He said "I love the U.S."', "Then he left."]),
        ("He said 'no.' then left.", ["He said 'no.'", "then left."]),
    ],
)
def test_a_quote_after_an_abbreviation_before_a_lowercase_word_ends_nothing(text, expected):
    """`U.S.'` is the possessive of an acronym, not the end of a quotation: rule 5 keeps
    the abbreviation's period from ending the sentence, and the apostrophe after it must
    not either (it made "The U.S.'" a ROUGE-Lsum line of its own)."""
    assert split_sentences(text) == expected
    assert split_punctuation("The U.S.' role grew.") == ["The U.S.'", "role grew."]  # no rule 5 there


def test_ellipsis_ends_only_before_a_capital():
    assert split_sentences("And so... we left. Wait... Then what?") == ["And so... we left.", "Wait...", "Then what?"]
    assert split_sentences("Well… Maybe.") == ["Well…", "Maybe."]


def test_newlines_are_hard_breaks_and_blank_lines_vanish():
    text = "Headline without a stop\n\n  First sentence. Second one\nthird line. "
    assert split_sentences(text) == ["Headline without a stop", "First sentence.", "Second one", "third line."]
    assert split_sentences("") == [] and split_sentences(" \n ") == []


@pytest.mark.parametrize("sep", ["\r", "\x0c", "\x85", "\u2028"])
def test_newline_only_cuts_lines_at_newlines_alone(sep):
    """Lead and extractive cut an article at every line boundary; ROUGE-Lsum's splitting
    (`newline_only`) at "\\n" alone, as rouge-score does: another boundary is whitespace,
    after which punctuation still ends a sentence."""
    text = f"Headline without a stop{sep}First sentence.{sep}Second one\nthird line"
    assert split_sentences(text) == ["Headline without a stop", "First sentence.", "Second one", "third line"]
    assert split_sentences(text, newline_only=True) == [
        f"Headline without a stop{sep}First sentence.",
        "Second one",
        "third line",
    ]
    tokenised = f"headline{sep}first sentence .{sep}second one\nthird line"
    assert split_tokenised(tokenised) == ["headline", "first sentence .", "second one", "third line"]
    assert split_tokenised(tokenised, newline_only=True) == [
        f"headline{sep}first sentence .",
        "second one",
        "third line",
    ]


def test_split_tokenised_uses_standalone_punctuation_tokens():
    text = "gary locke will be confirmed on friday . the club went unbeaten ! u.s. army ... gone ?\nnext line"
    assert split_tokenised(text) == [
        "gary locke will be confirmed on friday .",
        "the club went unbeaten !",
        "u.s. army ... gone ?",
        "next line",
    ]


@pytest.mark.parametrize(
    "text, expected",
    [
        # PTB quotes: `He said "no."` is `` He said `` no . '' ``; the quote closes the sentence.
        ("He said `` no . '' Next highlight .", ["He said `` no . ''", "Next highlight ."]),
        ("he asked ` why ? ' then left .", ["he asked ` why ? '", "then left ."]),
        # PTB brackets: rouge-score reads -RRB- as the word "rrb", so its line matters.
        ("Prices rose -LRB- by 3 % . -RRB- Then fell .", ["Prices rose -LRB- by 3 % . -RRB-", "Then fell ."]),
        ("prices rose -lrb- by 3 % ! -rrb- then fell .", ["prices rose -lrb- by 3 % ! -rrb-", "then fell ."]),
        # Highlights joined with " . " after one ending in a quote: no line of punctuation alone.
        ("He said `` no . '' . Next highlight .", ["He said `` no . '' .", "Next highlight ."]),
        ("the end . ''", ["the end . ''"]),
    ],
)
def test_split_tokenised_keeps_closing_quotes_and_brackets_with_their_sentence(text, expected):
    """As `split_sentences` keeps `He said "no."` whole (rule 3): the tokenised form of
    the same highlights gives the same lines, the closing quote or bracket on its own."""
    assert split_tokenised(text) == expected


def test_lead_k():
    text = "One. Two. Three. Four."
    assert lead_k(text) == ["One.", "Two.", "Three."]
    assert lead_k(text, k=1) == ["One."]
    assert lead_k("Only one", k=3) == ["Only one"]
    with pytest.raises(ValueError, match="k must be >= 1"):
        lead_k(text, k=0)


def test_punctuation_splitter_has_no_abbreviation_rule():
    from shardflow.summarise.sentences import SPLITTERS, split_punctuation

    text = "The U.S. Census Bureau said so. Mr. Smith agreed."
    assert split_sentences(text) == ["The U.S. Census Bureau said so.", "Mr. Smith agreed."]
    assert split_punctuation(text) == ["The U.S.", "Census Bureau said so.", "Mr.", "Smith agreed."]
    assert split_punctuation('He said "Stop." then left. 3.5 stays.') == ['He said "Stop."', "then left.", "3.5 stays."]
    assert SPLITTERS["prose"] is split_sentences and SPLITTERS["punctuation"] is split_punctuation

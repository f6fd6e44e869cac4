"""lead_k on the texts a news corpus holds beyond tidy prose: no final stop, headlines
without punctuation, other scripts. (test_sentences covers the splitting rules.)"""

from __future__ import annotations

import pytest

from shardflow.summarise.lead import lead_k


def test_a_last_sentence_without_a_final_stop_is_kept_whole():
    text = "Markets fell sharply. Traders blamed the rate rise"
    assert lead_k(text) == ["Markets fell sharply.", "Traders blamed the rate rise"]
    assert lead_k("no punctuation at all in this text") == ["no punctuation at all in this text"]


def test_lines_without_punctuation_are_sentences_of_their_own():
    text = "BREAKING\r\nStorm hits the coast\n\nTwo roads closed. More follows."
    assert lead_k(text) == ["BREAKING", "Storm hits the coast", "Two roads closed."]


@pytest.mark.parametrize("text", ["", "   ", "\n\n \t\n"])
def test_a_text_without_words_has_no_lead(text):
    assert lead_k(text, k=3) == []


def test_text_is_kept_as_written_combining_marks_and_right_to_left_included():
    decomposed = "Cafe\u0301 owners met. E\u0301lodie spoke first. Then the mayor."  # e + COMBINING ACUTE
    assert lead_k(decomposed, k=2) == ["Cafe\u0301 owners met.", "E\u0301lodie spoke first."]
    hebrew = "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd. \u200fThe End."
    assert "".join(lead_k(hebrew, k=5)).replace(" ", "") == hebrew.replace(" ", "")  # nothing lost or reordered


def test_the_punctuation_splitter_cuts_at_abbreviations_the_prose_one_keeps():
    text = "Mr. Smith left. He said no. The U.S. team won."
    assert lead_k(text, k=2, splitter="prose") == ["Mr. Smith left.", "He said no."]
    assert lead_k(text, k=2, splitter="punctuation") == ["Mr.", "Smith left."]


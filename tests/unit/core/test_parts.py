"""shardflow.core.parts: records parts read back as they were saved."""

from __future__ import annotations

import pytest

from shardflow.core.parts import PartStore


# JSON escapes the C0 controls ("\x1c" is "\\u001c"), not these.
@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x85"], ids=["U+2028", "U+2029", "NEL"])
def test_records_with_line_breaks_other_than_newline_load_as_saved(tmp_path, char):
    """Python's splitlines() breaks at U+2028, NEL and more, which JSON leaves unescaped
    (a summary may hold them): a part is one record a "\\n"-ended line."""
    store = PartStore(tmp_path / "parts", {"job": "t"}).open()
    records = [{"id": "a", "summary": f"one{char}two"}, {"id": "b", "summary": "three"}]
    store.save_records(0, records)
    assert store.load_records(0, 2) == records
    assert store.load_records(0, 3) is None


def test_an_empty_records_part_loads_as_no_record(tmp_path):
    store = PartStore(tmp_path / "parts", {"job": "t"}).open()
    store.save_records(0, [])
    assert store.load_records(0, 0) == []

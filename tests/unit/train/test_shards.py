"""Token shard files: the llm.c layout, checked reads, atomic streaming writes."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from shardflow.train.shards import (
    HEADER_BYTES,
    ShardFormatError,
    ShardReadError,
    ShardWriter,
    choose_dtype,
    open_shard,
    read_header,
    write_shard,
)

# Written from the spec (llm.c dev/data/data_common.py), sharing no code with shards.py:
# 256 little-endian int32 (magic, version, n_tokens, zeros), then the tokens.
SPEC = {(20240520, 1): "<u2", (20240801, 7): "<u4"}


def reference_read(path) -> np.ndarray:
    with open(path, "rb") as fh:
        header = struct.unpack("<256i", fh.read(1024))
    magic, version, n_tokens = header[:3]
    assert header[3:] == (0,) * 253
    tokens = np.fromfile(path, dtype=SPEC[(magic, version)], offset=1024)
    assert len(tokens) == n_tokens
    return tokens


@pytest.mark.parametrize(
    "dtype, magic, version, top", [("uint16", 20240520, 1, 2**16 - 1), ("uint32", 20240801, 7, 2**32 - 1)]
)
def test_round_trip_matches_the_reference_reader(tmp_path, dtype, magic, version, top):
    tokens = np.array([0, 1, 7, 50256 % (top + 1), top], dtype=np.int64)
    path = tmp_path / "s.bin"
    with ShardWriter(path, dtype) as w:  # streamed in pieces; count filled at close
        w.write(tokens[:2])
        w.write(tokens[2:].tolist())
    data = path.read_bytes()
    assert struct.unpack("<3i", data[:12]) == (magic, version, 5)
    assert len(data) == HEADER_BYTES + 5 * np.dtype(dtype).itemsize
    np.testing.assert_array_equal(reference_read(path), tokens)
    shard = open_shard(path, dtype)
    assert isinstance(shard.tokens, np.memmap) and shard.tokens.dtype == np.dtype(dtype).newbyteorder("<")
    np.testing.assert_array_equal(shard.tokens, tokens)
    np.testing.assert_array_equal(shard.read(1, 4), tokens[1:4])


def test_empty_shard_opens(tmp_path):
    write_shard(tmp_path / "e.bin", [], "uint16")
    assert len(open_shard(tmp_path / "e.bin").tokens) == 0


def test_a_file_without_a_header_holds_bare_tokens_past_the_int32_count(tmp_path, monkeypatch):
    """header=False: the position split's scratch file, which no int32 count limits."""
    import shardflow.train.shards as shards

    monkeypatch.setattr(shards, "MAX_TOKENS", 3)
    with pytest.raises(ValueError, match="the int32 header cannot count them"):
        write_shard(tmp_path / "h.bin", [1, 2, 3, 4], "uint16")
    with ShardWriter(tmp_path / "raw.bin", "uint16", header=False) as w:
        w.write([1, 2, 3, 4, 65535])
    assert (tmp_path / "raw.bin").read_bytes() == np.array([1, 2, 3, 4, 65535], dtype="<u2").tobytes()
    with open_shard(tmp_path / "raw.bin", "uint16", header=False) as raw:
        assert raw.header is None and len(raw) == 5
        np.testing.assert_array_equal(raw.read(1, 5), [2, 3, 4, 65535])
        np.testing.assert_array_equal(raw.tokens, [1, 2, 3, 4, 65535])
    (tmp_path / "odd.bin").write_bytes(b"\0" * 5)
    with pytest.raises(ShardFormatError, match=r"odd\.bin: 5 bytes, not a whole number of uint16 tokens"):
        open_shard(tmp_path / "odd.bin", "uint16", header=False)


def test_truncated_and_padded_files_are_refused(tmp_path):
    path = tmp_path / "t.bin"
    write_shard(path, np.arange(100), "uint16")
    data = path.read_bytes()
    path.write_bytes(data[:-2])
    with pytest.raises(ShardFormatError, match=r"t\.bin: truncated: the header says 100 uint16 tokens .* 1222 bytes"):
        open_shard(path)
    path.write_bytes(data + b"\0\0")
    with pytest.raises(ShardFormatError, match="trailing bytes"):
        open_shard(path)
    path.write_bytes(data[:500])
    with pytest.raises(ShardFormatError, match="shorter than the 1024-byte shard header"):
        read_header(path)


def test_a_short_read_is_an_io_fault_not_a_format_error(tmp_path):
    """A shard checked at open that then returns fewer bytes (cut while open, a failing
    disk) raises an OSError, which a retry is allowed to try (shardflow.core.failures)."""
    from shardflow.core.failures import deterministic

    path = tmp_path / "s.bin"
    write_shard(path, range(10), "uint16")
    shard = open_shard(path)
    with open(path, "r+b") as fh:
        fh.truncate(HEADER_BYTES + 4)
    with pytest.raises(ShardReadError, match=r"s\.bin: short read at token 1: 2 of 8 bytes") as err:
        shard.read(1, 5)
    assert isinstance(err.value, OSError) and not isinstance(err.value, ValueError)
    assert not deterministic(err.value)
    shard.close()


def test_mislabelled_files_are_refused(tmp_path):
    path = tmp_path / "m.bin"
    write_shard(path, np.arange(10), "uint16")
    with pytest.raises(ShardFormatError, match=r"m\.bin: holds uint16 tokens \(magic 20240520\), expected uint32"):
        open_shard(path, "uint32")
    data = bytearray(path.read_bytes())
    data[4:8] = struct.pack("<i", 7)  # uint16 magic with the uint32 version
    path.write_bytes(bytes(data))
    with pytest.raises(
        ShardFormatError, match="magic 20240520 .uint16 tokens. with version 7; that format is version 1"
    ):
        open_shard(path)
    data[0:4] = struct.pack("<i", 12345)
    path.write_bytes(bytes(data))
    with pytest.raises(ShardFormatError, match="magic number 12345 is not a token shard's"):
        open_shard(path)


def test_writer_is_atomic_and_discards_on_error(tmp_path):
    path = tmp_path / "a.bin"
    killed = tmp_path / f"a.bin.tmp-{2**22 + 1}"  # a writer SIGKILLed mid-shard: cleared at publishing
    killed.write_bytes(b"half")
    w = ShardWriter(path, "uint16")
    w.write([1, 2, 3])
    assert not path.exists()  # only the tmp file exists until close
    w.close()
    assert open_shard(path).n_tokens == 3
    with pytest.raises(RuntimeError), ShardWriter(tmp_path / "b.bin", "uint16") as w:
        w.write([1])
        raise RuntimeError("boom")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


def test_token_ids_must_fit_the_dtype(tmp_path):
    with pytest.raises(ValueError, match="token id 65536 does not fit uint16"):
        write_shard(tmp_path / "x.bin", [1, 65536], "uint16")
    assert not (tmp_path / "x.bin").exists()


def test_choose_dtype():
    assert choose_dtype(50257) == "uint16"
    assert choose_dtype(65536) == "uint16"
    assert choose_dtype(65537) == "uint32"
    assert choose_dtype(100, "uint32") == "uint32"
    with pytest.raises(ValueError, match="uint16 holds ids below 65536, but the tokenizer's vocab_size is 128256"):
        choose_dtype(128256, "uint16")
    with pytest.raises(ValueError, match="expected 'auto', 'uint16' or 'uint32'"):
        choose_dtype(100, "int8")

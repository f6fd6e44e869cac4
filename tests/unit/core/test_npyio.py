import numpy as np
import pytest

from shardflow.core.npyio import NpyWriter, iter_row_blocks, read_header, rows_per_block


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("block_rows", [1, 3, 7, 100])
def test_blocks_round_trip_through_the_writer(tmp_path, dtype, block_rows):
    x = np.random.default_rng(0).standard_normal((17, 5)).astype(dtype)
    np.save(tmp_path / "x.npy", x)
    blocks = list(iter_row_blocks(tmp_path / "x.npy", block_rows))
    assert all(len(b) <= block_rows for b in blocks)
    with NpyWriter(tmp_path / "y.npy", dtype, x.shape) as w:
        for b in blocks:
            w.write(b)
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == dtype and np.array_equal(x, y)
    assert read_header(tmp_path / "y.npy")[:2] == ((17, 5), np.dtype(dtype))


def test_writer_refuses_short_or_long_writes(tmp_path):
    with pytest.raises(ValueError, match="2 rows written of 3"):
        with NpyWriter(tmp_path / "a.npy", np.float32, (3, 2)) as w:
            w.write(np.zeros((2, 2), np.float32))
    w = NpyWriter(tmp_path / "b.npy", np.float32, (1, 2))
    with pytest.raises(ValueError, match="more than the 1 rows"):
        w.write(np.zeros((2, 2), np.float32))
    with pytest.raises(ValueError, match="width 2"):
        w.write(np.zeros((1, 3), np.float32))


def test_truncated_file_is_an_error(tmp_path):
    np.save(tmp_path / "x.npy", np.ones((10, 4), np.float32))
    data = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "x.npy").write_bytes(data[:-20])
    with pytest.raises(ValueError, match="file ends at row"):
        list(iter_row_blocks(tmp_path / "x.npy", 4))


def test_default_blocks_are_about_4_mib():
    assert rows_per_block(384, np.float32) == (4 << 20) // (384 * 4)
    assert rows_per_block(10**9, np.float32) == 1


@pytest.mark.parametrize(
    "content",
    [b"", b"version https://git-lfs.github.com/spec/v1\n", b"\x93NUMPY\x01\x00\x10"],
    ids=["empty", "lfs-pointer", "cut-in-header"],
)
def test_a_file_that_is_no_npy_is_an_error_naming_it(tmp_path, content):
    # numpy's own errors ("EOF: reading magic string, expected 8 bytes got 0") name no
    # file: a merge of hundreds of chunks, or a sweep's reference, left the user guessing.
    path = tmp_path / "embed_7.npy"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"embed_7\.npy: not a readable \.npy file \("):
        read_header(path)
    with pytest.raises(ValueError, match=r"embed_7\.npy: not a readable \.npy file \("):
        list(iter_row_blocks(path))

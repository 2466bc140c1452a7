"""Malformed data files are refused with a DataError naming the file (issue 23): IDX headers
whose sizes overflow or exceed the file or a limit, MNIST headers that are not 28x28, gzip bombs
(streamed, never decompressed whole), oversized images and Pillow bombs, FIFOs, NUL bytes."""

from __future__ import annotations

import gzip
import io
import os
import struct
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

from dlperf.data import load_dataset, read_cifar10_bin, read_idx, read_mnist, read_words
from dlperf.data.idx import MAX_IDX_BYTES, parse_idx
from dlperf.data.imagefolder import (
    IMAGE_FORMATS,
    MAX_IMAGE_PIXELS,
    image_size,
    load_eval_image,
    load_train_image,
    open_image,
)
from dlperf.errors import DataError

N = 5


def idx(magic: int, dims: tuple[int, ...], values: bytes) -> bytes:
    return magic.to_bytes(4, "big") + b"".join(d.to_bytes(4, "big") for d in dims) + values


def mnist_pair(tmp_path: Path, img: bytes, lbl: bytes, gz: bool = False) -> tuple[Path, Path]:
    sfx = ".gz" if gz else ""
    i, l_ = tmp_path / f"t10k-images-idx3-ubyte{sfx}", tmp_path / f"t10k-labels-idx1-ubyte{sfx}"
    i.write_bytes(gzip.compress(img) if gz else img)
    l_.write_bytes(gzip.compress(lbl) if gz else lbl)
    return i, l_


PIXELS = bytes(range(256)) * (N * 784 // 256) + bytes(N * 784 % 256)
LABELS = idx(0x801, (N,), bytes([1, 2, 3, 4, 5]))


def test_valid_small_mnist_pair_reads(tmp_path):
    i, l_ = mnist_pair(tmp_path, idx(0x803, (N, 28, 28), PIXELS), LABELS, gz=True)
    x, y = read_mnist(i, l_)
    assert x.shape == (N, 1, 28, 28) and x.dtype == np.uint8 and y.tolist() == [1, 2, 3, 4, 5]
    assert x.ravel().tobytes() == PIXELS
    assert read_idx(i).shape == (N, 28, 28)


@pytest.mark.parametrize("dims", [(2**32 - 1,) * 3, (2**31, 2**16, 28)])
def test_idx_dims_product_overflow_refused(tmp_path, dims):
    # Products beyond int64 (and within it) are exact Python ints: refused, never wrapped.
    f = tmp_path / "x-idx3-ubyte"
    f.write_bytes(idx(0x803, dims, PIXELS))
    with pytest.raises(DataError, match=r"x-idx3-ubyte.*(limit|truncated)"):
        read_idx(f)
    with pytest.raises(DataError, match=r"limit"):
        parse_idx(f.read_bytes(), f)


def test_idx_header_over_limit_refused_before_reading(tmp_path):
    f = tmp_path / "x-idx3-ubyte"
    f.write_bytes(idx(0x803, (1 << 30, 28, 28), PIXELS))
    with pytest.raises(DataError, match=r"841,813,590,016 bytes of values, more than the "
                                        r"1,073,741,824-byte limit .*MAX_IDX_BYTES"):
        read_idx(f)
    with pytest.raises(DataError, match=r"more than the 1,000-byte limit"):
        read_idx(tmp_path / "x-idx3-ubyte", max_bytes=1000)
    assert MAX_IDX_BYTES == 1 << 30


@pytest.mark.parametrize("shape", [(14, 56), (784, 1), (32, 32)])
def test_mnist_not_28x28_refused(tmp_path, shape):
    i, l_ = mnist_pair(tmp_path, idx(0x803, (N, *shape), bytes(N * shape[0] * shape[1])),
                       LABELS)
    with pytest.raises(DataError, match=rf"t10k-images-idx3-ubyte holds {shape[0]}x{shape[1]} "
                                        rf"images, but MNIST images are 28x28"):
        read_mnist(i, l_)
    # Any size when asked for (an MNIST-format set of another size).
    x, _ = read_mnist(i, l_, image_shape=None)
    assert x.shape == (N, 1, *shape)


def test_mnist_zero_images_and_empty_files_refused(tmp_path):
    i, l_ = mnist_pair(tmp_path, idx(0x803, (0, 28, 28), b""), idx(0x801, (0,), b""))
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte holds no images"):
        read_mnist(i, l_)
    i.write_bytes(b"")
    with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte is empty \(0 bytes\)"):
        read_mnist(i, l_)
    i.write_bytes(gzip.compress(b""))
    with pytest.raises(DataError, match=r"is empty: it holds no data"):
        read_idx(i)


def test_gzip_bomb_streamed_and_refused_fast(tmp_path):
    # A valid 5-image file followed by 2 GiB of zeros inside the gzip stream: refused after
    # reading one byte past the declared size, in milliseconds, without the 2 GiB.
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = c.compress(idx(0x803, (N, 28, 28), PIXELS)) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(bytes(1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    f = tmp_path / "t10k-images-idx3-ubyte.gz"
    f.write_bytes(head + block * 2048 + c.flush())
    t0 = time.perf_counter()
    with pytest.raises(DataError, match=r"longer than its header says.*decompressed file holds "
                                        r"more"):
        read_idx(f)
    assert time.perf_counter() - t0 < 2.0


def test_gzip_header_declaring_more_than_deflate_can_hold(tmp_path):
    f = tmp_path / "t10k-images-idx3-ubyte.gz"
    f.write_bytes(gzip.compress(idx(0x803, (1 << 20, 28, 28), PIXELS)))
    with pytest.raises(DataError, match=r"more than a [\d,]+-byte gzip file can hold "
                                        r"\(deflate compresses at most 1032:1\)"):
        read_idx(f)


def test_fifo_refused_without_blocking(tmp_path):
    fifo = tmp_path / "t10k-images-idx3-ubyte"
    os.mkfifo(fifo)
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(LABELS)
    for fn in (read_idx, read_cifar10_bin, read_words, load_dataset):
        with pytest.raises(DataError, match=r"t10k-images-idx3-ubyte is a FIFO \(named pipe\), "
                                            r"not a regular file"):
            fn(fifo)


def test_cifar_over_limit_refused_from_size(tmp_path):
    f = tmp_path / "data_batch_1.bin"
    with open(f, "wb") as fh:
        fh.truncate(3073 * 400)
    with pytest.raises(DataError, match=r"data_batch_1\.bin is 1,229,200 bytes, more than the "
                                        r"1,000,000-byte limit"):
        read_cifar10_bin(f, max_bytes=1_000_000)
    x, y = read_cifar10_bin(f)
    assert x.shape == (400, 3, 32, 32) and not y.any()


def test_token_file_nul_byte_and_limit(tmp_path):
    f = tmp_path / "ptb.valid.txt"
    f.write_bytes(b"a b c\nd e\0 f\n")
    with pytest.raises(DataError, match=r"ptb\.valid\.txt is not a text file: it has a NUL byte "
                                        r"at offset 9"):
        read_words(f)
    f.write_bytes(b"a b c\n" * 100)
    with pytest.raises(DataError, match=r"600 bytes, more than the 599-byte limit"):
        read_words(f, max_bytes=599)
    assert read_words(f, max_bytes=600)[1] == 100


# --- images ---------------------------------------------------------------------------------

def _jpeg(w: int = 40, h: int = 30) -> bytes:
    from PIL import Image

    b = io.BytesIO()
    Image.new("RGB", (w, h), (10, 200, 30)).save(b, "JPEG")
    return b.getvalue()


def _png_header_only(w: int, h: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 8))
            + chunk(b"IEND", b""))


def test_open_image_rgb_and_size(tmp_path):
    f = tmp_path / "a.jpg"
    f.write_bytes(_jpeg())
    im = open_image(f)
    assert im.mode == "RGB" and im.size == (40, 30)
    assert image_size(f) == (30, 40)
    assert load_eval_image(str(f), 16).shape == (16, 16, 3)
    assert load_train_image(str(f), 16, np.random.default_rng(0)).shape == (16, 16, 3)
    assert IMAGE_FORMATS == ("JPEG", "PNG")


def test_image_over_pixel_cap_refused_from_header(tmp_path):
    # 144 MP (the JPEG): the header says so; nothing is decoded.
    jpg = _jpeg()
    i = jpg.index(b"\xff\xc0")
    f = tmp_path / "big.jpg"
    f.write_bytes(jpg[:i + 5] + struct.pack(">HH", 12000, 12000) + jpg[i + 9:])
    t0 = time.perf_counter()
    with pytest.raises(DataError, match=r"big\.jpg is 12000x12000 = 144,000,000 pixels, more than "
                                        r"the 67,108,864-pixel limit .*MAX_IMAGE_PIXELS"):
        load_train_image(str(f), 16, np.random.default_rng(0))
    assert time.perf_counter() - t0 < 1.0
    assert MAX_IMAGE_PIXELS == 1 << 26
    small = tmp_path / "small.jpg"
    small.write_bytes(_jpeg(100, 100))
    with pytest.raises(DataError, match=r"10,000 pixels, more than the 9,999-pixel limit"):
        open_image(small, max_pixels=9999)


def test_pillow_decompression_bomb_is_a_data_error(tmp_path):
    # Over twice Pillow's MAX_IMAGE_PIXELS Pillow raises DecompressionBombError (not an
    # OSError) from open(): it must arrive as a DataError naming the file.
    f = tmp_path / "bomb.png"
    f.write_bytes(_png_header_only(30000, 30000))
    with pytest.raises(DataError, match=r"bomb\.png is refused as a decompression bomb"):
        load_eval_image(str(f), 16)


@pytest.mark.parametrize("content, match", [
    (b"", r"x\.jpg is empty \(0 bytes\)"),
    (b"GIF89a" + bytes(40), r"x\.jpg \(no JPEG or PNG decoder accepts its header"),
    ("truncated", r"x\.jpg \(OSError: .*[Tt]runcated"),
])
def test_bad_image_files_refused(tmp_path, content, match):
    f = tmp_path / "x.jpg"
    f.write_bytes(_jpeg()[:-40] if content == "truncated" else content)
    with pytest.raises(DataError, match=match):
        load_train_image(str(f), 16, np.random.default_rng(0))


def test_imagefolder_broken_link_and_fifo_refused(tmp_path):
    root = tmp_path / "if"
    (root / "a").mkdir(parents=True)
    (root / "a" / "ok.jpg").write_bytes(_jpeg())
    (root / "a" / "z.jpg").symlink_to(root / "missing.jpg")
    with pytest.raises(DataError, match=r"cannot read image .*z\.jpg: No such file"):
        load_dataset(f"imagefolder:{root}")
    (root / "a" / "z.jpg").unlink()
    os.mkfifo(root / "a" / "z.jpg")
    ds = load_dataset(f"imagefolder:{root}")
    with pytest.raises(DataError, match=r"z\.jpg is a FIFO"):
        load_eval_image(str(ds.x[1]), 16)


def test_input_pipeline_errors_are_marked_whatever_their_type():
    # tf.data or a DataLoader re-raise a bad file as their own types: the recorder notes where
    # the exception came from, so a worker can store it as a (non-final) data error.
    from dlperf.data.pipeline import INPUT_ERROR_NOTE, DataWaitRecorder, raised_by_input

    rec = DataWaitRecorder()

    def bad():
        raise RuntimeError("InvalidArgumentError: jpeg decode failed")
    with pytest.raises(RuntimeError) as e:
        rec.wrap(bad)()
    assert raised_by_input(e.value) and e.value.__notes__ == [INPUT_ERROR_NOTE]
    try:
        try:
            rec.wrap(bad)()
        except RuntimeError as inner:
            raise ValueError("wrapped by a framework") from inner
    except ValueError as outer:
        assert raised_by_input(outer)
    assert not raised_by_input(RuntimeError("from the step"))
    assert rec.wrap(lambda: 7)() == 7 and len(rec.waits_s) == 1  # failed calls record no wait

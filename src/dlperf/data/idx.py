"""Reader for the IDX format of MNIST (LeCun et al.), raw or gzip-compressed.

An IDX file is a 4-byte magic number ``0x00 0x00 <type> <ndim>``, then ``ndim`` big-endian
uint32 dimensions, then the values in C order, big-endian. MNIST uses type ``0x08`` (unsigned
byte): images are ``0x00000803`` (``[N, 28, 28]``), labels ``0x00000801`` (``[N]``).
See http://yann.lecun.com/exdb/mnist/ ("FILE FORMATS FOR THE MNIST DATABASE").

Reading is streamed and checked before anything is allocated: the header is read first, the
size it declares (computed with Python integers, so no dimension product overflows) must be at
most :data:`MAX_IDX_BYTES` and, for a raw file, match the file's size; a gzip stream is
decompressed only up to the declared size plus one byte, so a decompression bomb costs at most
that much (never the whole stream).
"""

from __future__ import annotations

import gzip
import io
import math
import os
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from dlperf.data.files import open_regular
from dlperf.errors import DataError

GZIP_MAGIC = b"\x1f\x8b"
IDX_IMAGES_MAGIC = 0x00000803
IDX_LABELS_MAGIC = 0x00000801

#: Largest IDX value payload read (1 GiB): 20x the MNIST training images (47 MB) and above
#: EMNIST ByClass's 697,932 training images (547 MB), the largest MNIST-format set in common
#: use. A header declaring more is refused before any value is read (a corrupt header would
#: otherwise make the reader allocate whatever it says).
MAX_IDX_BYTES = 1 << 30

#: The largest ratio deflate achieves (1032:1, zlib's technical details,
#: https://zlib.net/zlib_tech.html): a gzip file of ``c`` bytes cannot hold more than about
#: ``1032 * c`` bytes, so a header declaring more is refused without decompressing.
DEFLATE_MAX_RATIO = 1032

#: MNIST image height and width (LeCun et al.); the models that train on MNIST take 28x28.
MNIST_IMAGE_SHAPE = (28, 28)

# IDX type code -> big-endian numpy dtype.
_IDX_TYPES: dict[int, str] = {
    0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8",
}

_REDOWNLOAD = "download the file again (and compare its sha256 with the published one)"
_CHUNK = 1 << 20


class IdxHeader:
    """An IDX header: ``magic`` (int), ``dtype`` (big-endian numpy dtype), ``dims`` (Python
    ints), ``header_bytes``, ``value_bytes`` (the product of ``dims`` times the item size,
    exact: Python integers)."""

    def __init__(self, magic: int, dims: tuple[int, ...]) -> None:
        self.magic, self.dims = magic, dims
        self.dtype = np.dtype(_IDX_TYPES[(magic >> 8) & 0xFF])
        self.header_bytes = 4 + 4 * len(dims)
        self.value_bytes = math.prod(dims) * self.dtype.itemsize

    def describe(self) -> str:
        return f"shape {self.dims} of {self.dtype.name}"


def _bad_magic(path: object, head: bytes) -> DataError:
    got = "0x" + head[:4].hex() if head else "an empty file"
    return DataError(
        f"{path} is not an IDX file: wrong magic number {got} (an IDX file starts with "
        f"0x0000TTNN: two zero bytes, type code TT in "
        f"{', '.join(f'{t:02x}' for t in _IDX_TYPES)}, NN dimensions; MNIST images are "
        f"0x00000803, labels 0x00000801); check that this is an MNIST file")


def _read_exact(fh: io.BufferedIOBase | BinaryIO, n: int, path: object, what: str) -> bytes:
    """``n`` bytes of ``fh`` (fewer at the end of the file); stream errors become DataError."""
    try:
        return fh.read(n)
    except (OSError, EOFError, zlib.error) as e:
        raise _corrupt_gz(path, e) from None


def _corrupt_gz(path: object, e: BaseException) -> DataError:
    return DataError(f"{path} is a corrupt or truncated gzip file ({e}); {_REDOWNLOAD}, or "
                     f"give the uncompressed file instead")


def read_header(fh: io.BufferedIOBase | BinaryIO, path: object) -> IdxHeader:
    """Read and check an IDX header from the start of ``fh``.

    Raises:
        DataError: wrong magic number, or the file ends inside the header.
    """
    head = _read_exact(fh, 4, path, "magic")
    if not head:
        raise DataError(f"{path} is empty: it holds no data (after decompression); "
                        f"{_REDOWNLOAD}")
    if len(head) < 4 or head[:2] != b"\0\0" or head[2] not in _IDX_TYPES:
        raise _bad_magic(path, head)
    ndim = head[3]
    raw = _read_exact(fh, 4 * ndim, path, "dimensions")
    if len(raw) < 4 * ndim:
        raise DataError(f"{path} is truncated: its IDX header needs {4 + 4 * ndim} bytes but "
                        f"the file has {4 + len(raw)}; {_REDOWNLOAD}")
    dims = tuple(int.from_bytes(raw[4 * i:4 * i + 4], "big") for i in range(ndim))
    return IdxHeader(int.from_bytes(head, "big"), dims)


class _IdxFile:
    """An open IDX file, raw or gzip (by its magic bytes ``1f 8b``, whatever its name):
    ``fh`` the decompressed stream, ``size`` the file's bytes, ``gz`` whether compressed."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._raw = open_regular(path, "data file")
        self.size = os.fstat(self._raw.fileno()).st_size
        if self.size == 0:
            self._raw.close()
            raise DataError(f"{path} is empty (0 bytes); {_REDOWNLOAD}")
        self.gz = self._raw.read(2) == GZIP_MAGIC
        self._raw.seek(0)
        self.fh: io.BufferedIOBase = gzip.GzipFile(fileobj=self._raw, mode="rb") if self.gz else self._raw

    def __enter__(self) -> _IdxFile:  # noqa: PYI034 - a private class
        return self

    def __exit__(self, *exc: object) -> None:
        if self.gz:
            self.fh.close()
        self._raw.close()


def _check_size(f: _IdxFile, h: IdxHeader, max_bytes: int) -> None:
    """Refuse a header whose declared size is over the limit or cannot be the file's."""
    p = f.path
    if h.value_bytes > max_bytes:
        raise DataError(
            f"{p}: its IDX header says {h.describe()}, i.e. {h.value_bytes:,} bytes of values, "
            f"more than the {max_bytes:,}-byte limit (dlperf.data.idx.MAX_IDX_BYTES): a corrupt "
            f"header, or not an MNIST-sized file; {_REDOWNLOAD}")
    if not f.gz:
        have = f.size - h.header_bytes
        if have != h.value_bytes:
            what = "truncated" if have < h.value_bytes else "longer than its header says"
            raise DataError(
                f"{p} is {what}: its IDX header says {h.describe()}, i.e. {h.value_bytes} "
                f"bytes of values, but the file has {have}; {_REDOWNLOAD}")
    elif h.header_bytes + h.value_bytes > DEFLATE_MAX_RATIO * f.size + 1024:
        raise DataError(
            f"{p} is truncated or its header is corrupt: its IDX header says {h.describe()}, "
            f"i.e. {h.value_bytes:,} bytes of values, more than a {f.size:,}-byte gzip file can "
            f"hold (deflate compresses at most {DEFLATE_MAX_RATIO}:1); {_REDOWNLOAD}")


def _read_values(f: _IdxFile, h: IdxHeader) -> np.ndarray:
    """The values after the header, as a native-endian array of ``h.dims``; the stream must
    end right after them (read one byte further, never more)."""
    buf = np.empty(h.value_bytes, dtype=np.uint8)  # pages are committed as they are filled
    view, got = buf.data, 0  # a memoryview of buf
    while got < h.value_bytes:
        try:
            n = f.fh.readinto(view[got:got + _CHUNK])
        except (OSError, EOFError, zlib.error) as e:
            raise _corrupt_gz(f.path, e) from None
        if not n:
            raise DataError(
                f"{f.path} is truncated: its IDX header says {h.describe()}, i.e. "
                f"{h.value_bytes} bytes of values, but the file has {got}; {_REDOWNLOAD}")
        got += n
    if _read_exact(f.fh, 1, f.path, "end"):
        raise DataError(
            f"{f.path} is longer than its header says: its IDX header says {h.describe()}, "
            f"i.e. {h.value_bytes} bytes of values, but the {'decompressed ' if f.gz else ''}"
            f"file holds more; {_REDOWNLOAD}")
    arr = buf.view(h.dtype).reshape(h.dims)
    return arr.astype(h.dtype.newbyteorder("="), copy=False)


def read_idx(path: str | os.PathLike, *, max_bytes: int = MAX_IDX_BYTES) -> np.ndarray:
    """Read the IDX file ``path`` (gz or raw) into an array.

    Returns:
        An array of the file's dimensions with the native-endian dtype of its type code
        (``uint8`` for MNIST).

    Raises:
        DataError: unreadable, empty or not a regular file; corrupt gzip; wrong magic number;
            declared size over ``max_bytes`` (:data:`MAX_IDX_BYTES`) or more than the gzip
            file can hold; truncated file, or trailing bytes after the values.
    """
    p = Path(path)
    with _IdxFile(p) as f:
        h = read_header(f.fh, p)
        _check_size(f, h, max_bytes)
        return _read_values(f, h)


def parse_idx(data: bytes, path: str | os.PathLike = "<bytes>", *,
              max_bytes: int = MAX_IDX_BYTES) -> np.ndarray:
    """Parse the IDX bytes ``data`` (already decompressed) into an array; see :func:`read_idx`.

    Raises:
        DataError: wrong magic number, declared size over ``max_bytes``, or the header's
            dimensions do not match the number of value bytes.
    """
    fh = io.BytesIO(data)
    h = read_header(fh, path)
    have = len(data) - h.header_bytes
    if h.value_bytes > max_bytes:
        raise DataError(f"{path}: its IDX header says {h.describe()}, more than the "
                        f"{max_bytes:,}-byte limit; {_REDOWNLOAD}")
    if have != h.value_bytes:
        what = "truncated" if have < h.value_bytes else "longer than its header says"
        raise DataError(
            f"{path} is {what}: its IDX header says {h.describe()}, i.e. {h.value_bytes} bytes "
            f"of values, but the file has {have}; {_REDOWNLOAD}")
    arr = np.frombuffer(data, dtype=h.dtype, count=math.prod(h.dims), offset=h.header_bytes)
    return arr.reshape(h.dims).astype(h.dtype.newbyteorder("="), copy=True)


def idx_magic(path: str | os.PathLike) -> int | None:
    """Return the IDX magic number of ``path`` (gz or raw) as an int, or ``None`` if the file
    does not look like IDX (first two bytes not zero, unknown type code, unreadable, or not a
    regular file)."""
    try:
        with _IdxFile(Path(path)) as f:
            head = f.fh.read(4)
    except (OSError, EOFError, zlib.error, DataError):
        return None
    if len(head) < 4 or head[:2] != b"\0\0" or head[2] not in _IDX_TYPES:
        return None
    return int.from_bytes(head, "big")


def read_mnist(images: str | os.PathLike, labels: str | os.PathLike, num_labels: int = 10,
               image_shape: tuple[int, int] | None = MNIST_IMAGE_SHAPE, *,
               max_bytes: int = MAX_IDX_BYTES) -> tuple[np.ndarray, np.ndarray]:
    """Read an MNIST-format image file and its label file (each gz or raw).

    Both headers are checked (magic numbers, image size, counts) before any value is read.

    Args:
        images, labels: the ``*-images-idx3-ubyte[.gz]`` and ``*-labels-idx1-ubyte[.gz]`` files.
        num_labels: labels must be in ``0..num_labels-1``.
        image_shape: the ``(H, W)`` the images must have (MNIST's 28x28, which the MNIST
            models take); ``None`` accepts any.
        max_bytes: limit on each file's declared value bytes (:data:`MAX_IDX_BYTES`).

    Returns:
        ``(x, y)``: ``x`` uint8 ``[N, 1, H, W]`` pixel values 0..255 (0 = background),
        ``y`` int64 ``[N]`` labels in ``0..num_labels-1``.

    Raises:
        DataError: any error of :func:`read_idx`; an images file that is not 3-D unsigned
            bytes (magic ``0x00000803``) or a labels file that is not 1-D unsigned bytes
            (``0x00000801``), e.g. the two swapped; images that are not ``image_shape``; no
            images; different numbers of images and labels; a label outside
            ``0..num_labels-1``.
    """
    with _IdxFile(Path(images)) as fi, _IdxFile(Path(labels)) as fl:
        hi, hl = read_header(fi.fh, images), read_header(fl.fh, labels)
        _check_mnist_headers(images, labels, hi, hl, image_shape)
        _check_size(fi, hi, max_bytes)
        _check_size(fl, hl, max_bytes)
        y = _read_values(fl, hl)
        bad = np.flatnonzero(y >= num_labels)
        if bad.size:
            i = int(bad[0])
            raise DataError(
                f"{labels} has a label out of range: label[{i}] = {int(y[i])} ({bad.size} "
                f"labels outside 0..{num_labels - 1}); the file is corrupt, {_REDOWNLOAD}")
        x = _read_values(fi, hi)
    return x[:, None, :, :], y.astype(np.int64)


def _check_mnist_headers(images: object, labels: object, hi: IdxHeader, hl: IdxHeader,
                         image_shape: tuple[int, int] | None) -> None:
    if hi.magic != IDX_IMAGES_MAGIC:
        raise DataError(
            f"{images} is not an IDX image file: expected magic 0x{IDX_IMAGES_MAGIC:08x} "
            f"(unsigned bytes, 3 dimensions [N, H, W]), got 0x{hi.magic:08x} "
            f"({hi.describe()}); is it the labels file? pass the *-images-idx3-ubyte file")
    if hl.magic != IDX_LABELS_MAGIC:
        raise DataError(
            f"{labels} is not an IDX label file: expected magic 0x{IDX_LABELS_MAGIC:08x} "
            f"(unsigned bytes, 1 dimension [N]), got 0x{hl.magic:08x} ({hl.describe()}); "
            f"pass the matching *-labels-idx1-ubyte file")
    if image_shape is not None and hi.dims[1:] != tuple(image_shape):
        raise DataError(
            f"{images} holds {hi.dims[1]}x{hi.dims[2]} images, but MNIST images are "
            f"{image_shape[0]}x{image_shape[1]} (and the MNIST models take that size): a "
            f"corrupt header or another data set; {_REDOWNLOAD}")
    if hi.dims[0] == 0:
        raise DataError(f"{images} holds no images (its IDX header says {hi.describe()}); "
                        f"give a file with at least one image")
    if hi.dims[0] != hl.dims[0]:
        raise DataError(
            f"image and label counts differ: {images} has {hi.dims[0]} images but {labels} "
            f"has {hl.dims[0]} labels; the two files must come from the same split (e.g. "
            f"t10k-images with t10k-labels)")

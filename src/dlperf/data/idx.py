"""Reader for the IDX format of MNIST (LeCun et al.), raw or gzip-compressed.

An IDX file is a 4-byte magic number ``0x00 0x00 <type> <ndim>``, then ``ndim`` big-endian
uint32 dimensions, then the values in C order, big-endian. MNIST uses type ``0x08`` (unsigned
byte): images are ``0x00000803`` (``[N, 28, 28]``), labels ``0x00000801`` (``[N]``).
See http://yann.lecun.com/exdb/mnist/ ("FILE FORMATS FOR THE MNIST DATABASE").
"""

from __future__ import annotations

import gzip
import os
import zlib
from pathlib import Path

import numpy as np

from dlperf.errors import DataError

GZIP_MAGIC = b"\x1f\x8b"
IDX_IMAGES_MAGIC = 0x00000803
IDX_LABELS_MAGIC = 0x00000801

# IDX type code -> big-endian numpy dtype.
_IDX_TYPES: dict[int, str] = {
    0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8",
}

_REDOWNLOAD = "download the file again (and compare its sha256 with the published one)"


def read_bytes_maybe_gz(path: str | os.PathLike) -> bytes:
    """Return the content of ``path``, decompressed if it is gzip (recognised by its magic bytes
    ``1f 8b``, whatever the file name).

    Raises:
        DataError: the file cannot be read, or it is a corrupt or truncated gzip stream.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise DataError(f"cannot read data file {path}: {e.strerror or e}") from None
    if not raw.startswith(GZIP_MAGIC):
        return raw
    try:
        return gzip.decompress(raw)
    except (OSError, EOFError, zlib.error) as e:
        raise DataError(
            f"{path} is a corrupt or truncated gzip file ({e}); {_REDOWNLOAD}, or give the "
            f"uncompressed file instead") from None


def idx_magic(path: str | os.PathLike) -> int | None:
    """Return the IDX magic number of ``path`` (gz or raw) as an int, or ``None`` if the file
    does not look like IDX (first two bytes not zero, unknown type code, or unreadable)."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            head = fh.read(2)
        opener = gzip.open if head == GZIP_MAGIC else open
        with opener(path, "rb") as fh:
            head = fh.read(4)
    except (OSError, EOFError, zlib.error):
        return None
    if len(head) < 4 or head[:2] != b"\0\0" or head[2] not in _IDX_TYPES:
        return None
    return int.from_bytes(head, "big")


def parse_idx(data: bytes, path: str | os.PathLike = "<bytes>") -> np.ndarray:
    """Parse the IDX bytes ``data`` (already decompressed) into an array.

    Returns:
        An array of the file's dimensions with the native-endian dtype of its type code
        (``uint8`` for MNIST).

    Raises:
        DataError: wrong magic number (not IDX), or the header's dimensions do not match the
            number of value bytes (truncated file, or trailing garbage).
    """
    if len(data) < 4 or data[:2] != b"\0\0" or data[2] not in _IDX_TYPES:
        got = "0x" + data[:4].hex() if data else "an empty file"
        raise DataError(
            f"{path} is not an IDX file: wrong magic number {got} (an IDX file starts with "
            f"0x0000TTNN: two zero bytes, type code TT in "
            f"{', '.join(f'{t:02x}' for t in _IDX_TYPES)}, NN dimensions; MNIST images are "
            f"0x00000803, labels 0x00000801); check that this is an MNIST file")
    dtype = np.dtype(_IDX_TYPES[data[2]])
    ndim = data[3]
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DataError(
            f"{path} is truncated: its IDX header needs {header} bytes but the file has "
            f"{len(data)}; {_REDOWNLOAD}")
    dims = tuple(int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim))
    expected = int(np.prod(dims, dtype=np.int64)) * dtype.itemsize
    have = len(data) - header
    if have != expected:
        what = "truncated" if have < expected else "longer than its header says"
        raise DataError(
            f"{path} is {what}: its IDX header says shape {dims} of {dtype.name}, i.e. "
            f"{expected} bytes of values, but the file has {have}; {_REDOWNLOAD}")
    arr = np.frombuffer(data, dtype=dtype, count=expected // dtype.itemsize, offset=header)
    return arr.reshape(dims).astype(dtype.newbyteorder("="), copy=True)


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """Read the IDX file ``path`` (gz or raw) into an array; see :func:`parse_idx`.

    Raises:
        DataError: unreadable file, corrupt gzip, wrong magic number, truncated file.
    """
    return parse_idx(read_bytes_maybe_gz(path), path)


def read_mnist(images: str | os.PathLike, labels: str | os.PathLike,
               num_labels: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Read an MNIST-format image file and its label file (each gz or raw).

    Returns:
        ``(x, y)``: ``x`` uint8 ``[N, 1, H, W]`` pixel values 0..255 (0 = background),
        ``y`` int64 ``[N]`` labels in ``0..num_labels-1``.

    Raises:
        DataError: any error of :func:`read_idx`; an images file that is not 3-D unsigned
            bytes (magic ``0x00000803``) or a labels file that is not 1-D unsigned bytes
            (``0x00000801``), e.g. the two swapped; different numbers of images and labels;
            a label outside ``0..num_labels-1``.
    """
    x = read_idx(images)
    if x.dtype != np.uint8 or x.ndim != 3:
        raise DataError(
            f"{images} is not an IDX image file: expected magic 0x{IDX_IMAGES_MAGIC:08x} "
            f"(unsigned bytes, 3 dimensions [N, H, W]), got {x.dtype.name} with shape "
            f"{x.shape}; is it the labels file? pass the *-images-idx3-ubyte file")
    y = read_idx(labels)
    if y.dtype != np.uint8 or y.ndim != 1:
        raise DataError(
            f"{labels} is not an IDX label file: expected magic 0x{IDX_LABELS_MAGIC:08x} "
            f"(unsigned bytes, 1 dimension [N]), got {y.dtype.name} with shape {y.shape}; "
            f"pass the matching *-labels-idx1-ubyte file")
    if x.shape[0] != y.shape[0]:
        raise DataError(
            f"image and label counts differ: {images} has {x.shape[0]} images but {labels} "
            f"has {y.shape[0]} labels; the two files must come from the same split (e.g. "
            f"t10k-images with t10k-labels)")
    bad = np.flatnonzero(y >= num_labels)
    if bad.size:
        i = int(bad[0])
        raise DataError(
            f"{labels} has a label out of range: label[{i}] = {int(y[i])} ({bad.size} labels "
            f"outside 0..{num_labels - 1}); the file is corrupt, {_REDOWNLOAD}")
    return x[:, None, :, :], y.astype(np.int64)

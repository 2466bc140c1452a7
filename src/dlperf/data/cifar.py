"""Reader and writer for the CIFAR-10 binary format.

Each record of a ``data_batch_<i>.bin`` / ``test_batch.bin`` file is 3073 bytes: one label byte
(0..9) then 3072 pixel bytes, the 1024 red values of the 32x32 image in row-major order, then
the 1024 green, then the 1024 blue (Krizhevsky 2009; https://www.cs.toronto.edu/~kriz/cifar.html,
"Binary version"). Each original file holds 10,000 records.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from dlperf.data.files import check_size, open_regular
from dlperf.errors import DataError

CIFAR10_SHAPE = (3, 32, 32)
RECORD_BYTES = 1 + 3 * 32 * 32  # 3073
#: Largest CIFAR-10 batch file read (1 GiB): 35x an original batch of 10,000 images
#: (30,730,000 bytes); the file is read whole, so this bounds the memory one file takes.
MAX_CIFAR_BYTES = 1 << 30
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")


def read_cifar10_bin(path: str | os.PathLike, *, max_bytes: int = MAX_CIFAR_BYTES
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Read one CIFAR-10 binary batch file (its size is checked before it is read).

    Args:
        path: a ``data_batch_<i>.bin`` / ``test_batch.bin`` file.
        max_bytes: size limit, :data:`MAX_CIFAR_BYTES` by default.

    Returns:
        ``(x, y)``: ``x`` uint8 ``[N, 3, 32, 32]`` (channels R, G, B; values 0..255),
        ``y`` int64 ``[N]`` labels in ``0..9``.

    Raises:
        DataError: unreadable, empty or not a regular file, size not a multiple of 3073
            bytes (truncated or not CIFAR-10 binary, e.g. the CIFAR-100 or python version),
            over ``max_bytes``, a label above 9.
    """
    path = Path(path)
    with open_regular(path, "CIFAR-10 file") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0 or size % RECORD_BYTES:
            raise DataError(
                f"{path} is not a CIFAR-10 binary file: its size {size} bytes is not a "
                f"{'non-zero ' if not size else ''}multiple of {RECORD_BYTES} (1 label byte + "
                f"3x32x32 pixel bytes per image); the file is truncated or of another format "
                f"(use the 'CIFAR-10 binary version', cifar-10-binary.tar.gz, not the python "
                f"or matlab version, nor CIFAR-100)")
        check_size(path, size, max_bytes, "CIFAR-10 file", "dlperf.data.cifar.MAX_CIFAR_BYTES")
        try:
            raw = fh.read(size + 1)
        except OSError as e:
            raise DataError(f"cannot read CIFAR-10 file {path}: {e.strerror or e}") from None
    if len(raw) != size:
        raise DataError(f"CIFAR-10 file {path} changed while it was read ({size} bytes, then "
                        f"{len(raw)}); read it again when nothing writes to it")
    rec = np.frombuffer(raw, dtype=np.uint8).reshape(-1, RECORD_BYTES)
    y = rec[:, 0].astype(np.int64)
    bad = np.flatnonzero(y > 9)
    if bad.size:
        i = int(bad[0])
        raise DataError(
            f"{path} has a label out of range: record {i} has label {int(y[i])} ({bad.size} "
            f"records with a label above 9); CIFAR-10 labels are 0..9, so the file is corrupt "
            f"or not CIFAR-10 (CIFAR-100 records have 2 label bytes)")
    x = rec[:, 1:].reshape(-1, *CIFAR10_SHAPE).copy()
    return x, y


def write_cifar10_bin(path: str | os.PathLike, images: np.ndarray, labels: np.ndarray) -> Path:
    """Write images and labels as a CIFAR-10 binary batch file (the inverse of
    :func:`read_cifar10_bin`); creates parent folders.

    Args:
        path: file to write, e.g. ``.../cifar10/data_batch_1.bin``.
        images: uint8 ``[N, 3, 32, 32]`` (channels R, G, B; values 0..255).
        labels: integer ``[N]`` with values in ``0..9``.

    Returns:
        ``Path(path)``.

    Raises:
        ValueError: wrong shapes or dtype, or a label outside 0..9.
    """
    images = np.asarray(images)
    labels = np.asarray(labels)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[1:] != CIFAR10_SHAPE:
        raise ValueError(f"images must be uint8 [N, 3, 32, 32], got {images.dtype} "
                         f"{list(images.shape)}")
    if labels.shape != (images.shape[0],) or not np.issubdtype(labels.dtype, np.integer):
        raise ValueError(f"labels must be integers of shape [{images.shape[0]}], got "
                         f"{labels.dtype} {list(labels.shape)}")
    if labels.size and (labels.min() < 0 or labels.max() > 9):
        raise ValueError("labels must be in 0..9")
    rec = np.empty((images.shape[0], RECORD_BYTES), dtype=np.uint8)
    rec[:, 0] = labels
    rec[:, 1:] = images.reshape(images.shape[0], -1)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(rec.tobytes())
    return path

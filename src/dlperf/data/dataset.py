"""The :class:`Dataset` record and the per-dataset constants shared by the data layer."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

#: Data-set names that :func:`dlperf.data.load_dataset` accepts (besides paths).
DATASETS: tuple[str, ...] = ("mnist", "cifar10", "ptb", "wikitext2", "imagefolder")

#: Other spellings accepted for a data-set name.
ALIASES: dict[str, str] = {"wikitext-2": "wikitext2", "cifar-10": "cifar10"}

#: Kind of each data set: ``"image"`` (uint8 NCHW + labels), ``"tokens"`` (int64 ids) or
#: ``"imagefolder"`` (JPEG paths + labels, decoded by the input pipeline).
KINDS: dict[str, str] = {"mnist": "image", "cifar10": "image", "ptb": "tokens",
                         "wikitext2": "tokens", "imagefolder": "imagefolder"}

#: Number of label classes of the image data sets.
NUM_LABELS: dict[str, int] = {"mnist": 10, "cifar10": 10}

#: Per-channel mean and standard deviation of pixel values scaled to [0, 1], computed over the
#: training split, used to normalise images as ``(x / 255 - mean) / std``.
#:
#: * MNIST: 0.1307 / 0.3081, the values of the PyTorch examples (``mnist/main.py``,
#:   ``transforms.Normalize((0.1307,), (0.3081,))``), i.e. the mean and std of the 60,000
#:   training images.
#: * CIFAR-10: mean (0.4914, 0.4822, 0.4465), std (0.2470, 0.2435, 0.2616): the per-channel
#:   (R, G, B) mean and std over the 50,000 training images. (The also-common std
#:   (0.2023, 0.1994, 0.2010) is the mean of per-image stds, not the data-set std.)
NORMALISATION: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "mnist": ((0.1307,), (0.3081,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}


@dataclass(frozen=True, eq=False)
class Dataset:
    """A data set read into memory, framework-independent.

    Attributes:
        name: ``"mnist"``, ``"cifar10"``, ``"ptb"``, ``"wikitext2"`` or ``"imagefolder"``.
        kind: ``"image"``, ``"tokens"`` or ``"imagefolder"``.
        path: the file or folder it was read from.
        x: images: ``uint8 [N, C, H, W]`` raw pixel values 0..255 (MNIST ``C=1, H=W=28``,
            CIFAR-10 ``C=3, H=W=32``, channels R, G, B); tokens: ``int64 [T]`` word ids into
            ``vocab`` in file order, with ``"<eos>"`` at the end of every line.
        y: images: ``int64 [N]`` labels in ``0..9``; tokens: ``None``.
            imagefolder: ``x`` is a string array ``[N]`` of JPEG paths and ``y`` ``int64 [N]``
            their class labels; ``meta`` has ``classes`` (names), ``num_labels``,
            ``n_samples``, ``image_size`` (of the first image) and ``listing_sha256``.
        vocab: tokens: ``vocab[id]`` is the word, ordered by descending frequency in the file
            read (ties by word), so id 0 is the most frequent word; images: ``None``.
        meta: ``split`` (``"train"``, ``"valid"``, ``"test"``), ``files`` (names of the files
            read, in order), ``sha256`` (file name -> hex digest), ``format``, and
            ``n_samples``/``image_shape``/``num_labels`` (images) or ``n_tokens``/``n_lines``/
            ``vocab_size`` (tokens); ``vocab_capped`` after :func:`cap_vocab` changed it.
    """

    name: str
    kind: str
    path: Path
    x: np.ndarray
    y: np.ndarray | None
    vocab: tuple[str, ...] | None
    meta: dict = field(default_factory=dict)

    @property
    def labels(self) -> np.ndarray:
        """``y``, the labels of an image or ImageFolder set; ValueError for a token set
        (it has none)."""
        if self.y is None:
            raise ValueError(f"data set {self.name!r} ({self.kind}) has no labels")
        return self.y

    @property
    def vocab_size(self) -> int:
        """Number of distinct token ids (``len(vocab)``); 0 for image data sets."""
        return len(self.vocab) if self.vocab is not None else 0

    def __len__(self) -> int:
        """Number of samples (images) or tokens."""
        return int(self.x.shape[0])

    def __repr__(self) -> str:
        return (f"Dataset(name={self.name!r}, kind={self.kind!r}, path={str(self.path)!r}, "
                f"x={self.x.dtype}{list(self.x.shape)}, split={self.meta.get('split')!r})")


def sha256_file(path: Path) -> str:
    """Hex sha256 digest of the file at ``path``."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()

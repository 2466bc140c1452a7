"""Finding a data set under the data root (or at a path) and loading it into a :class:`Dataset`.

Layout under the data root (``--data-dir`` or ``$DLPERF_DATA``); the first match wins:

* ``mnist/``: ``train-images-idx3-ubyte[.gz]`` + ``train-labels-idx1-ubyte[.gz]``, else
  ``t10k-images-idx3-ubyte[.gz]`` + ``t10k-labels-idx1-ubyte[.gz]``;
* ``cifar10/`` or ``cifar-10-batches-bin/`` (or ``cifar10/cifar-10-batches-bin/``):
  ``data_batch_*.bin`` (all, in numeric order), else ``test_batch.bin``;
* ``ptb/``: ``ptb.train.txt``, else ``ptb.valid.txt``, else ``ptb.test.txt``;
* ``wikitext-2/`` or ``wikitext2/``: ``wiki.train.tokens``, else ``wiki.valid.tokens``, else
  ``wiki.test.tokens``;
* ``imagefolder/``, ``imagenet/train/`` or ``imagenet/``: an ImageFolder of JPEGs
  (``<class>/<image>.jpg``; :mod:`dlperf.data.imagefolder`).

An ImageFolder can also be named explicitly as ``imagefolder:PATH``, and a folder given as a
path is recognised as one when it holds no other data set and its sub-folders hold images.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np

from dlperf.data.cifar import read_cifar10_bin
from dlperf.data.dataset import ALIASES, DATASETS, KINDS, NUM_LABELS, Dataset, sha256_file
from dlperf.data.idx import idx_magic, read_mnist
from dlperf.data.tokens import build_vocab, read_words
from dlperf.errors import DataError, DataMissing, unknown_choice

ENV_VAR = "DLPERF_DATA"

# Folder names under the data root, per data set, in order of preference.
FOLDERS: dict[str, tuple[str, ...]] = {
    "mnist": ("mnist",),
    "cifar10": ("cifar10", "cifar-10-batches-bin", "cifar10/cifar-10-batches-bin"),
    "ptb": ("ptb",),
    "wikitext2": ("wikitext-2", "wikitext2"),
    "imagefolder": ("imagefolder", "imagenet/train", "imagenet"),
}

#: Prefix that names an ImageFolder explicitly: ``--data imagefolder:PATH``.
IMAGEFOLDER_PREFIX = "imagefolder:"

_MNIST_SPLITS = (("train", "train"), ("t10k", "test"))
_TOKEN_FILES = {
    "ptb": (("ptb.train.txt", "train"), ("ptb.valid.txt", "valid"), ("ptb.test.txt", "test")),
    "wikitext2": (("wiki.train.tokens", "train"), ("wiki.valid.tokens", "valid"),
                  ("wiki.test.tokens", "test")),
}

# What each data set's folder must hold, for error messages.
LOOKED_FOR: dict[str, str] = {
    "mnist": "train-images-idx3-ubyte[.gz] + train-labels-idx1-ubyte[.gz], or "
             "t10k-images-idx3-ubyte[.gz] + t10k-labels-idx1-ubyte[.gz]",
    "cifar10": "data_batch_*.bin or test_batch.bin (CIFAR-10 binary version)",
    "ptb": "ptb.train.txt, ptb.valid.txt or ptb.test.txt",
    "wikitext2": "wiki.train.tokens, wiki.valid.tokens or wiki.test.tokens",
    "imagefolder": "one sub-folder of JPEG images per class (<class>/<image>.jpg)",
}


def data_root(data_dir: str | os.PathLike | None = None) -> Path | None:
    """Return the folder that holds the data sets: ``data_dir`` if given (not ``None`` or
    ``""``), else ``$DLPERF_DATA`` if set and non-empty, else ``None``. ``~`` is expanded; the
    folder is not checked for existence (:func:`load_dataset` does that)."""
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    env = os.environ.get(ENV_VAR, "")
    return Path(env).expanduser() if env else None


def canonical_name(name: str) -> str | None:
    """Return the data-set name ``name`` stands for (``"wikitext-2"`` -> ``"wikitext2"``,
    case-insensitive), or ``None`` if it is not a data-set name."""
    n = ALIASES.get(name.lower(), name.lower())
    return n if n in DATASETS else None


def load_dataset(name_or_path: str | os.PathLike, data_dir: str | os.PathLike | None = None
                 ) -> Dataset:
    """Load a data set by name (found under :func:`data_root`) or from a path.

    Args:
        name_or_path: one of :data:`DATASETS` (or an alias such as ``"wikitext-2"``), looked up
            under the data root (see the module docstring for the layout); or the path of a
            data set's folder or of one file: an MNIST ``*-images-idx3-ubyte[.gz]`` or
            ``*-labels-idx1-ubyte[.gz]`` file (its partner is taken from the same folder), a
            CIFAR-10 ``*.bin`` batch, a PTB ``*.txt`` or a WikiText ``*.tokens`` file. A name
            wins over a same-named folder in the working directory (write ``./mnist``).
        data_dir: data root; ``None`` uses ``$DLPERF_DATA``.

    Returns:
        A :class:`Dataset`; ``meta["split"]`` says which split was read.

    Raises:
        DataMissing: the data are not there: no data root set, the data root, the data set's
            folder or the path does not exist, or the folder holds none of its files (the
            message lists what was looked for and how to get it). A subclass of DataError.
        DataError: unknown name, unrecognised file, an MNIST file without its partner, or
            any format error of the readers (corrupt gzip, bad IDX magic, truncated file,
            count mismatch, label out of range, CIFAR size not a multiple of 3073, not UTF-8,
            empty file).
    """
    key = os.fspath(name_or_path)
    if key.startswith(IMAGEFOLDER_PREFIX):
        return _load_imagefolder(Path(key[len(IMAGEFOLDER_PREFIX):]).expanduser())
    name = canonical_name(key)
    if name is not None:
        return _load_by_name(name, data_dir)
    p = Path(key).expanduser()
    if p.exists():
        return _load_path(p)
    if os.sep in key or "/" in key or p.suffix:
        raise DataMissing(f"data path {p} does not exist; give an existing file or folder, or a "
                        f"data-set name ({', '.join(DATASETS)})")
    msg = str(unknown_choice("dataset", key, DATASETS))
    raise DataError(f"{msg}; or give the path of a data file or folder")


def _load_by_name(name: str, data_dir: str | os.PathLike | None) -> Dataset:
    root = data_root(data_dir)
    wanted = " or ".join(f"{f}/" for f in FOLDERS[name])
    if root is None:
        raise DataMissing(
            f"no data root set to find data set {name!r}: pass --data-dir DIR or set "
            f"{ENV_VAR}=DIR, where DIR holds {wanted} with {LOOKED_FOR[name]}; or give the "
            f"path of the files instead of the name")
    source = "--data-dir" if data_dir is not None and str(data_dir) != "" else ENV_VAR
    if not root.is_dir():
        raise DataMissing(f"data root {root} (from {source}) is not an existing folder; pass "
                        f"--data-dir or set {ENV_VAR} to the folder that holds {wanted}")
    folders = [root / f for f in FOLDERS[name] if (root / f).is_dir()]
    if not folders:
        raise DataMissing(
            f"data set {name!r} not found under data root {root} (from {source}): looked for "
            f"folder {' or '.join(str(root / f) for f in FOLDERS[name])}, holding "
            f"{LOOKED_FOR[name]}{_how_to_get(name, root)}")
    for folder in folders:
        ds = _load_folder_as(name, folder)
        if ds is not None:
            return ds
    found = sorted(q.name for q in folders[0].iterdir())
    shown = ", ".join(found[:12]) + (", ..." if len(found) > 12 else "") if found else "nothing"
    raise DataMissing(
        f"data set {name!r}: no data files in {' or '.join(str(f) for f in folders)}: looked "
        f"for {LOOKED_FOR[name]}; found {shown}{_how_to_get(name, root)}")


def _how_to_get(name: str, root: Path) -> str:
    """The end of a missing-data message: the command that makes a data set dlperf can make
    (an ImageFolder of synthetic JPEGs), else nothing (the others are downloaded by hand)."""
    if name == "imagefolder":
        return (f"; make one with `dlperf data make-imagefolder {root / FOLDERS[name][0]}` "
                f"(synthetic JPEGs) or put real images there")
    return ""


def _load_folder_as(name: str, folder: Path) -> Dataset | None:
    """Load data set ``name`` from ``folder``, or return ``None`` if its files are not there."""
    if name == "mnist":
        for prefix, split in _MNIST_SPLITS:
            pair = _mnist_pair(folder, prefix)
            if pair is not None:
                return _load_mnist(folder, *pair, split=split)
        return None
    if name == "cifar10":
        batches = sorted(folder.glob("data_batch_*.bin"), key=_natural_key)
        if batches:
            return _load_cifar(folder, batches, "train")
        test = folder / "test_batch.bin"
        return _load_cifar(folder, [test], "test") if test.is_file() else None
    if name == "imagefolder":
        return _load_imagefolder(folder) if _looks_like_imagefolder(folder) else None
    for fname, split in _TOKEN_FILES[name]:
        if (folder / fname).is_file():
            return _load_tokens(name, folder, folder / fname, split)
    return None


def _mnist_pair(folder: Path, prefix: str) -> tuple[Path, Path] | None:
    """The (images, labels) files of split ``prefix`` in ``folder``; ``None`` if there is no
    images file; DataError if the images file is there but its labels file is not."""
    images = _first_file(folder, f"{prefix}-images-idx3-ubyte")
    labels = _first_file(folder, f"{prefix}-labels-idx1-ubyte")
    if images is None and labels is None:
        return None
    if images is None or labels is None:
        have, miss = (images, "labels-idx1") if labels is None else (labels, "images-idx3")
        raise DataError(
            f"MNIST: found {have} but not its partner {folder / f'{prefix}-{miss}-ubyte'}[.gz]; "
            f"put both the images and the labels file of the split in {folder}")
    return images, labels


def _first_file(folder: Path, stem: str) -> Path | None:
    for name in (stem + ".gz", stem):
        if (folder / name).is_file():
            return folder / name
    return None


_MNIST_NAME = re.compile(r"(?P<pre>.*)(?P<kind>images-idx3|labels-idx1)-ubyte(?P<gz>\.gz)?")


def _load_path(p: Path) -> Dataset:
    """Load the data set at an existing path (a folder or a file), recognising its format."""
    if p.is_dir():
        for name in DATASETS:
            ds = _load_folder_as(name, p)
            if ds is not None:
                return ds
        subs = [f"{f}/" for n in DATASETS for f in FOLDERS[n] if (p / f).is_dir()]
        hint = (f"; it looks like a data root (it holds {', '.join(subs)}): pass it as "
                f"--data-dir / {ENV_VAR} and give a data-set name") if subs else ""
        raise DataError(
            f"cannot tell which data set folder {p} holds: looked for "
            f"{'; '.join(f'{n}: {LOOKED_FOR[n]}' for n in DATASETS)}{hint}")
    name = p.name
    m = _MNIST_NAME.fullmatch(name)
    if m:
        other = "labels-idx1" if m["kind"] == "images-idx3" else "images-idx3"
        stem = f"{m['pre']}{other}-ubyte"
        order = (stem + (m["gz"] or ""), stem + (".gz" if not m["gz"] else ""))
        partner = next((p.parent / n for n in order if (p.parent / n).is_file()), None)
        if partner is None:
            raise DataError(f"MNIST: {p} needs its partner file {p.parent / stem}[.gz] in the "
                            f"same folder (images and labels are separate IDX files)")
        images, labels = (p, partner) if m["kind"] == "images-idx3" else (partner, p)
        return _load_mnist(p, images, labels, split=_split_of(name))
    magic = idx_magic(p)
    if magic is not None:
        raise DataError(
            f"{p} is an IDX file (magic 0x{magic:08x}) but its name does not say which file "
            f"holds its images or labels: rename the pair to <split>-images-idx3-ubyte[.gz] "
            f"and <split>-labels-idx1-ubyte[.gz] (as in the MNIST distribution)")
    if name.endswith(".bin"):
        return _load_cifar(p, [p], _split_of(name))
    if name.endswith(".txt"):
        return _load_tokens("ptb", p, p, _split_of(name))
    if name.endswith(".tokens"):
        return _load_tokens("wikitext2", p, p, _split_of(name))
    raise DataError(
        f"cannot tell the format of {p}: expected an MNIST *-images-idx3-ubyte[.gz] / "
        f"*-labels-idx1-ubyte[.gz] file, a CIFAR-10 *.bin batch, a PTB *.txt or a WikiText "
        f"*.tokens file, or a folder holding them")


def _split_of(fname: str) -> str:
    f = fname.lower()
    if "t10k" in f or "test" in f:
        return "test"
    if "valid" in f:
        return "valid"
    if "train" in f or "data_batch" in f:
        return "train"
    return "unknown"


def _natural_key(p: Path) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name))


def _file_meta(files: list[Path], split: str, fmt: str) -> dict:
    return {"split": split, "format": fmt, "files": [str(f) for f in files],
            "sha256": {f.name: sha256_file(f) for f in files}}


def _load_mnist(path: Path, images: Path, labels: Path, split: str) -> Dataset:
    x, y = read_mnist(images, labels, NUM_LABELS["mnist"])
    fmt = "idx.gz" if images.name.endswith(".gz") else "idx"
    meta = _file_meta([images, labels], split, fmt)
    meta.update(n_samples=int(x.shape[0]), image_shape=tuple(x.shape[1:]),
                num_labels=NUM_LABELS["mnist"])
    return Dataset("mnist", KINDS["mnist"], path, x, y, None, meta)


def _load_cifar(path: Path, files: list[Path], split: str) -> Dataset:
    parts = [read_cifar10_bin(f) for f in files]
    x = np.concatenate([a for a, _ in parts]) if len(parts) > 1 else parts[0][0]
    y = np.concatenate([b for _, b in parts]) if len(parts) > 1 else parts[0][1]
    meta = _file_meta(files, split, "cifar10-bin")
    meta.update(n_samples=int(x.shape[0]), image_shape=tuple(x.shape[1:]),
                num_labels=NUM_LABELS["cifar10"])
    return Dataset("cifar10", KINDS["cifar10"], path, x, y, None, meta)


def _looks_like_imagefolder(folder: Path) -> bool:
    """True if some sub-folder of ``folder`` (among the first 64) holds an image file."""
    from dlperf.data.imagefolder import EXTENSIONS

    subs = [d for d in sorted(folder.iterdir())[:64] if d.is_dir()]
    for d in subs:
        for i, f in enumerate(os.scandir(d)):
            if f.name.lower().endswith(EXTENSIONS):
                return True
            if i > 64:
                break
    return False


def _load_imagefolder(folder: Path) -> Dataset:
    from dlperf.data.imagefolder import image_size, listing_digest, scan_imagefolder

    paths, labels, classes = scan_imagefolder(folder)
    size = image_size(paths[0])  # None if unreadable: reported when the pipeline decodes it
    meta = {"split": "train", "format": "imagefolder", "files": len(paths),
            "listing_sha256": listing_digest(paths), "n_samples": len(paths),
            "classes": classes, "num_labels": len(classes), "image_size": size}
    return Dataset("imagefolder", KINDS["imagefolder"], folder, np.asarray(paths), labels, None,
                   meta)


def _load_tokens(name: str, path: Path, file: Path, split: str) -> Dataset:
    words, n_lines = read_words(file)
    vocab, ids = build_vocab(words)
    meta = _file_meta([file], split, "text")
    meta.update(n_tokens=int(ids.shape[0]), n_lines=n_lines, vocab_size=len(vocab))
    return Dataset(name, KINDS[name], path, ids, None, vocab, meta)

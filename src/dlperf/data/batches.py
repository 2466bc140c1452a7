"""Turning a :class:`Dataset` into the training batches of a model spec.

Deterministic, no shuffling: the same data set, spec and batch size always give the same
batches, so runs are comparable across frameworks.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import numpy as np

from dlperf.data.dataset import NORMALISATION, NUM_LABELS, Dataset
from dlperf.data.tokens import UNK
from dlperf.errors import ConfigError, DataError

if TYPE_CHECKING:  # the data layer does not import the zoo at run time (no import cycle)
    from dlperf.zoo.spec import ModelSpec


def cap_vocab(ds: Dataset, max_vocab: int) -> Dataset:
    """Return ``ds`` with at most ``max_vocab`` token ids, the rarest words mapped to ``<unk>``.

    Ids are frequency ranks, so the kept words are the ``max_vocab`` most frequent ones: if the
    file's own ``"<unk>"`` is among them, every id ``>= max_vocab`` becomes its id; otherwise the
    top ``max_vocab - 1`` words are kept and ``"<unk>"`` is added as id ``max_vocab - 1``.
    ``ds`` itself is returned when its vocabulary already fits. The new ``meta`` has
    ``vocab_size`` updated and ``vocab_capped = {"from", "to", "words_mapped",
    "tokens_mapped"}`` (word types and token occurrences that became ``<unk>``).

    Raises:
        DataError: ``ds`` is not a token data set.
        ConfigError: ``max_vocab < 1``.
    """
    if ds.kind != "tokens" or ds.vocab is None:
        raise DataError(f"data set {ds.name!r} has no vocabulary to cap (it is {ds.kind})")
    if max_vocab < 1:
        raise ConfigError(f"max_vocab must be >= 1, got {max_vocab}")
    vsize = len(ds.vocab)
    if vsize <= max_vocab:
        return ds
    unk = ds.vocab.index(UNK) if UNK in ds.vocab else None
    if unk is not None and unk < max_vocab:
        keep, target, vocab = max_vocab, unk, ds.vocab[:max_vocab]
    else:
        keep = max_vocab - 1
        target, vocab = keep, ds.vocab[:keep] + (UNK,)
    mapped = ds.x >= keep
    x = np.where(mapped, np.int64(target), ds.x)
    meta = dict(ds.meta, vocab_size=len(vocab),
                vocab_capped={"from": vsize, "to": len(vocab), "words_mapped": vsize - keep,
                              "tokens_mapped": int(mapped.sum())})
    return dataclasses.replace(ds, x=x, vocab=vocab, meta=meta)


def make_batches(ds: Dataset, spec: ModelSpec, batch_size: int,
                 max_batches: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Cut ``ds`` into the full training batches of model ``spec``, in file order.

    ImageFolder (``ds.kind == "imagefolder"``): a square RGB image model; each image is decoded
    and resized with the evaluation transform (:func:`dlperf.data.imagefolder.load_eval_image`),
    normalised with the ImageNet constants; ``X`` float32 ``[nb, B, 3, S, S]``. Meant for a few
    batches (a check); training reads go through :mod:`dlperf.data.pipeline`.

    Images (``ds.kind == "image"``): a spec with ``input_kind == "image"`` needs
    ``input_shape == (C, H, W)`` of the images; ``"vector"`` needs ``input_shape[0] == C*H*W``
    (the image flattened row-major, e.g. MNIST for ``fcn_mnist``). Pixels are normalised as
    ``(x / 255 - mean) / std`` with the data set's per-channel constants
    (:data:`dlperf.data.dataset.NORMALISATION`). Returns ``X`` float32
    ``[nb, B, *spec.input_shape]`` and ``Y`` int64 ``[nb, B]`` labels; ``nb = N // B``.

    Tokens (``ds.kind == "tokens"``): the spec needs ``input_kind == "tokens"``; ``T =
    spec.input_shape[0]`` is the sequence length. If the vocabulary is larger than
    ``spec.num_classes`` it is capped first (:func:`cap_vocab`), so every id is
    ``< spec.num_classes``. Batchify as Zaremba et al. 2014 / the PyTorch
    ``word_language_model`` example: the ids are cut into ``B`` contiguous streams of ``L = n // B``
    tokens (the remainder dropped) and batch ``k`` is ``X[k, b] = stream_b[k*T : (k+1)*T]``,
    ``Y[k, b] = stream_b[k*T+1 : (k+1)*T+1]`` (the next token). Returns ``X`` and ``Y`` int64
    ``[nb, B, T]``; ``nb = (L - 1) // T``, so consecutive batches continue each stream (a
    stateful RNN can carry its hidden state across them).

    ``nb`` is limited to ``max_batches`` if given; only full batches are returned.

    Raises:
        ConfigError: ``batch_size < 1`` or ``max_batches < 1``.
        DataError: the data set does not fit the model (the message names both and the models /
            data sets that would fit), or it is too small for one batch of ``batch_size`` (the
            message gives the largest batch size that works).
    """
    if batch_size < 1:
        raise ConfigError(f"batch size must be >= 1, got {batch_size}")
    if max_batches is not None and max_batches < 1:
        raise ConfigError(f"max_batches must be >= 1 or None, got {max_batches}")
    _check_fits(ds, spec)
    if ds.kind == "imagefolder":
        return _imagefolder_batches(ds, spec, batch_size, max_batches)
    if ds.kind == "image":
        return _image_batches(ds, spec, batch_size, max_batches)
    return _token_batches(cap_vocab(ds, spec.num_classes), spec, batch_size, max_batches)


def _image_batches(ds: Dataset, spec: ModelSpec, bs: int, max_batches: int | None
                   ) -> tuple[np.ndarray, np.ndarray]:
    n = ds.x.shape[0]
    nb = n // bs
    if nb == 0:
        raise DataError(
            f"data set {ds.name!r} ({ds.meta.get('split', '?')} split, {ds.path}) has {n} "
            f"samples, too few for one batch of {bs}: the largest batch size that works is {n}")
    if max_batches is not None:
        nb = min(nb, max_batches)
    mean, std = (np.asarray(v, dtype=np.float32).reshape(-1, 1, 1)
                 for v in NORMALISATION[ds.name])
    x = ds.x[: nb * bs].astype(np.float32)
    x *= np.float32(1 / 255)
    x -= mean
    x /= std
    X = x.reshape(nb, bs, *spec.input_shape)
    Y = ds.labels[: nb * bs].astype(np.int64).reshape(nb, bs)
    return X, Y


def _imagefolder_batches(ds: Dataset, spec: ModelSpec, bs: int, max_batches: int | None
                         ) -> tuple[np.ndarray, np.ndarray]:
    # Decodes every image asked for (the evaluation transform: resize and centre crop), so it is
    # meant for a few batches (a check, a first batch); training reads go through the input
    # pipelines (dlperf.data.pipeline), which decode and augment per iteration.
    from dlperf.data.imagefolder import load_eval_image, normalize_hwc

    n = ds.x.shape[0]
    nb = n // bs
    if nb == 0:
        raise DataError(f"ImageFolder {ds.path} has {n} images, too few for one batch of {bs}: "
                        f"the largest batch size that works is {n} (or make more images)")
    if max_batches is not None:
        nb = min(nb, max_batches)
    size = spec.input_shape[1]
    x = np.stack([load_eval_image(str(p), size) for p in ds.x[: nb * bs]])
    X = normalize_hwc(x).transpose(0, 3, 1, 2).reshape(nb, bs, *spec.input_shape)
    Y = ds.labels[: nb * bs].astype(np.int64).reshape(nb, bs)
    return np.ascontiguousarray(X), Y


def _token_batches(ds: Dataset, spec: ModelSpec, bs: int, max_batches: int | None
                   ) -> tuple[np.ndarray, np.ndarray]:
    ids = ds.x
    n = ids.shape[0]
    t = spec.input_shape[0]
    length = n // bs
    nb = (length - 1) // t if length >= 1 else 0
    if nb == 0:
        best = n // (t + 1)
        fix = (f"the largest batch size that works is {best}" if best
               else "no batch size works; use a model with a shorter sequence")
        raise DataError(
            f"data set {ds.name!r} ({ds.meta.get('split', '?')} split, {ds.path}) has {n} "
            f"tokens, too few for batch size {bs} at sequence length {t} of model "
            f"{spec.name!r} (each of the {bs} streams needs {t + 1} tokens): {fix}")
    if max_batches is not None:
        nb = min(nb, max_batches)
    streams = ids[: length * bs].reshape(bs, length)
    X = np.ascontiguousarray(streams[:, : nb * t].reshape(bs, nb, t).transpose(1, 0, 2))
    Y = np.ascontiguousarray(streams[:, 1: nb * t + 1].reshape(bs, nb, t).transpose(1, 0, 2))
    return X.astype(np.int64, copy=False), Y.astype(np.int64, copy=False)


def _check_fits(ds: Dataset, spec: ModelSpec) -> None:
    if ds.kind == "imagefolder":
        # Any image size fits: the pipeline crops and resizes to the model's input.
        shape = tuple(spec.input_shape)
        if spec.input_kind != "image" or len(shape) != 3 or shape[0] != 3 or shape[1] != shape[2]:
            _misfit(ds, spec, f"it is RGB images cropped to a square but the model takes "
                              f"{_describe_input(spec)}")
        labels = int(ds.meta.get("num_labels", 0))
        if spec.num_classes < labels:
            _misfit(ds, spec, f"it has {labels} classes but the model only {spec.num_classes} "
                              f"outputs")
        return
    if ds.kind == "image":
        shape = tuple(int(d) for d in ds.x.shape[1:])
        if spec.input_kind == "image" and tuple(spec.input_shape) == shape:
            ok = True
        else:
            ok = spec.input_kind == "vector" and tuple(spec.input_shape) == (math.prod(shape),)
        labels = NUM_LABELS.get(ds.name, 0)
        if ok and spec.num_classes < labels:
            _misfit(ds, spec, f"it has {labels} label classes but the model only "
                              f"{spec.num_classes} outputs")
        if not ok:
            flat = math.prod(shape)
            _misfit(ds, spec, f"its images are {'x'.join(map(str, shape))} but the model takes "
                              f"{_describe_input(spec)} (needs image {shape} or vector "
                              f"({flat},))")
    elif spec.input_kind != "tokens" or len(spec.input_shape) != 1:
        _misfit(ds, spec, f"it is token ids but the model takes {_describe_input(spec)}")


def _describe_input(spec: ModelSpec) -> str:
    shape = "x".join(map(str, spec.input_shape))
    return {"image": f"images {shape}", "vector": f"vectors of {shape} features",
            "tokens": f"token sequences of length {shape}"}.get(spec.input_kind,
                                                              f"{spec.input_kind} {shape}")


def _misfit(ds: Dataset, spec: ModelSpec, why: str) -> None:
    fits = _models_for(ds.name)
    models = (f"models that train on {ds.name!r}: {', '.join(fits)}" if fits
              else f"no model lists {ds.name!r} in its real_data")
    own = (f"model {spec.name!r} trains on: {', '.join(spec.real_data)} (or synthetic data)"
           if spec.real_data else f"model {spec.name!r} trains on synthetic data only")
    raise DataError(f"data set {ds.name!r} does not fit model {spec.name!r}: {why}; {models}; "
                    f"{own}")


def _models_for(dataset: str) -> list[str]:
    """Names of the zoo models whose spec lists ``dataset`` in ``real_data`` (empty if the zoo
    cannot be imported)."""
    try:
        from dlperf.zoo import SPECS
    except Exception:  # the zoo is optional here; the hint is only a convenience
        return []
    return sorted(n for n, s in SPECS.items() if dataset in s.real_data)

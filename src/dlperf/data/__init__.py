"""The data layer: real data sets read from their original formats, pure numpy.

* :func:`load_dataset` reads MNIST (IDX, gz or raw), CIFAR-10 (binary version), Penn Treebank
  and WikiText-2 (word tokens) by name under the data root (``--data-dir`` or
  ``$DLPERF_DATA``, see :func:`data_root`) or from a path, into a :class:`Dataset`;
* :func:`make_batches` cuts a :class:`Dataset` into the batches of a model spec
  (normalised float32 images, or next-token LM batches);
* :func:`write_cifar10_bin` writes CIFAR-10 binary files (for tests and benchmarks).

Every error a user can cause (missing, corrupt or ill-fitting data) is a
:class:`dlperf.errors.DataError` whose message names the file and the fix; data that are not
there at all (not downloaded or made, no data root) raise its subclass
:class:`dlperf.errors.DataMissing`, which ``dlperf sweep`` records as ``unavailable`` points
instead of refusing the sweep. No framework is imported here.
"""

from __future__ import annotations

from dlperf.data.batches import cap_vocab, make_batches
from dlperf.data.cifar import read_cifar10_bin, write_cifar10_bin
from dlperf.data.dataset import DATASETS, NORMALISATION, Dataset
from dlperf.data.idx import read_idx, read_mnist
from dlperf.data.resolve import ENV_VAR, data_root, load_dataset
from dlperf.data.tokens import EOS, UNK, read_words

__all__ = ["DATASETS", "Dataset", "ENV_VAR", "EOS", "NORMALISATION", "UNK", "cap_vocab",
           "data_root", "load_dataset", "make_batches", "read_cifar10_bin", "read_idx",
           "read_mnist", "read_words", "write_cifar10_bin"]

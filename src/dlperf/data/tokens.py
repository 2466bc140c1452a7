"""Reader for word-level language-model text: Penn Treebank (Mikolov's split) and WikiText-2.

Convention (Mikolov et al. 2010 RNNLM; Zaremba et al. 2014; PyTorch ``word_language_model``
example, ``data.py``): every line of the file, blank lines included, is split on whitespace and
followed by an ``"<eos>"`` token. The files already carry ``<unk>`` for out-of-vocabulary words.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import numpy as np

from dlperf.data.files import check_size, open_regular
from dlperf.errors import DataError

EOS = "<eos>"
UNK = "<unk>"
#: Largest token file read (1 GiB): twice WikiText-103's training file (539 MB), the largest
#: of the word-level corpora in this format; a file is read whole and split into words (about
#: 60 bytes of Python objects per word), so this bounds what one file can take.
MAX_TOKEN_BYTES = 1 << 30


def read_words(path: str | os.PathLike, *, max_bytes: int = MAX_TOKEN_BYTES
               ) -> tuple[list[str], int]:
    """Read a token file as words (its size is checked before it is read).

    Returns:
        ``(words, n_lines)``: the words of every line in order, each line followed by ``"<eos>"``
        (so ``len(words)`` = number of whitespace-separated words + ``n_lines``).

    Raises:
        DataError: unreadable or not a regular file, over ``max_bytes``
            (:data:`MAX_TOKEN_BYTES`), a NUL byte (a binary file), not UTF-8, or no word at
            all (empty or blank lines only).
    """
    path = Path(path)
    with open_regular(path, "token file") as fh:
        size = os.fstat(fh.fileno()).st_size
        check_size(path, size, max_bytes, "token file", "dlperf.data.tokens.MAX_TOKEN_BYTES")
        try:
            raw = fh.read(max_bytes + 1)
        except OSError as e:
            raise DataError(f"cannot read token file {path}: {e.strerror or e}") from None
    check_size(path, len(raw), max_bytes, "token file", "dlperf.data.tokens.MAX_TOKEN_BYTES")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(
            f"{path} is not UTF-8 text: byte 0x{raw[e.start]:02x} at offset {e.start} cannot "
            f"be decoded ({e.reason}); token files must be UTF-8 (convert it, e.g. with "
            f"`iconv -t UTF-8`) or check that this is a PTB / WikiText file") from None
    nul = raw.find(b"\0")
    if nul >= 0:
        raise DataError(
            f"{path} is not a text file: it has a NUL byte at offset {nul} (text never does; "
            f"git and GNU grep use the same test for binary files); give a PTB / WikiText "
            f"token file, not a binary file")
    # Universal newlines, as Python's text-mode file iteration: \r\n and \r become \n.
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # text ends with a newline: no extra line
    words: list[str] = []
    n_words = 0
    for line in lines:
        w = line.split()
        n_words += len(w)
        words.extend(w)
        words.append(EOS)
    if n_words == 0:
        raise DataError(
            f"{path} is an empty token file: it has {len(raw)} bytes and {len(lines)} lines but "
            f"no words; give a non-empty PTB / WikiText file")
    return words, len(lines)


def build_vocab(words: list[str]) -> tuple[tuple[str, ...], np.ndarray]:
    """Build the vocabulary of ``words`` and encode them.

    The vocabulary is ordered by descending count, ties broken by the word (code-point order),
    so it is deterministic and ``id`` is the frequency rank.

    Returns:
        ``(vocab, ids)``: ``vocab[id]`` is the word; ``ids`` int64 ``[len(words)]``.
    """
    counts = Counter(words)
    vocab = tuple(sorted(counts, key=lambda w: (-counts[w], w)))
    index = {w: i for i, w in enumerate(vocab)}
    ids = np.fromiter((index[w] for w in words), dtype=np.int64, count=len(words))
    return vocab, ids

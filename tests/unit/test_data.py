"""Tests of the data layer (dlperf.data): real files from ../shared/data and corrupt copies."""

from __future__ import annotations

import gzip
import hashlib
import importlib.util
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from dlperf.data import (
    DATASETS,
    Dataset,
    cap_vocab,
    data_root,
    load_dataset,
    make_batches,
    read_cifar10_bin,
    write_cifar10_bin,
)
from dlperf.errors import ConfigError, DataError

try:
    from dlperf.zoo.spec import ModelSpec
except ImportError:  # the zoo registry is incomplete: load the self-contained spec module alone
    _p = Path(__file__).parents[2] / "src" / "dlperf" / "zoo" / "spec.py"
    _m = importlib.util.spec_from_file_location("_dlperf_zoo_spec", _p)
    _mod = importlib.util.module_from_spec(_m)
    _m.loader.exec_module(_mod)
    ModelSpec = _mod.ModelSpec

# Published facts about the real files (../shared/data/README.md; MNIST test-set label counts).
SHA256 = {
    "t10k-images-idx3-ubyte.gz": "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "t10k-labels-idx1-ubyte.gz": "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
    "ptb.valid.txt": "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2",
    "wiki.valid.tokens": "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8",
}
MNIST_T10K_LABEL_COUNTS = [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
MNIST_T10K_FIRST_LABELS = [7, 2, 1, 0, 4, 1, 4, 9, 5, 9]
# Tokens with one <eos> per line (PyTorch word_language_model convention) and vocabulary sizes;
# each is re-derived below by plain Python counting.
PTB_VALID_TOKENS, PTB_VALID_LINES, PTB_VALID_VOCAB = 73760, 3370, 6022
PTB_TEST_TOKENS, PTB_TEST_VOCAB = 82430, 6049
WT2_VALID_TOKENS, WT2_VALID_VOCAB = 217646, 13777


def spec(name="stand_in", kind="vector", shape=(784,), num_classes=10, real_data=()):
    """A tiny stand-in ModelSpec (the data layer only reads kind, shape, classes, real_data)."""
    return ModelSpec(name=name, family="fcn", input_kind=kind, input_shape=tuple(shape),
                     num_classes=num_classes, params=0, forward_flops_per_sample=0,
                     source="test", flops_source="test", real_data=tuple(real_data))


def count_words(path: Path) -> tuple[int, int, Counter]:
    """Independent reference: (tokens incl. one <eos> per line, lines, word counts)."""
    counts: Counter = Counter()
    n = lines = 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            words = line.split() + ["<eos>"]
            counts.update(words)
            n += len(words)
            lines += 1
    return n, lines, counts


@pytest.fixture(scope="module")
def mnist_raw_bytes(shared_data) -> tuple[bytes, bytes]:
    """Decompressed (images, labels) bytes of the real MNIST t10k files."""
    m = shared_data / "mnist"
    return (gzip.decompress((m / "t10k-images-idx3-ubyte.gz").read_bytes()),
            gzip.decompress((m / "t10k-labels-idx1-ubyte.gz").read_bytes()))


def write_mnist(folder: Path, images: bytes, labels: bytes, prefix="t10k", gz=False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    suffix = ".gz" if gz else ""
    (folder / f"{prefix}-images-idx3-ubyte{suffix}").write_bytes(images)
    (folder / f"{prefix}-labels-idx1-ubyte{suffix}").write_bytes(labels)
    return folder


# --------------------------------------------------------------------------------------- MNIST

def test_mnist_t10k_by_name(data_env, mnist_raw_bytes):
    ds = load_dataset("mnist")
    assert isinstance(ds, Dataset) and ds.name == "mnist" and ds.kind == "image"
    assert ds.path == data_env / "mnist"
    assert ds.x.shape == (10000, 1, 28, 28) and ds.x.dtype == np.uint8
    assert ds.y.shape == (10000,) and ds.y.dtype == np.int64
    assert ds.y[:10].tolist() == MNIST_T10K_FIRST_LABELS
    hist = np.bincount(ds.y, minlength=10)
    assert hist.tolist() == MNIST_T10K_LABEL_COUNTS and hist.sum() == 10000
    assert ds.x.min() == 0 and ds.x.max() == 255
    # Independent parse: pixels start after the 16-byte header, labels after 8 bytes.
    images, labels = mnist_raw_bytes
    assert np.array_equal(ds.x.ravel(), np.frombuffer(images, np.uint8, offset=16))
    assert np.array_equal(ds.y, np.frombuffer(labels, np.uint8, offset=8))
    assert ds.vocab is None
    assert ds.meta["split"] == "test" and ds.meta["n_samples"] == 10000
    assert ds.meta["format"] == "idx.gz"
    for f in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        assert ds.meta["sha256"][f] == SHA256[f]


def test_mnist_raw_idx_same_as_gz(shared_data, mnist_raw_bytes, tmp_path):
    gz = load_dataset("mnist", data_dir=shared_data)
    folder = write_mnist(tmp_path / "mnist", *mnist_raw_bytes)
    for ds in (load_dataset("mnist", data_dir=tmp_path),                  # by name
               load_dataset(str(folder)),                                 # folder path
               load_dataset(folder / "t10k-images-idx3-ubyte"),           # images file
               load_dataset(folder / "t10k-labels-idx1-ubyte")):          # labels file
        assert ds.meta["format"] == "idx" and ds.meta["split"] == "test"
        assert np.array_equal(ds.x, gz.x) and np.array_equal(ds.y, gz.y)
    # A direct .gz file path finds its .gz partner.
    ds = load_dataset(shared_data / "mnist" / "t10k-images-idx3-ubyte.gz")
    assert ds.path.name == "t10k-images-idx3-ubyte.gz" and np.array_equal(ds.y, gz.y)


def test_mnist_train_split_preferred(mnist_raw_bytes, tmp_path):
    images, labels = mnist_raw_bytes
    folder = write_mnist(tmp_path / "mnist", images, labels)
    n = 3  # a 3-image "train" split: header count patched, values cut
    tr_images = images[:4] + n.to_bytes(4, "big") + images[8:16] + images[16:16 + n * 784]
    tr_labels = labels[:4] + n.to_bytes(4, "big") + labels[8:8 + n]
    write_mnist(folder, gzip.compress(tr_images), gzip.compress(tr_labels), "train", gz=True)
    ds = load_dataset("mnist", data_dir=tmp_path)
    assert ds.meta["split"] == "train" and ds.x.shape == (3, 1, 28, 28)
    assert ds.y.tolist() == MNIST_T10K_FIRST_LABELS[:3]


def _patched(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new):]


@pytest.mark.parametrize("case, match", [
    ("truncated_gz", r"t10k-images-idx3-ubyte\.gz is a corrupt or truncated gzip file"),
    ("garbage_gz", r"corrupt or truncated gzip file"),
    ("wrong_magic", r"t10k-images-idx3-ubyte is not an IDX file: wrong magic number 0x12345678"),
    ("truncated_raw", r"t10k-images-idx3-ubyte is truncated: .*shape \(10000, 28, 28\).*"
                      r"7840000 bytes of values, but the file has 7839900"),
    ("trailing_bytes", r"longer than its header says"),
    ("count_mismatch", r"image and label counts differ: .*10000 images .* 9999 labels"),
    ("bad_label", r"t10k-labels-idx1-ubyte has a label out of range: label\[3\] = 10 "),
    ("swapped", r"t10k-images-idx3-ubyte is not an IDX image file: expected magic 0x00000803"),
])
def test_mnist_corrupt_files_refused(shared_data, mnist_raw_bytes, tmp_path, case, match):
    images, labels = mnist_raw_bytes
    gz = False
    if case == "truncated_gz":  # the real .gz files, the images one cut in half
        gz_images = (shared_data / "mnist" / "t10k-images-idx3-ubyte.gz").read_bytes()
        labels = (shared_data / "mnist" / "t10k-labels-idx1-ubyte.gz").read_bytes()
        images, gz = gz_images[: len(gz_images) // 2], True
    elif case == "garbage_gz":
        images, labels, gz = b"\x1f\x8b" + b"\x00" * 50, gzip.compress(labels, 1), True
    elif case == "wrong_magic":
        images = _patched(images, 0, bytes.fromhex("12345678"))
    elif case == "truncated_raw":
        images = images[:-100]
    elif case == "trailing_bytes":
        images = images + b"\x00"
    elif case == "count_mismatch":
        labels = _patched(labels, 4, (9999).to_bytes(4, "big"))[:-1]
    elif case == "bad_label":
        labels = _patched(labels, 8 + 3, bytes([10]))
    elif case == "swapped":
        images, labels = labels, images
    folder = write_mnist(tmp_path / "mnist", images, labels, gz=gz)
    with pytest.raises(DataError, match=match):
        load_dataset("mnist", data_dir=tmp_path)
    with pytest.raises(DataError, match=match):  # same through a direct path
        load_dataset(folder)


def test_mnist_missing_files(mnist_raw_bytes, tmp_path):
    with pytest.raises(DataError, match=r"'mnist' not found under data root .*looked for "
                                        r"folder .*mnist.*t10k-images-idx3-ubyte"):
        load_dataset("mnist", data_dir=tmp_path)
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "README").write_text("x")
    with pytest.raises(DataError, match=r"no data files in .*mnist: looked for "
                                        r"train-images-idx3-ubyte.* t10k-labels.*found README"):
        load_dataset("mnist", data_dir=tmp_path)
    (tmp_path / "mnist" / "t10k-images-idx3-ubyte").write_bytes(mnist_raw_bytes[0])
    with pytest.raises(DataError, match=r"not its partner .*t10k-labels-idx1-ubyte"):
        load_dataset("mnist", data_dir=tmp_path)
    with pytest.raises(DataError, match=r"partner file .*t10k-labels-idx1-ubyte"):
        load_dataset(tmp_path / "mnist" / "t10k-images-idx3-ubyte")


# ---------------------------------------------------------------------- data root & resolution

def test_missing_root_message(monkeypatch):
    monkeypatch.delenv("DLPERF_DATA", raising=False)
    assert data_root() is None
    with pytest.raises(DataError, match=r"no data root set .*pass --data-dir DIR or set "
                                        r"DLPERF_DATA=DIR"):
        load_dataset("ptb")


def test_data_dir_beats_env(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("DLPERF_DATA", str(tmp_path))
    assert data_root() == tmp_path
    assert data_root(shared_data) == shared_data
    assert data_root("") == tmp_path  # empty option = not given
    with pytest.raises(DataError, match=r"'ptb' not found under data root .* \(from "
                                        r"DLPERF_DATA\)"):
        load_dataset("ptb")
    assert load_dataset("ptb", data_dir=shared_data).meta["n_tokens"] == PTB_VALID_TOKENS
    monkeypatch.setenv("DLPERF_DATA", str(shared_data))
    with pytest.raises(DataError, match=r"from --data-dir"):
        load_dataset("ptb", data_dir=tmp_path)
    with pytest.raises(DataError, match=r"data root .*nope \(from --data-dir\) is not an "
                                        r"existing folder"):
        load_dataset("ptb", data_dir=tmp_path / "nope")


def test_unknown_name_and_paths(data_env, tmp_path):
    with pytest.raises(DataError, match=r"unknown dataset 'mnsit'; did you mean 'mnist'\?.*"
                                        r"cifar10, imagefolder, mnist, ptb, wikitext2"):
        load_dataset("mnsit")
    with pytest.raises(DataError, match=r"does not exist"):
        load_dataset(str(tmp_path / "nope" / "x.bin"))
    (tmp_path / "data.xyz").write_bytes(b"abc")
    with pytest.raises(DataError, match=r"cannot tell the format of .*data\.xyz"):
        load_dataset(tmp_path / "data.xyz")
    with pytest.raises(DataError, match=r"cannot tell which data set folder"):
        load_dataset(tmp_path)
    with pytest.raises(DataError, match=r"looks like a data root"):
        load_dataset(data_env)
    assert set(DATASETS) == {"mnist", "cifar10", "ptb", "wikitext2", "imagefolder"}


# -------------------------------------------------------------------------------------- tokens

def test_ptb_valid(data_env):
    ds = load_dataset("ptb")
    f = data_env / "ptb" / "ptb.valid.txt"
    n, lines, counts = count_words(f)
    assert (n, lines, len(counts)) == (PTB_VALID_TOKENS, PTB_VALID_LINES, PTB_VALID_VOCAB)
    assert ds.name == "ptb" and ds.kind == "tokens" and ds.y is None
    assert ds.x.shape == (PTB_VALID_TOKENS,) and ds.x.dtype == np.int64
    assert ds.meta["split"] == "valid" and ds.meta["n_tokens"] == PTB_VALID_TOKENS
    assert ds.meta["vocab_size"] == len(ds.vocab) == PTB_VALID_VOCAB <= 10000
    assert ds.meta["n_lines"] == PTB_VALID_LINES
    assert ds.meta["sha256"]["ptb.valid.txt"] == SHA256["ptb.valid.txt"]
    # Vocabulary: descending count, ties by word; ids decode back to the text.
    assert list(ds.vocab) == sorted(counts, key=lambda w: (-counts[w], w))
    assert ds.vocab[:3] == ("the", "<unk>", "<eos>")
    assert np.bincount(ds.x).tolist() == [counts[w] for w in ds.vocab]
    first = f.read_text(encoding="utf-8").split("\n")[0].split() + ["<eos>"]
    assert [ds.vocab[i] for i in ds.x[: len(first)]] == first
    assert (ds.x == ds.vocab.index("<eos>")).sum() == PTB_VALID_LINES


def test_ptb_test_by_path(shared_data):
    f = shared_data / "ptb" / "ptb.test.txt"
    ds = load_dataset(f)
    n, _, counts = count_words(f)
    assert (n, len(counts)) == (PTB_TEST_TOKENS, PTB_TEST_VOCAB)
    assert ds.name == "ptb" and ds.path == f and ds.meta["split"] == "test"
    assert ds.meta["n_tokens"] == PTB_TEST_TOKENS and ds.meta["vocab_size"] == PTB_TEST_VOCAB


def test_wikitext2_valid(data_env, tmp_path):
    ds = load_dataset("wikitext2")
    f = data_env / "wikitext-2" / "wiki.valid.tokens"
    n, _, counts = count_words(f)
    assert (n, len(counts)) == (WT2_VALID_TOKENS, WT2_VALID_VOCAB)
    assert ds.name == "wikitext2" and ds.meta["split"] == "valid"
    assert ds.x.shape == (WT2_VALID_TOKENS,) and ds.meta["vocab_size"] == WT2_VALID_VOCAB
    assert ds.meta["sha256"]["wiki.valid.tokens"] == SHA256["wiki.valid.tokens"]
    assert load_dataset("wikitext-2").meta["n_tokens"] == WT2_VALID_TOKENS  # alias
    # The wikitext2/ folder spelling, and train preferred over valid.
    (tmp_path / "wikitext2").mkdir()
    (tmp_path / "wikitext2" / "wiki.train.tokens").write_text(" = A = \n\n b c b \n")
    small = load_dataset("wikitext2", data_dir=tmp_path)
    assert small.meta["split"] == "train" and small.meta["n_tokens"] == 4 + 1 + 4
    assert small.vocab == ("<eos>", "=", "b", "A", "c")


@pytest.mark.parametrize("content, match", [
    (b"hello \xff world\n", r"ptb\.valid\.txt is not UTF-8 text: byte 0xff at offset 6"),
    (b"\xef\xbb caf\xc3\xa9", r"not UTF-8 text"),
    (b"", r"ptb\.valid\.txt is an empty token file"),
    (b"\n  \n\t\n", r"empty token file: it has 6 bytes and 3 lines but no words"),
])
def test_bad_token_files_refused(tmp_path, content, match):
    (tmp_path / "ptb").mkdir()
    (tmp_path / "ptb" / "ptb.valid.txt").write_bytes(content)
    with pytest.raises(DataError, match=match):
        load_dataset("ptb", data_dir=tmp_path)


# ------------------------------------------------------------------------------------ CIFAR-10

def _cifar_arrays(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8),
            rng.integers(0, 10, n).astype(np.int64))


def test_cifar10_round_trip(tmp_path):
    parts = {i: _cifar_arrays(n, i) for i, n in ((1, 7), (2, 5), (10, 3))}
    for i, (x, y) in parts.items():
        write_cifar10_bin(tmp_path / "cifar10" / f"data_batch_{i}.bin", x, y)
    # Byte layout checked independently: label byte, then R, G, B planes of 1024 bytes.
    raw = (tmp_path / "cifar10" / "data_batch_1.bin").read_bytes()
    assert len(raw) == 7 * 3073 and raw[0] == parts[1][1][0]
    assert raw[1:1025] == parts[1][0][0, 0].tobytes()      # red plane of image 0
    assert raw[2049:3073] == parts[1][0][0, 2].tobytes()   # blue plane
    ds = load_dataset("cifar10", data_dir=tmp_path)
    assert ds.name == "cifar10" and ds.kind == "image" and ds.meta["split"] == "train"
    assert [Path(f).name for f in ds.meta["files"]] == [
        "data_batch_1.bin", "data_batch_2.bin", "data_batch_10.bin"]  # numeric order
    x = np.concatenate([parts[i][0] for i in (1, 2, 10)])
    y = np.concatenate([parts[i][1] for i in (1, 2, 10)])
    assert ds.x.dtype == np.uint8 and ds.x.shape == (15, 3, 32, 32) and np.array_equal(ds.x, x)
    assert ds.y.dtype == np.int64 and np.array_equal(ds.y, y)
    assert ds.meta["n_samples"] == 15 and set(ds.meta["sha256"]) == {
        "data_batch_1.bin", "data_batch_2.bin", "data_batch_10.bin"}
    # test_batch.bin in the tarball's folder name; a single file by path.
    xt, yt = _cifar_arrays(4, 9)
    write_cifar10_bin(tmp_path / "c" / "cifar-10-batches-bin" / "test_batch.bin", xt, yt)
    dt = load_dataset("cifar10", data_dir=tmp_path / "c")
    assert dt.meta["split"] == "test" and np.array_equal(dt.x, xt) and np.array_equal(dt.y, yt)
    d1 = load_dataset(tmp_path / "cifar10" / "data_batch_2.bin")
    assert np.array_equal(d1.x, parts[2][0]) and d1.meta["split"] == "train"
    with pytest.raises(ValueError):
        write_cifar10_bin(tmp_path / "bad.bin", xt[:, :1], yt)


def test_cifar10_corrupt_refused(tmp_path):
    x, y = _cifar_arrays(3, 0)
    f = write_cifar10_bin(tmp_path / "cifar10" / "test_batch.bin", x, y)
    f.write_bytes(f.read_bytes()[:-10])
    with pytest.raises(DataError, match=r"test_batch\.bin is not a CIFAR-10 binary file: its "
                                        r"size 9209 bytes is not a multiple of 3073"):
        load_dataset("cifar10", data_dir=tmp_path)
    f.write_bytes(b"")
    with pytest.raises(DataError, match=r"not a non-zero multiple of 3073"):
        read_cifar10_bin(f)
    write_cifar10_bin(f, x, y)
    f.write_bytes(_patched(f.read_bytes(), 3073, bytes([10])))
    with pytest.raises(DataError, match=r"test_batch\.bin has a label out of range: record 1 "
                                        r"has label 10"):
        load_dataset("cifar10", data_dir=tmp_path)


# -------------------------------------------------------------------------------- make_batches

LM = spec("lm_stand_in", "tokens", (35,), 10000, ("ptb",))


def test_token_batches(data_env):
    ds = load_dataset("ptb")
    B, T = 20, 35
    X, Y = make_batches(ds, LM, B)
    length = PTB_VALID_TOKENS // B                      # 3688 tokens per stream
    nb = (length - 1) // T                              # 105 full windows
    assert X.shape == Y.shape == (nb, B, T) == (105, 20, 35)
    assert X.dtype == Y.dtype == np.int64
    streams = ds.x[: length * B].reshape(B, length)
    for k in (0, 1, nb - 1):
        assert np.array_equal(X[k], streams[:, k * T:(k + 1) * T])
        assert np.array_equal(Y[k], streams[:, k * T + 1:(k + 1) * T + 1])
    assert np.array_equal(Y[:, :, :-1], X[:, :, 1:])     # shifted by one token
    assert np.array_equal(Y[:-1, :, -1], X[1:, :, 0])    # streams continue across batches
    assert X[0, 1, 0] == ds.x[length]                   # stream b starts at b * length
    X3, Y3 = make_batches(ds, LM, B, max_batches=3)
    assert X3.shape == (3, B, T) and np.array_equal(X3, X[:3]) and np.array_equal(Y3, Y[:3])
    # Largest batch: every stream needs T + 1 tokens: 73760 // 36 = 2048.
    assert make_batches(ds, LM, 2048)[0].shape == (1, 2048, 35)
    with pytest.raises(DataError, match=r"'ptb' .*has 73760 tokens, too few for batch size "
                                        r"2049 .*largest batch size that works is 2048"):
        make_batches(ds, LM, 2049)
    with pytest.raises(ConfigError):
        make_batches(ds, LM, 0)
    with pytest.raises(ConfigError):
        make_batches(ds, LM, 4, max_batches=0)


def test_token_vocab_capped(data_env):
    ds = load_dataset("wikitext2")
    n, _, counts = count_words(data_env / "wikitext-2" / "wiki.valid.tokens")
    X, Y = make_batches(ds, LM, 10, max_batches=2)
    capped = cap_vocab(ds, LM.num_classes)
    assert X.max() < 10000 and np.array_equal(X, make_batches(capped, LM, 10, max_batches=2)[0])
    # '<unk>' is already frequent (id 1): keep the 10000 most frequent words, the rest -> it.
    rare = sorted(counts, key=lambda w: (-counts[w], w))[10000:]
    assert capped.vocab == ds.vocab[:10000] and capped.meta["vocab_size"] == 10000
    assert capped.meta["vocab_capped"] == {"from": WT2_VALID_VOCAB, "to": 10000,
                                           "words_mapped": len(rare),
                                           "tokens_mapped": sum(counts[w] for w in rare)}
    unk = ds.vocab.index("<unk>")
    assert (capped.x == unk).sum() == counts["<unk>"] + sum(counts[w] for w in rare)
    assert cap_vocab(capped, 10000) is capped and ds.meta["vocab_size"] == WT2_VALID_VOCAB


def test_cap_vocab_adds_unk(tmp_path):
    f = tmp_path / "ptb.train.txt"
    f.write_text("a a a b b c d\n")
    ds = load_dataset(f)
    assert ds.vocab == ("a", "b", "<eos>", "c", "d") and ds.meta["split"] == "train"
    c = cap_vocab(ds, 3)
    assert c.vocab == ("a", "b", "<unk>")
    assert [c.vocab[i] for i in c.x] == ["a", "a", "a", "b", "b", "<unk>", "<unk>", "<unk>"]


def test_image_batches_mnist(data_env):
    ds = load_dataset("mnist")
    B = 64
    X, Y = make_batches(ds, spec(shape=(784,)), B)     # fcn_mnist-style flattened vectors
    assert X.shape == (10000 // B, B, 784) == (156, 64, 784) and X.dtype == np.float32
    assert Y.shape == (156, 64) and Y.dtype == np.int64
    assert Y[0, :10].tolist() == MNIST_T10K_FIRST_LABELS
    expect = (ds.x[B + 5].astype(np.float64).ravel() / 255 - 0.1307) / 0.3081
    np.testing.assert_allclose(X[1, 5], expect, rtol=1e-5, atol=1e-5)
    # The training-set constants normalise the test set to about mean 0, std 1.
    assert abs(X.mean()) < 0.05 and abs(X.std() - 1) < 0.05
    Xi, Yi = make_batches(ds, spec(kind="image", shape=(1, 28, 28)), 100, max_batches=7)
    assert Xi.shape == (7, 100, 1, 28, 28) and Yi.shape == (7, 100)
    np.testing.assert_array_equal(Xi.reshape(-1, 784)[:64], X[0])
    assert make_batches(ds, spec(), 10000)[0].shape == (1, 10000, 784)
    with pytest.raises(DataError, match=r"'mnist' .*10000 samples, too few for one batch of "
                                        r"10001: the largest batch size that works is 10000"):
        make_batches(ds, spec(), 10001)


def test_image_batches_cifar(tmp_path):
    x, y = _cifar_arrays(10, 3)
    write_cifar10_bin(tmp_path / "cifar10" / "data_batch_1.bin", x, y)
    ds = load_dataset("cifar10", data_dir=tmp_path)
    X, Y = make_batches(ds, spec(kind="image", shape=(3, 32, 32)), 4)
    assert X.shape == (2, 4, 3, 32, 32) and X.dtype == np.float32   # 2 full batches of 4
    assert np.array_equal(Y.ravel(), y[:8])
    mean = np.array([0.4914, 0.4822, 0.4465]).reshape(3, 1, 1)
    std = np.array([0.2470, 0.2435, 0.2616]).reshape(3, 1, 1)
    np.testing.assert_allclose(X[1, 2], (x[6] / 255 - mean) / std, rtol=1e-5, atol=1e-5)
    with pytest.raises(DataError, match=r"'cifar10' does not fit model 'stand_in': its images "
                                        r"are 3x32x32 .*vector \(3072,\)"):
        make_batches(ds, spec(shape=(784,)), 4)


def test_incompatible_dataset_and_model(data_env):
    mnist, ptb = load_dataset("mnist"), load_dataset("ptb")
    cnn = spec("cifar_cnn", "image", (3, 32, 32), 10, ("cifar10",))
    with pytest.raises(DataError, match=r"data set 'mnist' does not fit model 'cifar_cnn': its "
                                        r"images are 1x28x28 but the model takes images "
                                        r"3x32x32.*model 'cifar_cnn' trains on: cifar10"):
        make_batches(mnist, cnn, 8)
    with pytest.raises(DataError, match=r"'mnist' does not fit model 'lm_stand_in'.*token "
                                        r"sequences of length 35.*trains on: ptb"):
        make_batches(mnist, LM, 8)
    with pytest.raises(DataError, match=r"'ptb' does not fit model 'stand_in': it is token ids "
                                        r"but the model takes vectors of 784 features.*"
                                        r"synthetic data only"):
        make_batches(ptb, spec(), 8)
    with pytest.raises(DataError, match=r"10 label classes but the model only 5 outputs"):
        make_batches(mnist, spec(num_classes=5), 8)


def test_zoo_specs_if_present(data_env):
    try:
        from dlperf.zoo import SPECS
    except Exception:
        pytest.skip("dlperf.zoo is not importable yet")
    if "fcn_mnist" not in SPECS or "lstm" not in SPECS:
        pytest.skip("fcn_mnist / lstm specs not in the zoo yet")
    X, Y = make_batches(load_dataset("mnist"), SPECS["fcn_mnist"], 32, max_batches=2)
    assert X.shape == (2, 32, *SPECS["fcn_mnist"].input_shape)
    lstm = SPECS["lstm"]
    X, Y = make_batches(load_dataset("ptb"), lstm, 4, max_batches=2)
    assert X.shape == (2, 4, lstm.input_shape[0]) and X.max() < lstm.num_classes
    with pytest.raises(DataError, match=r"models that train on 'mnist': .*fcn_mnist"):
        make_batches(load_dataset("mnist"), lstm, 4)


def test_sha256_helper_matches_hashlib(shared_data):
    f = shared_data / "ptb" / "ptb.valid.txt"
    ds = load_dataset(f)
    assert ds.meta["sha256"][f.name] == hashlib.sha256(f.read_bytes()).hexdigest()

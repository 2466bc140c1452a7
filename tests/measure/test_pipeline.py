"""Input pipelines: index plans, sample sources, the host prefetcher, the data wait and the
input-bound label, the ImageFolder generator and reader (framework-free, fast)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from dlperf.data import load_dataset, make_batches
from dlperf.data.dataset import Dataset
from dlperf.data.imagefolder import (
    load_train_image,
    make_imagefolder,
    random_resized_crop_box,
    scan_imagefolder,
)
from dlperf.data.pipeline import (
    DataWaitRecorder,
    HostPipeline,
    IndexPlan,
    SampleSource,
    data_wait_summary,
)
from dlperf.errors import ConfigError, DataError
from dlperf.zoo import get_spec


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("imgs") / "folder"
    make_imagefolder(root, images=18, classes=3, size=40, seed=1)
    return root


# --- index plans and sources ---------------------------------------------------------------------

def test_index_plan_is_a_fresh_permutation_per_pass_and_deterministic():
    plan = IndexPlan(10, shuffle=True, seed=3)
    first = [plan(p) for p in range(10)]
    second = [plan(p) for p in range(10, 20)]
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second  # reshuffled (probability of equal orders: 1 / 10!)
    assert first == [IndexPlan(10, shuffle=True, seed=3)(p) for p in range(10)]
    assert [IndexPlan(4, shuffle=False)(p) for p in range(6)] == [0, 1, 2, 3, 0, 1]


def _image_ds(n=12, c=1, hw=28, name="mnist"):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (n, c, hw, hw), dtype=np.uint8)
    y = rng.integers(0, 10, n).astype(np.int64)
    return Dataset(name, "image", Path("mem"), x, y, None, {"split": "train"})


def test_source_items_equal_make_batches_normalisation():
    ds = _image_ds()
    spec = get_spec("fcn_mnist_tiny")
    src = SampleSource(ds, spec, batch_size=4, seed=0)
    X, _ = make_batches(ds, spec, 1)  # batch size 1: X[i, 0] is sample i
    for p in range(5):
        x, y = src.item(p)
        i = src.plan(p)
        np.testing.assert_allclose(x, X[i, 0], rtol=1e-6)
        assert y == ds.y[i] and x.dtype == np.float32
    xb, yb = src.batch(1)
    assert xb.shape == (4, *spec.input_shape) and yb.shape == (4,)


def test_source_layouts_of_images():
    ds = _image_ds(c=3, hw=32, name="cifar10")
    spec = get_spec("resnet56_tiny")
    nchw = SampleSource(ds, spec, 2, layout="NCHW").item(0)[0]
    nhwc = SampleSource(ds, spec, 2, layout="NHWC").item(0)[0]
    assert nchw.shape == (3, 32, 32) and nhwc.shape == (32, 32, 3)
    np.testing.assert_array_equal(nchw.transpose(1, 2, 0), nhwc)


def test_source_refuses_a_data_set_smaller_than_a_batch():
    with pytest.raises(DataError, match="largest batch size that works is 12"):
        SampleSource(_image_ds(), get_spec("fcn_mnist_tiny"), batch_size=16)


# --- host pipeline -------------------------------------------------------------------------------

@pytest.mark.parametrize("workers", [0, 1, 3])
def test_host_pipeline_keeps_order_and_bounds_prefetch(workers):
    made: list[int] = []
    lock = threading.Lock()

    def make(k):
        with lock:
            made.append(k)
        time.sleep(0.001 * (k % 3))  # out-of-order completion on several threads
        return k

    pipe = HostPipeline(make, lambda b: ("dev", b), workers=workers, depth=2)
    try:
        got = [pipe.next() for _ in range(12)]
        assert got == [("dev", k) for k in range(12)]
        time.sleep(0.05)
        # never more than workers + depth host batches in flight plus the queued ones
        assert max(made) < 12 + workers + 2 + 2 + 1
    finally:
        pipe.close()


def test_host_pipeline_raises_the_error_of_a_failed_batch():
    def make(k):
        if k == 2:
            raise DataError("cannot decode image x.jpg")
        return k

    pipe = HostPipeline(make, lambda b: b, workers=2, depth=1)
    try:
        assert [pipe.next(), pipe.next()] == [0, 1]
        with pytest.raises(DataError, match="x.jpg"):
            pipe.next()
    finally:
        pipe.close()


# --- data wait and the input-bound label ---------------------------------------------------------

def test_data_wait_recorder_splits_warmup_from_measurement():
    t = iter([0.0, 0.5, 1.0, 1.25, 2.0, 2.125])
    rec = DataWaitRecorder(clock=lambda: next(t))
    nxt = rec.wrap(lambda: "batch")
    assert nxt() == "batch"
    rec.mark_measure()
    nxt(), nxt()
    assert rec.waits_s == [0.5, 0.25, 0.125]
    assert rec.measured() == [0.25, 0.125]


def test_input_bound_label_is_total_wait_over_total_time():
    steps = [0.1] * 9
    below = data_wait_summary([0.01] * 9, steps, threshold=0.10)  # exactly 10%: not above
    above = data_wait_summary([0.0101] * 9, steps, threshold=0.10)
    assert below["share"] == pytest.approx(0.10) and below["input_bound"] is False
    assert above["input_bound"] is True
    # a bursty loader (the H200's 4-worker DataLoader): one iteration in four waits 0.3 s and
    # the others none. The median wait is 0, yet 3/4 of the time goes into waiting: input-bound.
    burst = data_wait_summary([0.3, 0.0, 0.0, 0.0] * 4, [0.33, 0.03, 0.03, 0.03] * 4)
    assert burst["median_share"] == 0.0
    assert burst["share"] == pytest.approx(1.2 / 1.68) and burst["input_bound"] is True
    assert burst["time_share"] == burst["share"] and "total" in burst["criterion"]
    assert data_wait_summary([], steps)["input_bound"] is None


# --- ImageFolder ---------------------------------------------------------------------------------

def test_make_imagefolder_writes_jpegs_in_class_folders(folder):
    paths, labels, classes = scan_imagefolder(folder)
    assert classes == ["class_000", "class_001", "class_002"]
    assert len(paths) == 18 and np.bincount(labels).tolist() == [6, 6, 6]
    assert all(p.endswith(".jpg") and Path(p).read_bytes()[:2] == b"\xff\xd8" for p in paths)
    from PIL import Image

    with Image.open(paths[0]) as im:
        assert (im.format, im.size) == ("JPEG", (40, 40))


@pytest.mark.parametrize("kw,msg", [({"images": 0}, "--images"), ({"classes": 5, "images": 3},
                                    "more than --images"), ({"quality": 100}, "--quality")])
def test_make_imagefolder_refuses_bad_values(tmp_path, kw, msg):
    with pytest.raises(ConfigError, match=msg):
        make_imagefolder(tmp_path / "x", **kw)


def test_imagefolder_is_found_by_prefix_path_and_name(folder, monkeypatch):
    a = load_dataset(f"imagefolder:{folder}")
    b = load_dataset(str(folder))
    monkeypatch.setenv("DLPERF_DATA", str(folder.parent))
    (folder.parent / "imagefolder").symlink_to(folder)
    c = load_dataset("imagefolder")
    for ds in (a, b, c):
        assert ds.kind == "imagefolder" and len(ds) == 18
        assert ds.meta["num_labels"] == 3 and ds.meta["image_size"] == (40, 40)
    assert a.meta["listing_sha256"] == b.meta["listing_sha256"]


def test_imagefolder_errors_name_the_folder(tmp_path):
    with pytest.raises(DataError, match="not an existing folder"):
        load_dataset(f"imagefolder:{tmp_path / 'nope'}")
    (tmp_path / "empty" / "cat").mkdir(parents=True)
    with pytest.raises(DataError, match="no images"):
        load_dataset(f"imagefolder:{tmp_path / 'empty'}")


def test_imagefolder_fits_image_models_only(folder):
    ds = load_dataset(f"imagefolder:{folder}")
    X, Y = make_batches(ds, get_spec("resnet50_tiny"), 4, max_batches=2)
    assert X.shape == (2, 4, 3, 32, 32) and X.dtype == np.float32 and Y.shape == (2, 4)
    assert abs(float(X.mean())) < 3
    with pytest.raises(DataError, match="does not fit model 'lstm_tiny'"):
        make_batches(ds, get_spec("lstm_tiny"), 4, max_batches=1)


def test_random_resized_crop_box_follows_torchvision_bounds():
    rng = np.random.default_rng(0)
    for _ in range(200):
        top, left, h, w = random_resized_crop_box(60, 80, rng)
        assert 0 <= top and top + h <= 60 and 0 <= left and left + w <= 80
        assert 0.08 * 4800 * 0.9 <= h * w <= 4800
        assert 3 / 4 * 0.8 <= w / h <= 4 / 3 * 1.25
    # no box of ratio 3/4..4/3 fits a 1000 x 10 (h x w) strip: the central crop at ratio 3/4
    assert random_resized_crop_box(1000, 10, rng) == ((1000 - 13) // 2, 0, 13, 10)  # 10 / (3/4)


def test_train_image_is_cropped_flipped_and_seeded(folder, tmp_path):
    path = scan_imagefolder(folder)[0][0]
    a = load_train_image(path, 24, np.random.default_rng(5))
    b = load_train_image(path, 24, np.random.default_rng(5))
    assert a.shape == (24, 24, 3) and a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8 not a jpeg")
    with pytest.raises(DataError, match="bad.jpg"):
        load_train_image(str(bad), 24, np.random.default_rng(0))

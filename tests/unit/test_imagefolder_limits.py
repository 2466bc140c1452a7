"""``dlperf data make-imagefolder`` refuses what it could not make or what could not be read,
before writing anything (the fresh-user trial's item 3: ``--size 100000`` was killed by the
kernel's OOM killer after 24 GB and left empty class folders behind)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import numpy as np
import pytest

from dlperf.data import imagefolder as imf
from dlperf.data.imagefolder import MAX_IMAGE_PIXELS, make_imagefolder, scan_imagefolder
from dlperf.errors import ConfigError


def test_a_huge_size_is_refused_at_once_by_the_command_and_nothing_is_made(tmp_path):
    target = tmp_path / "new" / "if"
    p = subprocess.run([sys.executable, "-m", "dlperf", "data", "make-imagefolder", str(target),
                        "--images", "4", "--classes", "2", "--size", "100000"],
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "COLUMNS": "300"})
    assert p.returncode == 2, p.stderr
    err = " ".join(p.stderr.split())
    assert "--size 100000 makes 100000x100000 = 10,000,000,000 pixels per image" in err
    assert "give --size 8192 or less" in err and "Traceback" not in err
    assert not (tmp_path / "new").exists()


def test_the_pixel_limit_is_the_readers_limit(tmp_path):
    side = int(MAX_IMAGE_PIXELS ** 0.5)
    assert side * side == MAX_IMAGE_PIXELS == 8192 * 8192
    imf._check_pixels(side)  # the largest readable image passes
    with pytest.raises(ConfigError, match="--size 8193 makes 8193x8193"):
        make_imagefolder(tmp_path / "x", images=1, classes=1, size=side + 1)
    assert not (tmp_path / "x").exists()


def test_more_bytes_than_the_disk_has_are_refused(tmp_path, monkeypatch):
    import shutil

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(10**9, 10**9 - 10**5, 10**5))
    est = imf._estimate_bytes(100, 64, 90)  # ~2.6 KB each (measured: 4 of them, 10,487 bytes)
    assert 200_000 < est < 330_000
    with pytest.raises(ConfigError) as e:
        make_imagefolder(tmp_path / "a" / "b", images=100, classes=2, size=64)
    assert "--images 100 of --size 64 at --quality 90 would write about" in str(e.value)
    assert "give fewer --images, a smaller --size" in str(e.value)
    assert not (tmp_path / "a").exists()
    # the same folder, partly written, counts its files (overwritten) as free space
    monkeypatch.undo()
    make_imagefolder(tmp_path / "c", images=60, classes=2, size=64)
    written = sum(p.stat().st_size for p in (tmp_path / "c").rglob("*.jpg"))
    monkeypatch.setattr(shutil, "disk_usage",
                        lambda p: usage(10**9, 10**9, max(0, est * 1.1 - written + 50_000)))
    assert make_imagefolder(tmp_path / "c", images=100, classes=2, size=64)["images"] == 100


def test_more_memory_than_there_is_is_refused(tmp_path, monkeypatch):
    import psutil

    vm = namedtuple("vm", "available total")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: vm(200 * 2**20, 2**34))
    with pytest.raises(ConfigError, match=r"--size 4096: making one 4096x4096 image needs about "
                                          r"0\.3 GiB of memory, more than 50% of the 0\.2 GiB"):
        make_imagefolder(tmp_path / "m", images=1, classes=1, size=4096)
    assert not (tmp_path / "m").exists()
    make_imagefolder(tmp_path / "m", images=1, classes=1, size=16)  # small images still fit


def test_a_failure_part_way_leaves_no_empty_folder_it_made(tmp_path, monkeypatch):
    real = imf._synthetic_image
    calls = {"n": 0}

    def fails_on_the_second(Image, rng, size):
        if size == 300:  # not the 256 x 256 sample of the disk estimate
            calls["n"] += 1
            if calls["n"] == 2:
                raise OSError(28, "No space left on device")
        return real(Image, rng, size)

    monkeypatch.setattr(imf, "_synthetic_image", fails_on_the_second)
    root = tmp_path / "deep" / "if"
    with pytest.raises(OSError, match="No space left"):
        make_imagefolder(root, images=6, classes=3, size=300)
    # the one image written stays (running again completes the folder); no empty folder
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "deep", "deep/if", "deep/if/class_000", "deep/if/class_000/img_000000.jpg"]
    calls["n"] = 1  # fail on the first image: everything this call made goes
    with pytest.raises(OSError):
        make_imagefolder(tmp_path / "other" / "if", images=2, classes=2, size=300)
    assert not (tmp_path / "other").exists()
    monkeypatch.setattr(imf, "_synthetic_image", real)
    assert make_imagefolder(root, images=6, classes=3, size=300)["images"] == 6
    assert len(scan_imagefolder(root)[0]) == 6


def test_noise_drawn_in_bands_is_the_noise_of_one_draw(monkeypatch):
    """The images (so the data sets already made) are the same whatever the band size."""
    Image = imf._pil()
    whole = np.asarray(imf._synthetic_image(Image, np.random.default_rng(7), 96))
    monkeypatch.setattr(imf, "_NOISE_BAND_PIXELS", 96 * 5)  # bands of 5 rows, the last of 1
    banded = np.asarray(imf._synthetic_image(Image, np.random.default_rng(7), 96))
    assert whole.shape == (96, 96, 3) and np.array_equal(whole, banded)


def test_a_folder_of_another_data_set_is_still_refused_with_many_images(tmp_path):
    """The check of an existing folder reads its file names, not a set of every name the
    call would write (10 million names were gigabytes)."""
    root = tmp_path / "r"
    (root / "class_000").mkdir(parents=True)
    (root / "class_000" / "img_000001.jpg").write_bytes(b"x")  # belongs to class 1 of 2
    with pytest.raises(ConfigError, match="already holds 1 file"):
        imf._refuse_other_data_set(root, 10**9, 2, 16)
    Path(root / "class_000" / "img_000001.jpg").rename(root / "class_000" / "img_000002.jpg")
    assert imf._refuse_other_data_set(root, 10**9, 2, 16) == 1  # bytes there


def test_an_image_name_that_is_a_link_to_another_file_replaces_the_link_not_the_file(tmp_path):
    """Completing a folder rewrites its images; one whose name is a hard or symbolic link to
    another file (a results database) gets a new file under that name: what it linked to
    keeps its bytes. An image's temporary file left by a kill does not block completing."""
    make_imagefolder(tmp_path / "if", images=3, classes=1, size=8)
    precious = tmp_path / "results.db"
    precious.write_bytes(b"SQLite format 3\x00 measurements")
    cls = tmp_path / "if" / "class_000"
    (cls / "img_000001.jpg").unlink()
    os.link(precious, cls / "img_000001.jpg")
    (cls / "img_000002.jpg").unlink()
    (cls / "img_000002.jpg").symlink_to(precious)
    (cls / ".img_000000.jpg.k9_x2.tmp").write_bytes(b"\xff\xd8")  # left by a kill: removed
    make_imagefolder(tmp_path / "if", images=3, classes=1, size=8)
    assert sorted(p.name for p in cls.iterdir()) == [f"img_00000{i}.jpg" for i in range(3)]
    assert precious.read_bytes() == b"SQLite format 3\x00 measurements"
    for name in ("img_000001.jpg", "img_000002.jpg"):
        p = cls / name
        assert not p.is_symlink() and p.read_bytes()[:2] == b"\xff\xd8"  # a JPEG of its own

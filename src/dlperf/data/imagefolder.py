"""ImageFolder of JPEGs: scanning, a synthetic generator, and decode + augment with Pillow/numpy.

Layout (torchvision's ``ImageFolder`` convention): ``ROOT/<class>/<image>.jpg``; classes are the
sub-folder names in sorted order, label ``i`` = the ``i``-th class. Files with the extensions in
:data:`EXTENSIONS` count as images; other files are ignored.

No ImageNet is available here, so :func:`make_imagefolder` writes a synthetic one: smooth random
colour fields plus noise, encoded as baseline JPEG by Pillow at a fixed quality, so decoding costs
what a photo of the same size costs (JPEG decode time depends on the pixel count and the amount
of high-frequency content, not on what the picture shows).

The training transform is the standard ImageNet recipe of the PyTorch examples
(``RandomResizedCrop(224)`` with scale (0.08, 1) and ratio (3/4, 4/3), then
``RandomHorizontalFlip()``, then normalisation by :data:`IMAGENET_MEAN`/:data:`IMAGENET_STD`):
:func:`random_resized_crop_box` draws the crop exactly as torchvision's
``RandomResizedCrop.get_params`` does (torchvision/transforms/transforms.py), and
:func:`load_train_image` applies it with Pillow. The PyTorch pipeline uses torchvision's own
transforms where torchvision is installed and this implementation otherwise; JAX uses this one.

Pillow is imported lazily (it is a dependency of matplotlib, so it is present wherever dlperf's
dependencies are); a missing Pillow is a :class:`~dlperf.errors.DataError` that says how to fix it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import math
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from dlperf.data.files import check_size, open_regular
from dlperf.errors import ConfigError, DataError, DataMissing
from dlperf.outputs import atomic_write

#: Images and classes one call writes at most (ImageNet-21k: 14 M images in 21,841 classes),
#: and the largest seed (0 .. 2^32 - 1, as :data:`dlperf.config.limits.MAX_SEED`: this package
#: is below dlperf.config, so the limits of its own flags are here).
MAX_IMAGES = 2**24
MAX_CLASSES = 2**16
MAX_SEED = 2**32 - 1

#: File name endings counted as images (lower case).
EXTENSIONS = (".jpg", ".jpeg", ".png")

#: Per-channel (R, G, B) mean and std of ImageNet pixels scaled to [0, 1], as used by the PyTorch
#: ImageNet example and torchvision's pretrained models (``transforms.Normalize(mean=[0.485,
#: 0.456, 0.406], std=[0.229, 0.224, 0.225])``).
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

#: Image formats decoded (Pillow format names), whatever a file's name says: the formats of
#: :data:`EXTENSIONS`. Restricting Pillow to them also keeps its other decoders away from
#: untrusted files (``PIL.Image.open(formats=...)``).
IMAGE_FORMATS = ("JPEG", "PNG")

#: Largest image decoded, in pixels: 2**26 = 67,108,864 (8192 x 8192). A 61-megapixel camera
#: photo (9504 x 6336) fits; decoding one takes up to 3 bytes per pixel (192 MiB) per image in
#: flight in every loader worker, far more than a training crop needs. Below Pillow's own
#: bomb warning (``PIL.Image.MAX_IMAGE_PIXELS``, 89,478,485) and error (twice that), which
#: let a 144-megapixel JPEG through with a warning only.
MAX_IMAGE_PIXELS = 1 << 26

#: Largest image file read: 256 MiB (an uncompressed 8192 x 8192 RGB PNG is 192 MiB).
MAX_IMAGE_FILE_BYTES = 1 << 28

#: RandomResizedCrop defaults (torchvision): area fraction and aspect-ratio range.
CROP_SCALE = (0.08, 1.0)
CROP_RATIO = (3.0 / 4.0, 4.0 / 3.0)


def _pil():
    try:
        from PIL import Image
    except ImportError:  # pragma: no cover - Pillow comes with matplotlib
        raise DataError("ImageFolder data needs Pillow to read and write JPEGs: pip install "
                        "pillow (on a machine without a registry, carry its wheel)") from None
    return Image


def scan_imagefolder(root: str | os.PathLike) -> tuple[list[str], np.ndarray, list[str]]:
    """List the images of an ImageFolder.

    Args:
        root: the folder holding one sub-folder per class.

    Returns:
        ``(paths, labels, classes)``: image paths (sorted by class, then file name), ``int64
        [N]`` labels, and the class names in label order.

    Raises:
        DataMissing: ``root`` is not an existing folder, is empty, or its class sub-folders
            hold no images (nothing there yet: make or copy the images and run again).
        DataError: ``root`` holds files but no class sub-folders (not an ImageFolder layout).
    """
    r = Path(root)
    if not r.is_dir():
        raise DataMissing(f"ImageFolder {r} is not an existing folder; give a folder with one "
                          f"sub-folder of images per class (make one with `dlperf data "
                          f"make-imagefolder {r}`)")
    try:
        entries = [d for d in r.iterdir() if not d.name.startswith(".")]
        classes = sorted(d.name for d in entries if d.is_dir())
    except OSError as e:
        raise DataError(f"cannot list ImageFolder {r}: {e.strerror or e}") from None
    if not classes:
        kind = DataMissing if not entries else DataError
        raise kind(f"ImageFolder {r} has no class sub-folders: expected {r}/<class>/"
                   f"<image>.jpg (make one with `dlperf data make-imagefolder {r}`)")
    paths: list[str] = []
    labels: list[int] = []
    for i, c in enumerate(classes):
        try:
            names = sorted(os.listdir(r / c))
        except OSError as e:
            raise DataError(f"cannot list class folder {r / c}: {e.strerror or e}") from None
        for f in names:
            if f.lower().endswith(EXTENSIONS):
                paths.append(str(r / c / f))
                labels.append(i)
    if not paths:
        raise DataMissing(f"ImageFolder {r} has {len(classes)} class folder(s) but no images "
                          f"({', '.join(EXTENSIONS)}) in them")
    return paths, np.asarray(labels, dtype=np.int64), classes


def listing_digest(paths: list[str]) -> str:
    """sha256 of the file names and sizes (a cheap identity of the data set; contents are not
    hashed: 100,000 JPEGs would take minutes).

    Raises:
        DataError: an image cannot be stat'ed (e.g. a broken symbolic link), naming it.
    """
    h = hashlib.sha256()
    for p in paths:
        try:
            size = os.path.getsize(p)
        except OSError as e:
            raise DataError(f"cannot read image {p}: {e.strerror or e}; remove or replace the "
                            f"file") from None
        h.update(f"{Path(p).parent.name}/{Path(p).name}:{size}\n".encode())
    return h.hexdigest()


#: Peak memory while one synthetic image is made and encoded, in bytes per pixel: the
#: up-sampled colour field as a Pillow image (4 bytes per RGB pixel) and as an array (3) and the
#: noisy result as an array (3) and as a Pillow image (4), not all alive at once; plus, whatever
#: the size, the float64 temporaries of one band of noise (:data:`_NOISE_BAND_BYTES`). Measured
#: (peak RSS of a fresh process, Pillow 11, numpy 2): 10.1 bytes per pixel at 6144 x 6144, 21.8
#: at 2048 x 2048 where the band's ~50 MB dominates; 14 leaves room. At the pixel limit (8192 x
#: 8192) that is under 1 GiB.
MAKE_BYTES_PER_PIXEL = 14

#: Share of the memory available now that making one image may take (a shared host keeps the
#: rest; ``psutil.virtual_memory().available``).
MAKE_MEMORY_SHARE = 0.5

#: Rows of noise drawn at a time are sized to about this many pixels (24 MiB of float64 noise).
_NOISE_BAND_PIXELS = 1 << 20
#: Bound on the band's temporaries: 3 channels x 8 bytes x 3 arrays (noise, sum, clipped).
_NOISE_BAND_BYTES = 72 * _NOISE_BAND_PIXELS

#: Side of the sample image whose JPEG size estimates the bytes per pixel of the data set.
_SAMPLE_SIDE = 256


def make_imagefolder(root: str | os.PathLike, images: int = 1000, classes: int = 10,
                     size: int = 256, quality: int = 90, seed: int = 0) -> dict[str, Any]:
    """Write a synthetic ImageFolder of ``images`` JPEGs of ``size x size`` pixels.

    Images are spread evenly over ``classes`` folders ``class_000`` ... (file
    ``img_000000.jpg`` ...); existing files of the same names are replaced (a new file renamed
    over the name, so a link there never writes into what it links to), so a partly
    written folder can be completed by running again. A folder that already holds files this
    call would not write, or images of another size, is refused: writing into it would mix
    two data sets. Each image is a bilinear up-sampling of a
    random 8 x 8 colour field plus Gaussian noise (sigma 12), clipped to 0..255 and saved as
    baseline JPEG with 4:2:0 chroma subsampling at ``quality`` (Pillow's default subsampling).

    Before anything is written the request is checked against what can be read and what
    fits: ``size x size`` at most :data:`MAX_IMAGE_PIXELS` (the readers' limit), one image's
    working memory (:data:`MAKE_BYTES_PER_PIXEL`) within :data:`MAKE_MEMORY_SHARE` of the
    memory available now, and the estimated bytes of all the JPEGs (a sample image encoded
    at ``quality``) within the free space of the folder's file system. A refused call, or one
    that fails part-way, leaves no empty folder it made behind.

    Returns:
        ``{"root", "images", "classes", "size", "quality", "bytes"}`` (bytes written).

    Raises:
        ConfigError: a count or size below 1, more images or classes than
            :data:`MAX_IMAGES` / :data:`MAX_CLASSES`, a seed outside 0 .. :data:`MAX_SEED`, more
            images than free inodes, ``classes > images``, quality outside 1..95,
            images larger than the readers' limit, more memory or disk than there is, or a
            folder that holds another data set (files of other names, images of another size).
        DataError: Pillow is missing.
    """
    for name, v in (("--images", images), ("--classes", classes), ("--size", size)):
        if v < 1:
            raise ConfigError(f"{name} must be >= 1, got {v}")
    for name, v, limit in (("--images", images, MAX_IMAGES), ("--classes", classes,
                                                              MAX_CLASSES)):
        if v > limit:
            raise ConfigError(f"{name} {v:,} is over dlperf's limit of {limit:,} "
                              f"{name[2:]} (dlperf.data.imagefolder; ImageNet-21k has 14 M "
                              "images in 21,841 classes)")
    if not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"--seed {seed}: give a seed from 0 to {MAX_SEED:,}")
    if classes > images:
        raise ConfigError(f"--classes {classes} is more than --images {images}; every class "
                          f"needs at least one image")
    if not 1 <= quality <= 95:
        raise ConfigError(f"--quality must be in 1..95 (Pillow's useful range), got {quality}")
    _check_pixels(size)
    Image = _pil()
    r = Path(root)
    _check_memory(size)
    existing_bytes = _refuse_other_data_set(r, images, classes, size)
    _check_disk(r, images, size, quality, existing_bytes)
    made = [p for p in (r, *r.parents) if not p.exists()]  # removed again if left empty
    rng = np.random.default_rng(seed)
    dirs = [r / f"class_{c:03d}" for c in range(classes)]
    total = 0
    try:
        for d in dirs:
            if not d.exists():
                made.insert(0, d)
            d.mkdir(parents=True, exist_ok=True)
        for i in range(images):
            path = dirs[i % classes] / f"img_{i:06d}.jpg"
            buf = io.BytesIO()
            _synthetic_image(Image, rng, size).save(buf, format="JPEG", quality=quality)
            # a new file renamed over the name: a link there is replaced, never written through
            atomic_write(path, buf.getvalue(), sync=False)
            total += path.stat().st_size
    except BaseException:
        for d in made:  # class folders first, then the root and parents this call made
            with contextlib.suppress(OSError):
                d.rmdir()  # only when empty: images already written stay (run again to finish)
        raise
    return {"root": str(r), "images": images, "classes": classes, "size": size,
            "quality": quality, "bytes": total}


def _synthetic_image(Image: Any, rng: np.random.Generator, size: int) -> Any:
    """One ``size x size`` synthetic image (:func:`make_imagefolder`); the noise is drawn in
    bands of rows, so no ``float64`` copy of the whole image is ever held (the values, and
    so the files, are those of one draw of the whole: the generator's stream is sequential)."""
    field = rng.integers(0, 256, size=(8, 8, 3), dtype=np.uint8)
    base = np.asarray(Image.fromarray(field).resize((size, size), Image.BILINEAR))
    out = np.empty_like(base)
    band = max(1, _NOISE_BAND_PIXELS // size)
    for r0 in range(0, size, band):
        r1 = min(size, r0 + band)
        a = base[r0:r1].astype(np.float32) + rng.normal(0.0, 12.0, (r1 - r0, size, 3))
        out[r0:r1] = np.clip(a, 0, 255).astype(np.uint8)
    del base
    return Image.fromarray(out)


def _check_pixels(size: int) -> None:
    """Images must be readable by :func:`open_image` (:data:`MAX_IMAGE_PIXELS`)."""
    if size * size > MAX_IMAGE_PIXELS:
        side = math.isqrt(MAX_IMAGE_PIXELS)
        raise ConfigError(
            f"--size {size} makes {size}x{size} = {size * size:,} pixels per image, more than "
            f"the {MAX_IMAGE_PIXELS:,} ({side}x{side}) that dlperf's ImageFolder reader "
            f"decodes (dlperf.data.imagefolder.MAX_IMAGE_PIXELS): such images could not be "
            f"used; give --size {side} or less (training crops are 224)")


def _check_memory(size: int) -> None:
    """One image's working memory must fit in :data:`MAKE_MEMORY_SHARE` of the memory
    available now."""
    import psutil

    need = size * size * MAKE_BYTES_PER_PIXEL + _NOISE_BAND_BYTES
    avail = psutil.virtual_memory().available
    if need > MAKE_MEMORY_SHARE * avail:
        raise ConfigError(
            f"--size {size}: making one {size}x{size} image needs about {need / 2**30:.1f} GiB "
            f"of memory, more than {MAKE_MEMORY_SHARE:.0%} of the {avail / 2**30:.1f} GiB "
            f"available now; give a smaller --size")


def _estimate_bytes(images: int, size: int, quality: int) -> int:
    """Estimated bytes of ``images`` JPEGs of ``size x size`` at ``quality``: a sample image
    (at most :data:`_SAMPLE_SIDE` on a side, made as the real ones are) encoded in memory,
    scaled by the pixel count (the noise, which sets the JPEG size, is the same per pixel)."""
    import io

    side = min(size, _SAMPLE_SIDE)
    buf = io.BytesIO()
    _synthetic_image(_pil(), np.random.default_rng(0), side).save(buf, format="JPEG",
                                                                  quality=quality)
    return math.ceil(images * buf.tell() * (size * size) / (side * side))


def _check_disk(root: Path, images: int, size: int, quality: int, existing_bytes: int) -> None:
    """The estimated JPEGs must fit in the free space of ``root``'s file system (plus the
    bytes of the files there that would be overwritten), with 10% to spare."""
    import shutil

    need = _estimate_bytes(images, size, quality)
    near = next((p for p in (root, *root.parents) if p.exists()), Path("."))
    if not near.is_dir():
        return  # a path under a file: mkdir names it
    free = shutil.disk_usage(near).free + existing_bytes
    try:  # a file and a folder each take an inode: 10^8 tiny images fit the bytes, not these
        inodes = os.statvfs(near).f_favail
    except (AttributeError, OSError):  # pragma: no cover - not POSIX
        inodes = 0
    if inodes and images > inodes:
        raise ConfigError(
            f"--images {images:,} would need {images:,} files, more than the {inodes:,} free "
            f"inodes (files) of the file system of {root}; give fewer --images, or a folder "
            "on another file system")
    if need * 1.1 > free:
        raise ConfigError(
            f"--images {images} of --size {size} at --quality {quality} would write about "
            f"{need / 2**30:,.2f} GiB of JPEGs (estimated from a sample), more than the "
            f"{free / 2**30:,.2f} GiB free for {root}; give fewer --images, a smaller --size, "
            f"or a folder on a larger disk")


_NAME = re.compile(r"class_(\d+)/img_(\d+)\.jpg")
#: The temporary file of an image being written (:func:`dlperf.outputs.atomic_write`), left
#: by a kill before its rename.
_TEMP = re.compile(r"class_\d+/\.img_\d+\.jpg\.[A-Za-z0-9_]+\.tmp")


def _refuse_other_data_set(root: Path, images: int, classes: int, size: int) -> int:
    """Raise ConfigError if ``root`` holds files :func:`make_imagefolder` with these counts
    would not write, or an image of it is not ``size x size`` (checked on one file); return
    the bytes of the files there (all of them about to be overwritten)."""
    if not root.is_dir():
        return 0

    def ours(rel: str) -> bool:
        m = _NAME.fullmatch(rel)
        if m is None:
            return False
        c, i = int(m.group(1)), int(m.group(2))
        return i < images and c == i % classes and rel == f"class_{c:03d}/img_{i:06d}.jpg"

    have = sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
    for h in [h for h in have if _TEMP.fullmatch(h)]:  # an image's temporary file of a kill
        (root / h).unlink(missing_ok=True)
        have.remove(h)
    extra = [h for h in have if not ours(h)]
    if extra:
        raise ConfigError(
            f"{root} already holds {len(extra)} file(s) that an ImageFolder of {images} images "
            f"in {classes} classes would not write (e.g. {', '.join(extra[:3])}); writing into "
            f"it would mix two data sets: give a new or empty folder (the same command again "
            f"completes a partly written folder)")
    hw = image_size(root / have[0]) if have else None
    if hw is not None:
        got = (hw[1], hw[0])
        if got != (size, size):
            raise ConfigError(
                f"{root} holds {got[0]}x{got[1]} images ({have[0]}), not {size}x{size}: "
                f"writing into it would mix two data sets: give a new or empty folder, or "
                f"--size {got[0]} to complete it")
    return sum((root / h).stat().st_size for h in have)


def random_resized_crop_box(height: int, width: int, rng: np.random.Generator,
                            scale: tuple[float, float] = CROP_SCALE,
                            ratio: tuple[float, float] = CROP_RATIO) -> tuple[int, int, int, int]:
    """The crop ``(top, left, h, w)`` of torchvision's ``RandomResizedCrop.get_params``.

    Ten tries to draw an area fraction uniform in ``scale`` and a log-uniform aspect ratio in
    ``ratio`` whose box fits the image; otherwise a central crop at the nearest allowed ratio
    (the same algorithm and fallback as torchvision 0.2x, Szegedy et al. 2015's "Inception"
    augmentation).
    """
    area = height * width
    log_ratio = (math.log(ratio[0]), math.log(ratio[1]))
    for _ in range(10):
        target_area = area * rng.uniform(scale[0], scale[1])
        aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
        w = int(round(math.sqrt(target_area * aspect)))
        h = int(round(math.sqrt(target_area / aspect)))
        if 0 < w <= width and 0 < h <= height:
            top = int(rng.integers(0, height - h + 1))
            left = int(rng.integers(0, width - w + 1))
            return top, left, h, w
    in_ratio = width / height
    if in_ratio < min(ratio):
        w, h = width, int(round(width / min(ratio)))
    elif in_ratio > max(ratio):
        h, w = height, int(round(height * max(ratio)))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def open_image(path: str | os.PathLike, *, max_pixels: int = MAX_IMAGE_PIXELS,
               max_bytes: int = MAX_IMAGE_FILE_BYTES) -> Any:
    """Decode the JPEG or PNG file ``path`` into an RGB Pillow image (fully loaded).

    The checks come before any pixel is decoded: ``path`` must be a regular file (a FIFO
    would block), non-empty and at most ``max_bytes``; its format must be one of
    :data:`IMAGE_FORMATS` (whatever its name); the size its header declares must be at most
    ``max_pixels`` (:data:`MAX_IMAGE_PIXELS`), so a decompression bomb (a small file declaring
    a huge image) is refused from its header.

    Returns:
        A ``PIL.Image.Image`` in mode ``"RGB"``.

    Raises:
        DataError: any of the above, or the file cannot be decoded (truncated, corrupt, not an
            image): the message names the file and what is wrong.
    """
    Image = _pil()
    with open_regular(path, "image") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:
            raise DataError(f"image {path} is empty (0 bytes); remove or replace the file")
        check_size(path, size, max_bytes, "image", "dlperf.data.imagefolder.MAX_IMAGE_FILE_BYTES")
        try:
            with Image.open(fh, formats=IMAGE_FORMATS) as im:
                w, h = im.size
                if w * h > max_pixels:
                    raise DataError(
                        f"image {path} is {w}x{h} = {w * h:,} pixels, more than the "
                        f"{max_pixels:,}-pixel limit (dlperf.data.imagefolder.MAX_IMAGE_PIXELS; "
                        f"decoding it would take {3 * w * h / 2**20:,.0f} MiB): a decompression "
                        f"bomb or an image far larger than training uses; downscale it or "
                        f"remove it")
                return im.convert("RGB")
        except (DataError, MemoryError):
            raise
        except Image.DecompressionBombError as e:
            raise DataError(f"image {path} is refused as a decompression bomb ({e}); remove "
                            f"or replace the file") from None
        except Exception as e:  # noqa: BLE001 - Pillow's plugins raise OSError, ValueError,
            # SyntaxError, struct.error, EOFError, IndexError ... on malformed input: all the file's
            what = (f"no {' or '.join(IMAGE_FORMATS)} decoder accepts its header: another "
                    f"format, or a corrupt file" if isinstance(e, Image.UnidentifiedImageError)
                    else f"{type(e).__name__}: {e}")
            raise DataError(f"cannot decode image {path} ({what}); remove or replace the "
                            f"file") from None


def image_size(path: str | os.PathLike) -> tuple[int, int] | None:
    """``(height, width)`` from the image's header (nothing decoded), or None if it cannot be
    read as a JPEG or PNG file."""
    Image = _pil()
    try:
        with open_regular(path, "image") as fh, Image.open(fh, formats=IMAGE_FORMATS) as im:
            return im.height, im.width
    except (DataError, MemoryError):
        return None
    except Exception:  # noqa: BLE001 - reported when the pipeline decodes it
        return None


def load_train_image(path: str, out_size: int, rng: np.random.Generator) -> np.ndarray:
    """Decode a JPEG/PNG (:func:`open_image`) and apply RandomResizedCrop(out_size) +
    RandomHorizontalFlip with Pillow.

    Returns:
        ``uint8 [out_size, out_size, 3]`` (H, W, C; RGB).

    Raises:
        DataError: the file is refused or cannot be decoded (the message names it).
    """
    Image = _pil()
    im = open_image(path)
    top, left, h, w = random_resized_crop_box(im.height, im.width, rng)
    im = im.resize((out_size, out_size), Image.BILINEAR, box=(left, top, left + w, top + h))
    if rng.random() < 0.5:
        im = im.transpose(Image.FLIP_LEFT_RIGHT)
    return np.asarray(im, dtype=np.uint8)


def load_eval_image(path: str, out_size: int) -> np.ndarray:
    """Decode a JPEG/PNG (:func:`open_image`) and resize it deterministically (shorter side to
    ``out_size / 0.875``, centre crop ``out_size``: the PyTorch ImageNet example's validation
    transform). ``uint8 [S, S, 3]``.

    Raises:
        DataError: the file is refused or cannot be decoded.
    """
    Image = _pil()
    im = open_image(path)
    short = int(round(out_size / 0.875))
    s = short / min(im.width, im.height)
    im = im.resize((max(out_size, round(im.width * s)), max(out_size, round(im.height * s))),
                   Image.BILINEAR)
    left, top = (im.width - out_size) // 2, (im.height - out_size) // 2
    return np.asarray(im.crop((left, top, left + out_size, top + out_size)), dtype=np.uint8)


def normalize_hwc(batch_u8: np.ndarray) -> np.ndarray:
    """``uint8 [..., H, W, 3]`` -> ``float32`` ``(x / 255 - mean) / std`` (ImageNet constants)."""
    mean = np.asarray(IMAGENET_MEAN, dtype=np.float32)
    std = np.asarray(IMAGENET_STD, dtype=np.float32)
    x = batch_u8.astype(np.float32)
    x *= np.float32(1 / 255)
    x -= mean
    x /= std
    return x

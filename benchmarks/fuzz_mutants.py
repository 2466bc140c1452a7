"""Mutated input files for ``benchmarks/fuzz_inputs.py``: seeds, mutations and expectations.

Seeds are the real files under the shared data folder (MNIST t10k, PTB and WikiText-2 valid;
found as the tests find them: ``$DLPERF_DATA`` or ``../shared/data``), CIFAR-10 binary records
and ImageFolder JPEG/PNG files made from real MNIST digits (no CIFAR-10 or ImageNet file is
there), and the project's own sweep files (``benchmarks/**/*.yaml``).

Every case says what a correct reader must do with it (``Case.expect``):

* ``"refuse"``: the mutant breaks a rule of its format that a reader can check (decided by an
  oracle written here from the format's specification, independently of dlperf's readers, or
  by construction: a decompression bomb, a file over a documented limit, a duplicate YAML key);
* ``"accept"``: the mutant is a valid file (an unmodified seed, the same data re-encoded);
* ``"any"``: a change no format rule can see (a flipped pixel, a truncated text line); taking
  it and refusing it are both correct.

Format rules the oracles check (sources in the docstrings of the readers in ``dlperf.data``):
MNIST IDX (LeCun et al.): images magic 0x00000803 with dimensions ``[N, 28, 28]``, labels
0x00000801 ``[N]``, value bytes exactly the product of the dimensions, labels 0..9, ``N >= 1``,
gzip streams that decompress without error; CIFAR-10 binary (Krizhevsky 2009): a non-empty
multiple of 3073 bytes, every label byte 0..9; token files: UTF-8 text with at least one word
and no NUL byte (a NUL marks a binary file: git's and GNU grep's binary-file test).
"""

from __future__ import annotations

import gzip
import io
import os
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]


def shared_data() -> Path:
    """The real data sets: ``$DLPERF_DATA`` if set, else ``../shared/data`` (tests/conftest.py)."""
    env = os.environ.get("DLPERF_DATA")
    return Path(env) if env else REPO.parent / "shared" / "data"


@dataclass
class Case:
    """One mutant. ``write(folder) -> path`` writes its files under ``folder`` and returns what
    is given to the reader; ``names`` are file names a clear error message may name."""

    kind: str
    mutation: str
    expect: str
    write: Callable[[Path], Path]
    names: tuple[str, ...] = ()
    heavy: bool = False  # slow to write or read (bombs, big files): left out of --small runs
    detail: str = ""
    extra: dict = field(default_factory=dict)


# --- byte-level mutations -------------------------------------------------------------------

def flip(data: bytes, rng: np.random.Generator, k: int, lo: int = 0, hi: int | None = None
         ) -> bytes:
    """``data`` with ``k`` bytes in ``[lo, hi)`` XORed with a random non-zero byte."""
    b = bytearray(data)
    hi = len(b) if hi is None else hi
    for i in rng.integers(lo, hi, k):
        b[i] ^= int(rng.integers(1, 256))
    return bytes(b)


def gz(data: bytes) -> bytes:
    """gzip with a fixed mtime (reproducible bytes)."""
    return gzip.compress(data, 6, mtime=0)


def gzip_bomb(prefix: bytes, extra_zero_bytes: int) -> bytes:
    """A gzip stream of ``prefix`` followed by ``extra_zero_bytes`` zeros, built from one
    compressed 1 MiB block repeated (a full flush makes each block independent), so a 3 GiB
    bomb takes milliseconds to write. The trailer's CRC covers the prefix only: a reader that
    gets that far has already decompressed everything."""
    c = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = c.compress(prefix) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(b"\0" * (1 << 20)) + c.flush(zlib.Z_FULL_FLUSH)
    tail = c.flush()
    return head + block * (extra_zero_bytes >> 20) + tail


# --- MNIST ----------------------------------------------------------------------------------

IMG_NAME, LBL_NAME = "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"


def idx_header(magic: int, dims: tuple[int, ...]) -> bytes:
    return magic.to_bytes(4, "big") + b"".join(int(d).to_bytes(4, "big") for d in dims)


def idx_fields(b: bytes) -> tuple[int, tuple[int, ...], int] | None:
    """(type code, dims, value bytes present) of IDX bytes, or None if the header is broken."""
    if len(b) < 4 or b[:2] != b"\0\0":
        return None
    nd = b[3]
    hdr = 4 + 4 * nd
    if len(b) < hdr:
        return None
    dims = tuple(int.from_bytes(b[4 + 4 * i:8 + 4 * i], "big") for i in range(nd))
    return b[2], dims, len(b) - hdr


def mnist_defects(img: bytes | None, lbl: bytes | None) -> list[str]:
    """The oracle: the MNIST rules ``img``/``lbl`` (decompressed; None = corrupt gzip) break."""
    out = []
    fi = idx_fields(img) if img is not None else None
    fl = idx_fields(lbl) if lbl is not None else None
    if fi is None or fi[0] != 0x08 or len(fi[1]) != 3 or fi[1][1:] != (28, 28) \
            or fi[2] != int(np.prod(fi[1], dtype=object)) or fi[1][0] < 1:
        out.append("images")
    if fl is None or fl[0] != 0x08 or len(fl[1]) != 1 or fl[2] != fl[1][0] or fl[1][0] < 1:
        out.append("labels")
    if not out:
        if fi[1][0] != fl[1][0]:
            out.append("count")
        elif max(lbl[8:]) > 9:
            out.append("label range")
    return out


def _try_gunzip(b: bytes) -> bytes | None:
    try:
        return gzip.decompress(b)
    except (OSError, EOFError, zlib.error):
        return None


def mnist_cases(rng: np.random.Generator) -> list[Case]:
    m = shared_data() / "mnist"
    real_img_gz = (m / f"{IMG_NAME}.gz").read_bytes()
    real_lbl_gz = (m / f"{LBL_NAME}.gz").read_bytes()
    real_img, real_lbl = gzip.decompress(real_img_gz), gzip.decompress(real_lbl_gz)
    n = 64
    img = idx_header(0x803, (n, 28, 28)) + real_img[16:16 + n * 784]
    lbl = idx_header(0x801, (n,)) + real_lbl[8:8 + n]
    cases: list[Case] = []

    def add(mut: str, i: bytes, l: bytes, *, gzipped: bool = False, expect: str | None = None,  # noqa: E741 - images, labels
            heavy: bool = False, raw_gz: bool = False) -> None:
        """``i``/``l`` are the decompressed contents unless ``raw_gz`` (then the file bytes)."""
        if expect is None:
            di, dl = ((_try_gunzip(i), _try_gunzip(l)) if raw_gz else (i, l))
            expect = "refuse" if mnist_defects(di, dl) else "any"
        fi, fl = ((i, l) if raw_gz or not gzipped else (gz(i), gz(l)))
        sfx = ".gz" if gzipped or raw_gz else ""

        def write(d: Path, fi=fi, fl=fl, sfx=sfx) -> Path:
            f = d / "mnist"
            f.mkdir(parents=True)
            (f / f"{IMG_NAME}{sfx}").write_bytes(fi)
            (f / f"{LBL_NAME}{sfx}").write_bytes(fl)
            return f
        cases.append(Case("mnist", mut, expect, write, (IMG_NAME, LBL_NAME), heavy))

    add("seed", img, lbl, expect="accept")
    add("seed_gz", img, lbl, gzipped=True, expect="accept")
    add("real_t10k_gz", real_img_gz, real_lbl_gz, raw_gz=True, expect="accept", heavy=True)
    add("empty_images", b"", lbl, expect="refuse")
    add("empty_labels", img, b"", expect="refuse")
    add("empty_gz", gz(b""), gz(lbl), raw_gz=True, expect="refuse")
    add("swapped", lbl, img, expect="refuse")
    add("zero_images", idx_header(0x803, (0, 28, 28)), idx_header(0x801, (0,)), expect="refuse")
    add("dims_overflow", idx_header(0x803, (2**32 - 1,) * 3) + img[16:], lbl, expect="refuse")
    add("dims_overflow_gz", idx_header(0x803, (2**32 - 1,) * 3) + img[16:], lbl, gzipped=True,
        expect="refuse")
    add("ndim_255", b"\0\0\x08\xff" + b"\xff" * 1020 + img[16:], lbl, expect="refuse")
    add("ndim_0", b"\0\0\x08\x00" + img[16:], lbl, expect="refuse")
    add("dims_huge_fits_int64", idx_header(0x803, (2**31, 2**16, 28)) + img[16:], lbl,
        expect="refuse")
    add("not_28x28_14x56", idx_header(0x803, (n, 14, 56)) + img[16:], lbl, expect="refuse")
    add("not_28x28_784x1", idx_header(0x803, (n, 784, 1)) + img[16:], lbl, expect="refuse")
    add("not_28x28_gz", idx_header(0x803, (n, 56, 14)) + img[16:], lbl, gzipped=True,
        expect="refuse")
    add("4d_images", idx_header(0x804, (n, 1, 28, 28)) + img[16:], lbl, expect="refuse")
    add("int8_images", b"\0\0\x09\x03" + img[4:], lbl, expect="refuse")
    add("float_images", b"\0\0\x0d\x03" + img[4:], lbl, expect="refuse")
    add("count_plus_one", idx_header(0x803, (n + 1, 28, 28)) + img[16:], lbl, expect="refuse")
    add("labels_count_mismatch", img, idx_header(0x801, (n - 1,)) + lbl[8:-1], expect="refuse")
    add("label_out_of_range", img, lbl[:20] + bytes([200]) + lbl[21:], expect="refuse")
    add("trailing_byte", img + b"\0", lbl, expect="refuse")
    add("trailing_gz_member", gz(img) + gz(b"\x07" * 100), gz(lbl), raw_gz=True,
        expect="refuse")
    add("gzip_bomb_3GiB", gzip_bomb(img, 3 << 30), gz(lbl), raw_gz=True, expect="refuse",
        heavy=True)
    add("gzip_header_lies_800MB", gz(idx_header(0x803, (1 << 20, 28, 28)) + img[16:]),
        gz(idx_header(0x801, (1 << 20,)) + lbl[8:]), raw_gz=True, expect="refuse")
    add("dims_over_limit", idx_header(0x803, (1 << 30, 28, 28)) + img[16:],
        idx_header(0x801, (1 << 30,)) + lbl[8:], expect="refuse")
    add("gzip_header_lies_1GiB", gz(idx_header(0x803, (1 << 20, 32, 32)) + img[16:]), gz(lbl),
        raw_gz=True, expect="refuse")
    for k in range(10):
        add(f"truncated_{k}", img[:int(rng.integers(0, len(img)))], lbl)
        add(f"truncated_gz_{k}", gz(img)[:int(rng.integers(0, len(gz(img))))], gz(lbl),
            raw_gz=True)
    for k in range(8):
        add(f"flip_header_{k}", flip(img, rng, 1, 0, 16), lbl)
        add(f"flip_pixels_{k}", flip(img, rng, 1 + k, 16), lbl)
        add(f"flip_labels_file_{k}", img, flip(lbl, rng, 1 + k % 3))
        add(f"flip_gz_{k}", flip(gz(img), rng, 1 + k % 2, 10), gz(lbl), raw_gz=True)
    add("random_bytes", bytes(rng.integers(0, 256, len(img), dtype=np.uint8)), lbl)

    def fifo(d: Path) -> Path:
        f = d / "mnist"
        f.mkdir(parents=True)
        os.mkfifo(f / IMG_NAME)
        (f / LBL_NAME).write_bytes(lbl)
        return f / IMG_NAME
    cases.append(Case("mnist", "fifo_images", "refuse", fifo, (IMG_NAME,)))
    return cases


# --- CIFAR-10 -------------------------------------------------------------------------------

CIFAR_REC = 3073


def cifar_seed(n: int) -> bytes:
    """``n`` CIFAR-10 records made of real MNIST digits (padded to 32x32; R = the digit,
    G = its negative, B = its transpose) and their labels."""
    m = shared_data() / "mnist"
    x = np.frombuffer(gzip.decompress((m / f"{IMG_NAME}.gz").read_bytes()), np.uint8,
                      n * 784, 16).reshape(n, 28, 28)
    y = np.frombuffer(gzip.decompress((m / f"{LBL_NAME}.gz").read_bytes()), np.uint8, n, 8)
    p = np.pad(x, ((0, 0), (2, 2), (2, 2)))
    rgb = np.stack([p, 255 - p, p.transpose(0, 2, 1)], axis=1).reshape(n, -1)
    return np.concatenate([y[:, None], rgb], axis=1).astype(np.uint8).tobytes()


def cifar_defects(b: bytes) -> list[str]:
    """The oracle: CIFAR-10 binary rules ``b`` breaks."""
    if not b or len(b) % CIFAR_REC:
        return ["size"]
    if max(b[::CIFAR_REC]) > 9:
        return ["label"]
    return []


def cifar_cases(rng: np.random.Generator) -> list[Case]:
    seed = cifar_seed(40)
    cases: list[Case] = []

    def add(mut: str, data: bytes, expect: str | None = None, name: str = "data_batch_1.bin",
            heavy: bool = False) -> None:
        expect = expect or ("refuse" if cifar_defects(data) else "any")

        def write(d: Path, data=data) -> Path:
            f = d / "cifar10" / name
            f.parent.mkdir(parents=True)
            f.write_bytes(data)
            return f
        cases.append(Case("cifar10", mut, expect, write, (name,), heavy))

    add("seed", seed, "accept")
    add("seed_test_batch", seed, "accept", name="test_batch.bin")
    add("empty", b"", "refuse")
    add("one_byte", b"\x01")
    add("cifar100_layout", b"".join(bytes([3]) + seed[i:i + CIFAR_REC]
                                    for i in range(0, len(seed), CIFAR_REC)))
    add("gzipped", gz(seed), "refuse")
    add("mnist_idx_renamed", gzip.decompress(
        (shared_data() / "mnist" / f"{LBL_NAME}.gz").read_bytes()))
    for k in range(8):
        add(f"truncated_{k}", seed[:int(rng.integers(0, len(seed)))])
        add(f"appended_{k}", seed + bytes(rng.integers(0, 256, int(rng.integers(1, 4000)),
                                                       dtype=np.uint8)))
        add(f"flip_pixels_{k}", flip(seed, rng, 1 + k, 1, CIFAR_REC))
        lab = bytearray(seed)
        lab[CIFAR_REC * int(rng.integers(0, 40))] = int(rng.integers(0, 256))
        add(f"label_byte_{k}", bytes(lab))
    for k in range(4):
        add(f"random_records_{k}", bytes(rng.integers(0, 256, CIFAR_REC * (k + 1),
                                                      dtype=np.uint8)))
    add("zeros_one_record", b"\0" * CIFAR_REC)

    def sparse(d: Path) -> Path:
        f = d / "cifar10" / "data_batch_1.bin"
        f.parent.mkdir(parents=True)
        with open(f, "wb") as fh:
            fh.truncate(CIFAR_REC * 700_000)  # 2.15 GB, over the 1 GiB limit, no disk blocks
        return f
    cases.append(Case("cifar10", "sparse_2GB", "refuse", sparse, ("data_batch_1.bin",),
                      heavy=True))
    return cases


# --- token files ----------------------------------------------------------------------------

def token_defects(b: bytes) -> list[str]:
    """The oracle: token-file rules ``b`` breaks (UTF-8, a word, no NUL)."""
    try:
        t = b.decode("utf-8")
    except UnicodeDecodeError:
        return ["utf-8"]
    if "\0" in t:
        return ["nul"]
    if not t.split():
        return ["no words"]
    return []


def token_cases(rng: np.random.Generator) -> list[Case]:
    d = shared_data()
    seeds = {"ptb.valid.txt": (d / "ptb" / "ptb.valid.txt").read_bytes(),
             "wiki.valid.tokens": (d / "wikitext-2" / "wiki.valid.tokens").read_bytes()}
    cases: list[Case] = []

    def add(mut: str, name: str, data: bytes, expect: str | None = None) -> None:
        expect = expect or ("refuse" if token_defects(data) else "any")

        def write(dd: Path, data=data) -> Path:
            f = dd / "tok" / name
            f.parent.mkdir(parents=True)
            f.write_bytes(data)
            return f
        cases.append(Case("tokens", mut, expect, write, (name,)))

    for name, full in seeds.items():
        lines = full.split(b"\n")
        s = b"\n".join(lines[:300]) + b"\n"
        add("seed", name, s, "accept")
        add("crlf", name, s.replace(b"\n", b"\r\n"), "accept")
        add("empty", name, b"", "refuse")
        add("blank_lines", name, b" \n\t\n \n", "refuse")
        add("latin1", name, s.decode("utf-8").encode("latin-1", "replace") + b"caf\xe9\n")
        add("utf16", name, s.decode("utf-8").encode("utf-16"), "refuse")
        add("gzipped", name, gz(s), "refuse")
        add("nul_byte", name, s[:500] + b"\0" + s[500:], "refuse")
        add("mnist_idx_renamed", name, gzip.decompress(
            (d / "mnist" / f"{IMG_NAME}.gz").read_bytes())[:20000], "refuse")
        add("surrogate", name, s[:300] + b"\xed\xa0\x80" + s[300:], "refuse")
        add("overlong", name, s[:300] + b"\xc0\xaf" + s[300:], "refuse")
        add("one_long_line", name, s.replace(b"\n", b" "))
        for k in range(6):
            add(f"truncated_{k}", name, s[:int(rng.integers(0, len(s)))])
            add(f"flip_{k}", name, flip(s, rng, 1 + k))
        add("inserted_high_bytes", name, s[:100] + bytes(rng.integers(128, 256, 8,
                                                                      dtype=np.uint8)) + s[100:])
    add("real_wiki_valid", "wiki.valid.tokens", seeds["wiki.valid.tokens"], "accept")
    return cases


# --- ImageFolder ----------------------------------------------------------------------------

def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_gray(width: int, height: int, rows_per_block: int = 256) -> bytes:
    """A valid 8-bit greyscale PNG of zeros of any size (a decompression bomb when large): the
    IDAT stream is one compressed block of ``rows_per_block`` rows repeated (full flush)."""
    c = zlib.compressobj(9)
    row_block = b"\0" * ((width + 1) * rows_per_block)
    block = c.compress(row_block) + c.flush(zlib.Z_FULL_FLUSH)
    full, rest = divmod(height, rows_per_block)
    idat = block * full + c.compress(b"\0" * ((width + 1) * rest)) + c.flush()
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat)
            + _png_chunk(b"IEND", b""))


def png_with_size(png: bytes, width: int, height: int) -> bytes:
    """``png`` with its IHDR width/height replaced (CRC recomputed)."""
    ihdr = struct.pack(">II", width, height) + png[24:29]
    return png[:16] + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr)) + png[33:]


def jpeg_with_size(jpg: bytes, width: int, height: int) -> bytes:
    """``jpg`` with its baseline SOF0 frame header's height and width replaced."""
    i = jpg.index(b"\xff\xc0")
    return jpg[:i + 5] + struct.pack(">HH", height, width) + jpg[i + 9:]


def image_seeds() -> dict[str, bytes]:
    """JPEG and PNG seeds made of real MNIST digits, 64 x 64, in several modes."""
    from PIL import Image

    m = shared_data() / "mnist"
    x = np.frombuffer(gzip.decompress((m / f"{IMG_NAME}.gz").read_bytes()), np.uint8,
                      4 * 784, 16).reshape(4, 28, 28)
    out = {}
    for i, a in enumerate(x):
        g = Image.fromarray(a).resize((64, 64), Image.BILINEAR)
        rgb = Image.merge("RGB", (g, g.transpose(Image.FLIP_LEFT_RIGHT), g.rotate(90)))
        for fmt, mode, img in (("JPEG", "RGB", rgb), ("PNG", "RGB", rgb), ("JPEG", "L", g),
                               ("PNG", "RGBA", rgb.convert("RGBA")), ("JPEG", "CMYK", rgb)):
            b = io.BytesIO()
            (img if img.mode == mode else img.convert(mode)).save(b, fmt)
            out[f"{fmt.lower()}_{mode}_{i}"] = b.getvalue()
    return out


def image_cases(rng: np.random.Generator) -> list[Case]:
    from PIL import Image

    seeds = image_seeds()
    jpg, png = seeds["jpeg_RGB_0"], seeds["png_RGB_0"]
    cases: list[Case] = []

    def add(mut: str, data: bytes | Callable[[], bytes], expect: str, ext: str = ".jpg",
            heavy: bool = False) -> None:
        name = f"img{ext}"

        def write(d: Path, data=data) -> Path:
            root = d / "if"
            (root / "a").mkdir(parents=True)
            (root / "b").mkdir()
            (root / "a" / name).write_bytes(data() if callable(data) else data)
            (root / "b" / "ok.jpg").write_bytes(jpg)
            return root
        cases.append(Case("imagefolder", mut, expect, write, (name,), heavy))

    for k, v in seeds.items():
        if k.endswith(("_0", "_1")):
            add(f"seed_{k}", v, "accept", ".png" if k.startswith("png") else ".jpg")
    add("png_16bit", _png16(), "accept", ".png")
    add("empty", b"", "refuse")
    add("text_as_jpg", b"not an image\n" * 10, "refuse")
    add("gif_as_jpg", _gif(), "refuse")
    for k in range(8):
        add(f"truncated_jpg_{k}", jpg[:int(rng.integers(0, len(jpg) - 1))], "refuse")
        add(f"flip_scan_{k}", flip(jpg, rng, 1 + k % 3, len(jpg) // 2, len(jpg) - 2), "any")
    for k in range(4):
        add(f"truncated_png_{k}", png[:int(rng.integers(0, len(png) - 12))], "refuse", ".png")
    add("jpeg_claims_144MP", jpeg_with_size(jpg, 12000, 12000), "refuse")
    add("jpeg_claims_4GP", jpeg_with_size(jpg, 65535, 65535), "refuse")
    add("jpeg_zero_height", jpeg_with_size(jpg, 64, 0), "refuse")
    add("png_claims_900MP", png_with_size(png, 30000, 30000), "refuse", ".png")
    add("png_ihdr_crc", png[:20] + bytes([png[20] ^ 1]) + png[21:], "refuse", ".png")
    add("png_bomb_400MP", lambda: png_gray(20000, 20000), "refuse", ".png", heavy=True)
    add("png_100MP", lambda: png_gray(10000, 10000), "refuse", ".png", heavy=True)
    add("jpeg_81MP_real", lambda: _big_jpeg(9000, 9000), "refuse", heavy=True)

    def special(kind: str) -> Callable[[Path], Path]:
        def write(d: Path) -> Path:
            root = d / "if"
            (root / "a").mkdir(parents=True)
            (root / "b").mkdir()
            (root / "b" / "ok.jpg").write_bytes(jpg)
            p = root / "a" / "img.jpg"
            if kind == "dir":
                p.mkdir()
            elif kind == "fifo":
                os.mkfifo(p)
            else:
                p.symlink_to(root / "nowhere.jpg")
            return root
        return write
    for kind in ("dir", "fifo", "broken_symlink"):
        cases.append(Case("imagefolder", f"{kind}_named_jpg", "refuse", special(kind),
                          ("img.jpg",)))
    _ = Image  # Pillow is needed by the seeds and by the readers
    return cases


def _png16() -> bytes:
    from PIL import Image

    b = io.BytesIO()
    Image.fromarray((np.arange(64 * 64).reshape(64, 64) * 16).astype(np.uint16)).save(b, "PNG")
    return b.getvalue()


def _gif() -> bytes:
    from PIL import Image

    b = io.BytesIO()
    Image.new("P", (32, 32), 3).save(b, "GIF")
    return b.getvalue()


def _big_jpeg(w: int, h: int) -> bytes:
    from PIL import Image

    im = Image.new("RGB", (w, h), (90, 120, 200))
    b = io.BytesIO()
    im.save(b, "JPEG", quality=50)
    return b.getvalue()

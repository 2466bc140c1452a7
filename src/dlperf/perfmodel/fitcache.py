"""What the performance model computed, stored and keyed by what it was computed from.

One key covers both stores: the source of the modules of :mod:`dlperf.perfmodel` that compute
a prediction (:func:`model_key`: the modules a prediction imports, not the back-test's)
and the content of the results files (:func:`data_digest`). Any change to either makes a new key,
and nothing computed from other inputs is read back.

* The **residual table** (:func:`table_file`, ``perfmodel_residuals.json``) lies beside the data
  it was made from, in the folder that holds every results file of the prediction: the
  held-out back-test residuals ``log(measured / predicted)`` per prediction path (back-test
  category) and bound that prediction intervals come from. ``dlperf predict --validate`` writes
  it; ``dlperf predict`` only reads it, and never runs a back-test: without a table of the
  current key a prediction has no interval and says how to make one. Points are named
  relative to the table's folder, so a committed table holds on every clone.
* The **group fits** (:func:`fits_file`, under ``$DLPERF_CACHE_DIR``, default
  ``~/.cache/dlperf``): the roofline fits of :func:`~dlperf.perfmodel.onedevice.fit_group`
  (0.3-0.6 s each on a 2-core VM, two to four per prediction), read back by a later process.
  Their key also holds each file's resolved path and its path as given (a fit names its points
  by the path it was given, so a fit made from ``/abs/h200/x.db`` is not read back for
  ``h200/x.db``: a cached fit names its points as a fresh one would).

Every file is written atomically (:func:`dlperf.outputs.atomic_write`: a temporary file of an
unpredictable name in the same folder, created exclusively, then ``os.replace``, which replaces
a planted symbolic link instead of following it) and validated on read: a damaged or foreign
file, or an entry of the wrong shape or types (a number that is not finite, or out of its range,
where the model uses it; a bool that is not a JSON bool) is no entry, never misread. The group
fits, a cache of this user's, go through :mod:`dlperf.jsoncache` (owner-only, with a digest;
a file of another user or changed after it was written is not read). A folder that cannot be
written means no store and one warning naming it, not an error.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any, Literal, cast

from pydantic import AfterValidator, Field, Strict, TypeAdapter, ValidationError
from pydantic.dataclasses import dataclass as pydantic_dataclass

from dlperf.jsoncache import read_json, write_json
from dlperf.outputs import write_if_changed
from dlperf.perfmodel import roofline as rl
from dlperf.perfmodel.intervals import KeyedResidual
from dlperf.perfmodel.lsq import Solution
from dlperf.perfmodel.memo import once
from dlperf.perfmodel.records import Records, as_mapping, cache_root, content_digest

#: ``(group, without_model, device_name, kernels)``: the key of ``Calibration._eff``.
EffKey = tuple[tuple[str, str, str, str], "str | None", "str | None", bool]

#: The module a prediction starts from: :func:`model_key` hashes it and every module of
#: :mod:`dlperf.perfmodel` it imports, directly or not.
PREDICTION_ENTRY = "api"
#: The residual table's file name (:func:`table_file`).
TABLE_NAME = "perfmodel_residuals.json"
#: The residual table's format; part of its key.
TABLE_FORMAT = 1
#: A stored fit's series hosts are lists of these :class:`~dlperf.perfmodel.roofline.SeriesHost`
#: fields, in this order (:func:`_fits_json`).
HOST_FIELDS = ("model", "data", "layout", "host_s", "host_bound", "n_batch_sizes", "measured")
#: Largest magnitude of a stored solution's component (the series fit's logs of seconds,
#: clipped to [-60, 10] where used; DDP's overheads in [0, 5]); a larger one is a damaged entry
#: and is solved again.
MAX_ABS_SOLUTION = 1e3
#: The most parameters a stored solution has (the series fit 3, DDP's overhead 2).
MAX_SOLUTION_SIZE = 8
#: Largest ``|log(measured / predicted)|`` a stored residual may have (a factor of e^10, 22,000):
#: a larger one is no back-test error but a damaged or planted entry (e.g. 1e308), refused.
MAX_ABS_LOG_RESIDUAL = 10.0

# The stored forms, each field of its own JSON type (strict: a bool is no number, a string no
# bool) and range, checked in one parse when a store is read (pydantic raises ValidationError,
# a ValueError): a stored fit's efficiencies, seconds and log-widths are all far below 1e6, so
# a larger number is a damaged entry.
_Str = Annotated[str, Strict()]
_Bool = Annotated[bool, Strict()]
#: A number the model divides by: finite, > 0 and <= 1e6.
_Positive = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0, le=1e6)]
#: A finite number >= 0 and <= 1e6.
_NonNegative = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0, le=1e6)]
_Group = tuple[_Str, _Str, _Str, _Str]
#: A series host: :data:`HOST_FIELDS`.
_Host = tuple[_Str, _Str, _Str, _Positive, _Bool, Annotated[int, Field(strict=True, ge=1)],
              _Bool]


def _alone(run: tuple[str, int | str, int]) -> tuple[str, int | str, int]:
    """A stored run whose first id is not a number is that one id alone (:func:`_runs`)."""
    if isinstance(run[1], str) and run[2] != 1:
        raise ValueError(f"an id that is not a number stands alone: {run!r}")
    return run


def _run_ids(run: tuple[str, int | str, int]) -> tuple[str, ...]:
    """The ``path:id`` strings of a stored run ``[path, first id, count]``: ``count``
    consecutive ids of one file."""
    path, first, count = run
    if isinstance(first, str):
        return (f"{path}:{first}",)
    return tuple(f"{path}:{i}" for i in range(first, first + count))


_Run = Annotated[tuple[_Str, Annotated[int, Strict()] | _Str,
                       Annotated[int, Field(strict=True, gt=0, lt=10**6)]],
                 AfterValidator(_alone)]


@pydantic_dataclass(frozen=True)
class _Fit:
    """A stored :class:`~dlperf.perfmodel.roofline.Efficiency` (:func:`_fits_json`)."""

    group: _Group
    e_flops: _Positive
    e_bytes: _Positive
    models: tuple[_Str, ...]
    result_ids: list[_Run]
    rms_log: _NonNegative
    hosts: list[_Host]
    kernel_s: _NonNegative
    kernel_models: tuple[_Str, ...]

    def efficiency(self) -> rl.Efficiency:
        return rl.Efficiency(self.group, self.e_flops, self.e_bytes, self.models,
                             tuple(i for r in self.result_ids for i in _run_ids(r)), self.rms_log,
                             tuple(rl.SeriesHost(*h) for h in self.hosts), self.kernel_s,
                             self.kernel_models)


#: One stored group fit: ``[[group, without_model, device_name, kernels], fit or null]``.
_FIT_ITEM = TypeAdapter(tuple[tuple[_Group, _Str | None, _Str | None, _Bool],
                              Annotated[_Fit, AfterValidator(_Fit.efficiency)] | None])
#: A residual table's categories: category -> ``[log ratio, bound, point]`` rows.
_CATEGORIES = TypeAdapter(dict[str, list[tuple[
    Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-MAX_ABS_LOG_RESIDUAL,
                           le=MAX_ABS_LOG_RESIDUAL)],
    Literal["host", "device"] | None, _Str | None]]])
#: A fit solution: 1 to :data:`MAX_SOLUTION_SIZE` finite numbers within
#: +-:data:`MAX_ABS_SOLUTION`.
_SOLUTION = TypeAdapter(Annotated[list[Annotated[float, Field(
    strict=True, allow_inf_nan=False, ge=-MAX_ABS_SOLUTION, le=MAX_ABS_SOLUTION)]],
    Field(min_length=1, max_length=MAX_SOLUTION_SIZE)])


@functools.lru_cache(maxsize=1)
def model_key() -> str:
    """A hex digest of the source of the modules of :mod:`dlperf.perfmodel` that make a
    prediction (:func:`prediction_modules`; names and bytes, in name order): editing the
    back-test, a report or a module no prediction imports changes no key."""
    h = hashlib.sha256(f"table format {TABLE_FORMAT}".encode())
    for name in sorted(prediction_modules()):
        h.update(name.encode())
        h.update(module_file(name).read_bytes())
    return h.hexdigest()[:20]


def prediction_modules(entry: str = PREDICTION_ENTRY) -> set[str]:
    """Names of the modules of :mod:`dlperf.perfmodel` that ``entry`` imports, directly or
    through each other (at module level or inside a function), ``entry`` included: read from
    their source (:data:`_IMPORT_LINE`), nothing is imported. A name is dotted below the
    package (``transforms.precision``; a subpackage's own name stands for its
    ``__init__.py``, which importing any module of it runs): :func:`module_file` is its file.

    The source is scanned for import statements line by line, not parsed (parsing the ~20
    modules costs 0.1-0.3 s, most of a prediction's own time): a line of a string that reads
    as an import of a module of the package counts as one, which can only add a module to
    :func:`model_key` (a key that changes more often, never a stale one)."""
    pkg = "dlperf.perfmodel"
    seen: set[str] = set()
    todo = [entry]
    while todo:
        name = todo.pop()
        f = module_file(name)
        if name in seen or not f.is_file():
            continue
        seen.add(name)
        for m in _IMPORT_LINE.finditer(f.read_text()):
            # every name imported, dotted in full: "from M import a" imports M.a, and
            # dlperf.perfmodel.X.Y.anything is module X, X.Y, ... as far as files are there
            dotted = ([f"{m['from']}.{n}" for n in _first_words(m["names"])]
                      if m["from"] is not None else _first_words(m["modules"]))
            parts = [w.split(".")[2:] for w in dotted if w.startswith(pkg + ".")]
            todo += [".".join(p[:k]) for p in parts for k in range(1, len(p) + 1)]
    return seen


def module_file(name: str) -> Path:
    """The source file of the module ``name`` of :mod:`dlperf.perfmodel` (dotted below it, as
    :func:`prediction_modules` names it): ``X/Y.py``, else a package's ``X/Y/__init__.py``
    (which need not exist: a name that is neither is no module)."""
    base = Path(__file__).parent.joinpath(*name.split("."))
    f = base.with_name(base.name + ".py")
    return f if f.is_file() else base / "__init__.py"


#: An import statement at the start of a line (any indentation): ``from M import names``
#: (in parentheses they may span lines; a backslash continues a line) or ``import M, ...``.
_IMPORT_LINE = re.compile(
    r"^[ \t]*(?:from[ \t]+(?P<from>[\w.]+)[ \t]+import[ \t]+"
    r"(?P<names>\([^)]*\)|(?:[^\n;\\]|\\\n)*)"
    r"|import[ \t]+(?P<modules>(?:[^\n;\\]|\\\n)*))", re.M)


def _array(raw: Any) -> list[Any]:
    """A stored JSON value as an array: itself, ``[]`` where it is none
    (:func:`~dlperf.perfmodel.records.as_mapping`)."""
    return raw if isinstance(raw, list) else []


def _first_words(names: str) -> list[str]:
    """``"(a as b,  # note\n c)"`` -> ``["a", "c"]``: the imported names of an import
    statement's list (comments, parentheses, continuations and ``as`` names dropped)."""
    text = re.sub(r"#[^\n]*", "", names).replace("\\\n", " ").strip("() \t\n")
    return [item.split()[0] for item in text.split(",") if item.split()]


def data_digest(sources: Sequence[str], relative_to: Path | None = None) -> str:
    """A hex digest of the results files' content, each named by its path relative to
    ``relative_to`` (None: its resolved absolute path) and given by its
    :func:`~dlperf.perfmodel.records.content_digest` (each file read once per process)."""
    h = hashlib.sha256()
    for s in sources:
        real = os.path.realpath(s)
        h.update((os.path.relpath(real, relative_to) if relative_to is not None else real)
                 .encode())
        h.update(content_digest(s).encode())
    return h.hexdigest()[:20]


def content_key(recs: Records) -> str:
    """The group-fit store's key: :func:`model_key`, :func:`data_digest` (resolved paths) and
    the files' paths as given (``recs.sources``): the stored fits name their points by those,
    so the same files given by another path form (absolute, relative, through a link) are
    another key, and a fit read back names its points exactly as a fresh fit would."""
    given = "\0".join(recs.sources)
    return hashlib.sha256((model_key() + data_digest(recs.sources) + "\0" + given)
                          .encode()).hexdigest()[:20]


def write_atomic(f: Path, text: str) -> bool:
    """Write ``text`` to ``f`` so that no reader sees half a file
    (:func:`dlperf.outputs.atomic_write`, mode 0644: a table is committed and read by others),
    unless ``f`` holds ``text`` already (:func:`dlperf.outputs.write_if_changed`: a committed
    table made again keeps its mtime, a read-only checkout is not written). A folder that
    cannot be written is skipped with one warning naming it. Returns whether ``f`` holds
    ``text``."""
    try:
        f.parent.mkdir(parents=True, exist_ok=True)
        write_if_changed(f, text, mode=0o644)
        return True
    except OSError as e:
        if f.parent not in _WARNED:
            _WARNED.add(f.parent)
            warnings.warn(f"dlperf: cannot write the performance model's store in {f.parent} "
                          f"({e.strerror or e}); predictions fit again (and have no interval "
                          "where it was a residual table) until the folder can be written",
                          stacklevel=3)
        return False


_WARNED: set[Path] = set()


def table_file(sources: Sequence[str]) -> Path:
    """The residual table of the results files ``sources``: :data:`TABLE_NAME` in the deepest
    folder holding all of them (a folder given as ``--db`` holds its files itself).

    Raises:
        ValueError: no sources.
    """
    if not sources:
        raise ValueError("no results file: a residual table needs the files it was made from")
    dirs = [os.path.dirname(os.path.realpath(s)) for s in sources]
    return Path(os.path.commonpath(dirs)) / TABLE_NAME


def _set_name(sources: Sequence[str], folder: Path) -> str:
    """The entry of a set of results files in their table: their paths relative to the table's
    folder, sorted and joined by ``|``."""
    return "|".join(sorted(os.path.relpath(os.path.realpath(s), folder) for s in sources))


def read_table(sources: Sequence[str]) -> tuple[dict[str, list[KeyedResidual]] | None, str]:
    """The residuals (category -> ``[(log ratio, bound, point), ...]``, points as resolved
    ``path:id``) stored for exactly these results files under the current :func:`model_key`,
    and ``""``; or None and why not (no table, no entry for these files, made by other model
    code or from other data, or not a valid table)."""
    entry, why = _entry(sources)
    if not entry:
        return None, why
    f = table_file(sources)
    try:
        return _categories(entry, f.parent), ""
    except (TypeError, ValueError) as e:
        return None, f"the residual table {relative_if_under_cwd(f)} is not valid ({e})"


def _entry(sources: Sequence[str]) -> tuple[dict[str, Any], str]:
    """The entry of these results files in their residual table (:func:`table_file`) made by
    the model's current source (:func:`model_key`) from their current content
    (:func:`data_digest`), and ``""``; else ``{}`` and why not (no table or one that cannot
    be read, no entry for these files, one made by other model code or from other data)."""
    f = table_file(sources)
    shown = relative_if_under_cwd(f)  # named as the prediction's other lines name files
    try:
        raw = _parsed(f)
    except FileNotFoundError:
        return {}, f"no residual table {shown}"
    except (OSError, ValueError, RecursionError) as e:
        return {}, f"the residual table {shown} cannot be read ({e})"
    entry = as_mapping(raw).get(_set_name(sources, f.parent))
    if not isinstance(entry, dict):
        return {}, f"the residual table {shown} has no entry for these results files"
    if len(gpus := entry_gpus(entry)) > 1:
        return {}, (f"the residual table {shown} pools the residuals of {len(gpus)} GPU models "
                    f"({', '.join(sorted(gpus))}) for these files: not one GPU's; validate "
                    "each GPU model alone (dlperf predict --validate --device ...)")
    if entry.get("model_key") != model_key():
        return {}, (f"the residual table {shown} was made by other performance-model code "
                    "(the model changed since)")
    if entry.get("data_key") != data_digest(sources, f.parent):
        return {}, f"the residual table {shown} was made from other content of these files"
    return entry, ""


def _categories(entry: dict[str, Any], folder: Path) -> dict[str, list[KeyedResidual]]:
    """An entry's residuals by category, each checked (:data:`_CATEGORIES`), points resolved
    under the table's ``folder``.

    Raises:
        TypeError, ValueError: the entry has no categories, or a residual is not valid.
    """
    real: dict[str, str] = {}  # a table names a few files thousands of times

    def resolved(path: str) -> str:
        return once(real, path, lambda: os.path.realpath(folder / path))
    return {cat: [(r, bound, _repathed(point, resolved)) for r, bound, point in rows]
            for cat, rows in _CATEGORIES.validate_python(entry.get("categories")).items()}


#: The residual tables committed with the repository's results (relative to its root), which
#: a set of results files without a table of its own borrows from (:func:`borrowable`).
COMMITTED_TABLES = ("benchmarks/results/" + TABLE_NAME, "benchmarks/results/h200/" + TABLE_NAME)


def borrowable(sources: Sequence[str]) -> list[tuple[str, frozenset[str],
                                                     dict[str, list[KeyedResidual]],
                                                     frozenset[str]]]:
    """The residual-table entries made by the current model code (:func:`model_key`) that a
    prediction on ``sources`` may borrow an interval from, ``(the table in words, its results
    files as resolved paths, category -> residuals, the GPUs of its fits)`` each: every entry of the table beside
    ``sources`` (:func:`table_file`), of the table in each file's own folder, and of the
    tables committed with the repository (:data:`COMMITTED_TABLES`, found from this module's
    place in a source checkout; an installed package has none). An entry is taken whatever
    the current content of its files (its residuals are the model's errors on what they held
    then); one that is not valid is left out. Reads tables only."""
    root = Path(__file__).resolve().parents[3]
    cands = [table_file(sources), *(Path(os.path.realpath(s)).parent / TABLE_NAME
                                    for s in sources), *(root / t for t in COMMITTED_TABLES)]
    out = []
    seen: set[tuple[Path, str]] = set()
    for f in dict.fromkeys(cands):
        try:
            raw = _parsed(f)
        except (OSError, ValueError, RecursionError):
            continue
        for name, entry in as_mapping(raw).items():
            if (f, name) in seen or not isinstance(entry, dict) \
                    or entry.get("model_key") != model_key() or len(entry_gpus(entry)) > 1:
                continue  # several GPUs' residuals: labelled as either's, it is neither's
            seen.add((f, name))
            try:
                cats = _categories(entry, f.parent)
            except (TypeError, ValueError):
                continue
            names = name.split("|")
            files = frozenset(os.path.realpath(f.parent / n) for n in names)
            out.append((_table_words(f, names), files, cats, _fit_devices(entry)))
    return out


def entry_gpus(entry: dict) -> frozenset[str]:
    """The GPU models (``NVIDIA H200``) of a table entry's ``cuda`` roofline fits (their
    keys' group's device kind and their device name): a table holds one GPU model's
    residuals (:func:`read_table` and :func:`borrowable` take no entry of several, and
    :func:`write_table` writes none)."""
    return _fit_devices(entry, kind="cuda")


def _fit_devices(entry: dict, kind: str | None = None) -> frozenset[str]:
    """The device names (``NVIDIA H200``) of a table entry's roofline fits (their keys'
    third item), of those whose group's device kind (its last item) is ``kind`` where given
    (``cuda``); empty where it has none."""
    return frozenset(item[0][2] for item in _array(entry.get("fits"))
                     if isinstance(item, list) and item and isinstance(item[0], list)
                     and len(item[0]) > 2 and isinstance(item[0][2], str) and item[0][2]
                     and (kind is None or (isinstance(item[0][0], list)
                                           and item[0][0][-1:] == [kind])))


def _table_words(f: Path, names: Sequence[str]) -> str:
    """``the h200 + h200x2 residual table (benchmarks/results/perfmodel_residuals.json)``: the
    folders of an entry's files (the table's own folder by its name) and the table's path
    (relative to the working folder when under it)."""
    folders = sorted({n.split(os.sep)[0] if os.sep in n else f.parent.name for n in names})
    return f"the {' + '.join(folders)} residual table ({relative_if_under_cwd(f)})"


def relative_if_under_cwd(path: str | os.PathLike[str]) -> str:
    """``path`` relative to the working directory where it lies under it, else as it is (also
    where no relative path exists: another drive)."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return str(path)
    return str(path) if rel.startswith("..") else rel


def _parsed(f: Path) -> Any:
    """The JSON of a residual table, parsed once per process for the same path, size and
    modification time (a prediction reads its residuals and its group fits from it).

    Raises:
        OSError, ValueError, RecursionError: it cannot be read or parsed.
    """
    st = f.stat()
    return _parsed_at(str(f), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=8)
def _parsed_at(f: str, mtime_ns: int, size: int) -> Any:
    return json.loads(Path(f).read_text())


def _repathed(point: str | None, path_of: Callable[[str], str]) -> str | None:
    """A residual's point ``path:id`` with its path mapped by ``path_of`` (resolved when a
    table is read, made relative to the table's folder when it is written); None (a row of no
    stored point) stays None."""
    if point is None:
        return None
    path, _, rid = point.rpartition(":")
    return f"{path_of(path)}:{rid}"


def _table_text(raw: dict[str, Any]) -> str:
    """The table as JSON with one residual (and one fit solution) per line (a diff of a
    committed table reads)."""
    def rows(field: str, v: Any) -> str:
        if not isinstance(v, dict):
            return json.dumps(v)
        if field == "solutions":
            return "{" + ",".join(f"\n  {json.dumps(k)}: {json.dumps(x)}"
                                  for k, x in sorted(v.items())) + "}"
        inner = ",\n".join(f"  {json.dumps(cat)}: [\n" + ",\n".join(
            "   " + json.dumps(r) for r in rs) + "]" for cat, rs in sorted(v.items()))
        return "{\n" + inner + "}"
    entries = []
    for name, e in sorted(raw.items()):
        fields = ",\n".join(f" {json.dumps(k)}: {rows(k, v)}" for k, v in sorted(e.items()))
        entries.append(f"{json.dumps(name)}: {{\n{fields}}}")
    return "{\n" + ",\n".join(entries) + "}\n"


def write_table(sources: Sequence[str], residuals: dict[str, list[KeyedResidual]],
                fits: dict[EffKey, rl.Efficiency | None] | None = None,
                solutions: Mapping[str, Solution] | None = None) -> Path:
    """Store ``residuals`` (category -> keyed residuals, points as resolved ``path:id``), the
    roofline group ``fits`` the back-test made (:func:`read_table_fits`) and the fit
    ``solutions`` it and a prediction of each stored configuration use
    (:data:`dlperf.perfmodel.lsq.SOLVED`; :func:`read_table_solutions`) as the entry of these
    results files in their table (:func:`table_file`), keeping the other entries and, where the
    entry's model and data keys are unchanged, its solutions too; returns the file.

    Raises:
        OSError: the table's folder cannot be written.
        ValueError: ``fits`` of several GPU models (:func:`entry_gpus`): one GPU's table only.
    """
    gpus = {k[2] for k in (fits or {}) if k[0][3] == "cuda" and k[2]}
    if len(gpus) > 1:
        raise ValueError(f"a residual table holds one GPU model's residuals, not those of "
                         f"{len(gpus)} ({', '.join(sorted(gpus))}): back-test each alone")
    f = table_file(sources)
    folder = f.parent
    try:
        raw = json.loads(f.read_text())
    except (OSError, ValueError):
        raw = {}
    raw = as_mapping(raw)

    def rel(path: str) -> str:
        return os.path.relpath(path, folder)
    name, mkey, dkey = _set_name(sources, folder), model_key(), data_digest(sources, folder)
    old = raw.get(name)
    if (isinstance(old, dict) and old.get("model_key") == mkey and old.get("data_key") == dkey
            and isinstance(old.get("solutions"), dict)):
        # solutions are keyed by their problem: those of a wider run on the same model and
        # data (the committed tables') stay valid, so a narrower --validate keeps them
        solutions = {**_solutions_of(old["solutions"]), **(solutions or {})}
    raw[name] = {
        "model_key": mkey, "data_key": dkey,
        "categories": {cat: [[r, b, _repathed(p, rel)] for r, b, p in rows]
                       for cat, rows in residuals.items()},
        "fits": _fits_json({k: _renamed(v, {s: os.path.relpath(os.path.realpath(s), folder)
                                               for s in sources})
                            for k, v in (fits or {}).items()}),
        "solutions": {k: list(v) for k, v in sorted((solutions or {}).items())}}
    if not write_atomic(f, _table_text(raw)):
        raise OSError(f"cannot write the residual table {f}")
    return f


def fits_file(recs: Records) -> Path:
    """The group-fit store of ``recs`` (:func:`content_key`) under ``$DLPERF_CACHE_DIR``."""
    return cache_root() / f"perfmodel-fits-{content_key(recs)}.json"


def solutions_file(recs: Records) -> Path:
    """The fit-solution store of ``recs`` (:func:`content_key`) under ``$DLPERF_CACHE_DIR``:
    the solutions of the fits this user's predictions made (:data:`dlperf.perfmodel.lsq.
    SOLVED`)."""
    return cache_root() / f"perfmodel-solutions-{content_key(recs)}.json"


def _solutions_of(raw: Any) -> dict[str, Solution]:
    """Fit solutions from their stored form ``{problem key: [x0, x1, ...]}`` (JSON: the keys
    are strings); an entry that is not a :data:`_SOLUTION` is dropped (it is solved again)."""
    out: dict[str, Solution] = {}
    for k, v in as_mapping(raw).items():
        try:
            out[k] = tuple(_SOLUTION.validate_python(v))
        except ValidationError:
            continue
    return out


def read_solutions(f: Path) -> dict[str, Solution]:
    """The fit solutions stored in ``f`` (:func:`_solutions_of`); trusted only if this user's
    and intact (:mod:`dlperf.jsoncache`)."""
    return _solutions_of(read_json(f))


def write_solutions(f: Path, solutions: Mapping[str, Solution]) -> None:
    """Store ``solutions`` in ``f`` (:func:`dlperf.jsoncache.write_json`)."""
    write_json(f, {k: list(solutions[k]) for k in sorted(solutions)})


def read_table_solutions(sources: Sequence[str]) -> dict[str, Solution]:
    """The fit solutions stored with the residual table of these results files under the
    table's current key (:func:`write_table`); ``{}`` without such an entry."""
    return _solutions_of(_entry(sources)[0].get("solutions"))


def _runs(ids: Sequence[str]) -> list[list[Any]]:
    """``path:id`` strings as runs ``[path, first id, count]`` of consecutive ids in the same
    file, in order (a fit names hundreds of points; stored as runs they take a tenth of the
    room)."""
    out: list[list[Any]] = []
    for x in ids:
        path, _, rid = x.rpartition(":")
        if out and out[-1][0] == path and rid.isdigit() \
                and int(rid) == out[-1][1] + out[-1][2]:
            out[-1][2] += 1
        else:
            out.append([path, int(rid) if rid.isdigit() else rid, 1])
    return out


def read_table_fits(sources: Sequence[str]) -> dict[EffKey, rl.Efficiency | None]:
    """The roofline group fits stored with the residual table of these results files, made
    by the model's current source from their current content (the table's key); ``{}``
    without such an entry. A fit names its points by the path the back-test was given (as
    ``fits_file``'s do): one made from other paths is no fit of these files."""
    entry = _entry(sources)[0]  # {} without one: no fits
    folder = table_file(sources).parent
    named = {os.path.relpath(os.path.realpath(s), folder): s for s in sources}
    return {k: _renamed(v, named) for k, v in _fits_of(entry.get("fits")).items()}


def _renamed(eff: rl.Efficiency | None, names: dict[str, str]) -> rl.Efficiency | None:
    """``eff`` with the files of its ``path:id`` points renamed by ``names`` (a name not in it
    kept)."""
    if eff is None:
        return None
    ids = tuple(f"{names.get(p, p)}:{i}" for p, _, i in (r.rpartition(":")
                                                          for r in eff.result_ids))
    return replace(eff, result_ids=ids)


def read_fits(f: Path) -> dict[EffKey, rl.Efficiency | None]:
    """The group fits stored in ``f`` (:func:`_fits_of`); trusted only if this user's and
    intact (:mod:`dlperf.jsoncache`)."""
    return _fits_of(read_json(f))


def _fits_of(raw: Any) -> dict[EffKey, rl.Efficiency | None]:
    """Group fits from their stored form (:func:`_fits_json`); an entry that does not read
    back as a key and a :class:`_Fit` of the key's group (or null: no point to fit on) is
    dropped."""
    out: dict[EffKey, rl.Efficiency | None] = {}
    for item in _array(raw):
        try:
            key, eff = cast(tuple[EffKey, 'rl.Efficiency | None'],
                            _FIT_ITEM.validate_python(item))
        except ValidationError:
            continue
        if eff is None or eff.group == key[0]:  # a fit stored under another group's key: none
            out[key] = eff
    return out


def write_fits(f: Path, fits: dict[EffKey, rl.Efficiency | None]) -> None:
    """Store ``fits`` in ``f`` (:func:`dlperf.jsoncache.write_json`)."""
    write_json(f, _fits_json(fits))


def _fits_json(fits: dict[EffKey, rl.Efficiency | None]) -> list[Any]:
    """Group fits as stored: ``[[group, without_model, device_name, kernels], fit or null]``
    each, in key order."""
    return [[[list(k[0]), k[1], k[2], k[3]],
             None if v is None else {**asdict(v), "result_ids": _runs(v.result_ids),
                                     "hosts": [[getattr(h, f) for f in HOST_FIELDS]
                                               for h in v.hosts]}]
            for k, v in sorted(fits.items(), key=lambda kv: json.dumps(kv[0]))]

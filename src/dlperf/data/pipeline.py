"""Real input pipelines, the framework-free parts: sample sources, index plans, a host prefetcher
and the data-wait measurement.

A run with real data through a pipeline (``--loader-workers N``, or any ImageFolder) reads,
decodes, augments and batches its input *during* training, as a training job does, instead of
cycling batches prepared before timing. Each framework builds its own idiomatic pipeline over
the pieces here (PyTorch ``DataLoader``: ``frameworks/torch_input.py``; ``tf.data``:
``frameworks/tf_input.py``; JAX: Grain worker processes, :mod:`dlperf.data.grain_pipeline`, or
:class:`HostPipeline`'s threads, chosen in ``frameworks/jax_input.py``).

Order of samples: the stream is an endless concatenation of passes over the data set; each pass
of an image data set is a fresh permutation (seeded by ``(seed, pass)``, so every framework and
every worker count sees the same order); token batches are taken in order (consecutive LM
batches continue each stream). There is no epoch boundary in the stream, so the measured
iterations see the pipeline's steady state; a data set smaller than one batch is refused.

Data wait (docs/measurement.md rule 10): :class:`DataWaitRecorder` reads the host clock around the
call that hands the step its next batch, i.e. the time the training loop is blocked on input.
It is two clock reads per iteration (about 0.1 us), inside the step only when the data are real.
A run is labelled *input-bound* when the measured iterations spent more than
:data:`INPUT_BOUND_SHARE` (10%, configurable per run) of their total time waiting for data (total
wait / total measured time): at that share the input pipeline visibly costs training speed, while
a few percent is within run-to-run noise. The share is of totals, not of medians, because a
prefetching loader delivers in bursts: each of N workers makes a whole batch, so when they fall
behind one iteration in N waits long and the rest find a batch ready. The median wait is then ~0
while most of the time goes into waiting (measured on an H200, resnet50 bf16 on JPEGs with 4
DataLoader workers: median wait 0.7% of the median iteration, total wait 71% of the time, 27% of
the synthetic throughput). Totals are also what throughput is made of (docs/measurement.md: processing
time is the mean time between iterations).
"""

from __future__ import annotations

import math
import queue
import statistics
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from dlperf.data.dataset import NORMALISATION, Dataset
from dlperf.errors import DataError

#: Default share of the measured time spent waiting for data above which a run is input-bound.
INPUT_BOUND_SHARE = 0.10
#: How ``share`` is defined (kept in every summary, so stored results say which rule made them).
WAIT_CRITERION = "total data wait / total measured time"


# --- index plans ---------------------------------------------------------------------------------

class IndexPlan:
    """Maps a stream position ``p`` (0, 1, 2, ...) to a data-set index.

    Args:
        n: items per pass (> 0).
        shuffle: each pass is ``np.random.default_rng((seed, pass)).permutation(n)``; else
            ``p % n``.
        seed: seeds the permutations.
    """

    def __init__(self, n: int, shuffle: bool, seed: int = 0) -> None:
        if n < 1:
            raise DataError("an input pipeline needs at least one item")
        self.n, self.shuffle, self.seed = n, shuffle, seed
        self._perms: OrderedDict[int, np.ndarray] = OrderedDict()

    def __call__(self, p: int) -> int:
        if not self.shuffle:
            return p % self.n
        e = p // self.n
        perm = self._perms.get(e)
        if perm is None:
            perm = np.random.default_rng((self.seed, e)).permutation(self.n)
            self._perms[e] = perm
            while len(self._perms) > 2:  # positions are asked for in (nearly) increasing order
                self._perms.popitem(last=False)
        return int(perm[p % self.n])


# --- sample sources ------------------------------------------------------------------------------

class SampleSource:
    """What one pipeline position yields, as numpy, for one model spec and layout.

    * ``image`` data sets (MNIST, CIFAR-10): item ``p`` is one sample, ``x`` float32 normalised
      as :func:`dlperf.data.make_batches` does (``(x / 255 - mean) / std``), shaped as the
      model takes it (a vector, ``[C, H, W]``, or ``[H, W, C]`` for ``layout="NHWC"``), ``y``
      int64 scalar; positions are shuffled per pass.
    * ``imagefolder``: item ``p`` decodes the JPEG and applies RandomResizedCrop + flip
      (:func:`dlperf.data.imagefolder.load_train_image`, random state seeded by ``(seed, p)``),
      normalised with the ImageNet constants; ``[3, S, S]`` or ``[S, S, 3]``.
    * ``tokens``: ``per_batch`` is True and item ``k`` is the whole LM batch ``k`` of
      :func:`dlperf.data.make_batches` (``x``, ``y`` int64 ``[B, T]``), in order.

    :meth:`batch` stacks ``B`` consecutive items (or returns the per-batch item).

    Args:
        ds: the data set.
        spec: the model spec (input kind and shape).
        batch_size: ``B``.
        layout: ``"NCHW"`` (PyTorch) or ``"NHWC"`` (JAX, TensorFlow) for images.
        seed: seeds the order and the augmentation.

    Raises:
        DataError: the data do not fit the model, or are fewer than one batch.
    """

    def __init__(self, ds: Dataset, spec: Any, batch_size: int, layout: str = "NCHW",
                 seed: int = 0) -> None:
        from dlperf.data.batches import _check_fits, make_batches

        _check_fits(ds, spec)
        self.ds, self.spec, self.B, self.layout, self.seed = ds, spec, batch_size, layout, seed
        self.per_batch = ds.kind == "tokens"
        self.kind = ds.kind
        if self.per_batch:
            self._X, self._Y = make_batches(ds, spec, batch_size)
            self.n = int(self._X.shape[0])
        else:
            self.n = int(ds.x.shape[0])
            if self.n < batch_size:
                raise DataError(f"data set {ds.name!r} ({ds.path}) has {self.n} samples, too few "
                                f"for one batch of {batch_size}: the largest batch size that "
                                f"works is {self.n}")
        self.plan = IndexPlan(self.n, shuffle=not self.per_batch, seed=seed)
        if ds.kind == "image":
            mean, std = NORMALISATION[ds.name]
            self._mean = np.asarray(mean, np.float32).reshape(-1, 1, 1)
            self._std = np.asarray(std, np.float32).reshape(-1, 1, 1)

    @property
    def image(self) -> bool:
        """True for image inputs (so the layout applies)."""
        return self.spec.input_kind == "image"

    def item(self, p: int) -> tuple[np.ndarray, Any]:
        """The sample (or per-batch item) at stream position ``p``."""
        if self.per_batch:
            k = self.plan(p)
            return self._X[k], self._Y[k]
        i = self.plan(p)
        if self.kind == "imagefolder":
            from dlperf.data.imagefolder import load_train_image, normalize_hwc

            rng = np.random.default_rng((self.seed, p))
            x = normalize_hwc(load_train_image(str(self.ds.x[i]), self.spec.input_shape[1], rng))
            if self.layout == "NCHW":
                x = np.ascontiguousarray(x.transpose(2, 0, 1))
            return x, np.int64(self.ds.labels[i])
        x = self.ds.x[i].astype(np.float32)  # uint8 [C, H, W]
        x *= np.float32(1 / 255)
        x -= self._mean
        x /= self._std
        if self.spec.input_kind != "image":
            x = x.reshape(self.spec.input_shape)
        elif self.layout == "NHWC":
            x = np.ascontiguousarray(x.transpose(1, 2, 0))
        return x, np.int64(self.ds.labels[i])

    def batch(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Batch ``k`` of the stream: ``x`` ``[B, ...]``, ``y`` ``[B]`` (or the LM batch)."""
        if self.per_batch:
            return self.item(k)
        items = [self.item(k * self.B + j) for j in range(self.B)]
        return np.stack([a for a, _ in items]), np.asarray([b for _, b in items], np.int64)


# --- a host prefetcher (JAX) ---------------------------------------------------------------------

class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class HostPipeline:
    """Batches made on host threads and copied to the device ahead of the training step.

    With ``workers == 0`` every :meth:`next` makes batch ``k`` and copies it on the calling
    thread (no overlap). With ``workers > 0`` a pool of ``workers`` threads makes batches (each
    batch on one thread) and a feeder thread takes them in order, calls ``put`` (the device
    copy) and queues the result; the queue holds ``depth`` device batches, and up to
    ``workers + depth`` host batches are in flight. Python threads overlap where the work
    releases the GIL (JPEG decode and resize in Pillow, numpy arithmetic, the copy).

    Args:
        make: ``k -> host batch`` (called with k = 0, 1, 2, ...).
        put: ``host batch -> device batch`` (e.g. ``jax.device_put``).
        workers: host threads (>= 0).
        depth: device batches queued ahead (>= 1).

    An exception in ``make`` or ``put`` is raised by the :meth:`next` that would have returned
    that batch.
    """

    def __init__(self, make: Callable[[int], Any], put: Callable[[Any], Any], workers: int,
                 depth: int = 2) -> None:
        if workers < 0 or depth < 1:
            raise ValueError("workers must be >= 0 and depth >= 1")
        self._make, self._put, self.workers, self.depth = make, put, workers, depth
        self._k = 0
        self._stop = threading.Event()
        self._q: queue.Queue = queue.Queue(maxsize=depth)
        self._pool: ThreadPoolExecutor | None = None
        self._feeder: threading.Thread | None = None
        if workers > 0:
            self._pool = ThreadPoolExecutor(workers, thread_name_prefix="dlperf-input")
            self._feeder = threading.Thread(target=self._feed, args=(self._pool,),
                                            name="dlperf-feeder", daemon=True)
            self._feeder.start()

    def _feed(self, pool: ThreadPoolExecutor) -> None:
        pending: deque = deque()
        k = 0
        try:
            while not self._stop.is_set():
                while len(pending) < self.workers + self.depth:
                    pending.append(pool.submit(self._make, k))
                    k += 1
                item = self._put(pending.popleft().result())
                while not self._stop.is_set():
                    try:
                        self._q.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            self._q.put(_Failure(e))
        finally:
            for f in pending:
                f.cancel()

    def next(self) -> Any:
        """The next device batch (blocks until it is ready)."""
        if self._feeder is None:
            b = self._put(self._make(self._k))
            self._k += 1
            return b
        item = self._q.get()
        if isinstance(item, _Failure):
            raise item.exc
        return item

    __call__ = next

    def close(self) -> None:
        """Stop the threads (batches in flight are dropped)."""
        self._stop.set()
        if self._feeder is not None:
            try:
                while True:
                    self._q.get_nowait()
            except queue.Empty:
                pass
            self._feeder.join(timeout=5.0)
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


# --- the data wait -------------------------------------------------------------------------------

#: The note :func:`mark_input_error` adds to an exception raised while the next batch was
#: fetched (reading, decoding, augmenting or copying input), whatever its type.
INPUT_ERROR_NOTE = "dlperf: raised by the input pipeline while fetching the next batch"


def mark_input_error(e: BaseException) -> None:
    """Note on ``e`` (``add_note``, its type unchanged) that the input pipeline raised it, once.

    A framework's pipeline re-raises a bad file as its own exception type (``tf.data``'s
    ``InvalidArgumentError`` for a corrupt JPEG, Pillow's ``OSError`` through a DataLoader),
    so the type alone cannot tell a data error from a crash; :func:`raised_by_input` reads the
    note. An out-of-memory error copying a batch gets the note too: check for OOM first.
    """
    if INPUT_ERROR_NOTE not in getattr(e, "__notes__", ()):
        e.add_note(INPUT_ERROR_NOTE)


def raised_by_input(e: BaseException) -> bool:
    """True if ``e`` (or an exception it was raised from) carries :data:`INPUT_ERROR_NOTE`."""
    seen: set[int] = set()
    cur: BaseException | None = e
    while cur is not None and id(cur) not in seen:
        if INPUT_ERROR_NOTE in getattr(cur, "__notes__", ()):
            return True
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return False


class DataWaitRecorder:
    """Host time blocked on each next batch: wraps the function that returns it.

    ``waits_s`` holds one duration per call (seconds), in order; :meth:`mark_measure` (called
    by the adapter's ``on_phase("measure")``) records where the measured iterations start, and
    :meth:`measured` returns the waits from there on (one per measured iteration, since the step
    asks for exactly one batch).

    Args:
        clock: host clock in seconds (injectable for tests).
    """

    def __init__(self, clock: Callable[[], float] = time.perf_counter) -> None:
        self._clock = clock
        self.waits_s: list[float] = []
        self._measure_from: int | None = None

    def wrap(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """``fn`` with its duration appended to :attr:`waits_s` at every call; an exception
        from ``fn`` is re-raised marked by :func:`mark_input_error`."""
        clock, waits = self._clock, self.waits_s

        def timed() -> Any:
            t0 = clock()
            try:
                out = fn()
            except Exception as e:
                mark_input_error(e)
                raise
            waits.append(clock() - t0)
            return out

        return timed

    def mark_measure(self) -> None:
        """The next call belongs to the first measured iteration."""
        self._measure_from = len(self.waits_s)

    def measured(self) -> list[float]:
        """Waits of the measured iterations (all waits if :meth:`mark_measure` was not called)."""
        return list(self.waits_s[self._measure_from or 0:])


def data_wait_summary(waits_s: list[float], step_times_s: list[float],
                      threshold: float = INPUT_BOUND_SHARE) -> dict[str, Any]:
    """Summarise the data wait of the measured iterations and label the run.

    Args:
        waits_s: data wait per measured iteration (s).
        step_times_s: the measured iteration times (s).
        threshold: share of the measured time spent waiting above which the run is input-bound.

    Returns:
        ``median_s``, ``mean_s``, ``max_s``; ``share`` = total wait / total measured time (the
        label's criterion, see the module docstring; ``time_share`` is the same number, its name
        before schema 8); ``median_share`` = median wait / median iteration time (how a typical
        iteration fares: ~0 under a bursty loader even when it is input-bound); ``threshold``;
        ``input_bound`` (``share > threshold``); ``criterion``; ``n``. Shares are None without
        step times.
    """
    if not waits_s:
        return {"n": 0, "median_s": None, "mean_s": None, "max_s": None, "share": None,
                "time_share": None, "median_share": None, "threshold": threshold,
                "input_bound": None, "criterion": WAIT_CRITERION}
    med = statistics.median(waits_s)
    step_med = statistics.median(step_times_s) if step_times_s else 0.0
    total = math.fsum(step_times_s)
    share = math.fsum(waits_s) / total if total > 0 else None
    return {"n": len(waits_s), "median_s": med, "mean_s": math.fsum(waits_s) / len(waits_s),
            "max_s": max(waits_s), "share": share, "time_share": share,
            "median_share": med / step_med if step_med > 0 else None,
            "threshold": threshold, "input_bound": None if share is None else share > threshold,
            "criterion": WAIT_CRITERION}

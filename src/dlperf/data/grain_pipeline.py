"""A JAX input pipeline whose workers are processes: Grain (``pip install grain``), framework-free.

Grain is the JAX ecosystem's own data loader (google/grain). dlperf's thread pipeline
(:class:`dlperf.data.pipeline.HostPipeline`) makes batches on Python threads, which hold the GIL
that JAX's training loop needs to dispatch its step (measured on an H200, resnet50 bf16 b=128 on
JPEGs, 16 threads: the step itself ran 6.1x slower than on synthetic data); Grain makes them in
worker processes, as PyTorch's DataLoader does. :class:`GrainPipeline` builds, with Grain's
public API (verified against grain 0.2.18)::

    MapDataset.source(positions)          # item p = SampleSource.item(p): the same order as
      .batch(B, drop_remainder=True)      #   every framework and worker count (IndexPlan)
      .map(to host dtypes)                #   batch k = positions k*B .. k*B+B-1
      .to_iter_dataset(ReadOptions(num_threads=0, prefetch_buffer_size=0))
      .mp_prefetch(MultiprocessingOptions(num_workers=N, per_worker_buffer_size=P))
    grain.experimental.device_put(..., cpu_buffer_size=P, device_buffer_size=P)

* Batching happens in the workers: ``mp_prefetch`` slices the *batch* data set, worker ``i``
  making batches ``i, i+N, i+2N, ...``, and interleaves the workers' outputs round-robin, so the
  stream is batch 0, 1, 2, ... exactly as :meth:`SampleSource.batch` gives them (tested).
* ``ReadOptions(num_threads=0)``: each worker makes one batch at a time on its own main thread,
  as a DataLoader worker does (parallelism comes from the processes; Grain's docstring
  recommends 0 threads where the work is CPU-bound Python, to avoid GIL contention inside a
  worker). Each worker queues up to ``per_worker_buffer_size`` finished batches in shared memory
  (and Grain's main-process interleave keeps as many per worker).
* The stream is endless: the position source has ``ENDLESS_BATCHES`` (2**40) batches, about 35
  years at 1,000 batches/s.
* ``grain.experimental.device_put`` (Grain's own two-stage prefetch: a host buffer, then a
  thread that calls ``jax.device_put`` into a device buffer) copies batches to the device ahead
  of the step, as :class:`HostPipeline`'s feeder thread does.

Start method: Grain 0.2.18 starts its workers with ``multiprocessing.get_context("spawn")``
(``grain/_src/python/dataset/transformations/process_prefetch.py``): each worker is a fresh
interpreter that receives the cloudpickled data set; nothing of the parent is forked, so the
JAX process's runtime threads and locks are never copied into a child (forking a process with
JAX initialised is what JAX warns against). The workers run dlperf's framework-free
:class:`SampleSource` only; Grain itself imports the ``jax`` Python package when it is installed
(its profiler shim, ``grain/_src/core/profiler.py``), which costs each worker ~0.6 s and ~140 MB
at start, but no JAX backend is initialised in a worker (no device, no XLA client; tested).

Abseil flags: Grain 0.2.18 reads one of its absl flags when JAX is installed, which raises
``UnparsedFlagAccessError`` in programs that never parse absl flags (google/grain#1355, fixed
after 0.2.18 by #1362). :func:`import_grain` marks the flags as parsed (all at their defaults)
when nothing has parsed them, the workaround given in that issue.
"""

from __future__ import annotations

import gc
import importlib.util
import multiprocessing
from typing import Any

import numpy as np

from dlperf.data.pipeline import SampleSource

#: The endless stream's length in batches (2**40: never reached; a finite length is what
#: Grain's random-access data sets need).
ENDLESS_BATCHES = 2**40
#: Name prefix of Grain's worker processes (``multiprocessing.Process.name``, grain 0.2.18).
GRAIN_PROCESS_PREFIX = "grain-process-prefetch"
#: The start method Grain's workers use (grain 0.2.18, see the module docstring).
GRAIN_START_METHOD = "spawn"
#: The warning of a JAX run whose loader workers fell back to threads.
THREADS_WARNING = ("grain not installed: loader workers are Python threads, which compete with "
                   "the training loop for the GIL; pip install grain")


def grain_installed() -> bool:
    """True when a ``grain`` package can be found (not imported: Grain's import takes ~1.5 s
    and imports JAX)."""
    try:
        return importlib.util.find_spec("grain") is not None
    except (ImportError, ValueError):  # ValueError: sys.modules["grain"] is None
        return False


def import_grain() -> Any:
    """Import and return the ``grain`` module, ready for use outside ``absl.app``.

    Raises:
        ImportError: Grain is not installed (or cannot be imported).
    """
    import grain  # noqa: PLC0415 - optional dependency, imported where used
    from absl import flags

    if not flags.FLAGS.is_parsed():  # google/grain#1355 (see the module docstring)
        flags.FLAGS.mark_as_parsed()
    return grain


class _Positions:
    """Grain's random-access data source over stream positions: item ``p`` is
    ``SampleSource.item(p)`` (a sample, or the whole LM batch ``p`` of per-batch data)."""

    def __init__(self, source: SampleSource, length: int) -> None:
        self.source, self.length = source, length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, p: int) -> tuple[np.ndarray, Any]:
        return self.source.item(int(p))

    def __repr__(self) -> str:  # Grain names the source in its messages
        ds = self.source.ds
        return f"dlperf positions over {ds.name} ({self.source.n} items per pass)"


class _HostBatch:
    """A batch ``(x, y)`` as the step takes it: C-contiguous, ``x`` in ``x_dtype`` (float32 or
    int32 ids), ``y`` in ``y_dtype`` (made in the worker, so the main process only copies)."""

    def __init__(self, x_dtype: Any, y_dtype: Any) -> None:
        self.x_dtype, self.y_dtype = np.dtype(x_dtype), np.dtype(y_dtype)

    def __call__(self, batch: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        x, y = batch
        return (np.ascontiguousarray(x, dtype=self.x_dtype),
                np.ascontiguousarray(y, dtype=self.y_dtype))


class GrainPipeline:
    """Batches of a :class:`SampleSource` made by Grain worker processes, optionally copied to a
    JAX device ahead of the step (see the module docstring for the pipeline).

    ``next()`` returns batch 0, 1, 2, ... of the endless stream: ``(x, y)`` with ``x``
    ``[B, ...]`` in ``x_dtype`` and ``y`` ``[B, ...]`` in ``y_dtype`` (host numpy arrays, or
    JAX arrays on ``device``), equal to ``SampleSource.batch(k)`` up to those dtypes. The workers
    start at construction (they spawn while the step compiles).

    Args:
        source: what each position yields, and the batch size ``B``.
        workers: Grain worker processes (>= 1).
        x_dtype, y_dtype: dtypes of the batch (cast in the workers).
        device: a JAX device to copy batches to (``grain.experimental.device_put``), or None
            for host batches.
        worker_buffer: finished batches each worker keeps ahead
            (``MultiprocessingOptions.per_worker_buffer_size``, >= 1).
        host_buffer, device_buffer: batches ``device_put``'s host and device stages keep
            ahead (>= 1).

    Raises:
        ImportError: Grain is not installed.
        ValueError: ``workers`` or a buffer < 1.

    An exception raised while a worker makes a batch (a corrupt JPEG, ...) is raised by the
    :meth:`next` that would have returned that batch, with a note naming the batch.
    """

    def __init__(self, source: SampleSource, workers: int, *, x_dtype: Any = np.float32,
                 y_dtype: Any = np.int32, device: Any = None, worker_buffer: int = 2,
                 host_buffer: int = 2, device_buffer: int = 2) -> None:
        if workers < 1 or min(worker_buffer, host_buffer, device_buffer) < 1:
            raise ValueError(f"GrainPipeline needs workers >= 1 and buffers >= 1 (got workers "
                             f"{workers}, buffers {worker_buffer}, {host_buffer}, "
                             f"{device_buffer})")
        grain = import_grain()
        self.version = str(grain.__version__)
        self.workers, self.B, self.per_batch = workers, source.B, source.per_batch
        length = ENDLESS_BATCHES * (1 if source.per_batch else source.B)
        ds = grain.MapDataset.source(_Positions(source, length))
        if not source.per_batch:
            ds = ds.batch(source.B, drop_remainder=True)
        ds = ds.map(_HostBatch(x_dtype, y_dtype))
        self.read_options = grain.ReadOptions(num_threads=0, prefetch_buffer_size=0)
        self.mp_options = grain.MultiprocessingOptions(num_workers=workers,
                                                       per_worker_buffer_size=worker_buffer)
        it_ds = ds.to_iter_dataset(self.read_options).mp_prefetch(self.mp_options)
        self.host_buffer = self.device_buffer = None
        if device is not None:
            it_ds = grain.experimental.device_put(it_ds, device, cpu_buffer_size=host_buffer,
                                                  device_buffer_size=device_buffer)
            self.host_buffer, self.device_buffer = host_buffer, device_buffer
        self._it: Any = iter(it_ds)
        self._it.start_prefetch()
        self._k = 0
        self.seen_at_close: list[tuple[int, str]] | None = None

    def next(self) -> Any:
        """The next batch of the stream (blocks until it is ready).

        Raises:
            ValueError: the pipeline is closed.
            Exception: whatever making the batch raised in its worker (a note names the batch).
        """
        if self._it is None:
            raise ValueError("the Grain pipeline is closed")
        try:
            b = next(self._it)
        except StopIteration:  # only after ENDLESS_BATCHES batches
            raise RuntimeError(f"the endless stream ended after {self._k} batches") from None
        except Exception as e:
            e.add_note(f"dlperf: raised while making batch {self._k} (positions "
                       + (f"{self._k}" if self.per_batch
                          else f"{self._k * self.B}..{self._k * self.B + self.B - 1}")
                       + f") in a Grain {self.version} worker process ({self.workers} workers)")
            raise
        self._k += 1
        return b

    __call__ = next

    def worker_processes(self) -> list[tuple[int, str]]:
        """``(pid, start method)`` of the Grain worker processes alive now (children of this
        process named by Grain; empty before they start and after :meth:`close`)."""
        return [(p.pid, getattr(p, "_start_method", None) or "?")
                for p in multiprocessing.active_children()
                if p.name.startswith(GRAIN_PROCESS_PREFIX) and p.pid is not None]

    def close(self) -> None:
        """Stop the workers and threads (Grain joins each worker, killing it after 25 s) and
        free the shared memory of batches in flight; idempotent. :attr:`seen_at_close` keeps
        :meth:`worker_processes` as they were just before."""
        if self._it is None:
            return
        self.seen_at_close = self.worker_processes()
        it, self._it = self._it, None
        try:
            it.close()
        finally:
            del it
            # Grain's iterators close themselves again when collected; collect them now, not
            # at interpreter exit, when their modules are half torn down and the close fails.
            gc.collect()


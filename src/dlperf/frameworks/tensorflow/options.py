"""TensorFlow's own option rules (registry ``options``; :mod:`dlperf.config.rules` calls them).

The Keras models are NHWC (channels last: the only layout of TensorFlow's CPU convolutions), so
``--layout nchw`` is refused. On the CPU across nodes a worker drives one device, so
``--dp-layout per_node`` (one MultiWorkerMirroredStrategy worker per node) cannot run several
devices per node there.
"""

from __future__ import annotations

from typing import Any


def check(cfg: Any) -> list[tuple[str, str]]:
    """The errors of ``cfg`` (a validated :class:`dlperf.config.RunConfig` of TensorFlow) that
    are TensorFlow's own, as ``(field, message)``; ``[]`` when there are none."""
    errors = []
    if cfg.runtime.layout == "nchw":
        errors.append(("layout", f"layout 'nchw' is a PyTorch option: the {cfg.runtime.framework} models "
                                 "are NHWC (channels last); use --layout auto or nhwc"))
    if (cfg.hardware.device == "cpu" and cfg.parallel.nnodes > 1 and cfg.parallel.nproc > 1
            and cfg.parallel.dp_layout == "per_node"):
        # TensorFlow's CollectiveAllReduceExtended gives a worker without GPUs exactly one
        # device (CPU:0), so a worker cannot drive several logical CPU devices.
        errors.append(("dp_layout", f"dp_layout 'per_node' with TensorFlow on the CPU across "
                                    f"nodes: MultiWorkerMirroredStrategy drives one CPU device "
                                    f"per worker process, so --nproc {cfg.parallel.nproc} on each of "
                                    f"--nnodes {cfg.parallel.nnodes} nodes needs one process per device; "
                                    f"use --dp-layout per_device"))
    return errors

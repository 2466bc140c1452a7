"""The MXNet half of tests/frameworks/mxnet/test_mxnet.py, run in the MXNet interpreter ($DLPERF_MXNET_PYTHON).

``python tests/frameworks/mxnet/mxnet_side.py IN.npz OUT.npz`` (with dlperf's source on PYTHONPATH). ``IN.npz``
holds, per model ``<m>`` named in ``models``: the PyTorch ``state_dict`` (``<m>/sd/<key>``),
an input batch (``<m>/x``) and, for the optimizer check, the batches and labels of two steps
(``<m>/step_x<i>``, ``<m>/step_y<i>``). ``OUT.npz`` gets, per model: the trainable parameter
count (``<m>/n_params``), the output of the untouched model (``<m>/shape``), the forward outputs
with PyTorch's weights in inference (``<m>/eval``) and training mode (``<m>/train``, models
without dropout), the two training steps' losses and the first weight after them
(``<m>/step_loss``, ``<m>/step_w``, ``<m>/step_stages``) through the adapter's own staged step,
loss and trainer, runs prepared by the adapter (``run/*``, :func:`adapter_runs`) and
``engine/*`` timings of the asynchronous engine. Not a test module (no ``test_`` prefix).
"""

from __future__ import annotations

import sys
import time

import numpy as np


def main(inp: str, out: str) -> int:
    import mxnet as mx
    from mxnet import autograd

    import dlperf.zoo as zoo
    from dlperf.frameworks.mxnet.step import GluonStep, make_trainer, with_loss
    from dlperf.zoo.convert_mxnet import torch_to_mxnet

    data = np.load(inp)
    res: dict[str, np.ndarray] = {}
    models = [str(m) for m in data["models"]]
    for name in models:
        spec = zoo.get_spec(name)
        mod = __import__(f"dlperf.zoo.{spec.family}.mxnet_impl", fromlist=["build"])
        net = mod.build(spec)
        net.initialize(ctx=mx.cpu())
        params = net.collect_params()
        res[f"{name}/n_params"] = np.array(sum(p.data().size for p in params.values()
                                               if p.grad_req != "null"))
        x = mx.nd.array(data[f"{name}/x"], dtype="float32")
        res[f"{name}/shape"] = np.array(net(x).shape)
        prefix = f"{name}/sd/"
        sd = {k[len(prefix):]: data[k] for k in data.files if k.startswith(prefix)}
        arrays = torch_to_mxnet(sd, {k: p.shape for k, p in params.items()})
        for k, p in params.items():
            p.set_data(mx.nd.array(arrays[k], dtype="float32"))
        if data[f"{name}/hybridize"]:
            net.hybridize(static_alloc=True, static_shape=True)
        res[f"{name}/eval"] = net(x).asnumpy()  # outside autograd.record: inference mode
        if data[f"{name}/train_mode"]:
            with autograd.record():
                y = net(x)
            y.backward()  # MXNet updates BN running statistics in the backward pass
            # A hybridized (static_alloc) graph writes the running statistics without the
            # engine ordering a later read after it: asnumpy() alone may read the old values
            # (seen on MXNet 1.9.1, oneDNN); wait for everything first, as the adapter's step does.
            mx.nd.waitall()
            res[f"{name}/train"] = y.asnumpy()
            # BN running statistics after one training-mode forward and backward
            bn = [k for k in params if k.endswith("running_mean")]
            if bn:
                res[f"{name}/running_mean"] = params[bn[0]].data().asnumpy()
                res[f"{name}/running_var"] = params[bn[0].replace("mean", "var")].data().asnumpy()
        if f"{name}/step_x0" in data.files:
            for k, p in params.items():  # back to PyTorch's weights and statistics
                p.set_data(mx.nd.array(arrays[k], dtype="float32"))
            # The adapter's own staged step, loss and trainer, fed the two batches.
            model = with_loss(mx, net, spec)
            trainer, _ = make_trainer(mx, params, spec)
            batches = iter([(mx.nd.array(data[f"{name}/step_x{i}"], dtype="float32"),
                             mx.nd.array(data[f"{name}/step_y{i}"], dtype="float32"))
                            for i in range(2)])
            step = GluonStep(mx, model, trainer, [], 1, batches.__next__)
            stages: list[str] = []
            losses = [float(step(lambda s, h=None: stages.append(s)).asscalar())  # noqa: B023 - called in this pass
                      for _ in range(2)]
            res[f"{name}/step_loss"] = np.array(losses)
            res[f"{name}/step_stages"] = np.array(stages)
            first = next(iter(params))
            res[f"{name}/step_w"] = params[first].data().asnumpy()
    res.update(adapter_runs())
    # The engine is asynchronous on the CPU: a dot returns before it has run.
    a = mx.nd.random.normal(shape=(1200, 1200))
    mx.nd.waitall()
    mx.nd.dot(a, a)  # warm up (oneDNN/OpenBLAS kernels, memory)
    mx.nd.waitall()
    t0 = time.perf_counter()
    c = mx.nd.dot(a, a)
    for _ in range(4):
        c = mx.nd.dot(c, a)
    t1 = time.perf_counter()
    mx.nd.waitall()
    t2 = time.perf_counter()
    res["engine/dispatch_s"] = np.array(t1 - t0)
    res["engine/complete_s"] = np.array(t2 - t0)
    np.savez(out, **res)
    return 0


def adapter_runs() -> dict[str, np.ndarray]:
    """``run/<mode>/...``: runs prepared by the adapter itself (fcn5_tiny, batch 8, two
    accumulated micro-batches, seed 0): the losses of three fused steps (``fused``; the
    measured segment starts before the third) and of three staged steps with recording marks
    on a second run made from the same seed (``staged``), the marks of one staged step
    (``stages``), the compile counts and the first call's time."""
    import dlperf.zoo as zoo
    from dlperf.config import make_run_config
    from dlperf.frameworks.mxnet.adapter import MXNetAdapter

    res: dict[str, np.ndarray] = {}
    spec = zoo.get_spec("fcn5_tiny")
    for mode in ("eager", "graph"):
        cfg = make_run_config(model="fcn5_tiny", framework="mxnet", device="cpu", batch_size=8,
                              grad_accum=2, mode=mode, seed=0)
        fused = MXNetAdapter().prepare(cfg, spec)
        handles = [fused.step(), fused.step()]
        fused.on_phase("measure")  # as the harness does, before the measured steps
        handles.append(fused.step())
        res[f"run/{mode}/fused"] = np.array(fused.losses_to_floats(handles))
        info = fused.compile_info()
        res[f"run/{mode}/n_compiles"] = np.array(info["n_compiles"])
        res[f"run/{mode}/recompiles_measured"] = np.array(info["recompiles_measured"])
        res[f"run/{mode}/first_call_s"] = np.array(fused.flags["first_call_s"])
        fused.close()
        staged = MXNetAdapter().prepare(cfg, spec)
        stages: list[str] = []
        losses = [staged.staged_step(lambda s, h=None: stages.append(s)) for _ in range(3)]  # noqa: B023 - called in this pass
        res[f"run/{mode}/staged"] = np.array(staged.losses_to_floats(losses))
        res[f"run/{mode}/stages"] = np.array(stages[:len(stages) // 3])
        staged.close()
    return res


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))

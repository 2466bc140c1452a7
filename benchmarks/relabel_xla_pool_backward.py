"""One-off: move the max-pool backward of stored JAX GPU results from op class ``other`` to
``pooling``, where the stored names show it.

Until the commit that added :func:`dlperf.measure.breakdown.xla.is_instruction_kernel`, an XLA:GPU
kernel named after its fusion (``input_scatter_fusion_8``, the instruction
``input_scatter_fusion.8`` with ``.`` made ``_``) was read by the classifier before the
primitive of the fusion, and the ``scatter`` in the name put it in ``other`` (the class of an
embedding's backward). For GoogLeNet and VGG-16 those fusions are the max-pool backward: JAX's
``select_and_scatter``, which XLA expands to a scatter; only the fusion without a number
(``input_scatter_fusion``, whose kernel name equals the instruction's) was read by its
primitive and got ``pooling``, the class torch gives ``max_pool_backward_nhwc``.

Evidence that every such fusion of these two models is a max-pool backward: the compiled train
step of ``googlenet_tiny`` and ``vgg16_tiny`` (the same Flax code, compiled for the CPU) has
13 and 5 ``scatter`` instructions whose op_name ends in ``select_and_scatter`` (torch runs
``max_pool_backward_nhwc`` 13 and 5 times per step) and one ``scatter-add`` of the loss
(``take_along_axis``), which the classifier puts in ``loss`` by its optax source frame, never
in ``other``. No other scatter is in these steps.

Only the names the result stored (``op_classes.top_ops``: the 15 largest ops) can be moved;
the rest of ``other`` stays where it was. Each changed result keeps what it was in
``op_classes.relabelled`` (names, seconds per iteration moved, the classes before).

    PYTHONPATH=src python benchmarks/relabel_xla_pool_backward.py benchmarks/results/h200/breakdown.db
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import sys

#: Models whose every XLA scatter fusion outside the loss is a max-pool backward (above).
MODELS = ("googlenet", "vgg16")
_SCATTER_FUSION = re.compile(r"^(?:input|loop)_scatter_fusion(?:_\d+)?$")



def reseal(db: sqlite3.Connection, rid: int) -> None:
    """The row's checksums after this deliberate rewrite (dlperf.results.rowcheck), where the
    file has them; otherwise the next writer seals the row."""
    from dlperf.results.rowcheck import seal
    from dlperf.results.rows import COLUMNS

    if db.execute("SELECT 1 FROM sqlite_master WHERE name='row_sums'").fetchone():
        seal(db, rid, COLUMNS)

def relabel_result(r: dict) -> dict | None:
    """Move the ``other`` time of ``r``'s stored scatter fusions to ``pooling`` (in place).

    Returns the record kept in ``op_classes.relabelled``, or None when nothing applies (not a
    JAX GPU result of :data:`MODELS`, no such name, stored after the fix, or done before).
    """
    oc = r.get("op_classes") or {}
    if (r.get("framework") != "jax" or r.get("device") != "cuda" or r.get("model") not in MODELS
            or "top_by_class" in oc or "relabelled" in oc or not oc.get("per_iter_s")):
        return None
    moved = [t for t in oc.get("top_ops") or []
             if t.get("class") == "other" and _SCATTER_FUSION.match(str(t.get("name")))]
    if not moved:
        return None
    per = oc["per_iter_s"]
    s = math.fsum(float(t["s"]) for t in moved)
    if s > per.get("other", 0.0) * (1 + 1e-9):
        raise ValueError(f"{r.get('model')}: the names hold {s} s, more than other's "
                         f"{per.get('other')} s")
    record = {"by": "benchmarks/relabel_xla_pool_backward.py", "from": "other",
              "to": "pooling", "s": s, "names": [t["name"] for t in moved],
              "per_iter_s_before": {"other": per.get("other", 0.0),
                                    "pooling": per.get("pooling", 0.0)},
              "why": "XLA:GPU kernels named after their fusion were read before the fusion's "
                     "primitive (select_and_scatter: the max-pool backward)"}
    per["other"] = max(per.get("other", 0.0) - s, 0.0)
    per["pooling"] = per.get("pooling", 0.0) + s
    for t in moved:
        t["class"] = "pooling"
    oc["relabelled"] = record
    return record


def relabel(path: str) -> list[tuple[int, dict]]:
    """Relabel every applicable row of the store at ``path``; returns (id, record) of each."""
    db = sqlite3.connect(path)
    out = []
    with db:
        for rid, blob in db.execute("SELECT id, result_json FROM results WHERE framework='jax'"
                                    ).fetchall():
            r = json.loads(blob)
            rec = relabel_result(r)
            if rec is None:
                continue
            db.execute("UPDATE results SET result_json=? WHERE id=?", (json.dumps(r), rid))
            reseal(db, rid)
            out.append((rid, rec))
    db.close()
    return out


if __name__ == "__main__":
    for p in sys.argv[1:]:
        for rid, rec in relabel(p):
            print(f"{p} #{rid}: {rec['s'] * 1e3:.4g} ms other -> pooling ({len(rec['names'])} "
                  f"names: {', '.join(rec['names'])})")

"""A/B of the torch CUDA breakdown's reconciliation between two source trees (issue 19 check):
``PYTHONPATH=TREE/src python benchmarks/breakdown_ab.py OUT.json``: resnet50 bf16 b=64 eager with
--breakdown (the settings of tests/integration/test_breakdown_frameworks.py), fused median,
phase sums, rel_diff and reason, written as JSON."""
import json
import sys
import tempfile

from dlperf.config import IterationPolicy, make_run_config
from dlperf.worker import run_config

out = {}
for rep in range(2):
    with tempfile.TemporaryDirectory() as d:
        cfg = make_run_config(model="resnet50", batch_size=64, device="cuda", precision="bf16",
                              iterations=IterationPolicy(min_iters=20, min_time_s=1.0),
                              breakdown=True, trace_dir=d)
        r = run_config(cfg)
    bd = r.get("breakdown") or {}
    out[rep] = {"status": r["status"], "fused_median_s": (r.get("summary") or {}).get("median"),
                "rel_diff": bd.get("rel_diff"), "reason": bd.get("reason"),
                "phases": {k: v for k, v in bd.items() if isinstance(v, (int, float, str))},
                "busy_s": (r.get("trace") or {}).get("busy_s")}
    print(rep, json.dumps(out[rep])[:600], flush=True)
json.dump(out, open(sys.argv[1], "w"), indent=1, default=str)

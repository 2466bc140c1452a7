"""Which stored series a prediction of a stored one-device point fits: the point's own file's
(its host session) or the one with the most batch sizes (the point's file on ties).

For every stored one-device measurement whose configuration is stored in 2+ results files, on
one side of the frozen split, both rules predict it with every stored measurement of the point
withheld (as ``dlperf predict`` withholds them); printed: the rows where the rules fit different
files, their median and mean absolute error, and which is closer. ``api._series_file`` is the
rule ``predict`` uses (chosen on development: see docs/perfmodel.md, "Which stored series").

    PYTHONPATH=src python benchmarks/series_choice.py [development|test]
"""
import statistics as st
import sys
import time
from collections import defaultdict

from dlperf.perfmodel import model as pm
from dlperf.perfmodel.api import records_of, shared_fits
from dlperf.perfmodel.calibrate import Calibration, Config
from dlperf.perfmodel.records import point_id
from dlperf.validation import split as sp

DB = ["benchmarks/results/h200", "benchmarks/results/h200x2"]
recs = records_of(DB)
shared = shared_fits(recs)
spl = sp.load()
side_want = sys.argv[1] if len(sys.argv) > 1 else "development"
# candidate points: one-device, not variant, config stored in >= 2 files
pts = [p for p in recs.points if p.world_size == 1 and not p.variant]
files_of = defaultdict(set)
for p in pts:
    if not p.instrumented:
        files_of[Config.of(p)].add(p.source)
keys = defaultdict(list)
for p in pts:
    c = Config.of(p)
    if len(files_of[c]) >= 2 and spl.side_of_model(p.model) == side_want:
        keys[(c, p.per_device_batch)].append(p)
rows = []
t0 = time.time()
for (c, b), ps in sorted(keys.items(), key=lambda kv: (kv[0][0].label(), kv[0][1])):
    cal = Calibration(recs, lambda p, c=c, b=b: c.matches(p) and p.world_size == 1
                      and p.per_device_batch == b, share_efficiencies=shared)
    ser = cal.series(c)
    if not ser:
        continue
    nb = {s[0].source: len({p.batch_size for p in s}) for s in ser}
    cache: dict = {}

    def pred(src, cache=cache, cal=cal, c=c, b=b):
        if src not in cache:
            try:
                one = pm.from_series(cal, c, b, src)
            except (LookupError, ValueError):
                one = pm.from_series(cal, c, b, None)
            cache[src] = (one.step_time_s, one.fit.result_ids[0].rsplit(":", 1)[0], one.bound)
        return cache[src]
    for p in ps:
        if p.instrumented:
            continue
        a = pred(p.source)                        # rule A: the point's own file
        best = max(nb.values())
        longest = [s for s, n in nb.items() if n == best]
        bsrc = p.source if p.source in longest else ser[0][0].source
        bb = pred(bsrc)                           # rule B: most batch sizes, own file on ties
        m = p.step_time_s
        rows.append(dict(cfg=c.label(), b=b, point=point_id(p), meas=m, a=a[0], b_=bb[0],
                         a_src=a[1], b_src=bb[1],
                         bound=bb[2], differ=a[1] != bb[1],
                         ea=abs(a[0] / m - 1), eb=abs(bb[0] / m - 1)))
print(f"{len(rows)} measurements, {time.time()-t0:.0f}s", file=sys.stderr)
d = [r for r in rows if r["differ"]]
def summ(rs, k): return f"{100*st.median(r[k] for r in rs):.2f}%" if rs else "-"
print(f"{side_want}: {len(rows)} stored measurements of configurations in 2+ files; rules differ on {len(d)}")
print(f"  where they differ: MdAPE own-file {summ(d,'ea')}, longest {summ(d,'eb')}; "
      f"longest closer on {sum(r['eb'] < r['ea'] for r in d)}, own-file closer on {sum(r['ea'] < r['eb'] for r in d)}")
if d:
    print(f"  mean APE own-file {100 * st.mean(r['ea'] for r in d):.2f}%, "
          f"longest {100 * st.mean(r['eb'] for r in d):.2f}%")
for bnd in ("host", "device"):
    dd = [r for r in d if r["bound"] == bnd]
    print(f"  {bnd}-bound ({len(dd)}): own-file {summ(dd,'ea')}, longest {summ(dd,'eb')}")
print(f"  all rows: own-file {summ(rows,'ea')}, longest {summ(rows,'eb')}")

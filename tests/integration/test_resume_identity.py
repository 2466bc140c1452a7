"""What makes a point "already measured": a source model's code (its file, its entry point's
module, an ``hf:`` config) is part of it, and a tagged run resumes a point of the thread policy
at whatever thread count it chose then (dlperf.resume)."""

from __future__ import annotations

import io
import os
import textwrap

import pytest
from rich.console import Console

from dlperf import sweep
from dlperf.config import make_run_config
from dlperf.results.schema import failure_record
from dlperf.results.store import ResultStore
from dlperf.resume import code_changes, resume_plan, thread_variants
from dlperf.zoo import get_spec

torch = pytest.importorskip("torch")

NET = textwrap.dedent('''
    import torch

    def mlp(width: int = 8):
        model = torch.nn.Sequential(torch.nn.Linear(4, width), torch.nn.ReLU(),
                                    torch.nn.Linear(width, 2))
        def make_batch(batch_size, generator, device):
            return (torch.randn(batch_size, 4, generator=generator, device=device),
                    torch.randint(0, 2, (batch_size,), generator=generator, device=device))
        return model, make_batch, torch.nn.functional.cross_entropy
''')


def _edit(path, text):
    path.write_text(text)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a later version, surely


def _fail(cfg):
    """A runner that stores a final failure at once (no worker): enough to be 'done'."""
    return failure_record(cfg, "oom", "scripted")


def test_an_edited_file_model_is_measured_again_with_a_notice(tmp_path):
    net = tmp_path / "net.py"
    net.write_text(NET)
    name = f"file:{net}:mlp"
    code = get_spec(name).code
    assert code and code.startswith("sha256:") and len(code) == 7 + 16
    db = tmp_path / "r.db"
    out = io.StringIO()
    con = Console(file=out, width=250)

    def go():
        cfg = make_run_config(model=name, batch_size=4, device="cpu", threads=1)
        with ResultStore(str(db)) as store:
            return sweep.execute([cfg], store, runner=_fail, console=con, show_progress=False)

    assert go().ran == 1
    again = go()
    assert again.ran == 0 and again.skipped == 1  # the same code: resumed
    _edit(net, NET.replace("torch.nn.ReLU()", "torch.nn.Tanh()"))  # same sizes, new code
    assert get_spec(name).code != code
    edited = go()
    assert edited.ran == 1 and edited.skipped == 0
    assert "1 stored point(s) of file:" in out.getvalue() and "measured again" in out.getvalue()
    with ResultStore(str(db), read_only=True) as store:
        recs = store.records(latest=False, samples=False)
        assert [r.identity.spec.code for r in recs] == [code, get_spec(name).code]
        assert code_changes([make_run_config(model=name, batch_size=4, device="cpu",
                                             threads=1)], store, store.done_keys()) == []


def test_a_tagged_run_also_remeasures_edited_code(tmp_path):
    net = tmp_path / "net.py"
    net.write_text(NET)
    name = f"file:{net}:mlp"
    cfg = make_run_config(model=name, batch_size=4, device="cpu", threads=1)
    db = tmp_path / "t.db"
    with ResultStore(str(db)) as store:
        store.add({**_fail(cfg).to_dict(), "tag": "v1"})
    lines: list[str] = []
    todo, _, n = resume_plan([cfg], str(db), "v1", rerun=False, retry_failed=False,
                             notice=lines.append)
    assert todo == [] and n == 1 and not lines
    _edit(net, NET + "\n# tuned\n")
    cfg2 = make_run_config(model=name, batch_size=4, device="cpu", threads=1)
    todo, _, n = resume_plan([cfg2], str(db), "v1", rerun=False, retry_failed=False,
                             notice=lines.append)
    assert [p.run_key() for p in todo] == [cfg2.run_key()] and n == 0
    assert len(lines) == 1 and "measured with other code" in lines[0]


def test_a_tag_resumes_a_thread_policy_point_at_the_count_it_chose(tmp_path):
    """``--tag v1`` twice on the CPU with the automatic thread count: the point stored under
    the policy (threads=1, ``env.thread_policy.policy == "auto"``) is done, whatever the
    count now; one whose threads were given (no policy record) is not taken for it."""
    cfg = make_run_config(model="fcn5_tiny", framework="torch", batch_size=8, device="cpu")
    assert cfg.hardware.threads is None and thread_variants(cfg, usable=2)[0].hardware.threads == 1
    chosen = cfg.with_(threads=1)
    db = tmp_path / "p.db"
    with ResultStore(str(db)) as store:
        store.add({**_fail(chosen).to_dict(), "tag": "v1",
                   "env": {"thread_policy": {"policy": "auto", "threads": 1}}})
        store.add({**_fail(chosen).to_dict(), "tag": "v2"})  # threads given by the user under v2
    todo, _, n = resume_plan([cfg], str(db), "v1", rerun=False, retry_failed=False)
    assert todo == [] and n == 1
    todo, _, n = resume_plan([cfg], str(db), "v2", rerun=False, retry_failed=False)
    assert todo == [cfg] and n == 0

"""dlperf.api: the examples of docs/api.md run as written, and the API's own errors.

Every ```python block of docs/api.md is executed in order in one namespace, in a fresh working
folder; a block whose info string has ``file=NAME`` is written to NAME instead (the page shows
a user's model file that a later block names as ``file:NAME:FUNCTION``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from dlperf import api  # noqa: E402
from dlperf.errors import ConfigError, UnavailableError  # noqa: E402

DOC = Path(__file__).resolve().parents[2] / "docs" / "api.md"
BLOCK = re.compile(r"^```python([^\n]*)\n(.*?)^```", re.M | re.S)
QUICK = {"min_iters": 4, "min_time_s": 0.0, "warmup_window": 2, "max_warmup_iters": 4}


def doc_blocks() -> list[tuple[str, str]]:
    """``(info string, code)`` of each ```python block of docs/api.md, in order."""
    return [(m.group(1).strip(), m.group(2)) for m in BLOCK.finditer(DOC.read_text())]


@pytest.fixture
def threads_restored():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_the_page_has_examples():
    blocks = doc_blocks()
    assert len(blocks) >= 5
    assert [info for info, _ in blocks if info] == ["file=mynet.py"]
    code = "\n".join(c for _, c in blocks)
    for call in ("api.run(", "api.sweep(", "api.to_dataframe(", "get_spec("):
        assert call in code


def test_docs_api_examples_run(tmp_path, monkeypatch, threads_restored, capsys):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {"__name__": "docs_api"}
    for i, (info, code) in enumerate(doc_blocks()):
        m = re.search(r"file=(\S+)", info)
        if m:
            (tmp_path / m.group(1)).write_text(code)
            continue
        exec(compile(code, f"{DOC}:block{i}", "exec"), namespace)  # noqa: S102
    sys.modules.pop("mynet", None)
    df = namespace["df"]
    assert len(df) == 6 and set(df["status"]) == {"ok"}
    assert "result_json" not in df.columns and "step_time_median_s" in df.columns
    mlp = f"file:{tmp_path / 'mynet.py'}:mlp"
    assert namespace["mlp"] == mlp
    assert sorted(df.loc[df["model"] == mlp, "batch_size"]) == [8, 16]
    assert (df["samples_per_s"] > 0).all()
    printed = capsys.readouterr().out
    assert "ms per iteration" in printed and "tokens/s" in printed


def test_run_in_a_worker_process_and_store(tmp_path):
    """The default: a fresh worker process per point, as `dlperf run` does."""
    db = tmp_path / "r.db"
    r = api.run("fcn5_tiny", batch_size=4, device="cpu", threads=1, iterations=QUICK, db=db)
    assert r.identity.status == "ok", r.identity.error
    assert r.worker.pid != __import__("os").getpid()
    df = api.to_dataframe(db)
    assert list(df["model"]) == ["fcn5_tiny"] and df["samples_per_s"][0] > 0


def test_to_dataframe_of_dicts_with_filters():
    rows = [{"model": "a", "status": "ok", "batch_size": 4},
            {"model": "b", "status": "error", "batch_size": 8}]
    df = api.to_dataframe(rows, status="ok")
    assert list(df["model"]) == ["a"] and "result_json" not in df.columns
    with pytest.raises(ConfigError, match="unknown result column 'stauts'"):
        api.to_dataframe(rows, stauts="ok")
    with pytest.raises(ConfigError, match="got an int"):
        api.to_dataframe(3)
    with pytest.raises(ConfigError, match="does not exist"):
        api.to_dataframe("no/such/results.db")


def test_to_dataframe_without_pandas(monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(UnavailableError, match="pip install pandas"):
        api.to_dataframe([])


def test_bad_points_raise_before_running():
    with pytest.raises(ConfigError, match="batch_size"):
        api.run("fcn5_tiny", batch_size=0, in_process=True)
    with pytest.raises(ConfigError, match="takes no other fields"):
        api.run(api.config("fcn5_tiny", batch_size=2), batch_size=4)
    with pytest.raises(ConfigError, match=r"grid\[0\]"):
        api.sweep(grid=[{"model": ["fcn5_tiny"], "batch_sise": [2]}], quiet=True)
    with pytest.raises(ConfigError, match="did you mean 'fcn5_tiny'"):
        api.sweep(grid=[{"model": ["fcn5_tiyn"]}], quiet=True)

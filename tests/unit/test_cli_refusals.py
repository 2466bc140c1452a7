"""Silent acceptances the fresh-user trial found (its item 10), now refused or noted before
anything is measured: empty items in list flags, an empty or impossible ``--report``, a tag
that no result has, and ``compare X X``. In-process command line (nothing here measures)."""

from __future__ import annotations

import pytest

from cli_here import cli
from fakes import make_db

RUN = ("run", "--model", "fcn5_tiny", "--framework", "torch", "--device", "cpu")


@pytest.mark.parametrize("flag, value", [
    ("--batch-size", "8,,32"), ("--batch-size", "8,32,"), ("--batch-size", ",8"),
    ("--threads", "1,,2"), ("--precision", "fp32,,bf16"), ("--mode", "eager,"),
    ("--model", "fcn5_tiny,,fcn8_tiny"), ("--nproc", "1,,2"), ("--loader-workers", "0,,2"),
    ("--compile-mode", "default,,max-autotune"), ("--loader-impl", "auto,"),
])
def test_an_empty_item_in_a_list_flag_is_refused(tmp_path, flag, value):
    db = tmp_path / "r.db"
    args = [a for a in RUN if a not in ("--model", "fcn5_tiny")] if flag == "--model" else RUN
    code, text = cli(*args, flag, value, "--db", str(db))
    assert code == 2, text
    assert f"{flag} {value!r} has an empty item" in text, text
    assert not db.exists()  # refused before anything ran


@pytest.mark.parametrize("args", [
    ("results", "--model", "fcn5_tiny,,fcn8_tiny"), ("results", "--status", "ok,"),
    ("results", "--tag", "v1,,v2"), ("compare", "{db}", "{db}", "--model", ",fcn5_tiny"),
    ("report", "-o", "{out}", "-f", "md,,html"),
])
def test_an_empty_item_in_a_reader_list_flag_is_refused(tmp_path, args):
    db = make_db(tmp_path / "r.db")
    args = [a.format(db=db, out=tmp_path / "rep") for a in args]
    if args[0] != "compare":
        args += ["--db", str(db)]
    code, text = cli(*args)
    assert code == 2 and "has an empty item" in text, text


def test_an_empty_report_flag_is_refused(tmp_path):
    db = tmp_path / "r.db"
    code, text = cli(*RUN, "--report", "", "--db", str(db))
    assert code == 2 and "--report is empty" in text, text
    assert not db.exists()
    sweep = tmp_path / "s.yaml"
    sweep.write_text("name: s\ngrid:\n  - model: fcn5_tiny\n")
    code, text = cli("sweep", str(sweep), "--report", "  ")
    assert code == 2 and "--report is empty" in text, text


def test_a_report_folder_under_a_file_is_refused_before_measuring(tmp_path):
    a_file = tmp_path / "r.db"
    a_file.write_text("not a folder")
    db = tmp_path / "out.db"
    for rep in (a_file / "sub", a_file / "sub" / "deeper"):
        code, text = cli(*RUN, "--report", str(rep), "--db", str(db))
        assert code == 2, text
        assert f"is under {str(a_file)!r}, which is a file" in text, text
    assert not db.exists()  # nothing measured, nothing stored
    assert a_file.read_text() == "not a folder"


def test_a_report_folder_that_can_be_made_passes_the_check(tmp_path):
    from dlperf.cli.common import check_out_dir

    check_out_dir(tmp_path / "new" / "rep", "--report")  # parents made later: fine
    check_out_dir(tmp_path, "--report")  # an existing folder: fine


def test_results_with_a_tag_no_result_has_is_refused(tmp_path):
    db = make_db(tmp_path / "r.db")
    code, text = cli("results", "--db", str(db), "--tag", "nosuch")
    assert code == 2, text
    assert f"no result in {db} has tag 'nosuch'" in text and "tags there: v1, v2" in text
    code, text = cli("results", "--db", str(db), "--tag", "v1,v1x")
    assert code == 2 and "has tag 'v1x'; did you mean 'v1'?" in text, text
    # the same exit status as another filter that matches nothing in the file
    assert cli("results", "--db", str(db), "--model", "nosuch")[0] == code
    code, text = cli("results", "--db", str(db), "--tag", "v2", "-f", "csv")
    assert code == 0 and text.count("fcn5_tiny") == 1, text
    untagged = make_db(tmp_path / "u.db", tags=(None, None))
    code, text = cli("results", "--db", str(untagged), "--tag", "v1")
    assert code == 2 and "tags there: none" in text, text


def test_compare_a_file_with_itself_notes_it(tmp_path, monkeypatch):
    db = make_db(tmp_path / "r.db")
    code, text = cli("compare", str(db), str(db))
    assert code == 0, text
    assert f"note: BASE and NEW are the same file ({db})" in text
    monkeypatch.chdir(tmp_path)
    code, text = cli("compare", "r.db", "./r.db")
    assert code == 0 and "note: BASE r.db and NEW ./r.db are the same file" in text, text
    code, text = cli("compare", "--db", str(db), "v1", "v1")
    assert "same revision (v1)" in text, text
    other = make_db(tmp_path / "o.db")
    code, text = cli("compare", str(db), str(other))
    assert code == 0 and "same file" not in text, text


def test_run_help_names_every_suite(monkeypatch):
    """`dlperf run --help` names every suite (``tiny`` included): the list comes from the
    suites registry, not from a list written in the help."""
    from dlperf.zoo import SUITES

    monkeypatch.setenv("COLUMNS", "300")
    code, text = cli("run", "--help")
    assert code == 0
    assert f"A suite: {', '.join(SUITES)} (see" in text and "tiny" in SUITES


@pytest.mark.parametrize("flag, choices", [
    ("--optimizer-impl", "auto, fused, foreach or single"),
    ("--compile-mode", "default, reduce-overhead, max-autotune or max-autotune-no-cudagraphs"),
    ("--loader-impl", "auto, processes or threads")])
def test_an_empty_value_is_refused_not_read_as_the_default(tmp_path, flag, choices):
    """`--optimizer-impl ''`, `--compile-mode ''` and `--loader-impl ''` are refused, not run
    silently as their defaults."""
    db = tmp_path / "r.db"
    code, out = cli(*RUN, "--batch-size", "8", flag, "", "--db", str(db))
    assert code == 2 and f"{flag} '' is empty; give {choices}" in out
    assert not db.exists()


def test_results_since_after_every_result_says_so(tmp_path):
    """`--since` past every result says that no result is that recent, not an empty table."""
    db = make_db(tmp_path / "r.db")
    code, out = cli("results", "--db", str(db), "--since", "2099-01-01")
    assert code == 0 and "note: no result in" in out and "at or after 2099-01-01" in out
    assert "the newest is from 20" in out
    code, out = cli("results", "--db", str(db), "--since", "2000-01-01")
    assert code == 0 and "note: no result" not in out


def test_results_output_of_another_format_says_which_suffixes_work(tmp_path):
    """``dlperf results -o x.md`` (or ``.txt``): results writes CSV or JSON only; the refusal
    names the suffixes that choose them and where the Markdown table comes from, and writes
    nothing."""
    db = make_db(tmp_path / "r.db")
    for name in ("out.md", "out.txt"):
        code, out = cli("results", "--db", str(db), "-o", str(tmp_path / name))
        assert code == 2 and ".csv or .json" in out and "dlperf report -o DIR" in out, out
        assert not (tmp_path / name).exists()
    code, _ = cli("results", "--db", str(db), "-o", str(tmp_path / "out.csv"))
    assert code == 0 and (tmp_path / "out.csv").read_text().startswith("id,")

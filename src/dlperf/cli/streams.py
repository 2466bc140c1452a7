"""Output streams that a terminal without UTF-8 can take: ``PYTHONIOENCODING=ascii`` (or a
``C``/POSIX locale) made ``dlperf results`` end in a ``UnicodeEncodeError`` traceback at the
first ``⚠`` of its table. :func:`make_safe` gives stdout and stderr an error handler that
writes each character the stream's encoding lacks as its nearest ASCII (:data:`ASCII`), or
``?``; nothing changes on a UTF-8 stream."""

from __future__ import annotations

import codecs
import sys
from typing import Any

__all__ = ["ASCII", "HANDLER", "make_safe"]

#: The characters dlperf prints that ASCII lacks, and what stands for each.
ASCII = {"–": "-", "—": "-", "−": "-", "⚠": "!", "·": ".", "✗": "x", "∩": "^", "…": "...",
         "×": "x", "†": "+", "‡": "++", "±": "+-", "µ": "u", "≈": "~", "≥": ">=", "≤": "<=",
         "→": "->", "✓": "v", "°": " deg", "‖": "||", "²": "^2", "█": "#", "▏": "|", "━": "-",
         "─": "-", "│": "|", "╭": "+", "╮": "+", "╰": "+", "╯": "+", "┃": "|", "┏": "+",
         "┓": "+", "┗": "+", "┛": "+", "╸": "-", "╺": "-"}
#: The name of the codec error handler :func:`make_safe` registers.
HANDLER = "dlperf-ascii"


def _replace(err: UnicodeError) -> tuple[str, int]:
    if not isinstance(err, UnicodeEncodeError):
        raise err
    bad = err.object[err.start:err.end]
    return "".join(ASCII.get(c, "?") for c in bad), err.end


codecs.register_error(HANDLER, _replace)


def make_safe(*streams: Any) -> None:
    """Give each of ``streams`` (default: stdout and stderr) whose encoding is not a UTF one
    the :data:`HANDLER` error handler, so text it cannot encode is written in ASCII instead of
    raising. Streams without ``reconfigure`` (a test's capture) are left alone."""
    for s in streams or (sys.stdout, sys.stderr):
        enc = str(getattr(s, "encoding", "") or "").lower().replace("-", "").replace("_", "")
        if enc.startswith("utf") or not hasattr(s, "reconfigure"):
            continue
        try:
            s.reconfigure(errors=HANDLER)
        except (ValueError, OSError):  # a closed or detached stream
            continue

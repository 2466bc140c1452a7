"""Screenshots of a report page in headless Chromium at a given viewport width (a phone's
too: the command line's --window-size stops at 500 px), through the DevTools protocol over
a pipe (--remote-debugging-pipe; stdlib only).

    python shoot.py PAGE.html OUT.png --width 1400 [--height 2400] [--mobile] [--full]
        [--section ID] [--probe]

--section ID: only that section of the page is shown (the others hidden), from its top.
--full: the whole page (or section), not only the first --height pixels.
--probe: print the page's width against the viewport's and every box that scrolls sideways.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import time
from pathlib import Path


class Pipe:
    def __init__(self, exe: str = "/usr/bin/chromium") -> None:
        r_in, w_in = os.pipe()  # we write commands -> chromium's fd 3
        r_out, w_out = os.pipe()  # chromium writes on fd 4 -> we read
        self.proc = subprocess.Popen(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-pipe", "about:blank"],
            pass_fds=(3, 4, r_in, w_out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=lambda: (os.dup2(r_in, 3), os.dup2(w_out, 4)) and None)
        os.close(r_in)
        os.close(w_out)
        self.w, self.r = w_in, r_out
        self.buf = b""
        self.n = 0
        self.events: list[dict] = []

    def _read(self) -> dict:
        while b"\0" not in self.buf:
            chunk = os.read(self.r, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self.buf += chunk
        msg, _, self.buf = self.buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method: str, session: str | None = None, **params) -> dict:
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params}
        if session:
            msg["sessionId"] = session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        while True:
            m = self._read()
            if m.get("id") == self.n:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, name: str, timeout: float = 60) -> None:
        end = time.time() + timeout
        while time.time() < end:
            if any(e.get("method") == name for e in self.events):
                return
            self.events.append(self._read())
        raise TimeoutError(name)

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except Exception:
            pass
        self.proc.wait(timeout=30)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("page")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--width", type=int, default=1400)
    ap.add_argument("--height", type=int, default=2400)
    ap.add_argument("--mobile", action="store_true")
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--section")
    ap.add_argument("--probe", action="store_true")
    a = ap.parse_args()
    p = Pipe()
    try:
        tid = next(t["targetId"] for t in p.call("Target.getTargets")["targetInfos"]
                   if t["type"] == "page")
        s = p.call("Target.attachToTarget", targetId=tid, flatten=True)["sessionId"]
        p.call("Page.enable", s)
        p.call("Emulation.setDeviceMetricsOverride", s, width=a.width, height=a.height,
               deviceScaleFactor=2 if a.mobile else 1, mobile=a.mobile)
        p.call("Page.navigate", s, url=Path(a.page).resolve().as_uri())
        p.wait_event("Page.loadEventFired")
        if a.section:
            p.call("Runtime.evaluate", s, expression=(
                "document.querySelectorAll('section.card').forEach(function(e){"
                f"if(e.id!=={json.dumps(a.section)})e.style.display='none'}});"
                "document.querySelector('nav.toc').style.display='none';"
                "window.dispatchEvent(new Event('resize'));"))
        time.sleep(3)  # plotly's responsive resize
        if a.probe:
            r = p.call("Runtime.evaluate", s, returnByValue=True, expression=(
                "(function(){var o=[];document.querySelectorAll('.scroll').forEach("
                "function(e){if(e.offsetParent&&e.scrollWidth>e.clientWidth+1){var s="
                "e.closest('section');o.push((s?s.id:'?')+':'+e.scrollWidth+'>'+"
                "e.clientWidth)}});return 'page '+document.documentElement.scrollWidth+"
                "' viewport '+window.innerWidth+' boxes that scroll: '+(o.join(' ')||'none')"
                "})()"))
            print(r["result"]["value"])
        if a.out:
            m = p.call("Page.getLayoutMetrics", s)["cssContentSize"]
            h = m["height"] if a.full else min(a.height, m["height"])
            shot = p.call("Page.captureScreenshot", s, format="png", captureBeyondViewport=True,
                          clip={"x": 0, "y": 0, "width": a.width, "height": h, "scale": 1})
            Path(a.out).write_bytes(base64.b64decode(shot["data"]))
    finally:
        p.close()


if __name__ == "__main__":
    main()

"""Drive a real headless Chromium over the Chrome DevTools Protocol (CDP), for the report tests.

Chromium is started with ``--remote-debugging-port=0``; it writes the port it bound to the
``DevToolsActivePort`` file in its profile directory, which we poll. One websocket to the
browser endpoint carries everything: a page target is attached in flattened mode, so page
commands carry its ``sessionId``. Events that arrive while waiting for a reply are kept.

Run as a script it takes a screenshot of an HTML file (how ``docs/report.png`` is made):
``python tests/report/chromium_cdp.py reports/streamguard.html docs/report.png``.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from websockets.sync.client import ClientConnection, connect

CHROMIUM = Path("/usr/bin/chromium")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-address=127.0.0.1",
    "--remote-debugging-port=0",
)
STARTUP_TIMEOUT = 30.0
COMMAND_TIMEOUT = 30.0


class Page:
    """One attached page: send commands, wait for events, read what the page logged."""

    def __init__(self, ws: ClientConnection, session_id: str | None) -> None:
        self._ws = ws
        self._session = session_id
        self._ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    def _receive(self, timeout: float) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(self._ws.recv(timeout=timeout))
        return message

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        """Run one CDP command on the page and return its result; fail on a CDP error."""
        ident = next(self._ids)
        command: dict[str, Any] = {"id": ident, "method": method, "params": params}
        if self._session is not None:
            command["sessionId"] = self._session
        self._ws.send(json.dumps(command))
        deadline = time.monotonic() + COMMAND_TIMEOUT
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no CDP reply to {method} within {COMMAND_TIMEOUT} s"
            message = self._receive(left)
            if message.get("id") == ident and message.get("sessionId") == self._session:
                assert "error" not in message, f"CDP {method} failed: {message['error']}"
                result: dict[str, Any] = message.get("result", {})
                return result
            if "method" in message:
                self.events.append(message)

    def wait_event(self, method: str, timeout: float) -> dict[str, Any]:
        """The first event named ``method`` (already received or arriving within ``timeout``)."""
        for event in self.events:
            if event["method"] == method:
                return event
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"no {method} event within {timeout} s"
            message = self._receive(left)
            if "method" in message:
                self.events.append(message)
                if message["method"] == method:
                    return message

    def evaluate(self, expression: str) -> Any:
        """The JSON value of a JavaScript expression in the page (awaiting a promise)."""
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        assert "exceptionDetails" not in result, f"{expression!r} threw: {result}"
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float) -> Any:
        """Poll a JavaScript expression until it is truthy; fail naming it after ``timeout``."""
        deadline = time.monotonic() + timeout
        while not (value := self.evaluate(expression)):
            assert time.monotonic() < deadline, f"{expression!r} still falsy after {timeout} s"
            time.sleep(0.05)
        return value

    def screenshot(self, path: Path, *, full_page: bool = False) -> None:
        """Save a PNG of the viewport (or of the whole page)."""
        result = self.send("Page.captureScreenshot", format="png", captureBeyondViewport=full_page)
        path.write_bytes(base64.b64decode(result["data"]))

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions and error log entries seen so far."""
        found = []
        for event in self.events:
            method, params = event["method"], event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails']}")
            elif method == "Runtime.consoleAPICalled" and params["type"] in (
                "error",
                "warning",
                "assert",
            ):
                found.append(f"console.{params['type']}: {params['args']}")
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                found.append(f"log {params['entry']['level']}: {params['entry']['text']}")
        return found

    def requested_urls(self) -> list[str]:
        """Every URL the page asked the network stack for."""
        return [
            e["params"]["request"]["url"]
            for e in self.events
            if e["method"] == "Network.requestWillBeSent"
        ]


def _read_port_file(profile: Path, process: subprocess.Popen[bytes]) -> tuple[int, str]:
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while True:
        if port_file.exists():
            lines = port_file.read_text().split("\n")
            if len(lines) >= 2 and lines[0].isdigit() and lines[1].startswith("/"):
                return int(lines[0]), lines[1]
        assert process.poll() is None, f"chromium exited with status {process.returncode}"
        assert time.monotonic() < deadline, f"chromium wrote no DevToolsActivePort in {profile}"
        time.sleep(0.05)


@contextmanager
def chromium_page(workdir: Path, width: int = 1280, height: int = 900) -> Iterator[Page]:
    """A fresh headless Chromium (own profile under ``workdir``) with one page, domains on.

    Fails, never skips, when Chromium is not installed. The browser's whole process group is
    terminated and waited for on exit.
    """
    assert CHROMIUM.exists(), (
        f"{CHROMIUM} is missing: install Debian's chromium package (make install does, as root)"
    )
    profile = workdir / "chromium-profile"
    profile.mkdir(parents=True)
    log = (workdir / "chromium.log").open("wb")
    process = subprocess.Popen(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # Its singleton directories (org.chromium.Chromium.*) go here too, not left in /tmp.
        env={**os.environ, "TMPDIR": str(workdir)},
    )
    try:
        port, browser_path = _read_port_file(profile, process)
        with connect(
            f"ws://127.0.0.1:{port}{browser_path}", max_size=None, open_timeout=STARTUP_TIMEOUT
        ) as ws:
            browser = Page(ws, session_id=None)
            target = browser.send("Target.createTarget", url="about:blank")
            attached = browser.send(
                "Target.attachToTarget", targetId=target["targetId"], flatten=True
            )
            page = Page(ws, attached["sessionId"])
            for domain in ("Page", "Runtime", "Log", "Network"):
                page.send(f"{domain}.enable")
            page.send(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=height,
                deviceScaleFactor=1,
                mobile=False,
            )
            yield page
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        log.close()


def main(argv: list[str]) -> int:
    """``HTML PNG [WIDTH [ID]]``: save a screenshot of the top of the page ``HTML``, down to
    the bottom of the element ``ID`` (default: one screen, 1000 px)."""
    if not 2 <= len(argv) <= 4:
        print("usage: chromium_cdp.py PAGE.html OUT.png [WIDTH (default 1280) [ELEMENT_ID]]")
        return 2
    source, out = Path(argv[0]).resolve(), Path(argv[1])
    width = int(argv[2]) if len(argv) > 2 else 1280
    with (
        tempfile.TemporaryDirectory() as workdir,
        chromium_page(Path(workdir), width=width, height=1000) as page,
    ):
        page.send("Page.navigate", url=source.as_uri())
        page.wait_event("Page.loadEventFired", COMMAND_TIMEOUT)
        if len(argv) == 4:
            bottom = page.evaluate(
                f"document.getElementById({json.dumps(argv[3])}).getBoundingClientRect().bottom"
            )
            page.send(
                "Emulation.setDeviceMetricsOverride",
                width=width,
                height=int(bottom) + 16,
                deviceScaleFactor=1,
                mobile=False,
            )
        page.screenshot(out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

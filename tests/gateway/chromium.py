"""Headless Chromium (Debian's `chromium`; scripts/setup.sh installs it) driven over the
Chrome DevTools Protocol with the `websockets` client: nothing is downloaded at run time
and no driver binary stands between. A fake microphone plays a WAV file
(--use-file-for-fake-audio-capture) and media permission prompts are accepted.

    with Chromium(wav, tmp_path) as browser:
        browser.open("http://127.0.0.1:8000/")
        browser.wait_for("window.voiceState.connected")
        png = browser.screenshot()
"""
from __future__ import annotations

import base64
import itertools
import json
import shutil
import subprocess
import time
from pathlib import Path

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--use-fake-ui-for-media-stream",
         "--use-fake-device-for-media-stream", "--autoplay-policy=no-user-gesture-required",
         "--remote-debugging-port=0", "--window-size=900,700"]


def chromium_path() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Chromium:
    def __init__(self, wav: Path, directory: Path, timeout_s: float = 60.0) -> None:
        self.wav, self.profile, self.timeout_s = Path(wav), Path(directory) / "profile", timeout_s
        self.proc: subprocess.Popen | None = None
        self.ws = None
        self.session = ""
        self._ids = itertools.count(1)

    def __enter__(self) -> "Chromium":
        from websockets.sync.client import connect

        self.profile.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([chromium_path(), *FLAGS, f"--user-data-dir={self.profile}",
                                      f"--use-file-for-fake-audio-capture={self.wav}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port, path = self._devtools_address()
            self.ws = connect(f"ws://127.0.0.1:{port}{path}", max_size=None, open_timeout=self.timeout_s)
            target = self.call("Target.createTarget", url="about:blank")["targetId"]
            self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
            self.call("Page.enable")
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self.ws is not None:
            self.ws.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)

    def _devtools_address(self) -> tuple[str, str]:
        """Chromium writes its DevTools port and browser path into the profile once it listens."""
        active = self.profile / "DevToolsActivePort"
        deadline = time.monotonic() + self.timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"chromium exited with {self.proc.returncode}"
            lines = active.read_text().split() if active.exists() else []
            if len(lines) >= 2:
                return lines[0], lines[1]
            time.sleep(0.05)
        raise TimeoutError(f"chromium did not open its DevTools port within {self.timeout_s} s")

    def call(self, method: str, **params) -> dict:
        """One DevTools command (on the page once attached); its result."""
        n = next(self._ids)
        message = {"id": n, "method": method, "params": params}
        if self.session and not method.startswith("Target."):
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        while True:
            reply = json.loads(self.ws.recv(timeout=self.timeout_s))
            if reply.get("id") == n:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})

    def open(self, url: str) -> None:
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout_s: float = 120.0, what: str = ""):
        """Polls `expression` on the page until it is truthy; its value."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            value = self.evaluate(expression)
            if value:
                return value
            time.sleep(0.1)
        raise TimeoutError(f"{what or expression} did not happen within {timeout_s} s "
                           f"(page state: {self.evaluate('JSON.stringify(window.voiceState || null)')})")

    def screenshot(self) -> bytes:
        return base64.b64decode(self.call("Page.captureScreenshot", format="png")["data"])

"""A minimal Chrome DevTools Protocol client (Python 3 stdlib only) for the dashboard tests
and bench/dashboard.

Browser() starts headless Chromium with --remote-debugging-pipe: Chromium reads commands
on its fd 3 and writes responses and events on its fd 4, each a JSON message ended by a NUL
byte (what Puppeteer's `pipe: true` uses). No port, nothing for another process to connect
to. A reader thread collects responses by id and keeps every event; Page (one tab, attached
with flatten=True so commands carry its sessionId) navigates, evaluates JavaScript, waits
for conditions, clicks, types and takes screenshots.

Browser.close() (also on `with` exit and at interpreter exit) asks Chromium to quit, then
kills its process group, reaps it and removes the temporary profile directory, so a failed
test leaves no chromium process behind. The binary is $TRAINTL_CHROMIUM, default `chromium`
on PATH.
"""
import atexit
import base64
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

# Page events kept for the tests (all events are kept; these are the ones enabled).
CONSOLE_EVENTS = ("Runtime.consoleAPICalled", "Runtime.exceptionThrown", "Log.entryAdded")


class CDPError(Exception):
    pass


def chromium_binary():
    """The Chromium to run, or None when there is none."""
    name = os.environ.get("TRAINTL_CHROMIUM", "chromium")
    if os.sep in name:
        return name if os.access(name, os.X_OK) else None
    return shutil.which(name)


def _high_fd(fd):
    """`fd` moved to a number >= 10 (close-on-exec), so that the child's redirections to 3
    and 4 cannot overwrite one pipe end with the other."""
    high = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return high


class Browser:
    def __init__(self, binary=None, window_size=(1280, 900), extra_args=(), timeout=30):
        self.binary = binary or chromium_binary()
        if not self.binary:
            raise CDPError("no chromium: install it (Debian: apt-get install chromium) or set "
                           "TRAINTL_CHROMIUM to its path")
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="traintl-chromium-")
        self.proc = None
        self._lock = threading.Lock()  # writes and the tables below
        self._cond = threading.Condition(self._lock)
        self._next_id = 0
        self._results = {}  # id -> message, for ids someone waits for
        self._waiting = set()
        self.events = []  # every event, in arrival order
        self._closed = False
        self._reader_error = None
        self.stderr_path = os.path.join(self.profile, "chromium.stderr")

        cmd_r, cmd_w = os.pipe()    # we write commands, chromium reads them on its fd 3
        resp_r, resp_w = os.pipe()  # chromium writes on its fd 4, we read
        cmd_r, resp_w = _high_fd(cmd_r), _high_fd(resp_w)
        args = [self.binary, "--headless=new", "--remote-debugging-pipe", "--no-sandbox",
                "--disable-gpu", f"--user-data-dir={self.profile}", "--no-first-run",
                "--no-default-browser-check", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--mute-audio",
                # Containers often give /dev/shm 64 MiB, too little for Chromium.
                "--disable-dev-shm-usage",
                f"--window-size={window_size[0]},{window_size[1]}"] + list(extra_args) + [
                "about:blank"]
        # A tiny Python wrapper puts the pipe ends on fds 3 and 4 and execs Chromium (no
        # preexec_fn: the caller may have threads; sh's redirections stop at fd 9).
        script = ("import os, sys; os.dup2(%d, 3); os.dup2(%d, 4); os.close(%d); os.close(%d); "
                  "os.execvp(sys.argv[1], sys.argv[1:])" % (cmd_r, resp_w, cmd_r, resp_w))
        stderr = open(self.stderr_path, "wb")
        try:
            self.proc = subprocess.Popen([sys.executable, "-c", script] + args,
                                         stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
                                         pass_fds=(cmd_r, resp_w), start_new_session=True)
        except BaseException:
            for fd in (cmd_r, cmd_w, resp_r, resp_w):
                os.close(fd)
            shutil.rmtree(self.profile, ignore_errors=True)
            raise
        finally:
            stderr.close()
        os.close(cmd_r)
        os.close(resp_w)
        self._out = cmd_w
        self._in = resp_r
        _live.add(self)
        self._reader = threading.Thread(target=self._read_loop, name="cdp-reader", daemon=True)
        self._reader.start()
        try:
            self.version = self.send("Browser.getVersion", timeout=timeout)
        except BaseException:
            self.close()
            raise

    # ---- transport -------------------------------------------------------------------------

    def _read_loop(self):
        buf = b""
        try:
            while True:
                chunk = os.read(self._in, 1 << 16)
                if not chunk:
                    break
                buf += chunk
                while b"\0" in buf:
                    raw, buf = buf.split(b"\0", 1)
                    msg = json.loads(raw)
                    with self._cond:
                        if "id" in msg:
                            if msg["id"] in self._waiting:
                                self._results[msg["id"]] = msg
                        else:
                            self.events.append(msg)
                        self._cond.notify_all()
        except Exception as e:  # a broken message: report it to whoever waits
            self._reader_error = e
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()

    def send(self, method, params=None, session_id=None, timeout=None, wait=True):
        """Sends a command; returns its result (or raises CDPError with its error), or with
        wait=False its id at once (for commands that block, e.g. a click opening a dialog)."""
        with self._cond:
            if self._closed:
                raise CDPError(f"{method}: the browser is gone ({self._gone_why()})")
            self._next_id += 1
            msg_id = self._next_id
            msg = {"id": msg_id, "method": method, "params": params or {}}
            if session_id:
                msg["sessionId"] = session_id
            if wait:
                self._waiting.add(msg_id)
            data = json.dumps(msg).encode() + b"\0"
            try:
                while data:
                    data = data[os.write(self._out, data):]
            except OSError as e:  # EPIPE: Chromium is gone
                self._waiting.discard(msg_id)
                raise CDPError(f"{method}: cannot send ({e}; {self._gone_why()})") from None
        if not wait:
            return msg_id
        deadline = time.monotonic() + (timeout or self.timeout)
        with self._cond:
            try:
                while msg_id not in self._results:
                    if self._closed:
                        raise CDPError(f"{method}: the browser is gone ({self._gone_why()})")
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise CDPError(f"{method}: no answer within {timeout or self.timeout} s")
                    self._cond.wait(left)
                reply = self._results.pop(msg_id)
            finally:
                self._waiting.discard(msg_id)
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error'].get('message')} "
                           f"{reply['error'].get('data', '')}".rstrip())
        return reply.get("result", {})

    def _gone_why(self):
        if self._reader_error:
            return f"reader: {self._reader_error!r}"
        if self.proc is not None and self.proc.returncode is None:
            try:  # not reaped here (WNOWAIT): close() still needs the process group
                info = os.waitid(os.P_PID, self.proc.pid,
                                 os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                info = None
            if info is not None:
                return f"chromium exited (status {info.si_status}): {self.stderr_tail(1500)}"
        return "pipe closed"

    def wait_event(self, method, predicate=None, timeout=None, start=0, session_id=None):
        """The first event `method` at index >= start (of self.events) for which predicate
        holds; waits for it."""
        deadline = time.monotonic() + (timeout or self.timeout)
        i = start
        with self._cond:
            while True:
                while i < len(self.events):
                    ev = self.events[i]
                    i += 1
                    if ev.get("method") != method:
                        continue
                    if session_id and ev.get("sessionId") != session_id:
                        continue
                    if predicate is None or predicate(ev.get("params", {})):
                        return ev.get("params", {})
                if self._closed:
                    raise CDPError(f"waiting for {method}: the browser is gone "
                                   f"({self._gone_why()})")
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CDPError(f"no {method} event within {timeout or self.timeout} s")
                self._cond.wait(left)

    # ---- pages -----------------------------------------------------------------------------

    def page(self):
        """The first tab (about:blank from the command line), attached."""
        deadline = time.monotonic() + self.timeout
        while True:
            targets = self.send("Target.getTargets")["targetInfos"]
            pages = [t for t in targets if t["type"] == "page"]
            if pages:
                break
            if time.monotonic() > deadline:
                raise CDPError(f"no page target: {targets}")
            time.sleep(0.05)
        session = self.send("Target.attachToTarget",
                            {"targetId": pages[0]["targetId"], "flatten": True})["sessionId"]
        return Page(self, session, pages[0]["targetId"])

    # ---- shutdown --------------------------------------------------------------------------

    def close(self):
        """Quits Chromium; always kills what is left of its process group, reaps it and
        removes the profile. Safe to call twice."""
        _live.discard(self)
        proc = self.proc
        if proc is not None and proc.returncode is None:
            try:
                if not self._closed:
                    self.send("Browser.close", timeout=5)
            except CDPError:
                pass
            # Until it is reaped, the exited browser (a zombie) keeps its pid and process
            # group id from being reused: wait without reaping, then kill the group's rest
            # (zygote, renderers, utility processes), then reap.
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and _group_members(proc.pid):
                time.sleep(0.05)
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                pass
        elif proc is not None:  # reaped already: kill what is left of its group by pid
            for pid in _group_members(proc.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
        # Chromium is gone, so the reader sees the end of its pipe; then the fds can go.
        if getattr(self, "_reader", None) is not None:
            self._reader.join(5)
        for name in ("_out", "_in"):
            fd = getattr(self, name, None)
            if fd is not None:
                setattr(self, name, None)
                try:
                    os.close(fd)
                except OSError:
                    pass
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None

    def leftover_processes(self):
        """Live processes of Chromium's process group (after close(): none)."""
        return _group_members(self.proc.pid) if self.proc is not None else []

    def stderr_tail(self, n=4000):
        try:
            with open(self.stderr_path, errors="replace") as f:
                return f.read()[-n:]
        except (OSError, TypeError):
            return ""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_live = set()


def _group_members(pgid):
    """Live (not zombie) processes of process group `pgid`."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry))
    return members


@atexit.register
def _close_all():
    for b in list(_live):
        b.close()


class Page:
    def __init__(self, browser, session_id, target_id):
        self.browser = browser
        self.session_id = session_id
        self.target_id = target_id
        for domain in ("Page", "Runtime", "Log"):
            self.send(f"{domain}.enable")

    def send(self, method, params=None, **kw):
        return self.browser.send(method, params, session_id=self.session_id, **kw)

    def mark(self):
        """An event index: wait_event(..., start=mark) sees only later events."""
        with self.browser._cond:
            return len(self.browser.events)

    def wait_event(self, method, predicate=None, timeout=None, start=0):
        return self.browser.wait_event(method, predicate, timeout, start, self.session_id)

    def events(self, method, start=0):
        with self.browser._cond:
            return [e.get("params", {}) for e in self.browser.events[start:]
                    if e.get("method") == method and e.get("sessionId") == self.session_id]

    def navigate(self, url, timeout=None):
        """Loads `url` and waits for its load event (not for a same-document navigation:
        only the fragment changes, which fires no load event)."""
        start = self.mark()
        res = self.send("Page.navigate", {"url": url})
        if res.get("errorText"):
            raise CDPError(f"navigate {url}: {res['errorText']}")
        if res.get("loaderId"):
            self.wait_event("Page.loadEventFired", start=start, timeout=timeout)

    def reload(self, ignore_cache=False, timeout=None):
        start = self.mark()
        self.send("Page.reload", {"ignoreCache": ignore_cache})
        self.wait_event("Page.loadEventFired", start=start, timeout=timeout)

    def evaluate(self, expression, timeout=None):
        """The value of a JavaScript expression (promises awaited); raises CDPError on a
        JavaScript exception."""
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True,
                                             "awaitPromise": True, "userGesture": True},
                        timeout=timeout)
        if "exceptionDetails" in res:
            d = res["exceptionDetails"]
            text = d.get("exception", {}).get("description") or d.get("text")
            raise CDPError(f"evaluate {expression!r}: {text}")
        return res.get("result", {}).get("value")

    def wait_for(self, expression, timeout=20, interval=0.1, what=None):
        """Polls a JavaScript expression until it is truthy and returns its value; raises
        AssertionError naming `what` (or the expression) with the last value otherwise. An
        evaluation that fails (the page is navigating) is retried."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                last = self.evaluate(expression, timeout=max(1.0, deadline - time.monotonic()))
                if last:
                    return last
            except CDPError as e:
                if self.browser._closed:
                    raise
                last = f"<{e}>"
            if time.monotonic() >= deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for "
                                     f"{what or expression} (last: {last!r})")
            time.sleep(interval)

    def box(self, selector):
        """The centre of the visible element `selector` (scrolled into view), in CSS px."""
        sel = json.dumps(selector)
        r = self.evaluate(f"""(() => {{
            const e = document.querySelector({sel});
            if (!e) return null;
            e.scrollIntoView({{block: 'center'}});
            const b = e.getBoundingClientRect();
            return {{x: b.left + b.width / 2, y: b.top + b.height / 2, w: b.width, h: b.height}};
        }})()""")
        if not r or r["w"] == 0 or r["h"] == 0:
            raise CDPError(f"no visible element {selector}")
        return r

    def click(self, selector, wait=True):
        """A real mouse click (press and release) in the middle of `selector`. With
        wait=False the release is not waited for: a click that opens a dialog blocks until
        the dialog is handled."""
        b = self.box(selector)
        base = {"x": b["x"], "y": b["y"], "button": "left", "clickCount": 1}
        self.send("Input.dispatchMouseEvent", dict(base, type="mouseMoved"))
        self.send("Input.dispatchMouseEvent", dict(base, type="mousePressed"))
        self.send("Input.dispatchMouseEvent", dict(base, type="mouseReleased"), wait=wait)

    def type_text(self, selector, text):
        """Focuses `selector` and types `text` into it as keyboard input."""
        sel = json.dumps(selector)
        if not self.evaluate(f"(() => {{ const e = document.querySelector({sel});"
                             f" if (!e) return false; e.focus(); return true; }})()"):
            raise CDPError(f"no element {selector}")
        self.send("Input.insertText", {"text": text})

    def handle_dialog(self, accept=True, timeout=None, start=0):
        """Waits for a JavaScript dialog (alert/confirm/prompt) and answers it; returns its
        event params (`type`, `message`)."""
        ev = self.wait_event("Page.javascriptDialogOpening", timeout=timeout, start=start)
        self.send("Page.handleJavaScriptDialog", {"accept": accept})
        return ev

    def screenshot(self, path, selector=None):
        """A PNG of the viewport, or of the element `selector`; returns the PNG bytes."""
        params = {"format": "png"}
        if selector:
            sel = json.dumps(selector)
            r = self.evaluate(f"""(() => {{
                const e = document.querySelector({sel});
                if (!e) return null;
                e.scrollIntoView({{block: 'center'}});
                const b = e.getBoundingClientRect();
                return {{x: b.left + scrollX, y: b.top + scrollY, width: b.width,
                         height: b.height}};
            }})()""")
            if not r or not r["width"] or not r["height"]:
                raise CDPError(f"no visible element {selector} to screenshot")
            params["clip"] = dict(r, scale=1)
            params["captureBeyondViewport"] = True
        data = base64.b64decode(self.send("Page.captureScreenshot", params)["data"])
        with open(path, "wb") as f:
            f.write(data)
        return data

    def console_problems(self, start=0):
        """Console errors and warnings, uncaught exceptions and browser log errors (a failed
        request, a Content-Security-Policy violation) since event index `start`, as text."""
        out = []
        for ev in self.events("Runtime.consoleAPICalled", start):
            if ev.get("type") in ("error", "warning", "assert"):
                args = " ".join(str(a.get("value", a.get("description", "")))
                                for a in ev.get("args", []))
                out.append(f"console.{ev['type']}: {args}")
        for ev in self.events("Runtime.exceptionThrown", start):
            d = ev.get("exceptionDetails", {})
            out.append("uncaught: " + (d.get("exception", {}).get("description")
                                       or d.get("text", "")))
        for ev in self.events("Log.entryAdded", start):
            e = ev.get("entry", {})
            if e.get("level") in ("error", "warning"):
                out.append(f"log {e.get('level')} ({e.get('source')}): {e.get('text')} "
                           f"{e.get('url', '')}".rstrip())
        return out

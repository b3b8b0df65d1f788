"""Connection floods for tests and benchmarks (issue 12, defect 5): a background thread
keeps many TCP connections to one address open and opens a new one as soon as the server
closes one, as an attacker who wants to hold a server's connection slots would. Python
stdlib only; one thread and a selector, so hundreds of connections cost little CPU.

  flood = Flood("127.0.0.1", port, 300, mode="slow").start()
  ...
  flood.stop()   # closes every connection; always call it (tests use try/finally)

Modes:
  "silent": connect and send nothing (holds a handshake or header slot until the server
            gives up on it);
  "slow":   send an HTTP request header that never ends: its first byte at once, then one
            byte every `trickle_s` seconds (a slow-loris).
`source` binds the connections to another loopback address (e.g. "127.0.0.2"), so that
a server sees them come from a different source than the legitimate clients.
"""
import errno
import selectors
import socket
import threading
import time

SLOW_HEADER = (b"GET /v1/jobs HTTP/1.1\r\nHost: flood\r\nUser-Agent: flood\r\n" +
               b"X-Slow: " + b"a" * 100000)


class Flood:
    def __init__(self, host, port, count, mode="silent", source=None, trickle_s=0.5,
                 reconnect_delay_s=0.0):
        assert mode in ("silent", "slow"), mode
        self.host, self.port, self.count = host, int(port), count
        self.mode, self.source, self.trickle_s = mode, source, trickle_s
        self.reconnect_delay_s = reconnect_delay_s
        self.connects = 0       # connections opened
        self.established = 0    # of which the TCP handshake completed
        self.closed_by_server = 0
        self.failed = 0         # connect errors (refused, reset before established)
        self._stop = threading.Event()
        self._thread = None

    def start(self):
        self._thread = threading.Thread(target=self._run, name="flood", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        if self._thread:
            self._thread.join(10)
            self._thread = None

    def open_now(self):
        return self._open

    # ---- the loop ----

    def _connect(self, sel, conns):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            if self.source:
                s.bind((self.source, 0))
            rc = s.connect_ex((self.host, self.port))
        except OSError:
            s.close()
            self.failed += 1
            return False
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            self.failed += 1
            return False
        self.connects += 1
        # A slow client sends its first byte at once (then one per trickle_s): a server
        # that waits for data before accepting still has to take it.
        conns[s] = {"up": False, "pos": 0, "next": time.monotonic()}
        sel.register(s, selectors.EVENT_WRITE)
        return True

    def _drop(self, sel, conns, s):
        try:
            sel.unregister(s)
        except (KeyError, ValueError):
            pass
        conns.pop(s, None)
        s.close()

    def _run(self):
        sel = selectors.DefaultSelector()
        conns = {}
        pending = 0  # connections to (re)open, at `reopen_at`
        reopen_at = 0.0
        try:
            for _ in range(self.count):
                if not self._connect(sel, conns):
                    pending += 1
            while not self._stop.is_set():
                now = time.monotonic()
                if pending and now >= reopen_at:
                    n, pending = pending, 0
                    for _ in range(n):
                        if not self._connect(sel, conns):
                            pending += 1
                    if pending:
                        reopen_at = now + 0.05  # the server is down: do not spin
                for key, events in sel.select(timeout=0.02):
                    s = key.fileobj
                    st = conns.get(s)
                    if st is None:
                        continue
                    if not st["up"]:
                        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                        if err:
                            self.failed += 1
                            self._drop(sel, conns, s)
                            pending += 1
                            reopen_at = max(reopen_at, time.monotonic() + 0.05)
                            continue
                        st["up"] = True
                        self.established += 1
                        sel.modify(s, selectors.EVENT_READ)
                        continue
                    try:
                        data = s.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if data:
                        continue  # a hello or an answer: ignore it, keep the slot
                    self.closed_by_server += 1
                    self._drop(sel, conns, s)
                    pending += 1
                    reopen_at = max(reopen_at, time.monotonic() + self.reconnect_delay_s)
                if self.mode == "slow":
                    now = time.monotonic()
                    for s, st in list(conns.items()):
                        if st["up"] and now >= st["next"] and st["pos"] < len(SLOW_HEADER):
                            try:
                                s.send(SLOW_HEADER[st["pos"]:st["pos"] + 1])
                                st["pos"] += 1
                            except OSError:
                                pass
                            st["next"] = now + self.trickle_s
                self._open = sum(1 for st in conns.values() if st["up"])
        finally:
            for s in list(conns):
                self._drop(sel, conns, s)
            sel.close()
            self._open = 0

    _open = 0

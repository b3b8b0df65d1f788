#!/usr/bin/env python3
"""How fast the dashboard's job page shows up in a real browser (headless Chromium over the
DevTools protocol, tests/e2e/cdp.py).

One daemon (bench/startup's benchlib.Daemon) runs one 2-rank job of libtest_train.so (a
report every 100 ms per rank) for the whole benchmark; the measurements start once it has
run --warmup-s seconds. Each round opens the job page (/ui/#/jobs/<id>) twice:
- cold: a new Chromium with a new profile (empty HTTP cache), the session cookie set
  through the protocol, then navigated to the page;
- warm: the same tab reloaded.
Per load, from the page's own clock (ms since its navigation started): first paint and
first contentful paint (performance.getEntriesByType('paint')), DOMContentLoaded, load,
and "chart has points": the app's performance mark `traintl:chart-points`, set when the
chart first drew the job's metrics (two API round trips after the script ran). Reported:
each load and the median over --rounds rounds (default 5). Target: first paint < 1 s.

The daemon serves its built-in copy of the dashboard, or the files in $TRAINTL_UI_DIR when
that is set (for measuring a change without rebuilding). Writes bench/dashboard/RESULTS.md.

Usage: /usr/bin/python3 bench/dashboard/run.py [--build build] [--rounds 5]
"""
import argparse
import http.client
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "startup"))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests", "e2e"))
import cdp  # noqa: E402
from benchlib import Daemon, log, machine_line, wait_for  # noqa: E402

RESULTS = os.path.join(HERE, "RESULTS.md")

MEASURE = """(() => {
  const paint = {};
  for (const e of performance.getEntriesByType('paint')) paint[e.name] = e.startTime;
  const nav = performance.getEntriesByType('navigation')[0];
  const chart = performance.getEntriesByName('traintl:chart-points')[0];
  const res = performance.getEntriesByType('resource');
  return {
    fp: paint['first-paint'], fcp: paint['first-contentful-paint'],
    dcl: nav.domContentLoadedEventEnd, load: nav.loadEventEnd,
    chart: chart ? chart.startTime : null,
    points: +document.getElementById('chart').dataset.points,
    static_bytes: nav.transferSize + res.filter((r) => r.name.includes('/ui/'))
      .reduce((n, r) => n + r.transferSize, 0),
    api_bytes: res.filter((r) => r.name.includes('/v1/')).reduce((n, r) => n + r.transferSize, 0),
    requests: 1 + res.length,
  };
})()"""
READY = ("performance.getEntriesByType('paint').length >= 2 && "
         "performance.getEntriesByName('traintl:chart-points').length > 0 && "
         "performance.getEntriesByType('navigation')[0].loadEventEnd > 0")


def session_cookie(daemon):
    """The dashboard's session cookie, from a ?token= link (the daemon answers 303 + cookie)."""
    host, port = daemon.address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request("GET", f"/ui/?token={daemon.token}")
        r = conn.getresponse()
        r.read()
        cookie = r.getheader("Set-Cookie") or ""
    finally:
        conn.close()
    if r.status != 303 or not cookie.startswith("traintl_session="):
        raise SystemExit(f"GET /ui/?token=: {r.status} {cookie!r}: does this traintld serve "
                         "the dashboard?")
    return cookie.split(";", 1)[0].split("=", 1)[1]


def measure(page, what):
    page.wait_for(READY, timeout=30, what=f"{what}: paint entries, the chart and load")
    m = page.evaluate(MEASURE)
    problems = page.console_problems()
    if problems:
        raise SystemExit(f"{what}: the page logged problems: {problems}")
    return m


def fmt(v):
    return "-" if v is None else f"{v:.0f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup-s", type=float, default=5.0)
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    lib = os.path.join(build, "tests/e2e/libs/libtest_train.so")
    if not cdp.chromium_binary():
        raise SystemExit("no chromium (apt-get install chromium, or set TRAINTL_CHROMIUM)")
    machine = machine_line()
    daemon = Daemon(os.path.join(build, "bin"), num_cpus=4)
    rows = []
    try:
        daemon.start()
        spec = {"name": "bench-dashboard", "entrypoint": {"library": lib},
                "train_loop_config": {"epochs": 1000000, "sleep_ms": 100},
                "scaling_config": {"num_workers": 2, "resources_per_worker": {"CPU": 1}}}
        status, body = daemon.request("POST", "/v1/jobs", {"spec": spec})
        if status != 201:
            raise SystemExit(f"POST /v1/jobs: {status} {body}")
        job = body["job_id"]
        wait_for(lambda: daemon.get(f"/v1/jobs/{job}")[1].get("state") == "RUNNING", 30,
                 "the job to run")
        time.sleep(a.warmup_s)
        cookie = session_cookie(daemon)
        base = f"http://{daemon.address}"
        url = f"{base}/ui/#/jobs/{job}"
        for i in range(a.rounds):
            with cdp.Browser() as browser:
                page = browser.page()
                page.send("Network.setCookie", {"name": "traintl_session", "value": cookie,
                                                "url": base + "/", "path": "/",
                                                "httpOnly": True, "sameSite": "Strict"})
                page.navigate(url)
                cold = measure(page, f"round {i + 1} cold")
                page.reload()
                warm = measure(page, f"round {i + 1} warm")
            for kind, m in (("cold", cold), ("warm", warm)):
                log(f"round {i + 1} {kind}: first paint {fmt(m['fp'])} ms, FCP {fmt(m['fcp'])} "
                    f"ms, load {fmt(m['load'])} ms, chart {fmt(m['chart'])} ms "
                    f"({m['points']} points), {m['requests']} requests, {m['static_bytes']} bytes of "
                    f"page files, {m['api_bytes']} of API answers")
                rows.append(dict(m, round=i + 1, kind=kind))
        daemon.request("POST", f"/v1/jobs/{job}/stop", {})
        daemon.wait_idle(30)
    finally:
        daemon.stop()
    write_results(rows, machine, a)


def write_results(rows, machine, a):
    ui_dir = os.environ.get("TRAINTL_UI_DIR")
    source = f"the files in `$TRAINTL_UI_DIR` ({ui_dir})" if ui_dir else "the built-in copy"
    lines = [
        "Written by `/usr/bin/python3 bench/dashboard/run.py "
        f"--build {a.build} --rounds {a.rounds}` (see the script's docstring for what is "
        "measured). Times are milliseconds since the page's navigation started, from the "
        "page's own Performance API; headless Chromium "
        "(`--headless=new --disable-gpu`) on the same machine as the daemon.",
        "",
        f"- Machine: {machine}",
        f"- Dashboard files: {source}; the job: 2 ranks of libtest_train.so, one report per "
        "rank every 100 ms, measured after it ran "
        f"{a.warmup_s:.0f} s (the chart's points column: how many it plotted).",
        "- cold: a new browser profile (empty cache) per round; warm: the same tab reloaded.",
        "",
        "| round | load | first paint | first contentful paint | DOMContentLoaded | load event "
        "| chart has points | points | requests | page files (bytes) | API answers (bytes) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['round']} | {r['kind']} | {fmt(r['fp'])} | {fmt(r['fcp'])} | "
                     f"{fmt(r['dcl'])} | {fmt(r['load'])} | {fmt(r['chart'])} | {r['points']} "
                     f"| {r['requests']} | {r['static_bytes']} | {r['api_bytes']} |")
    lines += ["", "Medians:", "",
              "| load | first paint | first contentful paint | DOMContentLoaded | load event "
              "| chart has points |", "|---|---|---|---|---|---|"]
    medians = {}
    for kind in ("cold", "warm"):
        sel = [r for r in rows if r["kind"] == kind]

        def med(key):
            vals = [r[key] for r in sel if r[key] is not None]
            return statistics.median(vals) if vals else None
        medians[kind] = {k: med(k) for k in ("fp", "fcp", "dcl", "load", "chart")}
        m = medians[kind]
        lines.append(f"| {kind} | {fmt(m['fp'])} | {fmt(m['fcp'])} | {fmt(m['dcl'])} | "
                     f"{fmt(m['load'])} | {fmt(m['chart'])} |")
    worst = max(m["fp"] for m in medians.values() if m["fp"] is not None)
    lines += ["", f"Target first paint < 1000 ms: {'met' if worst < 1000 else 'NOT met'} "
              f"(the slower median: {worst:.0f} ms).", ""]
    text = "\n".join(lines)
    print(text)
    # The generated part goes between the markers; notes written by hand around it stay.
    begin, end = "<!-- begin:generated -->", "<!-- end:generated -->"
    try:
        with open(RESULTS) as f:
            current = f.read()
    except FileNotFoundError:
        current = ""
    block = f"{begin}\n{text.rstrip()}\n{end}"
    if begin in current and end in current:
        head, rest = current.split(begin, 1)
        current = head + block + rest.split(end, 1)[1]
    else:
        current = "# bench/dashboard: the job page in a real browser\n\n" + block + "\n"
    with open(RESULTS, "w") as f:
        f.write(current)


if __name__ == "__main__":
    main()

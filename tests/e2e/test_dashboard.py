"""The web dashboard (/ui/) in a real headless Chromium, driven over the DevTools protocol
(tests/e2e/cdp.py): logging in (the form with a wrong and the right token, the ?code= link of
`traintl dashboard`, single-use and dropped from the address bar, the cookie accepted by
the API only with the session's page key in the X-Traintl-Ui header), the overview (the node, marked
head, and the job list), a running 2-rank job's page (a loss curve per rank that grows
between two screenshots, the attempts, checkpoints and a rank's log tail chosen with the
page's rank selector), stopping a job with the page's Stop button (its confirm dialog
accepted) and a failed job's page showing its attempt's failure reason. Every page is
checked for console errors, uncaught exceptions and browser log errors (a Content-Security-
Policy violation is one).

Screenshots go to $TRAINTL_TEST_OUTPUT_DIR, else <tmp>/traintl-dashboard-shots. Chromium
is $TRAINTL_CHROMIUM, else `chromium` on PATH: without it the tests fail (no skip).
"""
import http.client
import json
import os
import sys
import tempfile
import time

import cdp
from harness import DaemonTestCase, lib_path, main, train_spec, wait_for

SHOTS = os.environ.get("TRAINTL_TEST_OUTPUT_DIR") or os.path.join(
    tempfile.gettempdir(), "traintl-dashboard-shots")
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def js(value):
    """`value` as a JavaScript literal."""
    return json.dumps(value)


def visible(element_id):
    """JavaScript: whether the element is shown (not hidden, not in a hidden view)."""
    return (f"(() => {{ const e = document.getElementById({js(element_id)});"
            f" return !!e && e.getClientRects().length > 0; }})()")


class DashboardTest(DaemonTestCase):
    def setUp(self):
        if not cdp.chromium_binary():
            self.fail("no chromium: the dashboard tests need it (Debian: apt-get install "
                      "chromium; or set TRAINTL_CHROMIUM to the binary)")
        os.makedirs(SHOTS, exist_ok=True)
        self.browser = None
        self.page = None
        super().setUp()

    def tearDown(self):
        try:
            if self.browser is not None:
                if self._failed() and self.page is not None:
                    self._dump_page()
                self.browser.close()
                self.assertEqual(self.browser.leftover_processes(), [],
                                 "chromium processes left behind")
            if self._failed():  # a test that failed half-way leaves its job running
                self._stop_jobs()
        finally:
            super().tearDown()

    def _stop_jobs(self):
        try:
            for job in self.daemon.get("/v1/jobs")[1].get("jobs", []):
                if job["state"] not in TERMINAL:
                    self.daemon.post(f"/v1/jobs/{job['job_id']}/stop")
            wait_for(lambda: not self.daemon.worker_pids(), 15, what="the workers to exit")
        except (AssertionError, OSError) as e:
            sys.stderr.write(f"(could not stop the jobs: {e})\n")

    def _failed(self):
        result = getattr(self._outcome, "result", None)
        return any(err for _, err in getattr(self._outcome, "errors", []) if err) or any(
            test is self for test, _ in getattr(result, "failures", []) +
            getattr(result, "errors", []))

    def _dump_page(self):
        try:
            self.shot("failure")
            text = self.page.evaluate("document.body.innerText")
            sys.stderr.write(f"---- page {self.page.evaluate('location.href')} ----\n"
                             f"{text[-6000:]}\n")
            sys.stderr.write("---- console ----\n" +
                             "\n".join(self.page.console_problems()) + "\n")
        except Exception as e:  # the browser may be what failed
            sys.stderr.write(f"(no page dump: {e})\n---- chromium stderr ----\n"
                             f"{self.browser.stderr_tail()}\n")

    # ---- helpers ---------------------------------------------------------------------------

    def open_browser(self):
        self.browser = cdp.Browser()
        self.page = self.browser.page()
        return self.page

    def url(self, path):
        return f"http://{self.daemon.address}{path}"

    def shot(self, name, selector=None):
        path = os.path.join(SHOTS, f"{self._testMethodName}-{name}.png")
        data = self.page.screenshot(path, selector)
        print(f"screenshot: {path}")
        return data

    def login_link(self):
        """The link `traintl dashboard` prints: a single-use code, not the token."""
        p = self.daemon.cli("--json", "dashboard", check=True)
        link = json.loads(p.stdout)["login_url"]
        self.assertIn("?code=", link)
        self.assertNotIn(self.daemon.token, link)
        return link

    def login_with_link(self):
        self.page.navigate(self.login_link())
        self.page.wait_for(visible("view-overview"), what="the overview after the ?code= link")

    def open_job(self, job_id):
        self.page.navigate(self.url(f"/ui/#/jobs/{job_id}"))
        self.page.wait_for(f"document.getElementById('job-id').textContent === {js(job_id)}",
                           what=f"job page of {job_id}")

    def assertNoConsoleProblems(self, start=0, allow=()):
        problems = [p for p in self.page.console_problems(start)
                    if not any(a in p for a in allow)]
        self.assertEqual(problems, [], "console errors, uncaught exceptions or log errors in "
                                       "the page")

    def wait_running(self, job_id, ranks):
        """The job runs and every rank has reported metrics."""
        self.daemon.wait_job(job_id, lambda j: j["state"] == "RUNNING", 30, "RUNNING")

        def reported():
            status, body = self.daemon.get(f"/v1/jobs/{job_id}/metrics?ranks=all")
            return status == 200 and len(body.get("ranks", {})) >= ranks
        wait_for(reported, 30, what=f"metrics from {ranks} ranks of {job_id}")

    def raw_get(self, path, headers=None):
        host, port = self.daemon.address.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            conn.request("GET", path, headers=headers or {})
            r = conn.getresponse()
            return r.status, r.getheaders(), r.read()
        finally:
            conn.close()

    # ---- tests -----------------------------------------------------------------------------

    def test_login(self):
        page = self.open_browser()
        # The app asks GET /v1/nodes at start: 401 without a session, which Chromium logs.
        allow_401 = ("status of 401",)
        page.navigate(self.url("/ui/"))
        page.wait_for(visible("view-login"), what="the login form")
        self.assertFalse(page.evaluate(visible("view-overview")), "overview shown logged out")
        self.assertFalse(page.evaluate(visible("login-error")), "error shown before a login")
        self.shot("login")

        page.type_text("#login-token", "not-the-token")
        page.click("#login-submit")
        page.wait_for(visible("login-error") + " && " + visible("view-login"),
                      what="the login form saying the token was wrong")
        self.assertIn("Wrong token", page.evaluate("document.getElementById('login-error')"
                                                   ".textContent"))
        self.assertNotIn("login=failed", page.evaluate("location.href"))
        self.shot("login-failed")

        with open(os.path.join(self.daemon.data_dir, "token")) as f:
            token = f.read().strip()
        page.type_text("#login-token", token)
        page.click("#login-submit")
        page.wait_for(visible("view-overview"), what="the overview after logging in")
        node = self.daemon.get("/v1/nodes")[1]["nodes"][0]["node_id"]
        page.wait_for(f"!!document.querySelector('#nodes tr[data-node=\"{node}\"]')",
                      what=f"node {node} in the overview")
        self.assertNotIn("traintl_session", page.evaluate("document.cookie"),
                         "the session cookie must be HttpOnly")
        self.assertNoConsoleProblems(allow=allow_401)

        # Logging out shows the form again; the link of `traintl dashboard` logs in once and
        # leaves nothing in the address bar.
        page.click("#logout button")
        page.wait_for(visible("view-login"), what="the login form after logging out")
        self.assertIsNone(page.evaluate("localStorage.getItem('traintl.page_key')"))
        link = self.login_link()
        page.navigate(link)
        page.wait_for(visible("view-overview"), what="the overview after the ?code= link")
        href = page.evaluate("location.href")
        self.assertNotIn("code=", href)
        self.assertEqual(href, self.url("/ui/"))
        self.assertNoConsoleProblems(allow=allow_401)
        code = link.split("?code=", 1)[1]
        self.assertIsNone(self.daemon.ui_login(code=code), "a code logs in once")

        # The session: an HttpOnly cookie, and a page key the API needs beside it (a
        # cross-site form cannot send the header; a service on another port of this host
        # receives the cookie, never the key).
        host, port = self.daemon.address.rsplit(":", 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        conn.request("POST", "/ui/login", body="token=" + token,
                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        r = conn.getresponse()
        key = json.loads(r.read())["page_key"]
        cookie = r.getheader("Set-Cookie", "")
        conn.close()
        self.assertEqual(r.status, 200)
        # Named after the port: two daemons on one host keep their own sessions.
        self.assertIn(f"traintl_session_{port}=", cookie)
        self.assertIn("HttpOnly", cookie)
        self.assertIn("SameSite=Strict", cookie)
        self.assertNotIn(token, cookie + key)
        session = cookie.split(";", 1)[0]
        self.assertEqual(self.raw_get("/v1/nodes", {"Cookie": session})[0], 401)
        self.assertEqual(self.raw_get("/v1/nodes", {"Cookie": session,
                                                    "X-Traintl-Ui": "1"})[0], 401)
        self.assertEqual(self.raw_get("/v1/nodes", {"Cookie": session,
                                                    "X-Traintl-Ui": key})[0], 200)
        self.assertIsNone(self.daemon.ui_login(token="wrong"))
        # The page's files are revalidated by ETag: a reload costs 304s, not their bytes.
        status, headers, body = self.raw_get("/ui/app.js")
        etag = dict((k.lower(), v) for k, v in headers).get("etag")
        self.assertEqual(status, 200)
        self.assertTrue(etag and body, headers)
        status, _, body = self.raw_get("/ui/app.js", {"If-None-Match": etag})
        self.assertEqual((status, body), (304, b""))
        self.assertEqual(self.raw_get("/ui/app.js", {"If-None-Match": '"other"'})[0], 200)

    def test_running_job_pages(self):
        job_id = self.daemon.submit_spec(train_spec(name="dash", workers=2, epochs=400,
                                                    sleep_ms=100))
        self.wait_running(job_id, ranks=2)
        page = self.open_browser()
        self.login_with_link()

        # Overview: the node (the head) and the job.
        node = self.daemon.get("/v1/nodes")[1]["nodes"][0]["node_id"]
        page.wait_for(f"(() => {{ const r = document.querySelector('#nodes tr[data-node={js(node)}]');"
                      " return !!r && r.textContent.includes('head'); })()",
                      what=f"node {node} marked head in the overview")
        page.wait_for(f"(() => {{ const r = document.querySelector('#jobs tr[data-job={js(job_id)}]');"
                      " return !!r && r.textContent.includes('RUNNING')"
                      " && r.textContent.includes('dash') && r.textContent.includes('loss='); })()",
                      what=f"job {job_id} RUNNING with its loss in the job list")
        self.shot("overview")
        self.assertNoConsoleProblems()

        # The job page, through the job list's link.
        page.click(f"#jobs tr[data-job={js(job_id)}] a")
        page.wait_for(f"location.hash === {js('#/jobs/' + job_id)} && " + visible("view-job"),
                      what="the job page after clicking the job's link")
        chart = "document.getElementById('chart')"
        page.wait_for(f"{chart}.dataset.series === '2' && {chart}.dataset.metric === 'loss'"
                      f" && +{chart}.dataset.points >= 4 && !!{chart}.querySelector('canvas')",
                      what="a loss curve for each of the 2 ranks")
        points1 = int(page.evaluate(f"{chart}.dataset.points"))
        png1 = self.shot("chart-1", "#chart")
        self.shot("job-1")
        time.sleep(2.5)
        points2 = int(page.wait_for(
            f"+{chart}.dataset.points > {points1} && {chart}.dataset.points",
            what=f"the chart to grow beyond {points1} points"))
        png2 = self.shot("chart-2", "#chart")
        self.shot("job-2")
        self.assertGreater(points2, points1)
        self.assertNotEqual(png1, png2, "the chart looks the same after 2.5 s of training")
        legend = page.evaluate(f"{chart}.textContent")
        self.assertIn("rank 0", legend)
        self.assertIn("rank 1", legend)

        # Attempts, checkpoints, state.
        page.wait_for("(() => { const r = document.querySelector('#attempts tr[data-attempt=\"1\"]');"
                      " return !!r && r.textContent.includes('RUNNING'); })()",
                      what="attempt 1 RUNNING in the attempts table")
        self.assertEqual(page.evaluate("document.getElementById('job-state').dataset.state"),
                         "RUNNING")
        self.assertTrue(page.evaluate(visible("job-stop")), "no Stop button on a running job")
        ckpt = self.daemon.get(f"/v1/jobs/{job_id}/checkpoints")[1]["checkpoints"][0]["path"]
        page.wait_for("document.querySelectorAll('#checkpoints tbody tr').length >= 2",
                      what="checkpoints listed")
        self.assertIn(os.path.dirname(ckpt), page.evaluate(
            "document.getElementById('checkpoints').textContent"))

        # The log: rank 0's first, then rank 1's through the rank selector.
        log = "document.getElementById('log')"
        page.wait_for(f"/ rank 0 loss /.test({log}.textContent)", what="rank 0's log tail")
        page.evaluate("(() => { const s = document.getElementById('rank-select');"
                      " s.value = '1'; s.dispatchEvent(new Event('change')); })()")
        page.wait_for(f"{log}.dataset.rank === '1' && / rank 1 loss /.test({log}.textContent)",
                      what="rank 1's log tail after choosing rank 1")
        text = page.evaluate(f"{log}.textContent")
        self.assertNotIn(" rank 0 loss ", text, "rank 0's lines in rank 1's log")
        self.assertIn("rank 1/2 attempt 1 starting", text)
        self.shot("job-log-rank1", "#log")

        # Back to the overview through the header link.
        page.click("#nav a")
        page.wait_for(visible("view-overview") + " && !!document.querySelector("
                      f"'#jobs tr[data-job={js(job_id)}]')", what="the overview again")
        self.assertNoConsoleProblems()
        self.daemon.post(f"/v1/jobs/{job_id}/stop")
        self.daemon.wait_terminal(job_id)
        wait_for(lambda: not self.daemon.worker_pids(), 15, what="the workers to exit")

    def test_stop_button(self):
        job_id = self.daemon.submit_spec(train_spec(name="dash-stop", workers=1, epochs=1000,
                                                    sleep_ms=100))
        self.wait_running(job_id, ranks=1)
        page = self.open_browser()
        self.login_with_link()
        self.open_job(job_id)
        page.wait_for(visible("job-stop"), what="the Stop button")
        mark = page.mark()
        page.click("#job-stop", wait=False)  # confirm() blocks the click until answered
        dialog = page.handle_dialog(accept=True, start=mark)
        self.assertEqual(dialog["type"], "confirm")
        self.assertIn(job_id, dialog["message"])
        job = self.daemon.wait_job(job_id, lambda j: j["state"] in TERMINAL, 30, "stop")
        self.assertEqual(job["state"], "STOPPED", job)
        page.wait_for("document.getElementById('job-state').dataset.state === 'STOPPED'",
                      what="the page showing STOPPED")
        page.wait_for("!(" + visible("job-stop") + ")", what="the Stop button to go")
        self.shot("stopped")
        self.assertNoConsoleProblems()
        wait_for(lambda: not self.daemon.worker_pids(), 15, what="the workers to exit")

    def test_failed_job_reason(self):
        job_id = self.daemon.submit_spec(train_spec(name="dash-fail", workers=1,
                                                    fail_at_epoch=1, epochs=3))
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "FAILED", job)
        reason = job["attempts"][0]["reason"]
        self.assertIn("injected failure at epoch 1", reason)
        page = self.open_browser()
        self.login_with_link()
        self.open_job(job_id)
        page.wait_for("(() => { const r = document.querySelector('#attempts tr[data-attempt=\"1\"]');"
                      f" return !!r && r.textContent.includes({js(reason)})"
                      " && r.textContent.includes('FAILED'); })()",
                      what="attempt 1's failure reason in the attempts table")
        self.assertEqual(page.evaluate("document.getElementById('job-state').dataset.state"),
                         "FAILED")
        self.assertIn("injected failure", page.evaluate(
            "document.getElementById('job-message').textContent"))
        self.assertFalse(page.evaluate(visible("job-stop")), "Stop button on an ended job")
        self.shot("failed")
        self.assertNoConsoleProblems()

    def test_a_malformed_job_link_shows_the_overview(self):
        job_id = self.daemon.submit_spec(train_spec(name="dash-link", workers=1, epochs=1))
        self.daemon.wait_terminal(job_id)
        page = self.open_browser()
        self.login_with_link()
        self.open_job(job_id)
        # Not percent-decodable: decodeURIComponent throws URIError. The page used to stay
        # frozen on the job, no longer polled, with an uncaught exception.
        page.evaluate("location.hash = '#/jobs/%E0%A4%A'")
        page.wait_for(visible("view-overview") + " && !(" + visible("view-job") + ")",
                      what="the overview for a malformed link")
        self.assertNoConsoleProblems()

    def test_straggler_is_flagged(self):
        # A DDP job whose rank 1 sleeps 40 ms a step: the job page names it (which rank,
        # which node, how much slower), as `traintl status` does.
        spec = train_spec(name="dash-slow", workers=2, library=lib_path("libtest_ddp.so"),
                          steps=100000, slow_rank=1, slow_ms=40)
        spec["env"] = {"OMP_NUM_THREADS": "1"}
        job_id = self.daemon.submit_spec(spec)
        job = self.daemon.wait_job(job_id, lambda j: (j.get("progress") or {}).get("stragglers"),
                                   60, "a straggler")
        node = job["progress"]["stragglers"][0]["node"]
        page = self.open_browser()
        self.login_with_link()
        self.open_job(job_id)
        page.wait_for("document.getElementById('job-warnings').textContent"
                      f".includes('Straggler: rank 1 on ' + {js(node)})",
                      what="the straggler warning on the job page")
        self.assertIn("slower", page.evaluate(
            "document.getElementById('job-warnings').textContent"))
        self.shot("straggler")
        self.assertNoConsoleProblems()
        self.daemon.post(f"/v1/jobs/{job_id}/stop")
        self.daemon.wait_job(job_id, lambda j: j["state"] in TERMINAL, 30, "stop")
        wait_for(lambda: not self.daemon.worker_pids(), 15, what="the workers to exit")

if __name__ == "__main__":
    main()

"""Every rank's progress reaches the head (steps, busy time per step, collectives entered):
a throttled rank is named a straggler, and a rank stopped with SIGSTOP is named as the one
a stalled collective waits for, within 5 s and long before the collective timeout. Real
LibTorch DDP over Gloo (tests/e2e/libs/test_ddp.cc)."""
import os
import signal
import time

from harness import DaemonTestCase, lib_path, main, train_spec, wait_for


def ddp_spec(name, workers=3, **config):
    spec = train_spec(name=name, workers=workers, library=lib_path("libtest_ddp.so"), **config)
    spec["env"] = {"OMP_NUM_THREADS": "1"}
    return spec


class ProgressTest(DaemonTestCase):
    def warnings(self):
        return [l for l in self.daemon.log().splitlines() if " W " in l[:30]]

    def test_a_throttled_rank_is_named_a_straggler(self):
        d = self.daemon
        job_id = d.submit_spec(ddp_spec("slow", steps=100000, slow_rank=1, slow_ms=40))
        job = d.wait_job(job_id, lambda j: (j.get("progress") or {}).get("stragglers"),
                         timeout=60, what="a straggler")
        stragglers = job["progress"]["stragglers"]
        self.assertEqual([s["rank"] for s in stragglers], [1], job["progress"])
        self.assertGreaterEqual(stragglers[0]["slower"], 1.5)
        self.assertGreaterEqual(stragglers[0]["busy_s"], 0.035)
        self.assertEqual(len(job["progress"]["ranks"]), 3)
        self.assertTrue(all(r["steps"] >= 5 for r in job["progress"]["ranks"]))
        p = d.cli("status", job_id, check=True)
        self.assertIn("Straggler:", p.stdout)
        self.assertIn("rank 1 on ", p.stdout)
        # And in /metrics, per rank.
        status, text = d.get("/metrics", raw=True)
        text = text.decode()
        self.assertIn(f'traintl_rank_straggler{{job_id="{job_id}",job_name="slow",rank="1"', text)
        for rank in (0, 1, 2):
            self.assertIn(f'traintl_rank_busy_seconds{{job_id="{job_id}",job_name="slow",'
                          f'rank="{rank}"', text)
        wait_for(lambda: any("rank 1" in w and "straggler" in w for w in self.warnings()),
                 timeout=5, what="the straggler warning")
        d.cli("stop", job_id, "--wait", check=True)

    def test_an_even_job_has_no_straggler(self):
        d = self.daemon
        job_id = d.submit_spec(ddp_spec("even", steps=100000))
        d.wait_job(job_id, lambda j: all(
            r["steps"] >= 40 for r in (j.get("progress") or {}).get("ranks", [{"steps": 0}])),
            timeout=60, what="40 steps on every rank")
        time.sleep(1)
        job = d.job(job_id)
        self.assertEqual(job["progress"]["stragglers"], [], job["progress"])
        self.assertIsNone(job["progress"]["stalled"], job["progress"])
        d.cli("stop", job_id, "--wait", check=True)

    def test_a_stopped_rank_is_named_by_the_stalled_collective(self):
        d = self.daemon
        pid_dir = os.path.join(d.data_dir, "pids")
        os.makedirs(pid_dir)
        job_id = d.submit_spec(ddp_spec("stall", steps=100000, pid_dir=pid_dir))
        d.wait_job(job_id, lambda j: all(
            r["steps"] >= 20 for r in (j.get("progress") or {}).get("ranks", [{"steps": 0}])),
            timeout=60, what="20 steps on every rank")
        with open(os.path.join(pid_dir, "rank_1.pid")) as f:
            victim = int(f.read())
        os.kill(victim, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            job = d.wait_job(job_id, lambda j: (j.get("progress") or {}).get("stalled"),
                             timeout=10, what="the stalled collective")
            named_after = time.monotonic() - t0
            stalled = job["progress"]["stalled"]
            self.assertEqual(stalled["lagging"], [1], stalled)
            self.assertEqual(stalled["waiting"], [0, 2], stalled)
            self.assertLess(named_after, 5.0)
            self.assertEqual(job["state"], "RUNNING")  # no collective timeout (20 s) yet
            wait_for(lambda: any("stalled" in w and "rank(s) 1" in w for w in self.warnings()),
                     timeout=5, what="the stall warning")
            p = d.cli("status", job_id, check=True)
            self.assertIn("Stalled:", p.stdout)
            self.assertIn("for rank(s) 1", p.stdout)
            print(f"stalled collective named after {named_after:.2f} s")
        finally:
            os.kill(victim, signal.SIGCONT)
        # Going on again clears it.
        d.wait_job(job_id, lambda j: j["progress"] and j["progress"]["stalled"] is None,
                   timeout=10, what="the stall to clear")
        d.cli("stop", job_id, "--wait", check=True)


if __name__ == "__main__":
    main()

"""Warm workers (traintld --warm-workers N): started ahead of need with LibTorch and Python
loaded; a job's ranks - the restart after a SIGKILL above all - are handed to them instead
of new processes, and behave exactly as new ones do (log, checkpoint restore, cgroup,
leftover cleanup). None outlives the daemon."""
import os
import signal

from harness import Daemon, DaemonTestCase, main, proc_read, train_spec, wait_for


def children(pid):
    """(pid, command line) of the live children of `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        stat = proc_read(entry, "stat") if entry.isdigit() else b""
        fields = stat.rsplit(b")", 1)[-1].split()
        if len(fields) > 1 and fields[0] != b"Z" and int(fields[1]) == pid:
            cmd = proc_read(entry, "cmdline").replace(b"\0", b" ").decode(errors="replace")
            out.append((int(entry), cmd.strip()))
    return out


def warm_pids(daemon):
    return sorted(p for p, cmd in children(daemon.proc.pid) if "traintl-worker --warm" in cmd)


class WarmWorkerTest(DaemonTestCase):
    # The restart test keeps a start's and a restart's worth: the pool refills only once no
    # rank runs on the node.
    POOL = {"test_a_restart_runs_on_warm_workers_and_resumes_from_the_checkpoint": 4}

    def setUp(self):
        pool = self.POOL.get(self._testMethodName, 2)
        self.daemon = Daemon(num_cpus=4, extra_args=["--warm-workers", str(pool)]).start()

    def test_a_restart_runs_on_warm_workers_and_resumes_from_the_checkpoint(self):
        wait_for(lambda: len(warm_pids(self.daemon)) == 4, timeout=60, what="4 warm workers")
        first_warm = warm_pids(self.daemon)
        if os.geteuid() == 0:
            # They load on CPU time nothing else wants ...
            self.assertEqual({os.sched_getscheduler(p) for p in first_warm}, {os.SCHED_IDLE})
        job_id = self.daemon.submit_spec(train_spec(epochs=8, sleep_ms=250, max_failures=2))
        self.daemon.wait_job(job_id, lambda j: (j["latest_checkpoint"] or {}).get("seq", -1) >= 2,
                             what="checkpoint 2")
        # Attempt 1 ran on two of the warm workers ...
        ranks = self.daemon.worker_pids()
        self.assertEqual(len(ranks), 2, self.daemon.log())
        self.assertLessEqual(set(ranks), set(first_warm), self.daemon.log())
        if os.geteuid() == 0:
            # ... and trains with normal scheduling, every thread of them.
            for p in ranks:
                for tid in os.listdir(f"/proc/{p}/task"):
                    self.assertEqual(os.sched_getscheduler(int(tid)), os.SCHED_OTHER, (p, tid))
        # Nothing new loads beside the training ranks: the other two still wait, alone.
        second_warm = sorted(set(first_warm) - set(ranks))
        self.assertEqual(warm_pids(self.daemon), second_warm)
        victim = [p for p in ranks if b"rank_1" in proc_read(p, "cmdline")][0]
        os.kill(victim, signal.SIGKILL)

        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["attempt"], 2)
        a2 = job["attempts"][1]
        self.assertIn("checkpoint_a001_", a2["restored_from"])
        history = self.daemon.get(f"/v1/jobs/{job_id}/metrics")[1]["history"]
        second = [h["metrics"] for h in history if h["attempt"] == 2]
        self.assertEqual(second[0]["restored_path"], a2["restored_from"])
        self.assertEqual(second[0]["epoch"], second[0]["restored_epoch"] + 1)
        self.assertEqual(second[-1]["epoch"], 7)
        # Attempt 2's ranks were the second pair of warm workers.
        started = [l for l in self.daemon.log().splitlines()
                   if "started worker" in l and "attempt=2" in l]
        self.assertEqual(sorted(int(l.split("pid=")[1].split()[0]) for l in started), second_warm,
                         started)
        self.assertTrue(all(l.endswith("(warm)") for l in started), started)
        # With no rank left here, the pool fills up again with new workers.
        wait_for(lambda: len(warm_pids(self.daemon)) == 4, timeout=60, what="4 new warm workers")
        self.assertFalse(set(warm_pids(self.daemon)) & set(first_warm))
        # Each rank's log is its own file, as for a new process.
        p = self.daemon.cli("logs", job_id, "--rank", "0", "--attempt", "2")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("attempt 2 starting at epoch", p.stdout)

    def test_a_job_that_sets_ld_variables_gets_new_processes(self):
        wait_for(lambda: len(warm_pids(self.daemon)) == 2, timeout=30, what="2 warm workers")
        spec = train_spec(epochs=1, sleep_ms=10)
        spec["env"] = {"LD_BIND_NOW": "1"}  # read by the loader at exec: a warm one ran it
        job_id = self.daemon.submit_spec(spec)
        self.assertEqual(self.daemon.wait_terminal(job_id)["state"], "SUCCEEDED")
        started = [l for l in self.daemon.log().splitlines()
                   if "started worker" in l and job_id in l]
        self.assertEqual(len(started), 2, started)
        self.assertFalse(any("(warm)" in l for l in started), started)
        self.assertEqual(len(warm_pids(self.daemon)), 2)  # still there, unused

    def test_warm_workers_end_with_the_daemon(self):
        wait_for(lambda: len(warm_pids(self.daemon)) == 2, timeout=30, what="2 warm workers")
        warm = warm_pids(self.daemon)
        self.assertEqual(self.daemon.stop(), 0)
        for pid in warm:
            wait_for(lambda: not os.path.exists(f"/proc/{pid}") or
                     open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z",
                     timeout=10, what=f"warm worker {pid} to end")

    def test_a_warm_worker_killed_while_waiting_is_replaced(self):
        wait_for(lambda: len(warm_pids(self.daemon)) == 2, timeout=30, what="2 warm workers")
        victim = warm_pids(self.daemon)[0]
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda: f"warm worker pid={victim} exited before it was used" in self.daemon.log(),
                 timeout=30, what="the daemon to see the warm worker die")
        wait_for(lambda: len(warm_pids(self.daemon)) == 2 and victim not in warm_pids(self.daemon),
                 timeout=30, what="a replacement warm worker")
        job_id = self.daemon.submit_spec(train_spec(epochs=2, sleep_ms=10))
        self.assertEqual(self.daemon.wait_terminal(job_id)["state"], "SUCCEEDED")


if __name__ == "__main__":
    main()

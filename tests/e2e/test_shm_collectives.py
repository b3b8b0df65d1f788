"""The ranks of a job on one node reduce through shared memory (worker/torch/shm_group.h):
a real LibTorch DDP job through the daemon runs on it; the segment is a memfd, so kill -9 of
the workers and of the daemon leaves nothing in /dev/shm or anywhere else; a rank killed
mid-training fails its peers at once, not at the collective timeout."""
import os
import signal

from harness import (DaemonTestCase, kill_job_processes, lib_path, main, proc_read,
                     train_spec, wait_for)

SEGMENT = b"memfd:traintl-collectives"


def ddp_spec(name, workers, **config):
    spec = train_spec(name=name, workers=workers, library=lib_path("libtest_ddp.so"),
                      **config)
    spec["env"] = {"OMP_NUM_THREADS": "1"}
    return spec


def mapping_the_segment():
    """Pids of every process on this machine that maps a traintl collectives segment."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and SEGMENT in proc_read(entry, "maps"):
            found.append(int(entry))
    return found


def dev_shm():
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


class ShmCollectivesTest(DaemonTestCase):
    def history(self, job_id):
        status, body = self.daemon.get(f"/v1/jobs/{job_id}/metrics")
        self.assertEqual(status, 200, body)
        return [h["metrics"] for h in body["history"]]

    def steps_on_every_rank(self, job_id, steps, workers):
        def enough(j):
            ranks = (j.get("progress") or {}).get("ranks", [])
            return len(ranks) == workers and all(r["steps"] >= steps for r in ranks)
        return self.daemon.wait_job(job_id, enough, timeout=60, what=f"{steps} steps")

    def test_a_ddp_job_of_one_node_runs_on_shared_memory(self):
        d = self.daemon
        job_id = d.submit_spec(ddp_spec("shm", 3, steps=60, report_every=20))
        job = d.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        history = self.history(job_id)
        self.assertEqual([m["step"] for m in history], [20, 40, 60], history)
        self.assertEqual({m["backend"] for m in history}, {"shm"}, history)
        logs = d.cli("logs", job_id, "--rank", "2", check=True).stdout
        self.assertIn("process group ready (shm, rank 2 of 3)", logs)

    def test_off_in_the_jobs_env_means_flat_gloo(self):
        d = self.daemon
        spec = ddp_spec("gloo", 2, steps=20, report_every=20)
        spec["env"]["TRAINTL_SHM_COLLECTIVES"] = "0"
        job_id = d.submit_spec(spec)
        job = d.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        history = self.history(job_id)
        self.assertEqual({m["backend"] for m in history}, {"gloo"}, history)

    def test_a_killed_rank_fails_its_job(self):
        d = self.daemon
        pid_dir = os.path.join(d.data_dir, "pids")
        os.makedirs(pid_dir)
        job_id = d.submit_spec(ddp_spec("die", 3, steps=1000000, pid_dir=pid_dir))
        self.steps_on_every_rank(job_id, 20, 3)
        with open(os.path.join(pid_dir, "rank_1.pid")) as f:
            victim = int(f.read())
        os.kill(victim, signal.SIGKILL)
        job = d.wait_terminal(job_id, timeout=30)
        self.assertEqual(job["state"], "FAILED", job)
        self.assertEqual(kill_job_processes(d), [])

    def test_kill9_of_workers_and_daemon_leaves_no_segment(self):
        d = self.daemon
        before = dev_shm()
        pid_dir = os.path.join(d.data_dir, "pids")
        os.makedirs(pid_dir)
        job_id = d.submit_spec(ddp_spec("leak", 3, steps=1000000, pid_dir=pid_dir))
        self.steps_on_every_rank(job_id, 20, 3)
        ranks = []
        for r in range(3):
            with open(os.path.join(pid_dir, f"rank_{r}.pid")) as f:
                ranks.append(int(f.read()))
        # The ranks share one memfd segment, named only in their maps, not in /dev/shm.
        self.assertTrue(set(ranks) <= set(mapping_the_segment()), mapping_the_segment())
        self.assertEqual(dev_shm(), before)
        os.kill(ranks[0], signal.SIGKILL)
        d.kill9()
        for pid in ranks:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        wait_for(lambda: not (set(mapping_the_segment()) & set(ranks)), timeout=10,
                 what="the ranks to be gone")
        self.assertEqual(dev_shm(), before)
        self.assertEqual([p for p in mapping_the_segment() if p in ranks], [])


if __name__ == "__main__":
    main()

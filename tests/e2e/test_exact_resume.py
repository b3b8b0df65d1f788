"""Exact resume: the digits example (fixed seeds, 2 DDP ranks) killed mid-run and resumed
from its checkpoint ends with the same parameters as an uninterrupted run."""
import filecmp
import os
import signal
import unittest

from harness import Daemon, DaemonTestCase, bin_path, main, wait_for

LIB = os.path.join(os.path.dirname(os.environ.get("TRAINTL_BIN_DIR", "")), "examples",
                   "libdigits_train.so")
CSV = os.environ.get("TRAINTL_DIGITS_CSV", "/tmp/traintl-digits/digits.csv")


def digits_spec(name, epochs):
    return {
        "name": name,
        "entrypoint": {"library": LIB, "function": "train_loop"},
        "train_loop_config": {"lr": 0.01, "epochs": epochs, "batch_size": 32, "seed": 0},
        "scaling_config": {"num_workers": 2, "resources_per_worker": {"CPU": 1}},
        "run_config": {"failure_config": {"max_failures": 2}},
        "datasets": {"digits": {"uri": "file://" + CSV, "format": "csv", "split": False}},
        "env": {"OMP_NUM_THREADS": "1"},
    }


@unittest.skipUnless(os.path.exists(LIB), f"no {LIB} (built with TRAINTL_BUILD_TORCH=ON)")
@unittest.skipUnless(os.path.exists(CSV),
                     f"no {CSV}: run examples/digits/fetch_data.sh or set TRAINTL_DIGITS_CSV")
class ExactResumeTest(DaemonTestCase):
    def final_checkpoint(self, job):
        return job["latest_checkpoint"]["path"]

    def test_killed_and_resumed_equals_uninterrupted(self):
        d = self.daemon
        epochs = 40
        straight = d.submit_spec(digits_spec("straight", epochs))
        a = d.wait_terminal(straight, timeout=300)
        self.assertEqual(a["state"], "SUCCEEDED", a)
        self.assertEqual(a["attempt"], 1)

        resumed = d.submit_spec(digits_spec("resumed", epochs))
        # Freeze rank 1 as soon as a few checkpoints are committed (rank 0 then waits in its
        # allreduce, so no later checkpoint can commit), then kill it.
        victim = wait_for(lambda: next((p for p in d.worker_pids() if b"rank_1" in
                                        open(f"/proc/{p}/cmdline", "rb").read()), None),
                          timeout=60, interval=0.01, what="rank 1")
        wait_for(lambda: ((d.job(resumed)["latest_checkpoint"] or {}).get("seq", -1) >= 2),
                 timeout=120, interval=0.01, what="checkpoint 2")
        os.kill(victim, signal.SIGSTOP)
        stopped_at = d.job(resumed)["latest_checkpoint"]["seq"]
        os.kill(victim, signal.SIGKILL)
        b = d.wait_terminal(resumed, timeout=300)
        self.assertEqual(b["state"], "SUCCEEDED", b)
        if stopped_at >= epochs - 1:
            self.skipTest("the run finished before it could be interrupted")
        self.assertEqual(b["attempt"], 2)
        self.assertIsNotNone(b["attempts"][1]["restored_from"])
        # Same metrics to the last bit, and byte-identical saved parameters. (optimizer.pt
        # is not compared: LibTorch 1.13 keys optimizer state by tensor addresses.)
        self.assertEqual(b["metrics"], a["metrics"])
        self.assertTrue(filecmp.cmp(os.path.join(self.final_checkpoint(a), "model.pt"),
                                    os.path.join(self.final_checkpoint(b), "model.pt"),
                                    shallow=False))


if __name__ == "__main__":
    main()

"""Elastic sizes (scaling_config.num_workers {"min": m, "max": n}): a job starts with as many
ranks in [m, n] as fit now instead of waiting for n, waits only while fewer than m fit, and
grows to n in the same attempt when resources free up, the new rank taking a survivor's
state. (Shrinking when a node is lost, and growing back on it: test_multinode_ddp.py.)"""
import os
import shutil
import tempfile

from harness import (Daemon, DaemonTestCase, cli_in, final_weights, lib_path, main,
                     python_has_torch,
                     submit_python, train_spec, wait_for)

# An elastic Python function: a global batch of 48 rows per step, drawn from the step, split
# among the group's ranks as it is now.
ELASTIC_PY = r'''
import os, time
import torch
import torch.distributed as dist
from traintl import train


def train_fn(config):
    rank = train.get_context().get_world_rank()
    out = config["out_dir"]
    torch.manual_seed(0)
    model = train.torch.prepare_model(torch.nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    log = open(os.path.join(out, f"steps_rank{rank}.txt"), "a")

    def step(i):
        opt.zero_grad()
        torch.manual_seed(i)
        x, y = torch.randn(48, 32), torch.randn(48, 4)
        w, g = dist.get_world_size(), dist.get_rank()
        per = 48 // w
        loss = torch.nn.functional.mse_loss(model(x[g * per:(g + 1) * per]),
                                            y[g * per:(g + 1) * per])
        time.sleep(0.03)
        loss.backward()
        opt.step()
        log.write(f"{i} {w}\n")
        log.flush()
        if (i + 1) % 10 == 0:
            train.report({"step": i + 1})

    train.torch.run_steps(step, config["steps"], model=model, optimizer=opt)
    with open(os.path.join(out, f"final_rank{rank}.bin"), "wb") as f:
        for p in model.parameters():
            f.write(p.detach().contiguous().numpy().tobytes())
'''


def elastic(name, lo, hi, **config):
    spec = train_spec(name=name, **config)
    spec["scaling_config"]["num_workers"] = {"min": lo, "max": hi}
    return spec


class ElasticStartTest(DaemonTestCase):
    num_cpus = 3

    def four_cpus_one_taken(self, prefix):
        """A daemon of 4 CPUs instead, one of them taken by a long job ("hog"); returns a
        temp dir (removed after the test) and the hog's job id."""
        self.daemon.stop()
        self.daemon.cleanup()
        self.daemon = Daemon(num_cpus=4).start()
        out = tempfile.mkdtemp(prefix=prefix)
        self.addCleanup(shutil.rmtree, out, True)
        hog = self.daemon.submit_spec(train_spec(name="hog", workers=1, epochs=500,
                                                 sleep_ms=100))
        self.daemon.wait_job(hog, lambda j: j["state"] == "RUNNING", what="hog running")
        return out, hog

    def test_starts_with_what_fits_and_every_rank_knows_the_size(self):
        job_id = self.daemon.submit_spec(elastic("e", 2, 4, epochs=2, sleep_ms=50))
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["spec"]["scaling_config"]["num_workers"], {"min": 2, "max": 4})
        self.assertEqual((job["num_workers"], job["min_workers"]), (4, 2))
        status = cli_in(self.daemon, "/", "status", job_id)
        self.assertIn("2-4 (elastic)", status.stdout, status.stdout + status.stderr)
        # 3 CPUs, 1 per rank: 3 ranks, each told the world size 3.
        self.assertEqual(job["metrics"]["world_size"], 3, job)
        self.assertEqual(job["attempt"], 1, job)

    def test_waits_while_fewer_than_its_minimum_fit(self):
        hog = self.daemon.submit_spec(train_spec(name="hog", workers=2, epochs=50,
                                                 sleep_ms=100))
        self.daemon.wait_job(hog, lambda j: j["state"] == "RUNNING", what="hog running")
        job_id = self.daemon.submit_spec(elastic("e", 2, 3, epochs=1, sleep_ms=10))
        job = self.daemon.wait_job(job_id, lambda j: "CPU" in j["pending_reason"],
                                   what="a pending reason")
        self.assertEqual(job["state"], "PENDING", job)
        self.assertIn("CPU: 2 needed, 1 free", job["pending_reason"])
        self.daemon.post(f"/v1/jobs/{hog}/stop")
        job = self.daemon.wait_terminal(job_id)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["metrics"]["world_size"], 3, job)

    def test_grows_to_its_maximum_when_resources_free_up(self):
        lib = lib_path("libtest_peer_recovery.so")
        if not os.path.exists(lib):
            self.skipTest(f"no {lib} (built with TRAINTL_BUILD_TORCH=ON)")
        out, hog = self.four_cpus_one_taken("traintl-elastic-")
        steps = 600
        spec = {
            "name": "grow",
            "entrypoint": {"library": lib},
            "train_loop_config": {"steps": steps, "step_ms": 30, "report_every": 10,
                                  "global_batch": 48, "out_dir": out},
            "scaling_config": {"num_workers": {"min": 2, "max": 4},
                               "resources_per_worker": {"CPU": 1}},
            "env": {"OMP_NUM_THREADS": "1"},
        }
        job_id = self.daemon.submit_spec(spec)

        def worlds(rank):
            try:
                with open(os.path.join(out, f"steps_rank{rank}_gen0.txt")) as f:
                    return [line.split()[2] for line in f if line.strip()]
            except OSError:
                return []
        wait_for(lambda: len(worlds(0)) >= 20, timeout=120, what="20 steps of 3 ranks")
        self.assertEqual(set(worlds(0)), {"3"})
        # The head shows the group's current size next to the range while the job runs.
        self.assertEqual(self.daemon.get(f"/v1/jobs/{job_id}")[1].get("current_workers"), 3)
        listed = [j for j in self.daemon.get("/v1/jobs")[1]["jobs"] if j["job_id"] == job_id]
        self.assertEqual(listed[0].get("current_workers"), 3, listed)
        status = cli_in(self.daemon, "/", "status", job_id)
        self.assertIn("3 of 2-4 (elastic)", status.stdout, status.stdout + status.stderr)
        self.daemon.post(f"/v1/jobs/{hog}/stop")
        wait_for(lambda: self.daemon.get(f"/v1/jobs/{job_id}")[1].get("current_workers") == 4,
                 timeout=120, what="current_workers 4 after growing")
        job = self.daemon.wait_terminal(job_id, timeout=300)
        self.assertNotIn("current_workers", job)  # ended: no group
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["attempt"], 1, job)
        self.assertEqual(job["metrics"]["step"], steps, job)
        w = worlds(0)
        self.assertEqual(w[0], "3")
        self.assertEqual(w[-1], "4")
        grown = [n for n in os.listdir(out) if n.startswith("steps_rank3_")]
        self.assertEqual(len(grown), 1, os.listdir(out))
        with open(os.path.join(out, grown[0])) as f:
            self.assertGreater(int(f.readline().split()[0]), 0)  # a survivor's state
        self.assertEqual(len(set(final_weights(out, range(4)))), 1)

    def test_a_python_function_grows_too(self):
        if not python_has_torch():
            self.skipTest("/usr/bin/python3 cannot import torch")
        out, hog = self.four_cpus_one_taken("traintl-elastic-py-")
        src = os.path.join(out, "src")
        os.makedirs(src)
        with open(os.path.join(src, "train.py"), "w") as f:
            f.write(ELASTIC_PY)
        steps = 600
        spec = {"name": "grow-py", "entrypoint": {"python": "train:train_fn", "working_dir": "."},
                "train_loop_config": {"steps": steps, "out_dir": out},
                "scaling_config": {"num_workers": {"min": 2, "max": 4},
                                   "resources_per_worker": {"CPU": 1}},
                "env": {"OMP_NUM_THREADS": "1"}}
        job_id = submit_python(self.daemon, src, spec)

        def worlds():
            try:
                with open(os.path.join(out, "steps_rank0.txt")) as f:
                    return [line.split()[1] for line in f if line.strip()]
            except OSError:
                return []
        wait_for(lambda: len(worlds()) >= 20, timeout=180, what="20 steps of 3 ranks")
        self.assertEqual(set(worlds()), {"3"})
        self.daemon.post(f"/v1/jobs/{hog}/stop")
        job = self.daemon.wait_terminal(job_id, timeout=300)
        self.assertEqual(job["state"], "SUCCEEDED", job)
        self.assertEqual(job["attempt"], 1, job)
        w = worlds()
        self.assertEqual(w[-1], "4", w)
        self.assertEqual(len(set(final_weights(out, range(4)))), 1)

    def test_a_minimum_that_can_never_fit_is_refused(self):
        status, body = self.daemon.post("/v1/jobs", {"spec": elastic("e", 4, 6)})
        self.assertEqual(status, 400, body)
        self.assertIn("infeasible", body["error"])
        self.assertIn("CPU: 4 needed", body["error"])


if __name__ == "__main__":
    main()

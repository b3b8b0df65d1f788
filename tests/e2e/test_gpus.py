"""Declared GPUs: fractional requests share devices; each worker sees only its devices."""
from harness import Daemon, DaemonTestCase, main, train_spec, wait_for


def worker_env(pid):
    with open(f"/proc/{pid}/environ", "rb") as f:
        pairs = [kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv]
    return {k.decode(): v.decode() for k, v in pairs}


class GpuTest(DaemonTestCase):
    def setUp(self):
        self.daemon = Daemon(num_cpus=8, extra_args=["--num-gpus", "2"]).start()

    def test_half_gpus_pack_two_per_device(self):
        d = self.daemon
        spec = train_spec(workers=4, epochs=1000)
        spec["scaling_config"]["resources_per_worker"]["GPU"] = 0.5
        job_id = d.submit_spec(spec)
        d.wait_job(job_id, lambda j: j["state"] == "RUNNING", what="RUNNING")
        pids = wait_for(lambda: (lambda p: p if len(p) == 4 else None)(d.worker_pids()),
                        what="4 workers")
        devices = {}
        for pid in pids:
            env = worker_env(pid)
            devices[int(env["TRAINTL_WORLD_RANK"])] = env["CUDA_VISIBLE_DEVICES"]
        self.assertEqual(devices, {0: "0", 1: "0", 2: "1", 3: "1"})
        # The devices are full now: a whole-GPU job waits, saying GPU is missing.
        whole = train_spec(name="whole", workers=1, epochs=1)
        whole["scaling_config"]["resources_per_worker"]["GPU"] = 1
        second = d.submit_spec(whole)
        job = d.wait_job(second, lambda j: "GPU" in j["pending_reason"], what="GPU reason")
        self.assertEqual(job["state"], "PENDING")
        # Never fits: 3 GPUs per worker on a 2-GPU node.
        three = train_spec(name="three", workers=1)
        three["scaling_config"]["resources_per_worker"]["GPU"] = 3
        status, body = d.post("/v1/jobs", {"spec": three})
        self.assertEqual(status, 400)
        self.assertIn("infeasible", body["error"])
        d.post(f"/v1/jobs/{job_id}/stop")
        self.assertEqual(d.wait_terminal(second)["state"], "SUCCEEDED")
        nodes = d.get("/v1/nodes")[1]["nodes"]
        self.assertEqual(len(nodes[0]["gpus"]), 2)
        self.assertEqual(nodes[0]["resources_total"]["GPU"], 2)


if __name__ == "__main__":
    main()

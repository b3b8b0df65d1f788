"""traintl._native in standalone mode, and the traintl.train API over it.

Each test starts a real `python3 -c SCRIPT` with the agent channel and the context file a
{"command": [...]} entry point's program gets, and plays the agent on the other end of the
socketpair (agent_harness.py). Run by ctest as python.native_standalone.
"""

import json
import os
import sys
import textwrap
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from agent_harness import RankProcess, TempRoot  # noqa: E402


def script(text):
    return textwrap.dedent(text)


class StandaloneTest(unittest.TestCase):
    def setUp(self):
        self.root = TempRoot()
        self.ranks = []

    def tearDown(self):
        for r in self.ranks:
            r.close()
        self.root.cleanup()

    def start(self, text, **kwargs):
        r = RankProcess(script(text), self.root.path, **kwargs)
        self.ranks.append(r)
        return r

    def finish_ok(self, r):
        code, out = r.finish()
        self.assertEqual(code, 0, f"stdout:\n{out}\nlog:\n{r.log()}")
        return out

    def test_report_waits_for_acks_with_a_checkpoint_and_stages_it(self):
        r = self.start("""
            import os, tempfile
            import numpy as np
            from traintl import train
            train.report({"loss": 0.5, "step": np.int64(1), "acc": np.float32(0.25),
                          "bad": float("nan"), "nested": {"v": [np.float64(1.5)]}})
            print("after 0", flush=True)
            d = tempfile.mkdtemp()
            os.makedirs(os.path.join(d, "sub"))
            with open(os.path.join(d, "model.txt"), "w") as f:
                f.write("weights")
            with open(os.path.join(d, "sub", "opt.txt"), "w") as f:
                f.write("state")
            train.report({"loss": 0.25}, checkpoint=train.Checkpoint.from_directory(d))
            print("after 1", flush=True)
            try:
                train.report({"x": 1}, checkpoint=train.Checkpoint.from_directory(d + "-gone"))
            except RuntimeError as e:
                print("error", e, flush=True)
            try:
                train.report(["not", "a", "dict"])
            except TypeError as e:
                print("typeerror", e, flush=True)
        """)
        m = r.next_message()
        self.assertIsNotNone(m, r.log())
        self.assertEqual(m["type"], "report")
        self.assertEqual(m["seq"], 0)
        self.assertEqual(m["metrics"], {"loss": 0.5, "step": 1, "acc": 0.25, "bad": None,
                                        "nested": {"v": [1.5]}})
        self.assertIn(m.get("checkpoint"), (None, ""))
        # Metrics alone: report() returns without waiting for the ack.
        self.assertEqual(r.read_stdout_line(), "after 0")

        m = r.next_message()
        self.assertEqual(m["seq"], 1)
        self.assertEqual(m["metrics"], {"loss": 0.25})
        staged = os.path.join(r.staging_dir, "seq_1", "rank_0")
        self.assertEqual(m["checkpoint"], staged)
        # The files are staged before the report line is sent.
        with open(os.path.join(staged, "model.txt")) as f:
            self.assertEqual(f.read(), "weights")
        with open(os.path.join(staged, "sub", "opt.txt")) as f:
            self.assertEqual(f.read(), "state")
        # With a checkpoint it waits for its ack and every earlier one.
        r.ack(1)
        self.assertFalse(r.stdout_ready(0.3), "report returned before seq 0's ack")
        r.ack(0)
        self.assertEqual(r.read_stdout_line(), "after 1")
        line = r.read_stdout_line()
        self.assertTrue(line.startswith("error "), line)
        self.assertIn("does not exist", line)
        line = r.read_stdout_line()
        self.assertTrue(line.startswith("typeerror "), line)
        self.finish_ok(r)

    def test_async_upload_returns_at_once_and_the_exit_waits_for_it(self):
        # The upload takes ~0.6 s (2 MiB at 300 ms/MiB): both calls return before it ends,
        # later reports queue behind it, and the program's exit waits for it (atexit).
        r = self.start("""
            import os, tempfile
            from traintl import train
            d = tempfile.mkdtemp()
            with open(os.path.join(d, "model.bin"), "wb") as f:
                f.write(b"w" * (2 << 20))
            train.report({"step": 0}, checkpoint=train.Checkpoint.from_directory(d),
                         async_upload=True)
            with open(os.path.join(d, "model.bin"), "wb") as f:
                f.write(b"changed")
            print("after 0", flush=True)
            train.report({"step": 1})
            print("after 1", flush=True)
        """, env={"TEST_TRAINTL_UPLOAD_DELAY_MS_PER_MIB": "300"})
        self.assertEqual(r.read_stdout_line(), "after 0")
        self.assertEqual(r.read_stdout_line(), "after 1")
        m = r.next_message()
        self.assertIsNotNone(m, r.log())
        self.assertEqual((m["seq"], m["metrics"]), (0, {"step": 0}))
        staged = os.path.join(r.staging_dir, "seq_0", "rank_0")
        self.assertEqual(m["checkpoint"], staged)
        with open(os.path.join(staged, "model.bin"), "rb") as f:
            self.assertEqual(f.read(), b"w" * (2 << 20))
        m = r.next_message()
        self.assertEqual((m["seq"], m["metrics"]), (1, {"step": 1}))
        self.finish_ok(r)

    def test_context_checkpoint_and_stop(self):
        ckpt = os.path.join(self.root.path, "restored")
        os.makedirs(ckpt)
        with open(os.path.join(ckpt, "epoch"), "w") as f:
            f.write("7")
        r = self.start("""
            import json, os, time
            from traintl import train
            c = train.get_context()
            ck = train.get_checkpoint()
            with ck.as_directory() as d:
                epoch = open(os.path.join(d, "epoch")).read()
            copy = ck.to_directory()
            print(json.dumps({
                "world_rank": c.get_world_rank(), "world_size": c.get_world_size(),
                "local_rank": c.get_local_rank(),
                "local_world_size": c.get_local_world_size(),
                "node_rank": c.get_node_rank(), "trial_dir": c.get_trial_dir(),
                "attempt": c.get_attempt(), "trial_name": c.get_trial_name(),
                "experiment_name": c.get_experiment_name(), "trial_id": c.get_trial_id(),
                "checkpoint": ck.path, "epoch": epoch,
                "copied": open(os.path.join(copy, "epoch")).read(),
                "stop": train.should_stop()}), flush=True)
            deadline = time.monotonic() + 60
            while not train.should_stop() and time.monotonic() < deadline:
                time.sleep(0.01)
            print("stopped" if train.should_stop() else "timeout", flush=True)
        """, rank=1, world_size=3, context={
            "checkpoint_dir": ckpt, "attempt": 2, "node_rank": 1, "local_rank": 0,
            "local_world_size": 2})
        line = r.read_stdout_line()
        self.assertIsNotNone(line, r.log())
        got = json.loads(line)
        self.assertEqual(got, {
            "world_rank": 1, "world_size": 3, "local_rank": 0, "local_world_size": 2,
            "node_rank": 1, "trial_dir": os.path.join(self.root.path, "trial"), "attempt": 2,
            "trial_name": "py-test", "experiment_name": "py-test", "trial_id": "3f9c2a1b7d4e",
            "checkpoint": ckpt, "epoch": "7", "copied": "7", "stop": False})
        r.send({"type": "stop"})
        self.assertEqual(r.read_stdout_line(), "stopped")
        self.finish_ok(r)

    def test_no_checkpoint_on_first_attempt(self):
        r = self.start("""
            from traintl import train
            print(train.get_checkpoint(), flush=True)
        """)
        self.assertEqual(self.finish_ok(r).strip(), "None")

    def write_csv(self):
        path = os.path.join(self.root.path, "data.csv")
        with open(path, "w") as f:
            f.write("x,y,name\n")
            for i in range(10):
                f.write(f"{i},{i * 0.5},n{i}\n")
        return path

    def test_dataset_batches_are_zero_copy_views(self):
        path = self.write_csv()
        r = self.start("""
            import json
            import numpy as np
            from traintl import train
            shard = train.get_dataset_shard("train")
            assert shard is train.get_dataset_shard("train")
            out = {"columns": shard.columns(), "count": shard.count(), "batches": []}
            for batch in shard.iter_batches(batch_size=4, batch_format="numpy"):
                x = batch["x"]
                out["batches"].append({
                    "x": x.tolist(), "y": batch["y"].tolist(), "name": batch["name"].tolist(),
                    "dtypes": [str(batch["x"].dtype), str(batch["y"].dtype),
                               str(batch["name"].dtype)],
                    "view": x.base is not None and not x.flags.owndata,
                    "writeable": bool(x.flags.writeable)})
            kept = next(iter(shard.iter_batches(batch_size=3, batch_format="dict")))["y"]
            out["kept"] = kept.tolist()  # its batch lives on with the array
            epochs = []
            for _ in range(2):
                rows = []
                for b in shard.iter_batches(batch_size=5, local_shuffle_buffer_size=100,
                                            local_shuffle_seed=1):
                    rows += b["x"].tolist()
                epochs.append(rows)
            out["epochs"] = epochs
            out["dropped"] = [len(b["x"]) for b in shard.iter_batches(batch_size=4,
                                                                       drop_last=True)]
            try:
                train.get_dataset_shard("missing")
            except ValueError as e:
                out["missing"] = str(e)
            try:
                shard.iter_batches(batch_size=4, columns=["nope"])
            except ValueError as e:
                out["bad_column"] = str(e)
            print(json.dumps(out), flush=True)
        """, context={"datasets": {"train": {"uri": "file://" + path, "split": False}}})
        out = json.loads(self.finish_ok(r))
        self.assertEqual(out["columns"], ["x", "y", "name"])
        self.assertEqual(out["count"], 10)
        batches = out["batches"]
        self.assertEqual([len(b["x"]) for b in batches], [4, 4, 2])
        self.assertEqual(sum((b["x"] for b in batches), []), list(range(10)))
        self.assertEqual(sum((b["y"] for b in batches), []), [i * 0.5 for i in range(10)])
        self.assertEqual(sum((b["name"] for b in batches), []), [f"n{i}" for i in range(10)])
        self.assertEqual(batches[0]["dtypes"], ["int64", "float64", "object"])
        self.assertTrue(all(b["view"] for b in batches))
        self.assertTrue(all(b["writeable"] for b in batches))
        self.assertEqual(out["kept"], [0.0, 0.5, 1.0])
        e0, e1 = out["epochs"]
        self.assertEqual(sorted(e0), list(range(10)))
        self.assertEqual(sorted(e1), list(range(10)))
        self.assertNotEqual(e0, e1, "the epoch must seed the shuffle")
        self.assertEqual(out["dropped"], [4, 4])
        self.assertIn("missing", out["missing"])
        self.assertIn("nope", out["bad_column"])

    def test_iter_torch_batches(self):
        path = self.write_csv()
        r = self.start("""
            import json
            import torch
            from traintl import train
            shard = train.get_dataset_shard("train")
            out = {"batches": []}
            for b in shard.iter_torch_batches(batch_size=6, columns=["x", "y"],
                                              dtypes={"y": torch.float32}):
                out["batches"].append({k: [str(v.dtype), str(v.device), v.tolist(),
                                           isinstance(v, torch.Tensor)]
                                       for k, v in b.items()})
            b = next(iter(shard.iter_torch_batches(batch_size=4, columns=["x"],
                                                   dtypes=torch.float64)))
            out["all_float64"] = str(b["x"].dtype)
            try:
                next(iter(shard.iter_torch_batches(batch_size=4)))
            except ValueError as e:
                out["string_error"] = str(e)
            print(json.dumps(out), flush=True)
        """, context={"datasets": {"train": {"uri": "file://" + path, "split": False}}})
        out = json.loads(self.finish_ok(r))
        first, second = out["batches"]
        self.assertEqual(first["x"], ["torch.int64", "cpu", list(range(6)), True])
        self.assertEqual(first["y"][0:2], ["torch.float32", "cpu"])
        self.assertEqual(first["y"][2], [i * 0.5 for i in range(6)])
        self.assertEqual(second["x"][2], [6, 7, 8, 9])
        self.assertEqual(out["all_float64"], "torch.float64")
        self.assertIn("name", out["string_error"])

    def test_outside_a_job(self):
        r = self.start("""
            from traintl import train
            for call in (train.get_context, train.get_checkpoint, train.should_stop,
                         lambda: train.report({"a": 1})):
                try:
                    call()
                    print("no error")
                except RuntimeError as e:
                    print(e)
        """, with_channel=False)
        lines = self.finish_ok(r).strip().splitlines()
        self.assertEqual(
            lines,
            ["traintl.train is only available inside a traintl job (no TRAINTL_CONTEXT_FILE)"]
            * 4)

    def test_bad_channel_fd(self):
        r = self.start("""
            from traintl import train
            try:
                train.should_stop()
            except RuntimeError as e:
                print(e)
        """, env={"TRAINTL_CHANNEL_FD": "999"})
        self.assertIn("TRAINTL_CHANNEL_FD 999", self.finish_ok(r))

    def test_agent_gone_ends_the_rank(self):
        r = self.start("""
            import time
            from traintl import train
            train.should_stop()
            print("up", flush=True)
            time.sleep(60)
        """)
        self.assertEqual(r.read_stdout_line(), "up")
        r.sock.close()
        r.sock = None
        start = time.monotonic()
        code, _ = r.finish(timeout=30)
        self.assertEqual(code, 1)
        self.assertLess(time.monotonic() - start, 20)


if __name__ == "__main__":
    unittest.main(verbosity=2)

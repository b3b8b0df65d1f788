"""Every endpoint but /healthz needs the token; the CLI explains connection problems."""
import os
import stat

from harness import Daemon, DaemonTestCase, bin_path, main, train_spec

ENDPOINTS = [
    ("GET", "/v1/jobs"), ("POST", "/v1/jobs"), ("GET", "/v1/jobs/abc"),
    ("POST", "/v1/jobs/abc/stop"), ("GET", "/v1/jobs/abc/logs"),
    ("GET", "/v1/jobs/abc/checkpoints"), ("GET", "/v1/jobs/abc/metrics"),
    ("GET", "/v1/nodes"), ("PUT", "/v1/blobs/" + "0" * 64), ("HEAD", "/v1/blobs/" + "0" * 64),
]


class AuthTest(DaemonTestCase):
    def test_token_required_everywhere_but_healthz(self):
        d = self.daemon
        mode = stat.S_IMODE(os.stat(os.path.join(d.data_dir, "token")).st_mode)
        self.assertEqual(mode, 0o600)
        self.assertEqual(d.get("/healthz", auth=False)[0], 200)
        for method, path in ENDPOINTS:
            body = {"spec": train_spec()} if method in ("POST", "PUT") else None
            status, _ = d.request(method, path, body=body, auth=False)
            self.assertEqual(status, 401, (method, path))
            status, _ = d.request(method, path, body=body, token="wrong" * 8)
            self.assertEqual(status, 401, (method, path))
        self.assertEqual(d.get("/v1/jobs")[1]["jobs"], [])

    def test_cli_messages(self):
        d = self.daemon
        p = d.cli("list", env={"TRAINTL_TOKEN": "nope"})
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertIn("token", p.stderr)
        p = d.cli("--address", "127.0.0.1:1", "list")
        self.assertEqual(p.returncode, 3, p.stderr)
        self.assertIn("cannot connect", p.stderr)
        p = d.cli("status", "ffffffffffff")
        self.assertEqual(p.returncode, 5, p.stderr)
        p = d.cli("nodes")
        self.assertEqual(p.returncode, 0, p.stderr)


if __name__ == "__main__":
    main()

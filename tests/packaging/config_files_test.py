"""Config files (issue 7, item 2): the commented examples that the package installs in
/etc/traintl, and how traintld and traintl read config files."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.environ.get("TRAINTL_SOURCE_DIR", "")
BIN = os.environ.get("TRAINTL_BIN_DIR", "")
sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
import harness  # noqa: E402

DAEMON_CONF = os.path.join(SOURCE, "packaging", "traintld.conf")
CLI_CONF = os.path.join(SOURCE, "packaging", "traintl.conf")
# "#name = value" lines of an example: the options it documents.
EXAMPLE_LINE = re.compile(r"^#([a-z][a-z0-9-]*) = (.*)$")


def read(path):
    with open(path) as f:
        return f.read()


def example_settings(path):
    return [EXAMPLE_LINE.match(l).groups() for l in read(path).splitlines()
            if EXAMPLE_LINE.match(l)]


def uncommented(path, replace=None):
    """The example with every "#name = value" line made active; replace maps a name to
    another value."""
    lines = []
    for line in read(path).splitlines():
        m = EXAMPLE_LINE.match(line)
        if m:
            name, value = m.groups()
            line = f"{name} = {(replace or {}).get(name, value)}"
        lines.append(line)
    return "\n".join(lines) + "\n"


class DaemonConfigTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="traintl-conf-")

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def test_every_option_is_documented_in_the_example(self):
        help_text = subprocess.run([os.path.join(BIN, "traintld"), "--help"],
                                   capture_output=True, text=True, check=True).stdout
        options = set(re.findall(r"^\s+(?:-\w \[ )?--([a-z][a-z0-9-]*)", help_text, re.M))
        self.assertIn("log-level", options, help_text)
        options -= {"help", "config", "version"}
        documented = {name for name, _ in example_settings(DAEMON_CONF)}
        self.assertEqual(sorted(options - documented), [],
                         "options of traintld --help missing from packaging/traintld.conf")
        self.assertEqual(sorted(documented - options), [],
                         "packaging/traintld.conf documents options traintld does not have")

    def test_the_example_parses_with_every_line_active(self):
        conf = self.write("traintld.conf", uncommented(DAEMON_CONF))
        p = subprocess.run([os.path.join(BIN, "traintld"), "--config", conf, "--help"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 0, p.stderr)
        # A wrong key is refused, naming it: the check above can fail.
        bad = self.write("bad.conf", "log-levle = debug\n")
        p = subprocess.run([os.path.join(BIN, "traintld"), "--config", bad, "--help"],
                           capture_output=True, text=True)
        self.assertEqual(p.returncode, 2)
        self.assertIn("log-levle", p.stderr)

    def test_command_line_wins_over_the_config_file(self):
        conf = self.write("traintld.conf", "num-cpus = 3\nresources = {\"fast_disk\": 2}\n"
                                           "log-level = debug\n")
        d = harness.Daemon(num_cpus=2, extra_args=["--config", conf]).start()
        try:
            status, body = d.get("/v1/nodes")
            self.assertEqual(status, 200, body)
            node = body["nodes"][0]
            self.assertEqual(node["resources_total"]["CPU"], 2, node)  # --num-cpus 2
            self.assertEqual(node["resources_total"]["fast_disk"], 2, node)  # from the file
            self.assertEqual(d.stop(), 0)
        finally:
            d.cleanup()


class CliConfigTest(unittest.TestCase):
    def setUp(self):
        self.home = tempfile.mkdtemp(prefix="traintl-home-")

    def tearDown(self):
        shutil.rmtree(self.home, ignore_errors=True)

    def cli(self, *args, env=None):
        e = {k: v for k, v in os.environ.items() if not k.startswith("TRAINTL_")}
        e.pop("XDG_CONFIG_HOME", None)
        e.update({"HOME": self.home, "XDG_STATE_HOME": os.path.join(self.home, "state")})
        e.update(env or {})
        return subprocess.run([os.path.join(BIN, "traintl")] + list(args), capture_output=True,
                              text=True, env=e, timeout=60)

    def test_the_user_config_example_is_read(self):
        # The example with every line active, as a user's ~/.config/traintl/config; the
        # address points at a closed loopback port so the failure names it.
        conf_dir = os.path.join(self.home, ".config", "traintl")
        os.makedirs(conf_dir)
        with open(os.path.join(conf_dir, "config"), "w") as f:
            f.write(uncommented(CLI_CONF, {"address": "127.0.0.1:1",
                                           "data-dir": os.path.join(self.home, "nodata")}))
        with open(os.path.join(conf_dir, "token"), "w") as f:
            f.write("x" * 64)
        p = self.cli("list")
        self.assertEqual(p.returncode, 3, p.stderr)  # unreachable
        self.assertIn("127.0.0.1:1", p.stderr)

        # A config file naming a token file that does not exist is an error.
        os.unlink(os.path.join(conf_dir, "token"))
        p = self.cli("list")
        self.assertEqual(p.returncode, 4, p.stderr)
        self.assertIn("token", p.stderr)

        # A typo is a usage error naming the file.
        with open(os.path.join(conf_dir, "config"), "w") as f:
            f.write("adress = 127.0.0.1:1\n")
        p = self.cli("list")
        self.assertEqual(p.returncode, 2, p.stderr)
        self.assertIn(os.path.join(conf_dir, "config"), p.stderr)

    def test_a_config_file_finds_a_running_daemon(self):
        d = harness.Daemon(num_cpus=2).start()
        try:
            conf_dir = os.path.join(self.home, "xdg", "traintl")
            os.makedirs(conf_dir)
            with open(os.path.join(conf_dir, "config"), "w") as f:
                f.write(f"address = {d.address}\ntoken-file = {d.data_dir}/token\n")
            p = self.cli("--json", "nodes", env={"XDG_CONFIG_HOME": os.path.join(self.home, "xdg")})
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertIn("nodes", p.stdout)
            self.assertEqual(d.stop(), 0)
        finally:
            d.cleanup()


if __name__ == "__main__":
    if not SOURCE or not BIN:
        sys.exit("TRAINTL_SOURCE_DIR / TRAINTL_BIN_DIR are not set (run through ctest)")
    unittest.main(verbosity=2)

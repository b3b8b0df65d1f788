"""The man pages and shell completions generated from the --help texts
(packaging/docs/gen_docs.py, built as traintl_docs): every option --help lists is in the
pages, the pages render without groff warnings, and bash completion offers the verbs,
each verb's options, and job ids and names from the daemon."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

BUILD = os.environ.get("TRAINTL_BUILD_DIR", "")
BIN = os.environ.get("TRAINTL_BIN_DIR", "")
DOCS = os.path.join(BUILD, "packaging", "docs")


def run(*cmd, **kw):
    return subprocess.run(list(cmd), capture_output=True, text=True, check=True, **kw).stdout


def long_options(help_text):
    return set(re.findall(r"^\s+(?:-\w \[ )?--([a-z][a-z0-9-]*)", help_text, re.M))


def page(name):
    with open(os.path.join(DOCS, name)) as f:
        return f.read().replace("\\-", "-")


class DocsTest(unittest.TestCase):
    def setUp(self):
        if not os.path.exists(os.path.join(DOCS, "traintl.1")):
            self.skipTest("the man pages were not generated (no python3 or gzip at build time)")

    def test_every_help_option_and_verb_is_in_the_man_pages(self):
        traintl = os.path.join(BIN, "traintl")
        general = run(traintl, "--help")
        verbs = re.findall(r"^  ([a-z]+)\b", general.split("Commands:")[1].split("\n\n")[0], re.M)
        self.assertIn("logs", verbs)
        manual = page("traintl.1")
        for verb in verbs:
            self.assertIn(f".SS {verb}\n", manual)
            for option in long_options(run(traintl, verb, "--help")):
                self.assertIn("--" + option, manual, f"traintl {verb} --{option}")
        daemon = page("traintld.8")
        for option in long_options(run(os.path.join(BIN, "traintld"), "--help")):
            self.assertIn("--" + option, daemon, f"traintld --{option}")
        job = page("traintl-job.5")
        for field in ("scaling_config.num_workers", "run_config.time_limit_s",
                      "failure_config.max_failures", "entrypoint.python"):
            self.assertIn(field, job)

    def test_the_pages_render_without_warnings(self):
        if shutil.which("groff") is None:
            self.skipTest("no groff")
        for name in ("traintl.1", "traintld.8", "traintl-worker.8", "traintl-job.5"):
            p = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z",
                                os.path.join(DOCS, name)], capture_output=True, text=True)
            self.assertEqual((p.returncode, p.stderr), (0, ""), name)

    def test_bash_completion_offers_verbs_options_and_jobs(self):
        if shutil.which("bash") is None:
            self.skipTest("no bash")
        fake = tempfile.mkdtemp()
        try:
            # The daemon's job table, as `traintl list --all` prints it.
            with open(os.path.join(fake, "traintl"), "w") as f:
                f.write("#!/bin/sh\necho \"$@\" >> \"$(dirname \"$0\")/calls\"\n"
                        "printf 'ID            NAME    STATE\\n3f9c2a1b7d4e  digits  RUNNING\\n"
                        "0011aabbccdd  sweep   FAILED\\n'\n")
            os.chmod(os.path.join(fake, "traintl"), 0o755)
            script = f"""
source {os.path.join(DOCS, "traintl.bash-completion")}
t() {{ COMP_WORDS=("$@"); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); COMPREPLY=(); _traintl
      echo "${{COMPREPLY[*]}}"; }}
t traintl lo
t traintl logs --fo
t traintl --data-dir /srv/d stop ""
t traintl list --state fa
t traintl delete --ch
"""
            out = run("bash", "--noprofile", "--norc", "-c", script,
                      env=dict(os.environ, PATH=fake + ":" + os.environ["PATH"])).splitlines()
            self.assertEqual(out, ["logs", "--follow",
                                   "3f9c2a1b7d4e digits 0011aabbccdd sweep", "failed",
                                   "--checkpoints"])
            with open(os.path.join(fake, "calls")) as f:
                self.assertEqual(f.read().split("\n")[0], "--data-dir /srv/d list --all")
        finally:
            shutil.rmtree(fake, ignore_errors=True)

    def test_the_zsh_completion_parses(self):
        if shutil.which("zsh") is None:
            self.skipTest("no zsh")
        run("zsh", "-n", os.path.join(DOCS, "_traintl"))


if __name__ == "__main__":
    unittest.main(verbosity=2)

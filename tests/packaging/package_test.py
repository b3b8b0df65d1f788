"""The Debian package: build it, check it, unpack it, build against it, train with it.

    package_test.py deb          cpack -> $TRAINTL_PACKAGE_OUT/traintl_<version>_amd64.deb;
                                 contents, control fields, maintainer scripts, the unit
    package_test.py lintian      lintian on that .deb: no error
    package_test.py sdk_example  dpkg-deb -x into a staging root; the shipped out-of-tree
                                 example is built with find_package(traintl) from there and
                                 trained by the staged traintld through the staged CLI

Exit 77 (ctest: skipped) with the reason when a tool is missing. Python stdlib only.
"""
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile

SKIP = 77
OUT = os.environ.get("TRAINTL_PACKAGE_OUT", "")
BUILD = os.environ.get("TRAINTL_BUILD_DIR", "")
SOURCE = os.environ.get("TRAINTL_SOURCE_DIR", "")
VERSION = os.environ.get("TRAINTL_VERSION", "")
WITH_TORCH = os.environ.get("TRAINTL_WITH_TORCH", "1") == "1"
CMAKE = os.environ.get("CMAKE_COMMAND") or "cmake"
CPACK = os.environ.get("CPACK_COMMAND") or "cpack"

sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))


def deb_path():
    return os.path.join(OUT, f"traintl_{VERSION}_amd64.deb")


def skip(reason):
    print(f"SKIPPED: {reason}")
    sys.exit(SKIP)


def need(*tools):
    for t in tools:
        if shutil.which(t) is None:
            skip(f"{t} is not installed (apt-get install {t_pkg(t)})")


def t_pkg(tool):
    return {"dpkg-deb": "dpkg", "systemd-analyze": "systemd"}.get(tool, tool)


def run(cmd, check=True, **kw):
    p = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} -> {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p


def read(path):
    with open(path) as f:
        return f.read()


def check(cond, message):
    if not cond:
        raise AssertionError(message)


# --- packaging.deb -------------------------------------------------------------------

REQUIRED_FILES = [
    "./usr/bin/traintld",
    "./usr/bin/traintl",
    "./usr/bin/traintl-worker",
    "./usr/include/traintl/abi.h",
    "./usr/include/traintl/train.h",
    "./usr/include/traintl/dataset.h",
    "./usr/include/traintl/host.h",
    "./usr/include/traintl/torch.h",
    "./usr/lib/cmake/traintl/traintlConfig.cmake",
    "./usr/lib/cmake/traintl/traintlConfigVersion.cmake",
    "./usr/lib/cmake/traintl/traintlTargets.cmake",
    "./lib/systemd/system/traintld.service",
    "./etc/traintl/traintld.conf",
    "./etc/traintl/traintl.conf",
    "./usr/share/doc/traintl/copyright",
    "./usr/share/doc/traintl/changelog.gz",
    "./usr/share/doc/traintl/README.md",
    "./usr/share/doc/traintl/examples/sdk-example/CMakeLists.txt",
    "./usr/share/doc/traintl/examples/sdk-example/fit_line.cc",
    "./usr/share/doc/traintl/examples/sdk-example/job.json",
]
TORCH_FILES = [
    "./usr/lib/libtraintl_torch.so",
    "./usr/lib/cmake/traintl/traintlTorchTargets.cmake",
]
# Starting, restarting or enabling the service is the admin's decision.
FORBIDDEN_IN_SCRIPTS = re.compile(
    r"systemctl\s+(?:--\S+\s+)*(start|restart|enable|reload|try-restart)\b"
    r"|deb-systemd-invoke\s+(start|restart|try-restart)\b"
    r"|deb-systemd-helper\s+enable\b|invoke-rc\.d")


def test_deb():
    need("dpkg-deb")
    if shutil.which(CPACK) is None and not os.path.exists(CPACK):
        skip("cpack is not installed")
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    p = run([CPACK, "-G", "DEB", "-B", OUT, "--config", os.path.join(BUILD, "CPackConfig.cmake")],
            check=False, cwd=BUILD)
    check(p.returncode == 0, f"cpack failed ({p.returncode}); is the whole tree built?\n"
          f"{p.stdout}\n{p.stderr}")
    debs = [os.path.basename(d) for d in glob.glob(os.path.join(OUT, "*.deb"))]
    check(debs == [os.path.basename(deb_path())], f"expected {deb_path()}, cpack made {debs}")

    listing = run(["dpkg-deb", "-c", deb_path()]).stdout
    paths = {}
    for line in listing.splitlines():
        fields = line.split(None, 5)
        name = fields[5].split(" -> ")[0]
        paths[name] = fields[0]
    for f in REQUIRED_FILES + (TORCH_FILES if WITH_TORCH else []):
        check(f in paths, f"{f} is missing from the package:\n{listing}")
    for f in ["./usr/bin/traintld", "./usr/bin/traintl", "./usr/bin/traintl-worker"]:
        check(paths[f].startswith("-rwxr-xr-x"), f"{f} has mode {paths[f]}")
    check(not any(p.startswith("./usr/etc") or p.startswith("./usr/lib/systemd") for p in paths),
          "config or unit installed under /usr")

    fields = {}
    for key in ["Package", "Version", "Architecture", "Depends", "Recommends", "Section",
                "Maintainer", "Description"]:
        fields[key] = run(["dpkg-deb", "-f", deb_path(), key]).stdout.strip()
    check(fields["Package"] == "traintl", fields)
    check(fields["Version"] == VERSION, fields)
    check(fields["Architecture"] == "amd64", fields)
    depends = [d.strip() for d in fields["Depends"].split(",") if d.strip()]
    names = {re.split(r"[\s(:]", d)[0] for d in depends}
    expected = {"adduser", "libc6", "libstdc++6", "libgcc-s1", "libsqlite3-0", "libuv1",
                "libssl3", "nlohmann-json3-dev"}
    check(any(n.startswith("libboost-program-options1.74") for n in names),
          f"Depends lacks Boost.Program_options 1.74: {depends}")
    check(any(n.startswith("libraft") for n in names), f"Depends lacks libraft: {depends}")
    if WITH_TORCH:
        check(any(n.startswith("libtorch") for n in names), f"Depends lacks libtorch: {depends}")
    for n in expected:
        check(n in names, f"Depends lacks {n}: {depends}")
    # Every dependency is a Debian 12 package this machine's apt knows (when apt has its
    # package lists at all).
    if shutil.which("apt-cache") and run(["apt-cache", "show", "libc6"], check=False).returncode == 0:
        for d in depends:
            for alt in d.split("|"):
                name = re.split(r"[\s(:]", alt.strip())[0]
                p = run(["apt-cache", "show", "--no-all-versions", name], check=False)
                check(p.returncode == 0 and p.stdout.strip(),
                      f"Depends names {name}, which apt does not know")
    print("Depends:", fields["Depends"])

    control = tempfile.mkdtemp(prefix="traintl-control-")
    try:
        run(["dpkg-deb", "-e", deb_path(), control])
        for script in ["postinst", "prerm", "postrm"]:
            path = os.path.join(control, script)
            check(os.access(path, os.X_OK), f"{script} missing or not executable")
            run(["sh", "-n", path])
            with open(path) as f:
                code = "\n".join(l for l in f.read().splitlines()
                                 if not l.lstrip().startswith("#"))
            m = FORBIDDEN_IN_SCRIPTS.search(code)
            check(m is None, f"{script} starts or enables something: {m and m.group(0)}")
        with open(os.path.join(control, "postinst")) as f:
            postinst = f.read()
        check("adduser --system" in postinst and "traintl" in postinst,
              "postinst does not create the traintl system user")
        check("/var/lib/traintl" in postinst, "postinst does not create /var/lib/traintl")
        with open(os.path.join(control, "conffiles")) as f:
            conffiles = f.read().split()
        check(sorted(conffiles) == ["/etc/traintl/traintl.conf", "/etc/traintl/traintld.conf"],
              conffiles)
        if WITH_TORCH:
            with open(os.path.join(control, "triggers")) as f:
                triggers = f.read()
            check("activate-noawait ldconfig" in triggers, triggers)
    finally:
        shutil.rmtree(control, ignore_errors=True)

    # The unit as installed passes systemd-analyze verify.
    if shutil.which("systemd-analyze"):
        stage = tempfile.mkdtemp(prefix="traintl-stage-")
        try:
            run(["dpkg-deb", "-x", deb_path(), stage])
            verify_unit(os.path.join(stage, "lib/systemd/system/traintld.service"),
                        os.path.join(stage, "usr/bin/traintld"))
        finally:
            shutil.rmtree(stage, ignore_errors=True)
    print(f"OK: {deb_path()}")


def verify_unit(unit, traintld):
    """systemd-analyze verify, with ExecStart pointing at `traintld` (not installed in /usr
    here). Any message, not only the exit status, is a failure: verify exits 0 on unknown
    keys and bad values."""
    d = tempfile.mkdtemp(prefix="traintl-unit-")
    try:
        text = read(unit)
        check("ExecStart=/usr/bin/traintld" in text, "ExecStart does not run /usr/bin/traintld")
        copy = os.path.join(d, "traintld.service")
        with open(copy, "w") as f:
            f.write(text.replace("/usr/bin/traintld", traintld))
        p = run(["systemd-analyze", "verify", copy], check=False)
        out = (p.stdout + p.stderr).strip()
        check(p.returncode == 0 and not out, f"systemd-analyze verify: rc {p.returncode}\n{out}")
    finally:
        shutil.rmtree(d, ignore_errors=True)


# --- packaging.lintian ---------------------------------------------------------------

def test_lintian():
    need("lintian")
    check(os.path.exists(deb_path()), f"{deb_path()} missing (packaging.deb builds it)")
    # As root, lintian refuses to unpack unless told otherwise.
    cmd = ["lintian", "--fail-on", "error", "--no-tag-display-limit", "--info"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    p = run(cmd + [deb_path()], check=False)
    out = p.stdout + p.stderr
    print(out)
    errors = [l for l in out.splitlines() if l.startswith("E:")]
    check(p.returncode == 0 and not errors, f"lintian found errors ({p.returncode}):\n{out}")
    print("OK: lintian reports no error")


# --- packaging.sdk_example -----------------------------------------------------------

def test_sdk_example():
    need("dpkg-deb")
    check(os.path.exists(deb_path()), f"{deb_path()} missing (packaging.deb builds it)")
    work = tempfile.mkdtemp(prefix="traintl-sdk-")
    daemon = None
    try:
        stage = os.path.join(work, "root")
        run(["dpkg-deb", "-x", deb_path(), stage])
        prefix = os.path.join(stage, "usr")
        example = os.path.join(work, "sdk-example")
        shutil.copytree(os.path.join(prefix, "share/doc/traintl/examples/sdk-example"), example)

        build = os.path.join(example, "build")
        configure = [CMAKE, "-S", example, "-B", build, f"-DCMAKE_PREFIX_PATH={prefix}",
                     "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", "-DCMAKE_BUILD_TYPE=Release"]
        if WITH_TORCH:
            configure.append("-DTRAINTL_EXAMPLE_REQUIRE_TORCH=ON")
        p = run(configure)
        print(p.stdout)
        check(os.path.join(prefix, "lib/cmake/traintl") in
              read(os.path.join(build, "CMakeCache.txt")),
              "find_package(traintl) did not use the staged package")
        if WITH_TORCH:
            check(f"traintl::torch: {prefix}/lib/libtraintl_torch.so" in p.stdout,
                  "traintl::torch does not point into the staged package:\n" + p.stdout)
        run([CMAKE, "--build", build, "-j2"])
        commands = json.loads(read(os.path.join(build, "compile_commands.json")))
        flags = " ".join(c["command"] for c in commands)
        check(os.path.join(prefix, "include") in flags,
              "the example did not compile against the staged headers:\n" + flags)
        check(os.path.join(SOURCE, "worker") not in flags, "the example saw the source tree")
        library = os.path.join(build, "libfit_line.so")
        check(os.path.exists(library), "libfit_line.so was not built")

        # Train it with the staged binaries (traintld finds traintl-worker beside itself).
        import harness
        harness.BIN = os.path.join(prefix, "bin")
        empty_conf = os.path.join(work, "empty.conf")
        open(empty_conf, "w").close()
        daemon = harness.Daemon(num_cpus=2, extra_args=["--config", empty_conf]).start()
        p = subprocess.run([os.path.join(prefix, "bin/traintl"), "--data-dir", daemon.data_dir,
                            "submit", "job.json", "--wait"],
                           cwd=example, capture_output=True, text=True, timeout=300)
        print(p.stdout, p.stderr)
        check(p.returncode == 0, f"traintl submit --wait -> {p.returncode}")
        jobs = daemon.get("/v1/jobs")[1]["jobs"]
        check(len(jobs) == 1, jobs)
        job = daemon.job(jobs[0]["job_id"])
        check(job["state"] == "SUCCEEDED", job)
        history = daemon.get(f"/v1/jobs/{job['job_id']}/metrics")[1]["history"]
        losses = [h["metrics"]["loss"] for h in history]
        check(len(losses) == 5 and losses[-1] < losses[0], f"metrics: {history}")
        cks = daemon.get(f"/v1/jobs/{job['job_id']}/checkpoints")[1]["checkpoints"]
        check(len(cks) == 2, f"num_to_keep 2, got {cks}")
        check(daemon.stop() == 0, "traintld did not exit 0 on SIGTERM:\n" + daemon.log())
        check(daemon.worker_pids() == [], "workers left behind")
        print(f"OK: built against {prefix} and trained: losses {losses}")
    except Exception:
        if daemon is not None:
            sys.stderr.write("---- traintld log ----\n" + daemon.log()[-20000:] + "\n")
        raise
    finally:
        if daemon is not None:
            daemon.cleanup()
        shutil.rmtree(work, ignore_errors=True)


def main():
    tests = {"deb": test_deb, "lintian": test_lintian, "sdk_example": test_sdk_example}
    if len(sys.argv) != 2 or sys.argv[1] not in tests:
        sys.exit(f"usage: {sys.argv[0]} {'|'.join(tests)}")
    for var, value in [("TRAINTL_PACKAGE_OUT", OUT), ("TRAINTL_BUILD_DIR", BUILD),
                       ("TRAINTL_SOURCE_DIR", SOURCE), ("TRAINTL_VERSION", VERSION)]:
        if not value:
            sys.exit(f"{var} is not set (run through ctest)")
    try:
        tests[sys.argv[1]]()
    except AssertionError as e:
        print(f"FAILED: {e}")
        sys.exit(1)


if __name__ == "__main__":
    main()

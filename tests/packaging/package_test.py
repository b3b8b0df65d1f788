"""The Debian packages: build them, check them, unpack them, build against them, train.

    package_test.py deb          cpack -> $TRAINTL_PACKAGE_OUT/<package>_<version>_amd64.deb
                                 for traintl, libtraintl-torch<N>, libtraintl-xgboost<N>,
                                 python3-traintl and traintl-dev (those built); each one's
                                 contents, control fields, maintainer scripts; traintl
                                 depends on no LibTorch, Python or SDK package; the ELF files
                                 are hardened (PIE, RELRO, BIND_NOW, stack protector)
    package_test.py lintian      lintian on those .debs: no error, no warning
    package_test.py sdk_example  traintl, traintl-dev and the library packages unpacked with
                                 dpkg-deb -x into a staging root; the shipped out-of-tree
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

SOVERSION = os.environ.get("TRAINTL_SOVERSION", "")
COMPONENTS = [c for c in os.environ.get("TRAINTL_COMPONENTS", "").split(",") if c]

sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))

# CPack component -> Debian package (packaging/CPack.cmake).
PACKAGE_NAMES = {
    "traintl": "traintl",
    "torch": f"libtraintl-torch{SOVERSION}",
    "xgboost": f"libtraintl-xgboost{SOVERSION}",
    "python": "python3-traintl",
    "dev": "traintl-dev",
}


def packages():
    """{component: package name} of the packages this build makes."""
    return {c: PACKAGE_NAMES[c] for c in COMPONENTS}


def deb_path(package="traintl"):
    return os.path.join(OUT, f"{package}_{VERSION}_amd64.deb")


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

DOC = "./usr/share/doc/{}/"
# Files each package must hold (besides its doc directory's copyright and changelog.gz).
REQUIRED_FILES = {
    "traintl": [
        "./usr/bin/traintld",
        "./usr/bin/traintl",
        "./usr/bin/traintl-worker",
        "./lib/systemd/system/traintld.service",
        "./etc/traintl/traintld.conf",
        "./etc/traintl/traintl.conf",
        "./usr/share/doc/traintl/README.md",
    ],
    "torch": ["./usr/lib/libtraintl_torch.so.{so}"],
    "xgboost": ["./usr/lib/libtraintl_xgboost.so.{so}"],
    "python": [
        "./usr/lib/traintl/libtraintl_python.so",
        "./usr/lib/traintl/python/traintl/__init__.py",
        "./usr/lib/traintl/python/traintl/train/torch.py",
    ],
    "dev": [
        "./usr/include/traintl/abi.h",
        "./usr/include/traintl/train.h",
        "./usr/include/traintl/dataset.h",
        "./usr/include/traintl/host.h",
        "./usr/include/traintl/torch.h",
        "./usr/lib/cmake/traintl/traintlConfig.cmake",
        "./usr/lib/cmake/traintl/traintlConfigVersion.cmake",
        "./usr/lib/cmake/traintl/traintlTargets.cmake",
        "./usr/share/doc/traintl-dev/examples/sdk-example/CMakeLists.txt",
        "./usr/share/doc/traintl-dev/examples/sdk-example/fit_line.cc",
        "./usr/share/doc/traintl-dev/examples/sdk-example/job.json",
    ],
}
# traintl-dev's parts for the libraries built.
DEV_FILES = {
    "torch": ["./usr/lib/cmake/traintl/traintlTorchTargets.cmake"],
    "xgboost": ["./usr/include/traintl/xgboost.h",
                "./usr/lib/cmake/traintl/traintlXgboostTargets.cmake"],
}
# What the service package must not pull in: LibTorch (libtorch*, libc10), Python, NumPy,
# XGBoost, the SDK's build dependencies, the other traintl packages.
HEAVY = re.compile(r"torch|c10|python|numpy|xgboost|nlohmann|traintl-dev|libtraintl|g\+\+|cmake"
                   r"|openblas")
SECTIONS = {"traintl": "science", "torch": "libs", "xgboost": "libs", "python": "python",
            "dev": "libdevel"}
# Starting, restarting or enabling the service is the admin's decision.
FORBIDDEN_IN_SCRIPTS = re.compile(
    r"systemctl\s+(?:--\S+\s+)*(start|restart|enable|reload|try-restart)\b"
    r"|deb-systemd-invoke\s+(start|restart|try-restart)\b"
    r"|deb-systemd-helper\s+enable\b|invoke-rc\.d")
MAINTAINER_SCRIPTS = ["preinst", "postinst", "prerm", "postrm"]


def contents(deb):
    """{path: (mode string, link target or None)} of a .deb's data."""
    listing = run(["dpkg-deb", "-c", deb]).stdout
    paths = {}
    for line in listing.splitlines():
        fields = line.split(None, 5)
        name, _, target = fields[5].partition(" -> ")
        paths[name] = (fields[0], target or None)
    return paths


def control_fields(deb):
    text = run(["dpkg-deb", "-f", deb]).stdout
    fields = {}
    key = None
    for line in text.splitlines():
        if line[:1] in (" ", "\t") and key:
            fields[key] += "\n" + line
        else:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def relations(value):
    """Package names of a Depends/Recommends/Suggests value (alternatives flattened)."""
    out = []
    for d in value.split(","):
        for alt in d.split("|"):
            name = re.split(r"[\s(:]", alt.strip())[0]
            if name:
                out.append(name)
    return out


def apt_knows(name):
    return run(["apt-cache", "show", "--no-all-versions", name], check=False).stdout.strip() != ""


def elf_files(stage):
    """ELF files (not links) under an unpacked package."""
    out = []
    for root, _, files in os.walk(stage):
        for f in files:
            path = os.path.join(root, f)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as fh:
                if fh.read(4) == b"\x7fELF":
                    out.append(path)
    return out


def check_hardening(path):
    """Debian's hardening flags took: full RELRO (GNU_RELRO + BIND_NOW), PIE executables,
    the stack protector where the code has arrays, fortified libc calls where there are
    fortifiable ones (both are judged by lintian/hardening-check only on what the code
    calls, so this checks that at least the executables show them)."""
    dynamic = run(["readelf", "-d", "-W", path]).stdout
    headers = run(["readelf", "-l", "-W", path]).stdout
    check("GNU_RELRO" in headers, f"{path}: no RELRO segment")
    check(re.search(r"\(FLAGS\)\s.*BIND_NOW", dynamic) or
          re.search(r"\(FLAGS_1\)\s.*\bNOW\b", dynamic), f"{path}: not linked with -z now")
    check("TEXTREL" not in dynamic, f"{path}: has text relocations")
    if "/bin/" in path:
        kind = run(["readelf", "-h", "-W", path]).stdout
        check(re.search(r"Type:\s+DYN", kind), f"{path}: not a PIE")
        symbols = run(["readelf", "--dyn-syms", "-W", path]).stdout
        check("__stack_chk_fail" in symbols, f"{path}: no stack protector")
        check(re.search(r"__\w+_chk\b", symbols.replace("__stack_chk_fail", "")),
              f"{path}: no fortified libc call (_FORTIFY_SOURCE)")


def test_deb():
    need("dpkg-deb", "readelf")
    if shutil.which(CPACK) is None and not os.path.exists(CPACK):
        skip("cpack is not installed")
    check(COMPONENTS and SOVERSION, "TRAINTL_COMPONENTS / TRAINTL_SOVERSION are not set")
    shutil.rmtree(OUT, ignore_errors=True)
    os.makedirs(OUT)
    p = run([CPACK, "-G", "DEB", "-B", OUT, "--config", os.path.join(BUILD, "CPackConfig.cmake")],
            check=False, cwd=BUILD)
    check(p.returncode == 0, f"cpack failed ({p.returncode}); is the whole tree built?\n"
          f"{p.stdout}\n{p.stderr}")
    pkgs = packages()
    debs = sorted(os.path.basename(d) for d in glob.glob(os.path.join(OUT, "*.deb")))
    expected = sorted(os.path.basename(deb_path(n)) for n in pkgs.values())
    check(debs == expected, f"expected {expected}, cpack made {debs}")
    check("traintl" in pkgs and "dev" in pkgs, f"components: {COMPONENTS}")
    if WITH_TORCH:
        check("torch" in pkgs, f"built with LibTorch but no {PACKAGE_NAMES['torch']}")

    apt = (shutil.which("apt-cache") is not None and apt_knows("libc6"))
    owner = {}
    fields_of = {}
    for comp, name in pkgs.items():
        deb = deb_path(name)
        paths = contents(deb)
        required = [f.format(so=SOVERSION) for f in REQUIRED_FILES[comp]]
        required += [DOC.format(name) + "copyright", DOC.format(name) + "changelog.gz"]
        if comp == "dev":
            for lib in ("torch", "xgboost"):
                if lib in pkgs:
                    required += DEV_FILES[lib]
                    required.append(f"./usr/lib/libtraintl_{lib}.so")
        for f in required:
            check(f in paths, f"{f} is missing from {name}:\n" + "\n".join(sorted(paths)))
        for f, (mode, target) in paths.items():
            if not f.endswith("/"):
                check(f not in owner, f"{f} is in both {owner.get(f)} and {name}")
                owner[f] = name
            check(not f.startswith("./usr/etc") and not f.startswith("./usr/lib/systemd"),
                  f"{name}: config or unit installed under /usr: {f}")
        # Each part lives where it belongs: executables, unit and configs in traintl only;
        # the versioned libraries in their packages; headers and links in -dev.
        for f in paths:
            if f.startswith(("./usr/bin/", "./etc/", "./lib/systemd/", "./usr/share/man/")):
                check(comp == "traintl", f"{name} holds {f}")
            if f.startswith(("./usr/include/", "./usr/lib/cmake/")):
                check(comp == "dev", f"{name} holds {f}")
            if re.match(r"\./usr/lib/libtraintl_\w+\.so", f):
                check(comp in ("torch", "xgboost", "dev"), f"{name} holds {f}")
        if comp == "traintl":
            for f in ["./usr/bin/traintld", "./usr/bin/traintl", "./usr/bin/traintl-worker"]:
                check(paths[f][0].startswith("-rwxr-xr-x"), f"{f} has mode {paths[f][0]}")
        if comp in ("torch", "xgboost"):
            lib = f"./usr/lib/libtraintl_{comp}.so.{SOVERSION}"
            check(paths[lib][0].startswith("-rw-r--r--"), f"{lib}: {paths[lib]}")
        if comp == "dev":
            for lib in ("torch", "xgboost"):
                if lib in pkgs:
                    link = paths[f"./usr/lib/libtraintl_{lib}.so"]
                    check(link[0].startswith("l") and
                          link[1] == f"libtraintl_{lib}.so.{SOVERSION}",
                          f"libtraintl_{lib}.so is not the link to the soname: {link}")

        fields = control_fields(deb)
        fields_of[comp] = fields
        check(fields.get("Package") == name, fields)
        check(fields.get("Version") == VERSION, fields)
        check(fields.get("Architecture") == "amd64", fields)
        check(fields.get("Section") == SECTIONS[comp], f"{name}: Section {fields.get('Section')}")
        check(fields.get("Maintainer") and fields.get("Description"), fields)
        if comp != "traintl":
            check(fields.get("Source") == "traintl", f"{name}: Source {fields.get('Source')}")
        # Every dependency is one of ours or a Debian 12 package this machine's apt knows
        # (when apt has its package lists at all).
        ours = set(pkgs.values())
        for key in ("Depends", "Recommends", "Suggests"):
            for n in relations(fields.get(key, "")):
                if n in ours:
                    continue
                check(not apt or apt_knows(n), f"{name}: {key} names {n}, which apt does not know")
        print(f"{name}: Depends: {fields.get('Depends')}")
        for key in ("Recommends", "Suggests"):
            if fields.get(key):
                print(f"{name}: {key}: {fields[key]}")

        control = tempfile.mkdtemp(prefix="traintl-control-")
        stage = tempfile.mkdtemp(prefix="traintl-stage-")
        try:
            run(["dpkg-deb", "-e", deb, control])
            run(["dpkg-deb", "-x", deb, stage])
            check_control(comp, name, control)
            for elf in elf_files(stage):
                check_hardening(elf)
            if comp in ("torch", "xgboost"):
                soname = re.search(r"\(SONAME\)\s+Library soname: \[(.*)\]", run(
                    ["readelf", "-d", "-W",
                     os.path.join(stage, f"usr/lib/libtraintl_{comp}.so.{SOVERSION}")]).stdout)
                check(soname and soname.group(1) == f"libtraintl_{comp}.so.{SOVERSION}",
                      f"{name}: soname {soname and soname.group(1)}")
            if comp == "traintl" and shutil.which("systemd-analyze"):
                # The unit as installed passes systemd-analyze verify.
                verify_unit(os.path.join(stage, "lib/systemd/system/traintld.service"),
                            os.path.join(stage, "usr/bin/traintld"))
        finally:
            shutil.rmtree(control, ignore_errors=True)
            shutil.rmtree(stage, ignore_errors=True)

    # The service package: what a node or a machine that only submits jobs installs.
    f = fields_of["traintl"]
    names = set(relations(f.get("Depends", "")))
    for n in ["adduser", "libc6", "libstdc++6", "libgcc-s1", "libsqlite3-0", "libuv1",
              "libssl3"]:
        check(n in names, f"traintl: Depends lacks {n}: {f.get('Depends')}")
    check(any(n.startswith("libboost-program-options1.74") for n in names),
          f"Depends lacks Boost.Program_options 1.74: {f.get('Depends')}")
    check(any(n.startswith("libraft") for n in names), f"Depends lacks libraft: {names}")
    for key in ("Depends", "Pre-Depends", "Recommends"):
        heavy = [n for n in relations(f.get(key, "")) if HEAVY.search(n)]
        check(not heavy, f"traintl: {key} pulls in {heavy}: {f.get(key)}")
    check(relations(f.get("Recommends", "")) == ["systemd"], f"traintl: {f.get('Recommends')}")
    for comp, name in pkgs.items():
        if comp != "traintl":
            check(name in relations(f.get("Suggests", "")), f"traintl does not suggest {name}")

    version = f"(= {VERSION})"
    for lib in ("torch", "xgboost"):
        if lib in pkgs:
            dev_deps = fields_of["dev"]["Depends"]
            check(f"{pkgs[lib]} {version}" in dev_deps, f"traintl-dev: Depends {dev_deps}")
    check("nlohmann-json3-dev" in relations(fields_of["dev"]["Depends"]), fields_of["dev"])
    check("libtorch-dev" in relations(fields_of["dev"].get("Recommends", "")),
          fields_of["dev"])
    if "torch" in pkgs:
        names = relations(fields_of["torch"]["Depends"])
        check(any(n.startswith("libtorch") for n in names), f"libtraintl-torch: {names}")
    if "xgboost" in pkgs:
        names = relations(fields_of["xgboost"]["Depends"])
        check(any(n.startswith("libxgboost") for n in names), f"libtraintl-xgboost: {names}")
    if "python" in pkgs:
        deps = fields_of["python"]["Depends"]
        check(f"traintl {version}" in deps and "python3-numpy" in relations(deps),
              f"python3-traintl: Depends {deps}")
        check(any(n.startswith("libpython3") for n in relations(deps)),
              f"python3-traintl: no libpython: {deps}")
    print(f"OK: {', '.join(sorted(pkgs.values()))}")


def check_control(comp, name, control):
    """The control archive: maintainer scripts and conffiles are the service package's;
    the library packages have a shlibs file and the ldconfig trigger, and no script."""
    present = sorted(os.listdir(control))
    if comp != "traintl":
        scripts = [s for s in MAINTAINER_SCRIPTS if s in present]
        check(not scripts, f"{name} has maintainer scripts {scripts}")
        check("conffiles" not in present, f"{name} has conffiles")
    if comp in ("torch", "xgboost"):
        shlibs = read(os.path.join(control, "shlibs")).split()
        check(shlibs == [f"libtraintl_{comp}", SOVERSION, name, "(>=", f"{VERSION})"],
              f"{name}: shlibs {shlibs}")
        triggers = read(os.path.join(control, "triggers"))
        check("activate-noawait ldconfig" in triggers, triggers)
    elif comp != "traintl":
        check("triggers" not in present and "shlibs" not in present, f"{name}: {present}")
    if comp != "traintl":
        return
    check("triggers" not in present, "traintl has no library in the linker's path")
    for script in ["postinst", "prerm", "postrm"]:
        path = os.path.join(control, script)
        check(os.access(path, os.X_OK), f"{script} missing or not executable")
        run(["sh", "-n", path])
        with open(path) as f:
            code = "\n".join(l for l in f.read().splitlines()
                             if not l.lstrip().startswith("#"))
        m = FORBIDDEN_IN_SCRIPTS.search(code)
        check(m is None, f"{script} starts or enables something: {m and m.group(0)}")
    postinst = read(os.path.join(control, "postinst"))
    check("adduser --system" in postinst and "traintl" in postinst,
          "postinst does not create the traintl system user")
    check("/var/lib/traintl" in postinst, "postinst does not create /var/lib/traintl")
    conffiles = read(os.path.join(control, "conffiles")).split()
    check(sorted(conffiles) == ["/etc/traintl/traintl.conf", "/etc/traintl/traintld.conf"],
          conffiles)


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
    debs = [deb_path(n) for n in packages().values()]
    for deb in debs:
        check(os.path.exists(deb), f"{deb} missing (packaging.deb builds it)")
    # As root, lintian refuses to unpack unless told otherwise. Info tags are shown (and
    # printed here) but do not fail the test; errors and warnings do.
    cmd = ["lintian", "--fail-on", "error,warning", "--tag-display-limit", "0", "--info"]
    if os.geteuid() == 0:
        cmd.append("--allow-root")
    p = run(cmd + debs, check=False)
    out = p.stdout + p.stderr
    print(out)
    bad = [l for l in out.splitlines() if l.startswith(("E:", "W:"))]
    check(p.returncode == 0 and not bad,
          f"lintian found errors or warnings ({p.returncode}):\n" + "\n".join(bad or [out]))
    print(f"OK: lintian reports no error and no warning on {len(debs)} packages")


# --- packaging.sdk_example -----------------------------------------------------------

def test_sdk_example():
    need("dpkg-deb")
    # What a developer machine installs: the service (to train), the SDK and the libraries
    # it names; not python3-traintl.
    wanted = [n for c, n in packages().items() if c in ("traintl", "dev", "torch", "xgboost")]
    for name in wanted:
        check(os.path.exists(deb_path(name)), f"{deb_path(name)} missing (packaging.deb builds it)")
    work = tempfile.mkdtemp(prefix="traintl-sdk-")
    daemon = None
    try:
        stage = os.path.join(work, "root")
        for name in wanted:
            run(["dpkg-deb", "-x", deb_path(name), stage])
        prefix = os.path.join(stage, "usr")
        example = os.path.join(work, "sdk-example")
        shutil.copytree(os.path.join(prefix, "share/doc/traintl-dev/examples/sdk-example"),
                        example)

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
            check(f"traintl::torch: {prefix}/lib/libtraintl_torch.so.{SOVERSION}\n" in p.stdout,
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

"""traintld.service under a real systemd: boots a throw-away systemd-nspawn container on
an overlay of this machine's root (every change lands in a tmpfs and vanishes), where
in_container.sh installs the packages and drives the unit with systemctl: traintl alone
(no LibTorch, Python or SDK package), start (READY=1), STATUS=, a job trained by the
service, workers in the service's cgroup, stop mid-job and resume, journald priorities,
reload, the watchdog restarting a frozen daemon; then the library and SDK packages, an
example built against them and trained; remove and purge.

Needs root, systemd-nspawn (apt-get install systemd-container), unshare and overlayfs;
exits 77 (skipped) with the reason otherwise. Runs after packaging.deb (its fixture).
"""
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 77
OUT = os.environ.get("TRAINTL_PACKAGE_OUT", "")
VERSION = os.environ.get("TRAINTL_VERSION", "")
LIBS = os.environ.get("TRAINTL_TEST_LIBS", "")
HERE = os.path.dirname(os.path.abspath(__file__))

UNIT = """[Unit]
Description=traintl package test
SuccessAction=exit-force
FailureAction=exit-force
[Service]
Type=oneshot
ExecStart=/mnt/test/in_container.sh
TimeoutStartSec=900
"""

# Inside a private mount namespace: / as the lower layer of an overlay whose upper layer
# is a tmpfs, then systemd booted on it with the test unit as its only goal.
BOOT = r"""
set -e
mount --make-rprivate /
mkdir -p "$T/layer" "$T/root"
mount -t tmpfs -o size=6g tmpfs "$T/layer"
mkdir -p "$T/layer/upper" "$T/layer/work"
mount -t overlay overlay -o "lowerdir=/,upperdir=$T/layer/upper,workdir=$T/layer/work" "$T/root"
exec systemd-nspawn -D "$T/root" --machine=traintl-test-$$ --register=no --keep-unit \
  --link-journal=no --private-network --console=read-only \
  --bind-ro="$DEB_DIR:/mnt/deb" --bind-ro="$LIBS:/mnt/libs" --bind-ro="$TEST:/mnt/test" \
  --bind="$T/out:/mnt/out" \
  --bind-ro="$T/traintl-test.service:/etc/systemd/system/traintl-test.service" \
  -b -- systemd.unit=traintl-test.service
"""


def skip(reason):
    print(f"SKIPPED: {reason}")
    sys.exit(SKIP)


def main():
    if not OUT or not VERSION or not LIBS:
        sys.exit("TRAINTL_PACKAGE_OUT / TRAINTL_VERSION / TRAINTL_TEST_LIBS are not set "
                 "(run through ctest)")
    if os.geteuid() != 0:
        skip("booting a systemd container needs root")
    for tool in ("systemd-nspawn", "unshare", "mount"):
        if shutil.which(tool) is None:
            skip(f"{tool} is not installed (systemd-nspawn: apt-get install systemd-container)")
    with open("/proc/filesystems") as f:
        if "overlay" not in f.read():
            skip("the kernel has no overlayfs")
    for name in ("traintl", "traintl-dev"):
        deb = os.path.join(OUT, f"{name}_{VERSION}_amd64.deb")
        if not os.path.exists(deb):
            sys.exit(f"{deb} is missing (packaging.deb builds it)")
    lib = os.path.join(LIBS, "libtest_train.so")
    if not os.path.exists(lib):
        sys.exit(f"{lib} is missing (build test_train)")

    t = tempfile.mkdtemp(prefix="traintl-nspawn-")
    try:
        os.makedirs(os.path.join(t, "out"))
        with open(os.path.join(t, "traintl-test.service"), "w") as f:
            f.write(UNIT)
        env = dict(os.environ, T=t, DEB_DIR=OUT, LIBS=LIBS, TEST=HERE)
        try:
            p = subprocess.run(["unshare", "-m", "sh", "-c", BOOT], env=env,
                               capture_output=True, text=True, timeout=900)
            console = p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            console = f"(timed out)\n{e.stdout or ''}{e.stderr or ''}"
        log_path = os.path.join(t, "out", "log")
        log = ""
        if os.path.exists(log_path):
            with open(log_path) as f:
                log = f.read()
        print(log)
        if "ALL OK" not in log:
            if isinstance(console, bytes):
                console = console.decode(errors="replace")
            print("---- container console (last 8000 chars)\n" + console[-8000:])
            if not log:
                # The container did not get as far as the test: say why, as a skip only
                # when systemd itself could not boot.
                if "Failed to" in console and "Welcome to" not in console:
                    skip("systemd-nspawn cannot boot a container here:\n" + console[-2000:])
            print("FAILED")
            return 1
        print("OK: traintld.service ran under a real systemd")
        return 0
    finally:
        # The mounts lived in the private mount namespace and ended with it.
        shutil.rmtree(t, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

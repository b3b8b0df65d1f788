"""systemd/traintld.service: `systemd-analyze verify` is clean (no message at all: verify
exits 0 on unknown keys and bad values), and the settings issue 7 relies on are there.

    unit_file_test.py UNIT TRAINTLD

TRAINTLD replaces /usr/bin/traintld in ExecStart (verify checks that it is executable).
Exit 77 (skipped) without systemd-analyze.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

REQUIRED = {
    "Type": "notify",
    "NotifyAccess": "main",
    "Restart": "on-failure",
    "KillMode": "mixed",
    "User": "traintl",
    "Group": "traintl",
    "StateDirectory": "traintl",
    "ConfigurationDirectory": "traintl",
    "NoNewPrivileges": "yes",
    "ProtectSystem": "full",
    "ProtectHome": "read-only",
    "PrivateTmp": "yes",
    "OOMPolicy": "continue",
    "ExecReload": "/bin/sh -c 'kill -HUP $$MAINPID'",
}
# Each of these would break GPU workers or users' training code (see the unit's comments).
FORBIDDEN = ["PrivateDevices", "ProtectClock", "DevicePolicy", "MemoryDenyWriteExecute",
             "SystemCallFilter", "PrivateNetwork"]


def settings(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z]+)=(.*)$", line)
        if m:
            out.setdefault(m.group(1), m.group(2))
    return out


def main():
    unit, traintld = sys.argv[1], sys.argv[2]
    text = open(unit).read()
    s = settings(text)
    problems = []
    for key, value in REQUIRED.items():
        if s.get(key) != value:
            problems.append(f"{key}={s.get(key)!r}, expected {value!r}")
    for key in FORBIDDEN:
        if key in s:
            problems.append(f"{key}= is set")
    if not s.get("ExecStart", "").startswith("/usr/bin/traintld"):
        problems.append(f"ExecStart={s.get('ExecStart')!r}")
    watchdog = s.get("WatchdogSec", "0")
    if not watchdog.isdigit() or int(watchdog) <= 0:
        problems.append(f"WatchdogSec={watchdog!r}")
    stop_timeout = int(s.get("TimeoutStopSec", "0"))
    # Two worker graces (3 s each by default) and the leadership hand-over must fit.
    if stop_timeout < 15:
        problems.append(f"TimeoutStopSec={stop_timeout} is too short for the worker graces")
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems))
        return 1

    if shutil.which("systemd-analyze") is None:
        print("SKIPPED: systemd-analyze is not installed (apt-get install systemd)")
        return 77
    d = tempfile.mkdtemp(prefix="traintl-unit-")
    try:
        copy = os.path.join(d, "traintld.service")
        with open(copy, "w") as f:
            f.write(text.replace("/usr/bin/traintld", traintld))
        p = subprocess.run(["systemd-analyze", "verify", copy], capture_output=True, text=True)
        out = (p.stdout + p.stderr).strip()
        if p.returncode != 0 or out:
            print(f"FAILED: systemd-analyze verify: rc {p.returncode}\n{out}")
            return 1
        # The check can fail: a misspelt key is reported.
        with open(copy, "w") as f:
            f.write(text.replace("/usr/bin/traintld", traintld)
                    .replace("NoNewPrivileges=", "NoNewPrivilege="))
        p = subprocess.run(["systemd-analyze", "verify", copy], capture_output=True, text=True)
        if "NoNewPrivilege" not in p.stdout + p.stderr:
            print("FAILED: systemd-analyze verify did not report a misspelt key")
            return 1
    finally:
        shutil.rmtree(d, ignore_errors=True)
    print("OK: systemd-analyze verify is clean")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""tests/zygote.py, the suite's warm process server: what a forked child sees (arguments,
working directory, `sys.path`, environment, streams, exit status, signals) is what the same
command sees as a fresh `subprocess`."""

import signal
import subprocess
import sys

import pytest
import zygote

REPORT = """
import json, os, sys
print(json.dumps({
    "argv": sys.argv, "cwd": os.getcwd(), "path": sys.path, "mark": os.environ.get("MARK"),
    "name": __name__,
}))
print("a line on stderr", file=sys.stderr)
sys.exit(int(sys.argv[-1]))
"""


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "scripts" / "report.py"
    path.parent.mkdir()
    path.write_text(REPORT)
    return path


@pytest.mark.parametrize("how", ["-c", "script", "-m"])
def test_a_forked_child_sees_what_a_fresh_process_sees(how, script, tmp_path):
    command = {
        "-c": ["-c", REPORT],
        "script": [str(script)],
        "-m": ["-m", "report"],  # found through PYTHONPATH
    }[how]
    env = {"PATH": "/usr/bin:/bin", "MARK": "x", "PYTHONPATH": str(script.parent)}
    args = [sys.executable, *command, "one", "3"]
    fresh = subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)
    forked = zygote.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert fresh.returncode == forked.returncode == 3
    assert forked.stdout == fresh.stdout and forked.stderr == fresh.stderr == "a line on stderr\n"


def test_exit_statuses_and_signals_read_as_for_subprocess(tmp_path):
    cases = {
        "raise SystemExit('said')": (1, "said\n"),
        "import sys; sys.exit()": (0, ""),
        "import os, signal; os.kill(os.getpid(), signal.SIGKILL)": (-signal.SIGKILL, ""),
    }
    for code, (status, err) in cases.items():
        result = zygote.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True)
        assert (result.returncode, result.stderr) == (status, err.encode()), code
    sleeper = zygote.Process([sys.executable, "-c", "import time; time.sleep(60)"])
    assert sleeper.poll() is None
    sleeper.terminate()
    assert sleeper.wait(timeout=30) == -signal.SIGTERM

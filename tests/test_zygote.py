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


STREAMED = """
import os, sys, time
print("first", flush=True)
time.sleep(float(sys.argv[1]))
print("second on stderr", os.getsid(0) == os.getpid(), file=sys.stderr)
"""


def test_popen_pipes_lines_as_written_as_launch_reads_them(tmp_path):
    """`zygote.Popen`'s `stdout=PIPE, stderr=STDOUT` is a real pipe, read while the child
    runs; `start_new_session` as for `subprocess.Popen`."""
    options = dict(stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    args = [sys.executable, "-c", STREAMED, "60"]
    child = zygote.Popen(args, **options, start_new_session=True)
    assert child.stdout.readline() == "first\n"  # the child still sleeps
    assert child.poll() is None
    child.kill()
    assert child.wait(timeout=30) == -signal.SIGKILL and child.stdout.read() == ""
    child.stdout.close()
    args[-1] = "0"
    fresh = subprocess.Popen(args, **options, start_new_session=True)
    forked = zygote.Popen(args, **options, start_new_session=True)
    assert list(forked.stdout) == list(fresh.stdout) == ["first\n", "second on stderr True\n"]
    assert forked.wait(timeout=30) == fresh.wait(timeout=30) == 0
    fresh.stdout.close(), forked.stdout.close()

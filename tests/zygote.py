"""Real processes for the tests, without paying for TensorFlow's import in each one.

Importing TensorFlow and Keras costs a new process about 3.5 s of CPU; the suite starts some
forty `python -m stagegan` processes (resume's kill chains, parameter servers, multi-worker
chiefs). Here they are forked from a server that has already imported them, with Python's own
`multiprocessing` forkserver and its preload (`zygote_warm`): the server imports TensorFlow as
`stagegan`'s CLI does (`import_tensorflow`, which also sends native logs to /dev/null) and every
module of `stagegan`, and initialises nothing (no eager context, no thread pool, no gRPC), so a
fork of it is what a fresh `python -m stagegan` is right after its imports, but for one test
speed setting: graph ops are created without their Python stacks (tests/opstacks.py).

The child is a real process: its own pid, environment, working directory, `sys.path` (as
`PYTHONPATH` and the script's folder make it), stdout and stderr, exit status and signals
(SIGKILL reads -9 and SIGTERM reaches stagegan's handler, as for `subprocess.Popen`), and with
`netns` its own network namespace (`setns`, as `ip netns exec` does); tests/test_zygote.py
compares it with `subprocess`. What it does not have is a hash seed of its own (every child
shares the server's), so processes that must be fresh interpreters keep `subprocess`: the
exports loaded without stagegan, the wheel install, tests/test_cli.py's refused
`python -m stagegan`, and the two workers of tests/test_multi_worker.py's launch (its one
multi-worker run by processes with a hash seed each).

`Process` and `run` take `subprocess.Popen`'s and `subprocess.run`'s arguments for
`[sys.executable, "-m", module | "-c", code | script, *args]`; `Popen` the arguments
`stagegan.cli.launch` starts its processes with (a real pipe for their output, a session of
their own), so that a launch run in the test's process starts its workers and servers here
(`clihelp.launch`).
"""

import atexit
import multiprocessing
import multiprocessing.forkserver
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
import weakref

PIPE, DEVNULL = subprocess.PIPE, subprocess.DEVNULL
HERE = os.path.dirname(os.path.abspath(__file__))
_context = None


def _forkserver():
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["zygote_warm"])
        # Python 3.11's forkserver ignores the sys.path it is sent: PYTHONPATH finds the preload.
        before = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [HERE, before]))
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            if before is None:
                del os.environ["PYTHONPATH"]
            else:
                os.environ["PYTHONPATH"] = before
        _context = context
    return _context


class Process:
    """`subprocess.Popen(args, cwd=, env=, stdout=, stderr=)`, forked from the warm server.
    `stdout`/`stderr`: PIPE (read by `communicate`), DEVNULL, or None (the test's own).
    `netns`: the network namespace the process runs in (`ip netns add NETNS`)."""

    def __init__(self, args, cwd=None, env=None, stdout=None, stderr=None, text=False, netns=None):
        assert args[0] == sys.executable, args
        self.args = [str(a) for a in args]
        self._text = text
        self._pipes = {}  # name -> temporary file, removed when read (or with this object)
        weakref.finalize(self, _remove, self._pipes)
        paths = []
        for name, target in (("stdout", stdout), ("stderr", stderr)):
            if target == PIPE:
                handle, path = tempfile.mkstemp(prefix=f"zygote-{name}-")
                os.close(handle)
                self._pipes[name] = path
            elif target == DEVNULL:
                path = os.devnull
            else:
                assert target is None, target
                path = None
            paths.append(path)
        self._start(cwd, env, paths, netns=netns)

    def _start(self, cwd, env, streams, netns=None, new_session=False):
        environ = dict(os.environ if env is None else env)
        cwd = os.path.abspath(cwd or os.getcwd())
        self._process = _forkserver().Process(
            target=_child,
            args=(self.args, cwd, environ, *streams, netns, new_session),
            daemon=True,
        )
        self._process.start()
        self.pid = self._process.pid

    @property
    def returncode(self):
        return self._process.exitcode

    def poll(self):
        self._process.join(0)
        return self._process.exitcode

    def wait(self, timeout=None):
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self._process.exitcode

    def send_signal(self, signum):
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self):
        self.send_signal(signal.SIGKILL)

    def terminate(self):
        self.send_signal(signal.SIGTERM)

    def communicate(self, timeout=None):
        self.wait(timeout)
        return tuple(self._read(name) for name in ("stdout", "stderr"))

    def _read(self, name):
        path = self._pipes.pop(name, None)
        if path is None:
            return None
        try:
            with open(path, "rb") as f:
                data = f.read()
            return data.decode("utf-8", errors="replace") if self._text else data
        finally:
            os.unlink(path)


def _remove(pipes):
    for path in pipes.values():
        if os.path.exists(path):
            os.unlink(path)


def run(args, cwd=None, env=None, capture_output=False, timeout=None, text=False):
    """`subprocess.run`: the finished process's status and, with `capture_output`, its output."""
    streams = PIPE if capture_output else None
    process = Process(args, cwd=cwd, env=env, stdout=streams, stderr=streams, text=text)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.communicate()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


class Popen(Process):
    """`subprocess.Popen(args, env=, stdout=PIPE | None, stderr=STDOUT | None, text=True,
    start_new_session=)` as `stagegan.cli.launch` starts its processes, forked from the warm
    server: `stdout=PIPE` is a real pipe, read as it is written (`self.stdout`); None gives
    the child this process's descriptor 1 or 2 (not `sys.stdout`: what pytest captures there
    the child cannot write to)."""

    def __init__(self, args, env=None, stdout=None, stderr=None, text=False,
                 start_new_session=False):  # fmt: skip
        assert args[0] == sys.executable and text, args
        assert stdout in (None, PIPE) and stderr in (None, subprocess.STDOUT), (stdout, stderr)
        self.args, self._text, self._pipes, self.stdout = [str(a) for a in args], text, {}, None
        streams = [_Descriptor(1), _Descriptor(2)]
        read = None
        if stdout == PIPE:
            read, write = os.pipe()
            streams[0] = _Descriptor(write)
        if stderr == subprocess.STDOUT:
            streams[1] = streams[0]
        try:
            self._start(None, env, streams, new_session=start_new_session)
        except BaseException:
            if read is not None:
                os.close(read)
            raise
        finally:
            if read is not None:
                os.close(write)
        if read is not None:
            self.stdout = os.fdopen(read, "r", encoding="utf-8", errors="replace")


class _Descriptor:
    """A file descriptor of this process, sent to the child as the forkserver sends them
    (`DupFd` while the process is being started): the child receives its copy's number."""

    def __init__(self, fd):
        self.fd = fd

    def __reduce__(self):
        return _received, (multiprocessing.reduction.DupFd(self.fd),)


def _received(duplicate):
    return duplicate.detach()


def _child(args, cwd, env, stdout, stderr, netns=None, new_session=False):
    """In the forked process: become `args` run in `cwd` with `env` (in network namespace
    `netns`, as `ip netns exec NETNS` runs a command; with `new_session` in a session of its
    own), then exit as Python does. `stdout`, `stderr`: a file to write (its path), a
    descriptor sent by the parent (`_Descriptor`), or None (the server's)."""
    if netns is not None:
        _join_network_namespace(netns)
    if new_session:
        os.setsid()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    _redirect(stdout, stderr)
    import zygote_warm

    mode, target, rest = args[1], args[2] if len(args) > 2 else None, args[3:]
    # sys.path[0] as Python sets it: '' for -c, the working directory for -m, else the script's
    first = {"-c": "", "-m": cwd}.get(mode, os.path.dirname(os.path.realpath(mode)))
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:] = [first, *extra, *zygote_warm.SITE_PATH]
    status = 0
    try:
        if mode == "-m":
            sys.argv = [target, *rest]
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        elif mode == "-c":
            sys.argv = ["-c", *rest]
            exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.argv = args[1:]
            runpy.run_path(mode, run_name="__main__")
    except SystemExit as stop:
        status = stop.code
        if status is None:
            status = 0
        elif not isinstance(status, int):
            print(status, file=sys.stderr)
            status = 1
    except BaseException:
        traceback.print_exc()
        status = 1
    # What the interpreter does on its way out: wait for non-daemon threads, run atexit's
    # functions, flush the standard streams.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status & 0xFF)


def _redirect(stdout, stderr):
    """Point descriptors 1 and 2 at `stdout` and `stderr` (`_child`'s), where given."""
    for stream, target in ((sys.stdout, stdout), (sys.stderr, stderr)):
        if target is None:
            continue
        stream.flush()
        # stderr: the descriptor stagegan's CLI writes to
        if isinstance(target, str):
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
            os.dup2(fd, stream.fileno())
            os.close(fd)
        else:
            os.dup2(target, stream.fileno())
    for fd in {stdout, stderr}:
        if isinstance(fd, int) and fd not in (1, 2):
            os.close(fd)


def _join_network_namespace(name):
    """`setns(2)` into `/var/run/netns/NAME`: the sockets this process opens from now on are
    that namespace's (its interfaces, addresses and 127.0.0.1)."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/var/run/netns/{name}", os.O_RDONLY)
    try:
        if libc.setns(fd, 0x40000000) != 0:  # CLONE_NEWNET
            raise OSError(ctypes.get_errno(), f"setns into network namespace {name}")
    finally:
        os.close(fd)

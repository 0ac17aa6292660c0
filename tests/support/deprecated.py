"""What hosted RabbitMQ 4.3 brokers deny, checked on dlxtool's side of the wire.

RabbitMQ 4.3 lists "deprecated features" an operator can deny (`deprecated_features.permit.NAME = false`);
hosted brokers deny `global_qos` (basic.qos with global=true) and `transient_nonexcl_queues` (a queue
declared with durable=false and exclusive=false). A broker does not always enforce what it lists: 4.3.6
accepted a global_qos consumer on a quorum queue with global_qos denied (seen on scripts/dev-broker v43).
So the suite checks the frames themselves: every AMQP method pika sends goes through
`pika.connection.Connection._send_method` (BlockingChannel and the asynchronous channels of
dlxtool.broker.channel alike); dlxtool's own codec (dlxtool.broker.wire.frames, _hotpath.c) writes
basic.publish frames only. A method that uses a denied feature, sent while a dlxtool module is on the
call stack, is a violation: the test fails, naming the method and dlxtool's line that sent it. The frame
is still sent (the check observes, it does not change what the broker sees). What the tests' own helpers
send (no dlxtool frame on the stack) is not dlxtool's doing and is not checked.

On in every run, on every broker (dlxtool needs neither feature anywhere: its type probe, the one known use of
global QoS, now asks with an x-stream-offset consumer). DLXTOOL_TEST_DENY_DEPRECATED=0 turns it off; =report
records the violations without failing tests and lists them at the end of the run (without pytest-xdist: each
worker would list its own).
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dlxtool

DLXTOOL_DIR = Path(dlxtool.__file__).resolve().parent
ENV = "DLXTOOL_TEST_DENY_DEPRECATED"


def mode() -> str:
    """"fail" (the default: unset or 1), "report" or "" (off: 0), from DLXTOOL_TEST_DENY_DEPRECATED."""
    value = os.environ.get(ENV, "1").strip().lower()
    if value in ("0", "no", "false"):
        return ""
    return "report" if value == "report" else "fail"


@dataclass(frozen=True)
class Violation:
    feature: str  # the deprecated feature's name in RabbitMQ (rabbitmqctl list_deprecated_features)
    method: str  # what was sent, e.g. "basic.qos(prefetch_count=1, global=true)"
    site: str  # dlxtool's innermost frame that led to it: "dlxtool/broker/queues.py:119 in probe_type"
    stack: tuple[str, ...] = field(default=(), compare=False)  # dlxtool's frames, innermost first

    def __str__(self) -> str:
        via = "".join(f"\n    via {frame}" for frame in self.stack[1:])
        return (f"{self.site}: dlxtool sent {self.method}, RabbitMQ's deprecated feature {self.feature} "
                f"(denied on hosted 4.3 brokers){via}")


def denied_feature(method: Any) -> tuple[str, str] | None:
    """(feature, description) when a pika method object uses a feature hosted 4.3 brokers deny."""
    from pika import spec

    if isinstance(method, spec.Basic.Qos) and method.global_qos:
        return "global_qos", f"basic.qos(prefetch_count={method.prefetch_count}, global=true)"
    if (isinstance(method, spec.Queue.Declare) and not method.passive and not method.durable
            and not method.exclusive):
        return ("transient_nonexcl_queues",
                f"queue.declare({method.queue!r}, durable=false, exclusive=false, "
                f"auto_delete={str(bool(method.auto_delete)).lower()})")
    return None


# dlxtool's pass-throughs: what goes through them is decided by their caller (a test calling
# AsyncChannel.call("queue_declare", ...) itself is the test's doing, not dlxtool's).
PASS_THROUGH = {("broker/channel.py", "call")}


def _dlxtool_frames() -> tuple[str, ...]:
    """Who sent the method: when the code outside pika that called it (past dlxtool's pass-throughs) is
    dlxtool's, its frames in dlxtool's package from there outward, as "dlxtool/x.py:LINE in FUNC"; else ()."""
    import pika

    pika_dir = Path(pika.__file__).resolve().parent
    here = Path(__file__).resolve()
    frame = inspect.currentframe()
    # Out of this module and pika, then past dlxtool's pass-throughs.
    while frame is not None:
        path = Path(frame.f_code.co_filename).resolve()
        if path != here and not path.is_relative_to(pika_dir) and not (
                path.is_relative_to(DLXTOOL_DIR)
                and (path.relative_to(DLXTOOL_DIR).as_posix(), frame.f_code.co_name) in PASS_THROUGH):
            break
        frame = frame.f_back
    if frame is None or not Path(frame.f_code.co_filename).resolve().is_relative_to(DLXTOOL_DIR):
        return ()
    out = []
    root = DLXTOOL_DIR.parent
    while frame is not None:
        path = Path(frame.f_code.co_filename).resolve()
        if path.is_relative_to(DLXTOOL_DIR):
            out.append(f"{path.relative_to(root)}:{frame.f_lineno} in {frame.f_code.co_name}")
        frame = frame.f_back
    return tuple(out)


@contextmanager
def watch() -> Iterator[list[Violation]]:
    """Record, while active, every method dlxtool sends through pika that uses a denied feature."""
    from pika.connection import Connection

    found: list[Violation] = []
    # pika's one chokepoint for outgoing methods (channel RPCs, acks, publishes through pika). A watch inside another
    # (a test of this check, under the run's own watch) records alone: it calls pika's own method, not the outer watch.
    installed = Connection._send_method  # noqa: SLF001 - the check watches what pika sends, nothing else does
    original = getattr(installed, "pika_original", installed)

    def _send_method(self: Any, channel_number: int, method: Any, content: Any = None) -> None:
        denied = denied_feature(method)
        if denied is not None:
            stack = _dlxtool_frames()
            if stack:
                found.append(Violation(feature=denied[0], method=denied[1], site=stack[0], stack=stack))
        original(self, channel_number, method, content)

    _send_method.pika_original = original  # type: ignore[attr-defined]
    Connection._send_method = _send_method  # type: ignore[method-assign]  # noqa: SLF001 - see above
    try:
        yield found
    finally:
        Connection._send_method = installed  # type: ignore[method-assign]  # noqa: SLF001 - see above

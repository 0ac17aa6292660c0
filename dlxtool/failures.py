"""Failure fingerprints: which dead letters failed the same way, for `history --summary`.

Error texts carry what differs from message to message — ids, numbers, UUIDs, hex, timestamps — so that
`ValueError: order o-00013 has no lines` and `ValueError: order o-00058 has no lines` are one failure, not two.
`error_pattern` replaces those parts with placeholders: UUIDs `<uuid>`, timestamps `<time>`, 0x-hex `<hex>`, every
run of letters and digits that mixes the two (or is long hex) and has 5 or more characters `<id>`, every other
run of digits `<n>`. Words stay (they name the failure).

Where a convention records a stack (Spring's x-exception-stacktrace, NServiceBus' ExceptionInfo.StackTrace,
MassTransit's MT-Fault-StackTrace, Dramatiq's options.traceback), the failure is its exception type and first
application frame instead (`stack_signature`): the frame closest to where it was raised that is not the
language's runtime or a known framework/library, without its line number (a new build moves the lines). Java and
.NET stacks (`at pkg.Class.method(…)`) and Python tracebacks are read; a stack that is neither says nothing.

Pure functions, no I/O: the grouping itself is dlxtool.ops.history.summarize_failures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
# ISO 8601 date-times and dates (2026-12-01, 2026-12-01T22:30:21.669Z, 2026-12-01 22:30:21+01:00), then clock
# times (22:30:21, 22:30:21.669, 9:05)
_TIMESTAMP = re.compile(r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?(?!\d)"
                        r"(?:\s?(?:Z|UTC|GMT|[+-]\d{2}:?\d{2})\b)?")
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?!\d)(?:\s?(?:Z|UTC|GMT|[+-]\d{2}:?\d{2})\b)?")
_HEX = re.compile(r"\b0[xX][0-9a-fA-F]+\b")
_RUN = re.compile(r"[A-Za-z0-9]+")
_DIGITS = re.compile(r"\d+")
_LONG_HEX = re.compile(r"[0-9a-fA-F]{12,}")
_PLACEHOLDER = re.compile(r"<(?:uuid|time|hex)>")


def error_pattern(text: str) -> str:
    """`text` with what varies from message to message replaced (module docstring); whitespace collapsed."""
    text = _UUID.sub("<uuid>", text)
    text = _TIMESTAMP.sub("<time>", text)
    text = _CLOCK.sub("<time>", text)
    text = _HEX.sub("<hex>", text)
    # placeholders already made must not be read as runs of letters: split around them
    parts = _PLACEHOLDER.split(text)
    kept = _PLACEHOLDER.findall(text)
    out = [_RUN.sub(_run, part) for part in parts]
    joined = "".join(p + (kept[i] if i < len(kept) else "") for i, p in enumerate(out))
    return " ".join(joined.split())


def _run(match: re.Match[str]) -> str:
    run = match.group(0)
    digits = any(c.isdigit() for c in run)
    if digits and run.isdigit():
        return "<n>"
    if (digits and len(run) >= 5) or _LONG_HEX.fullmatch(run):
        return "<id>"
    return _DIGITS.sub("<n>", run) if digits else run


# -- stacks ----------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StackSignature:
    """What a recorded stack says of a failure: the exception type (the root cause where causes are chained) and
    its first application frame (`package.Class.method`, or `file in function` for Python), either may be None."""

    exception: str | None
    frame: str | None

    def short_frame(self) -> str | None:
        """The frame as a table shows it: Class.method (Python: file.py in function)."""
        if self.frame is None:
            return None
        if " in " in self.frame:  # Python: "/app/orders/handler.py in handle"
            path, function = self.frame.rsplit(" in ", 1)
            return f"{path.rsplit('/', 1)[-1]} in {function}"
        return ".".join(self.frame.split(".")[-2:])


# Frames of the runtimes and of the frameworks/libraries around an application: never "the application's".
LIBRARY_PREFIXES = (
    "java.", "javax.", "jakarta.", "jdk.", "sun.", "com.sun.", "kotlin.", "kotlinx.", "scala.", "groovy.",
    "org.springframework.", "org.apache.", "com.rabbitmq.", "io.netty.", "reactor.", "io.micrometer.",
    "com.fasterxml.", "org.hibernate.", "org.slf4j.", "ch.qos.", "io.opentelemetry.", "org.junit.",
    "System.", "Microsoft.", "NServiceBus.", "MassTransit.", "RabbitMQ.", "Newtonsoft.", "Polly.", "Autofac.",
    "Castle.", "Grpc.", "Google.Protobuf.",
)
PYTHON_LIBRARY_PATHS = ("/site-packages/", "/dist-packages/", "/lib/python", "<frozen ")

_AT = re.compile(r"^\s*at (?P<function>[^\s(]+)\s*\(")              # Java and .NET: "\tat pkg.Class.method(…)"
_PY_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+, in (?P<function>\S+)')
_TYPE = r"(?P<type>[A-Za-z_][\w$.`]*[A-Za-z_$\w])"
_CAUSED = re.compile(r"^\s*Caused by: " + _TYPE)                  # Java's chained causes
_INNER = re.compile(r"---> " + _TYPE)                             # .NET's inner exceptions, on the header
_HEAD = re.compile(r"^" + _TYPE + r"(?::|$)")                     # "pkg.SomeException: message"
_PY_TRACEBACK = "Traceback (most recent call last):"


def stack_signature(stack: str | None, exception: str | None = None) -> StackSignature | None:
    """The exception type and first application frame of a recorded stack (module docstring); `exception`: the type
    a convention records apart (MassTransit's MT-Fault-ExceptionType), used where the stack does not say it. None
    where the text is no stack (neither a frame nor an exception type found)."""
    if not stack or not stack.strip():
        return None
    lines = stack.strip().splitlines()
    if any(_PY_TRACEBACK in line for line in lines) or any(_PY_FRAME.match(line) for line in lines):
        found = _python(lines)
    else:
        found = _java_or_dotnet(lines)
    if found is None:
        return None if exception is None else StackSignature(exception, None)
    kind, frame = found
    return StackSignature(kind or exception, frame) if (kind or exception or frame) else None


def _java_or_dotnet(lines: list[str]) -> tuple[str | None, str | None] | None:
    """Java: the last `Caused by:` is the root cause, its frames follow it; .NET: the innermost `---> Type` on the
    header, whose frames come first. Either way the first application frame from the cause's frames on."""
    kind: str | None = None
    start = 0
    head = _HEAD.match(lines[0].strip())
    if head and not _AT.match(lines[0]):
        kind = head.group("type")
    inner = _INNER.findall(lines[0])
    if inner:
        kind = inner[-1]
    for number, line in enumerate(lines):
        caused = _CAUSED.match(line)
        if caused:
            kind, start = caused.group("type"), number
    frames = [m.group("function") for line in lines[start:] if (m := _AT.match(line))]
    if not frames:
        frames = [m.group("function") for line in lines if (m := _AT.match(line))]
    if not frames and kind is None:
        return None
    application = next((f for f in frames if not f.startswith(LIBRARY_PREFIXES) and "$$" not in f), None)
    return kind, application or (frames[0] if frames else None)


def _python(lines: list[str]) -> tuple[str | None, str | None] | None:
    """The last traceback (the exception raised last, where several are chained): its last application frame (the
    one closest to the raise; Python lists the outermost first) and the exception on its last line."""
    starts = [n for n, line in enumerate(lines) if _PY_TRACEBACK in line]
    block = lines[starts[-1]:] if starts else lines
    frames = [f"{m.group('path')} in {m.group('function')}" for line in block if (m := _PY_FRAME.match(line))]
    application = next((f for f in reversed(frames) if not any(p in f for p in PYTHON_LIBRARY_PATHS)), None)
    kind = None
    for line in reversed(block):
        if line and not line[0].isspace():
            head = _HEAD.match(line.strip())
            if head and _PY_TRACEBACK not in line:
                kind = head.group("type")
            break
    if not frames and kind is None:
        return None
    return kind, application or (frames[-1] if frames else None)


# -- the key a summary groups by ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FailureKey:
    """How a summary tells failures apart: by stack signature where a stack was recorded, else by error pattern
    (`ungrouped`: by the error text as it is)."""

    pattern: str | None
    signature: StackSignature | None = None

    def to_json(self) -> dict[str, str | None]:
        return {"error_pattern": self.pattern,
                "exception": self.signature.exception if self.signature else None,
                "frame": self.signature.frame if self.signature else None}


def failure_key(error: str | None, stack: str | None = None, *, exception: str | None = None,
                ungrouped: bool = False) -> FailureKey:
    """The key of one message's failure: its error text as it is (`ungrouped`), else its stack's signature where a
    convention recorded a stack, else its error pattern."""
    if ungrouped:
        return FailureKey(error)
    signature = stack_signature(stack, exception)
    if signature is not None:
        return FailureKey(None, signature)
    return FailureKey(error_pattern(error) if error else None)

"""JSON message bodies, read strictly: what `decoded` says of a JSON body (dlxtool.decoding.json_decoded) and what
an edited JSON body must be (dlxtool.editing). No NaN, no Infinity, no number a double cannot hold: a value that
would not be written back as the JSON it was read from."""

from __future__ import annotations

import json
import math
from typing import Any

MISSING: Any = object()  # no value (not None: JSON has null)


class JsonError(ValueError):
    """Not strict JSON: `line` is 1-based within the text (0: not known)."""

    def __init__(self, message: str, line: int = 0) -> None:
        super().__init__(message)
        self.message, self.line = message, line


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(text: str) -> Any:
    """Strict JSON; JsonError with the line."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise JsonError(f"not valid JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    except ValueError as exc:
        raise JsonError(f"not valid JSON: {exc}") from None
    if not _finite(value):
        raise JsonError("not valid JSON: a number too large for a double")
    return value


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True


def body_value(data: bytes, content_type: str) -> Any:
    """The JSON value of a body that is JSON (its content type says so, or it is a JSON object or array), else
    MISSING."""
    if "json" not in content_type and data.lstrip()[:1] not in (b"{", b"["):
        return MISSING
    try:
        return parse(data.decode("utf-8"))
    except (UnicodeDecodeError, JsonError):
        return MISSING

"""`dlxtool decode`'s side of decoding: the best payload of a log line (decode_line), a stream of lines
(decode_lines), a whole input as one payload (decode_whole_input) and the run's tally.

Apart from dlxtool.decoding, which peek, history and dump load to decode message bodies: they never read log lines.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlxtool import compression
from dlxtool.decoding import (
    COMPRESSED,
    FAILED,
    INVALID,
    INVALID_RATING,
    MIN_EXPLAINED_PREFIX,
    MIN_WEAK_BYTES,
    NOT_PROTOBUF,
    DecodedBody,
    decode_body,
    decode_candidate,
    registry_errors,
)
from dlxtool.errors import UsageError
from dlxtool.outcome import Outcome, Status
from proto_registry.hints import Hints
from proto_registry.result import MALFORMED, MATCH
from proto_registry.wire import TRUNCATED

if TYPE_CHECKING:
    from dlxtool import extract
    from proto_registry import Registry


# -- log lines --------------------------------------------------------------------------------


@dataclass(slots=True)
class LineResult:
    """The payload chosen in a log line, and what it decoded to."""

    candidate: extract.Candidate
    decoded: DecodedBody


def rate(decoded: DecodedBody | None, cand: extract.Candidate) -> float:
    """How well a candidate decoded: a clean typed match beats a defective one beats raw structure."""
    if decoded is None:
        return 0.0
    if decoded.type is not None and decoded.status == MATCH:
        base = 3.0 if decoded.score >= 1.0 else 2.0
        return base + decoded.confidence
    if decoded.status in (TRUNCATED, MALFORMED, COMPRESSED):
        # Below any payload that reads whole, above "no payload": a payload cut short is still reported.
        return (0.8 if cand.strong else 0.6) if payload_shaped(decoded, cand) else 0.0
    if decoded.status == NOT_PROTOBUF:  # only ever a decompressed payload here (see decode_candidate)
        return 0.55
    if decoded.raw is not None and (cand.strong or len(cand.data) >= 12):
        return 1.0
    return 0.0


def payload_shaped(decoded: DecodedBody, cand: extract.Candidate) -> bool:
    """Whether a candidate that did not decode is a payload nonetheless (reported, never hidden): one meant
    as binary data (the value of a payload key, a bytes literal) of a few bytes at least, or a bare token
    whose bytes before the cut a registered type explains (MIN_EXPLAINED_PREFIX). A JSON or text payload is
    not one (it is reported as what it is); nor is a bare token that only looks cut by chance."""
    from dlxtool import extract

    if decoded.status == COMPRESSED:
        return True
    if cand.strong:
        return len(cand.data) >= MIN_WEAK_BYTES and extract.content_kind(cand.data, strong=True) is None
    return (decoded.status == TRUNCATED and decoded.explained and (decoded.offset or 0) >= MIN_EXPLAINED_PREFIX
            and extract.content_kind(cand.data, strong=False) is None)


def decode_line(
    registry: Registry,
    line: str,
    *,
    hints: Hints | None = None,
    type_name: str | None = None,
    raw: bool = False,
    top: int = 0,
    want_text: bool = False,
    max_inflated: int = compression.DEFAULT_MAX_INFLATED,
) -> LineResult | None:
    """The best-decoding payload of ``line``, or ``None`` when the line holds no payload."""
    from dlxtool import extract

    cands = extract.candidates(line)
    if not cands:
        return None
    cache: dict[bytes, DecodedBody | None] = {}

    def rating(cand: extract.Candidate) -> tuple[float, DecodedBody | None]:
        if cand.invalid is not None:  # a payload key's value that is no base64/hex: said, not decoded in part
            return INVALID_RATING, DecodedBody(status=INVALID, error=f"{cand.key}: {cand.invalid}",
                                               size=len(cand.data))
        if cand.data not in cache:
            cache[cand.data] = decode_candidate(registry, cand.data, hints, type_name, raw, top,
                                                 strong=cand.strong, max_inflated=max_inflated)
        d = cache[cand.data]
        r = rate(d, cand)
        if r >= 2.0 and len(cand.data) < MIN_WEAK_BYTES and not cand.strong and not type_name:
            r = 0.5  # a short word that happens to be base64 of a tiny valid message: not evidence
        return r, d

    got = extract.best(cands, rating)
    if got is None:
        return None
    cand, score, decoded = got
    if decoded is None or (score <= 0.5 and (not (type_name or raw) or decoded.status in FAILED)):
        return _not_protobuf(cands)
    if want_text and cand.invalid is None:
        decoded = decode_candidate(registry, cand.data, hints, type_name, raw, top, want_text=True,
                                    strong=cand.strong, max_inflated=max_inflated)
        assert decoded is not None
    return LineResult(cand, decoded)


def _not_protobuf(cands: list[extract.Candidate]) -> LineResult | None:
    """A payload that is there but is JSON or text: said so, rather than "no payload found"."""
    from dlxtool import extract

    for cand in sorted(cands, key=lambda c: (not c.strong, -len(c.data))):
        if cand.invalid is not None:
            continue
        kind = extract.content_kind(cand.data, strong=cand.strong)
        if kind is not None:
            decoded = DecodedBody(status=NOT_PROTOBUF, error=f"payload is {kind}, not protobuf",
                                  content=cand.data.decode("utf-8"))
            return LineResult(cand, decoded)
    return None



# -- streams of lines -------------------------------------------------------------------------------


@dataclass(slots=True)
class LinePayload:
    """One payload found in (or one line passed through from) an input."""

    source: str
    line: int
    decoded: DecodedBody | None  # None: the line holds no payload (passed through)
    candidate: extract.Candidate | None = None
    text_line: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"source": self.source, "line": self.line}
        if self.candidate is not None:
            d["span"] = [self.candidate.start, self.candidate.end]
            d["encoding"] = self.candidate.encoding
            if self.candidate.key:
                d["key"] = self.candidate.key
        if self.decoded is None:
            d["status"] = "no_payload"
            d["text"] = self.text_line
            return d
        decoded = self.decoded.to_dict()
        if "source" in decoded:  # where the type came from (hint, explicit): not where the line came from
            decoded["type_source"] = decoded.pop("source")
        d.update(decoded)
        return d


def decode_lines(
    registry: Registry,
    lines: Iterable[str],
    *,
    source: str = "-",
    type_name: str | None = None,
    raw: bool = False,
    top: int = 0,
    want_text: bool = False,
    max_inflated: int = compression.DEFAULT_MAX_INFLATED,
    passthrough: bool = False,
) -> Iterator[LinePayload]:
    """Decode the payload of each line, lazily (so ``tail -f`` streams)."""
    if type_name is not None:
        with registry_errors():
            type_name = registry.resolve_one(type_name)
    for number, line in enumerate(lines, 1):
        line = line.rstrip("\r\n")
        found = decode_line(registry, line, type_name=type_name, raw=raw, top=top, want_text=want_text,
                            max_inflated=max_inflated)
        if found is not None:
            yield LinePayload(source, number, found.decoded, found.candidate)
        elif passthrough:
            yield LinePayload(source, number, None, text_line=line)


def decode_whole_input(
    registry: Registry,
    data: bytes,
    encoding: str,
    *,
    source: str = "-",
    type_name: str | None = None,
    raw: bool = False,
    top: int = 0,
    want_text: bool = False,
    max_inflated: int = compression.DEFAULT_MAX_INFLATED,
) -> LinePayload:
    """``--input base64|hex|binary``: the whole input is one payload."""
    from dlxtool import extract

    try:
        body = extract.decode_whole(data, encoding)
    except ValueError as exc:  # says what is not valid, and where (extract.not_encoded)
        raise UsageError(f"{source}: {exc}", hint=f"check --input ({encoding}: the whole input is one payload)") \
            from exc
    with registry_errors():
        decoded = decode_body(registry, body, type_name=type_name, raw=raw, top=top, want_text=want_text,
                              max_inflated=max_inflated)
    assert decoded is not None  # no content type given: never skipped
    return LinePayload(source, 1, decoded)


@dataclass(slots=True)
class Tally:
    """What a decode run found: payloads, how many decoded whole, how many did not and why. Its `outcome()`
    is the run's: USAGE (bad input data, exit 2) when payloads were found and none decoded whole; OK when some
    did, or when the input held no payload at all (passthrough pipelines go on)."""

    payloads: int = 0
    clean: int = 0
    not_protobuf: int = 0
    failed: dict[str, int] = field(default_factory=dict)

    def add(self, outcome: LinePayload) -> None:
        decoded = outcome.decoded
        if decoded is None:
            return
        self.payloads += 1
        if decoded.failed:
            self.failed[decoded.status] = self.failed.get(decoded.status, 0) + 1
        elif decoded.status == NOT_PROTOBUF:
            self.not_protobuf += 1
        else:
            self.clean += 1

    def outcome(self) -> Outcome:
        if not self.failed or self.clean or self.not_protobuf:
            return Outcome()
        n = sum(self.failed.values())
        why = ", ".join(f"{count} {_FAILED_WORDS.get(status, status)}" for status, count in sorted(self.failed.items()))
        hint = "each row says why: where its payload stops and what it holds up to there"
        if INVALID in self.failed:
            hint += ", or what in it is not base64 or hex"
        return Outcome(Status.USAGE, f"decode: {n} payload{'s' if n != 1 else ''} found, none decoded ({why})",
                          hint=hint)


_FAILED_WORDS = {TRUNCATED: "cut short", MALFORMED: "malformed", "error": "not of the type",
                 COMPRESSED: "compressed past the cap", INVALID: "not valid base64 or hex"}

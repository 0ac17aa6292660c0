"""A guarded replay: a canary first, a brake during the run — a replay that stops by itself when the fix did not work.

After a fix, replaying thousands of dead letters whose fix was incomplete sends them all back to fail again (one
more x-death each, one more delivery attempt on quorum queues). A guarded replay:

  * **canary** (`canary` messages, or `canary_percent` of the DLQ): a first pass replays only those, picked across
    the origins and failure groups the run meets (`CanaryPicker`), then watches them through the tap
    (dlxtool.ops.tap): one seen dead again (it carries this run's provenance) fails; the others pass once their
    origins held no ready message for `grace` seconds. It waits for that, at most `canary_wait` seconds. Any canary
    that failed, or any left undecided, stops the run there: the rest stays in the DLQ and nothing more moves.
  * **brake**: during the main pass, this run's messages seen dead again are counted by their publish number; when,
    among the last `brake_window` replayed (up to the newest one seen dead), more than `brake` of them died again
    (and at least `brake_minimum`), the engine is stopped as Ctrl-C stops it: in-flight publishes settle, what it
    holds goes back to the DLQ, nothing more is published.
  * **pace**: `rate` and `batch`/`pause` (a pause after every `batch` messages read) combine, for both passes.

Hooks into the replay: ReplaySettings.run_id (the provenance's run id: the tap's key), and each pass's
PassControl (dlxtool.ops.transfer_settings): .pick (the canary pass's choice), .read_at_most (the canary pass reads
the DLQ's head only), .stop (the brake's stop event), .pace. The decisions (canary verdict, brake) go to
`decided(kind, facts)` (the journal).
"""

from __future__ import annotations

import bisect
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from dlxtool.broker.connection import connect
from dlxtool.broker.queues import ready
from dlxtool.errors import RefusedError
from dlxtool.json_shapes import is_object
from dlxtool.message_ids import MessageIds, message_name
from dlxtool.ops.actions import Action, Decider, Deciding, Decision
from dlxtool.ops.engine import BEYOND_LIMIT
from dlxtool.ops.guard_settings import BRAKE_DEFAULT as BRAKE_DEFAULT
from dlxtool.ops.guard_settings import BRAKE_MINIMUM as BRAKE_MINIMUM
from dlxtool.ops.guard_settings import BRAKE_WINDOW as BRAKE_WINDOW
from dlxtool.ops.guard_settings import GRACE as GRACE
from dlxtool.ops.guard_settings import GuardSettings as GuardSettings
from dlxtool.ops.interrupts import received
from dlxtool.ops.stay import Stay, Why
from dlxtool.ops.tap import Death, Tap, TapUnavailable, dlq_bindings, failure_of
from dlxtool.ops.transfer_settings import PassControl
from dlxtool.outcome import Outcome, Status

if TYPE_CHECKING:
    from dlxtool.ops.pipeline import MoveRun as ReplayRun
    from dlxtool.ops.replay import Replay
    from dlxtool.ops.transfer_result import TransferResult
    from dlxtool.ops.transfer_settings import TransferOptions
    from dlxtool.record import MessageRecord

NOT_IN_CANARY = Why("not in the canary (stays for the run after it)", Stay.NOT_SELECTED)
STOPPED_AFTER_CANARY = Why("not replayed: the run stopped after the canary", Stay.GUARD_STOPPED)
CANARY_SCAN = 1000      # the canary pass reads max(CANARY_SCAN, 20 × N) messages of the DLQ's head,
CANARY_SCAN_MAX = 20_000  # at most this many (or N, where N is more)
class Pacer:
    """PassControl.pace: at most `rate` messages a second, and a `pause` after every `batch` messages read."""

    def __init__(self, rate: float | None, batch: int | None, pause: float) -> None:
        self.rate, self.batch, self.pause = rate, batch, pause
        self.start: float | None = None
        self._paused_at = 0
        self._resume = 0.0
        self._paused = 0.0  # pauses so far: --rate counts from the start without them

    def __call__(self, received: int) -> float:
        now = time.monotonic()
        if self.start is None:
            self.start = now
        if self.batch and received and received % self.batch == 0 and received != self._paused_at:
            self._paused_at = received
            self._resume = now + self.pause
            self._paused += self.pause
        wait = self._resume - now
        if self.rate:
            wait = max(wait, self.start + self._paused + received / self.rate - now)
        return wait


class CanaryPicker:
    """PassControl.pick of the canary pass: of the messages the replay would move, the first of each (origin,
    failure group) met, then the head's (up to half the canary), then — as the end of what the pass reads nears —
    whatever fills the canary. Every other message stays (NOT_IN_CANARY) for the run after it."""

    def __init__(self, size: int, scan: int) -> None:
        self.size, self.scan = size, scan
        self.seen: set[tuple[str, str]] = set()
        self.picked: list[str] = []          # names of the messages picked, in queue order
        self.groups: Counter[str] = Counter()  # origin -> canaries
        self._fill = 0
        self._read = 0

    def __call__(self, decide: Decider) -> Decider:
        def pick(record: MessageRecord) -> Decision:
            self._read += 1
            decision = decide(record)
            if decision.action is not Action.MOVE:
                return Decision.keep(NOT_IN_CANARY)  # said by the run after it, with its reason
            if self._choose(decision.group, record):
                self.picked.append(message_name(record))
                self.groups[decision.group] += 1
                return decision
            return Decision.keep(NOT_IN_CANARY)

        return Deciding(pick)  # no fast form: a pick reads each record whole

    def _choose(self, origin: str, record: MessageRecord) -> bool:
        if len(self.picked) >= self.size:
            return False
        key = (origin, failure_of(record.headers if is_object(record.headers) else {}, record.body,
                                  record.queue)[0])
        if key not in self.seen:
            self.seen.add(key)
            return True
        if self._fill < self.size // 2:
            self._fill += 1
            return True
        return self.scan - self._read < self.size - len(self.picked)  # the end of the scan: fill the canary


class Brake:
    """Counts this run's deaths by publish number; `add` says why it trips (once), else None."""

    def __init__(self, fraction: float, window: int, minimum: int) -> None:
        self.fraction, self.window, self.minimum = fraction, window, minimum
        self.numbers: list[int] = []
        self.tripped: str | None = None

    def add(self, number: int) -> str | None:
        bisect.insort(self.numbers, number)
        if self.tripped is not None:
            return None
        newest = self.numbers[-1]
        since = newest - self.window  # the window: the last `window` replayed up to the newest seen dead
        dead = len(self.numbers) - bisect.bisect_right(self.numbers, since)
        size = min(self.window, newest)
        if dead >= self.minimum and dead > self.fraction * size:
            self.tripped = (f"{dead} of the last {size} message(s) replayed died again "
                            f"(more than {self.fraction:.0%}, --brake)")
            return self.tripped
        return None


@dataclass
class CanaryVerdict:
    size: int                      # asked for
    picked: list[str]              # names, in queue order
    moved: int                     # of those, confirmed at their origin
    failed: list[Death]
    waited: float
    origins: list[str]
    decided: str = "passed"        # passed | failed | undecided | not run (nothing moved)

    @property
    def passed(self) -> int:
        return self.moved - len(self.failed) if self.decided != "undecided" else 0

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "picked": self.picked, "moved": self.moved, "verdict": self.decided,
                "passed": self.passed, "failed": len(self.failed),
                "undecided": self.moved - len(self.failed) if self.decided == "undecided" else 0,
                "waited_s": round(self.waited, 1), "origins": self.origins,
                "failed_messages": [{"message": d.name, "failure": d.failure, "error": d.example}
                                    for d in self.failed]}


@dataclass
class GuardReport:
    """What the guard saw and decided: the summary's and the JSON's `guard`."""

    settings: GuardSettings
    run_id: str
    watching: str | None = None      # what the tap is bound to
    not_watching: str | None = None  # why there is no tap (the brake is off then)
    canary: CanaryVerdict | None = None
    brake: str | None = None         # why the brake stopped the run
    stopped: str | None = None       # canary | brake | None
    deaths: list[Death] = field(default_factory=list[Death])
    moved: int = 0                   # every message this run moved (canary included)
    # origin -> why the tap cannot see its dead letters
    unwatched: dict[str, str] = field(default_factory=dict[str, str])

    @property
    def watched(self) -> bool:
        """A tap watched the whole run (else what died again is not known)."""
        return self.watching is not None and self.not_watching is None

    @property
    def died_again(self) -> int:
        return len(self.deaths)

    @property
    def stayed_out(self) -> int:
        return max(0, self.moved - self.died_again)

    def groups(self) -> list[dict[str, Any]]:
        """This run's deaths by failure, biggest first, each with an example."""
        by: dict[str, list[Death]] = {}
        for d in self.deaths:
            by.setdefault(d.failure, []).append(d)
        return [{"failure": failure, "messages": len(ds), "example_message": ds[0].name, "example_error": ds[0].example}
                for failure, ds in sorted(by.items(), key=lambda i: (-len(i[1]), i[0]))]

    def to_json(self) -> dict[str, Any]:
        s = self.settings
        return {
            "run_id": self.run_id, "watching": self.watching, "not_watching": self.not_watching,
            "origins_not_watched": dict(self.unwatched),
            "stopped": self.stopped, "stop_reason": self.brake if self.stopped == "brake" else (
                f"canary {self.canary.decided}" if self.stopped == "canary" and self.canary else None),
            "canary": self.canary.to_json() if self.canary else None,
            "brake": {"fraction": s.brake, "window": s.brake_window, "minimum": s.brake_minimum,
                      "tripped": self.brake} if s.brake is not None else None,
            # not known without a tap (or after it stopped): null, not 0
            "moved_and_stayed_out": self.stayed_out if self.watched else None,
            "moved_and_died_again": self.died_again if self.watched else None,
            "died_again_by_failure": self.groups(),
        }


class Guard:
    """One guarded replay: `run(replay, options)` → the ReplayRun of everything it moved (both passes)."""

    def __init__(self, settings: GuardSettings, *, report: Any, decided: Callable[[str, dict[str, Any]], None],
                 confirm: Callable[[str], None] | None = None) -> None:
        self.settings = settings
        self.report = report          # info/warn (dlxtool.ops.session.Reporter)
        self.decided = decided        # the journal's decision lines
        self.confirm = confirm        # asks before the run after a passed canary (None: --yes)
        base = uuid.uuid4().hex[:10]
        self.canary_run, self.main_run = f"{base}c", f"{base}r"
        self.guard = GuardReport(settings, base)
        self.tap: Tap | None = None
        self.brake: Brake | None = None
        self.stop = threading.Event()
        self._checked_origins: set[str] = set()

    # -- watching ---------------------------------------------------------------------------------------------

    def check(self, replay: Replay) -> None:
        """Before anything is read: a canary needs a tap; where the DLQ's bindings say none can be made, refused."""
        if not self.settings.wants_canary:
            return
        why = self._tap_refusal(replay)[0]
        if why is not None:
            raise RefusedError(f"--canary needs to watch the DLQ, and cannot: {why}; nothing was changed",
                               hint="bind the DLQ to its dead-letter exchange, or replay without --canary "
                                    "(with --rate/--batch for a small blast radius)")

    def _tap_refusal(self, replay: Replay) -> tuple[str | None, list[Any]]:
        """(why no tap can be made or None, the DLQ's bindings)."""
        source = replay.session.source
        why = None
        bindings = []
        if source.management is None:
            why = f"no management API to read the DLQ's bindings ({source.management_error or 'not reachable'})"
        else:
            try:
                bindings = dlq_bindings(source.management, source.vhost, replay.settings.source)
            except Exception as exc:  # noqa: BLE001 - said: the run is not watched
                why = f"the DLQ's bindings could not be read ({exc})"
            if why is None and not bindings:
                why = ("the DLQ is bound to no exchange: dead letters reach it through the default exchange "
                       "(x-dead-letter-exchange \"\"), which cannot be tapped")
        if why is None and replay.session.target is not None:
            why = ("--target-broker: the origins are on another broker, where what dies again goes to that broker's "
                   "queues")
        if why is None and source.profile is None:
            why = "no broker profile to open the tap's connection with"
        return why, bindings

    def _open_tap(self, replay: Replay) -> None:
        source = replay.session.source
        why, bindings = self._tap_refusal(replay)
        if why is None:
            profile = source.profile
            assert profile is not None
            # a replay over 1.0 is watched over 1.0: a message a 0.9.1 consumer cannot be given would end the watch
            tap = Tap(lambda: connect(profile), bindings, replay.settings.source, {self.canary_run, self.main_run},
                      on_death=self._on_death, timeout=source.timeout,
                      amqp10=profile if replay.session.protocol == "1.0" else None)
            try:
                tap.start()
                self.tap = tap
                self.guard.watching = ", ".join(b.describe() for b in bindings)
            except TapUnavailable as exc:
                tap.stop()
                why = exc.message
        if why is not None:
            self.guard.not_watching = why

    def _say_unwatched(self, replay: Replay, origins: list[str]) -> None:
        """Origins whose own dead-letter route the tap cannot see (said once each): what the broker dead-letters
        there goes elsewhere, or nowhere. A framework that parks failures through an exchange the DLQ is bound to is
        still seen, so this is a warning, not a stop."""
        from dlxtool.ops.routes import usable_router

        to = replay.session.to
        router = usable_router(to.management, to.vhost)
        if router is None or self.tap is None:
            return
        tapped = {b.exchange for b in self.tap.bindings}
        for queue in origins:
            if queue in self._checked_origins:
                continue
            self._checked_origins.add(queue)
            try:
                info = router.queue(queue)
            except Exception:  # noqa: BLE001 - a check that informs: not made, nothing said
                continue
            if info is None or not info.policies_known:
                continue
            dlx = info.dead_letter_exchange
            if dlx is None:
                why = "has no dead-letter exchange: what fails there and is rejected is dropped, unseen"
            elif dlx == "":
                why = "dead-letters through the default exchange, which the tap cannot see"
            elif dlx not in tapped:
                why = f"dead-letters to {dlx!r}, to which {replay.settings.source!r} is not bound"
            else:
                continue
            self.guard.unwatched[queue] = why
            self.report.warn(f"the tap cannot see what the broker dead-letters from {queue!r}: it {why} (a "
                             "framework that parks failures through the DLQ's exchanges is still seen)")

    def _on_death(self, death: Death) -> None:
        """The tap's thread: a death of the main pass may trip the brake (the engine checks the event between
        deliveries)."""
        if self.brake is not None and death.run == self.main_run and self.brake.add(death.number) is not None:
            self.stop.set()

    # -- the run ------------------------------------------------------------------------------------------------

    def run(self, replay: Replay, options: TransferOptions) -> ReplayRun:
        s = self.settings
        if s.watches:
            self._open_tap(replay)
        if self.tap is None and s.watches:
            if s.wants_canary:
                raise RefusedError(f"--canary needs to watch the DLQ, and cannot: {self.guard.not_watching}; "
                                   "nothing was changed",
                                   hint="bind the DLQ to its dead-letter exchange, or replay without --canary "
                                        "(with --rate/--batch for a small blast radius)")
            self.report.warn(f"the brake is off: {self.guard.not_watching} (docs/canary.md)")
        elif self.tap is not None:
            self.report.detail(f"watching for this run's messages dying again: a tap on {self.guard.watching}")
        run: ReplayRun | None = None
        try:
            run = self._passes(replay, options)
            return run
        finally:
            if self.tap is not None:
                # what a consumer fails just after the run reaches the tap within moments; a run that published
                # nothing (of this run's: the only copies the tap counts) has none on their way
                published = run is None or run.result.moved_total > 0
                self.tap.stop(linger=0.3 if published else 0.0)
                self.guard.deaths = self.tap.died()
                if self.tap.error is not None:  # it stopped watching mid-run (its connection went)
                    self.guard.not_watching = f"the tap stopped watching during the run: {self.tap.error}"
                    self.report.warn(f"{self.guard.not_watching}; the brake was off from then on")
                if self.tap.unreadable:
                    self.report.warn(f"the tap could not read {self.tap.unreadable} dead letter(s) as AMQP 1.0 "
                                     "messages: if any was this run's, it was not counted as dying again")

    def _passes(self, replay: Replay, options: TransferOptions) -> ReplayRun:
        s = self.settings
        settings = replay.settings
        canary_run: ReplayRun | None = None
        if s.wants_canary and self.tap is not None:
            canary_run = self._canary(replay, options)
            if self.guard.stopped:
                replay.settings = settings
                return self._combined(canary_run, None)
            if self.confirm is not None:
                assert self.guard.canary is not None
                self.confirm(f"All {self.guard.canary.moved} canaries passed; replay the rest of "
                             f"{settings.source!r}?")
        moved_before = canary_run.result.moved_total if canary_run else 0
        limit = settings.selection.limit
        if limit is not None:
            limit = max(0, limit - moved_before)
        replay.settings = replace(settings, run_id=self.main_run,
                                  selection=replace(settings.selection, limit=limit))
        pace = Pacer(s.rate, s.batch, s.pause) if s.batch or (s.rate and options.rate) else None
        control = PassControl(stop=self.stop, pace=pace)
        if self.tap is not None and s.brake is not None:
            self.brake = Brake(s.brake, s.brake_window, s.brake_minimum)
        if _signalled():  # a stop signal while the tap was set up or the canary was watched: the run stops at once
            self.stop.set()
        try:
            run = None if limit == 0 else replay.run(options, control)  # -n: the canary took all of it
        finally:
            replay.settings = settings
        if run is not None:
            self._say_unwatched(replay, list(dict.fromkeys(run.filled)))
        if self.brake is not None and self.brake.tripped is not None and run is not None \
                and not run.result.unprocessed:  # it tripped once everything was read: nothing was left to stop
            self.report.warn(f"the brake tripped after the last message was replayed: {self.brake.tripped}")
        elif self.brake is not None and self.brake.tripped is not None:
            self.guard.stopped, self.guard.brake = "brake", self.brake.tripped
            died = self.tap.died(self.main_run) if self.tap else []
            self.decided("brake", {"decision": "stopped", "why": self.brake.tripped,
                                   "replayed": run.result.moved_total if run else 0, "died_again": len(died),
                                   "died_again_ids": [d.name for d in died][:100]})
        return self._combined(canary_run, run)

    def _canary(self, replay: Replay, options: TransferOptions) -> ReplayRun:
        s = self.settings
        source = replay.session.source
        depth = ready(source.conn, replay.settings.source, source.timeout) or 0
        size = s.canary_size(depth)
        if replay.settings.selection.limit is not None:
            size = min(size, replay.settings.selection.limit)
        # what it reads: enough to meet the run's failure groups, bounded (on a classic DLQ it holds them unacked)
        scan = max(size, min(max(CANARY_SCAN, 20 * size), CANARY_SCAN_MAX))
        picker = CanaryPicker(size, min(scan, depth))
        control = PassControl(read_at_most=scan, pick=picker,
                              pace=Pacer(s.rate, s.batch, s.pause) if s.rate or s.batch else None)
        opts = options
        settings, keep_refused = replay.settings, replay.keep_refused
        replay.settings = replace(settings, run_id=self.canary_run)
        if replay.info is not None and replay.info.type == "classic":
            # what the canary pass reads and does not pick is held and given back in place at its end (free on a
            # classic queue): the DLQ keeps its order, the run after it reads them where they were
            replay.keep_refused = keep_refused or "held: the canary pass gives back in place what it does not pick"
            opts = replace(options, prefetch=max(options.prefetch, min(scan, 65535)))
        self.report.info(f"canary: replaying {size} message(s) first (of the first {min(scan, depth):,} in "
                         f"{settings.source!r}), then watching them for up to {s.canary_wait:g}s")
        try:
            run = replay.run(opts, control)
        finally:
            replay.settings, replay.keep_refused = settings, keep_refused
        run.clean_up()  # its temporary exchanges: what they carried is at the origins
        run.clean_up = lambda: None
        self._say_unwatched(replay, list(dict.fromkeys(run.filled)))
        verdict = self._watch(run, size, picker, replay)
        self.guard.canary = verdict
        stopped = verdict.decided in ("failed", "undecided", "interrupted") or run.result.error is not None \
            or run.result.interrupted or _signalled()
        facts: dict[str, Any] = {"decision": "stop" if stopped else "go on", **verdict.to_json()}
        facts["picked"] = facts["picked"][:100]  # the journal's line stays small; the summary lists them all
        self.decided("canary", facts)
        if stopped:
            self.guard.stopped = "canary"
        return run

    def _watch(self, run: ReplayRun, size: int, picker: CanaryPicker, replay: Replay) -> CanaryVerdict:
        """Wait until every canary died again or its origin held no ready message for `grace` s, at most
        canary_wait s. Ctrl-C ends the wait (the run stops as after a failed canary)."""
        s = self.settings
        to = replay.session.to
        moved = run.result.moved_total
        origins = list(dict.fromkeys(run.filled))
        started = time.monotonic()
        verdict = CanaryVerdict(size, picker.picked, moved, [], 0.0, origins)
        if not moved:
            verdict.decided = "not run (no canary moved)"
            return verdict
        assert self.tap is not None
        emptied: float | None = None
        while True:
            failed = self.tap.died(self.canary_run)
            now = time.monotonic()
            if len(failed) >= moved:
                break
            if self.tap.error is not None:
                verdict.decided = "undecided"
                self.report.warn(f"the tap stopped watching: {self.tap.error}")
                break
            if all((ready(to.conn, q, to.timeout) or 0) == 0 for q in origins):
                emptied = emptied or now
                if now - emptied >= s.grace:
                    break
            else:
                emptied = None
            if now - started >= s.canary_wait:
                verdict.decided = "undecided"
                break
            if _signalled():
                verdict.decided = "interrupted"
                run.result.interrupted = True
                break
            time.sleep(0.1)
        verdict.waited = time.monotonic() - started
        verdict.failed = self.tap.died(self.canary_run)
        if verdict.failed:
            verdict.decided = "failed"
        return verdict

    def _combined(self, canary: ReplayRun | None, main: ReplayRun | None) -> ReplayRun:
        """One ReplayRun for the summary: the main pass's, with the canary's moves (and its republishes) in it; after
        a stop at the canary, the canary pass's, its others counted as left in the DLQ."""
        if main is None:
            assert canary is not None
            run = canary
            r = run.result
            held = r.kept.pop(NOT_IN_CANARY, 0)
            if held and self.guard.stopped == "canary":  # left in the DLQ by the guard, not by the selection
                r.left[STOPPED_AFTER_CANARY] = held
            elif held:
                r.kept[BEYOND_LIMIT] = held
            self.guard.moved = r.moved_total
            return run
        if canary is not None:
            _add(main.result, canary.result)
            main.routes = {**canary.routes, **main.routes}
            main.filled = list(dict.fromkeys([*canary.filled, *main.filled]))
        self.guard.moved = main.result.moved_total
        return main

    def outcome(self, run: ReplayRun) -> Outcome:
        """The run's Outcome: STOPPED where the canary or the brake stopped it, else the replay's own."""
        g = self.guard
        if g.stopped == "canary" and g.canary is not None:
            c = g.canary
            if c.decided == "failed":
                first = g.groups()[0] if g.groups() else None
                why = (f"{len(c.failed)} of {c.moved} canaries died again"
                       + (f" ({first['failure']}: {', '.join(d.name for d in c.failed[:5])})" if first else ""))
            elif c.decided == "undecided":
                why = (f"{c.moved} canaries not seen to leave their origin within {c.waited:.0f}s "
                       f"({', '.join(c.origins)}; none seen to die again)")
            else:  # a stop signal, an error, the connection: said as the replay says them
                return run.outcome()
            return Outcome(Status.STOPPED, f"replay stopped after the canary: {why}; nothing more moved, the rest is "
                           f"still in {run.result.source}",
                           "fix what the failures say, then run the same command again"
                           if c.decided == "failed" else
                           "check the origins' consumers, then run the same command again (--canary-wait SECONDS "
                           "waits longer)")
        if g.stopped == "brake":
            depth = run.depths.get(run.result.source, {}).get("ready")
            left = (f"{depth} message(s) in {run.result.source} now (the rest, and what died again)"
                    if depth is not None else f"the rest is still in {run.result.source}")
            return Outcome(Status.STOPPED, f"replay stopped by the brake: {g.brake}; {run.result.moved_total} "
                           f"replayed, {g.died_again} seen to die again, {left}",
                           "fix what the failures say, then run the same command again to resume (--max-replays 1 "
                           "leaves the ones that died again in the DLQ)")
        return run.outcome()


def _signalled() -> bool:
    """A stop signal (Ctrl-C, SIGTERM, SIGHUP) came while no engine ran (the canary's wait): the run stops there."""
    return received() is not None


def _add(into: TransferResult, other: TransferResult) -> None:
    """The canary pass's moves and republishes counted in the main pass's result (its NOT_IN_CANARY stays are the
    main pass's to count)."""
    into.moved.update(other.moved)
    into.ids = _merged(into.ids, other.ids)
    into.republished += other.republished
    into.possible_duplicates += other.possible_duplicates
    into.left.update(other.left)
    into.notes.extend(n for n in other.notes if n not in into.notes)
    into.elapsed += other.elapsed


def _merged(a: MessageIds, b: MessageIds) -> MessageIds:
    out = MessageIds()
    for ids in (b, a):  # the canary's first: they moved first
        out.count += ids.count
        out.without += ids.without
        out.listed.extend(ids.listed[:max(0, 100 - len(out.listed))])
        out.add_digest(ids)
    return out

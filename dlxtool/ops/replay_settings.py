"""What a replay is asked to do (`ReplaySettings`), each setting declaring how replay's fast path stands to it.

The fast path (dlxtool.ops.replay_raw) decides on a dead letter's encoded bytes and must answer exactly what the
Python path (ReplayDecider.__call__) answers, or decline. A setting the fast path does not apply the same way
must keep it off; so every field of ReplaySettings says which of three it is, in its metadata (`FAST`):

  * `applied(...)`    the fast path applies it as the Python path does, whatever its value (it reads the same
                      Shape, guard or route the setting changes);
  * `only_when(...)`  the fast path may run only while the value passes a test (a selection with criteria, an
                      --origin-from forcing another convention, --edit: the run then takes the Python path);
  * `per_message(...)` the fast path runs, and declines each message a byte-level test picks (a body
                      --reset-body-retries may rewrite, a user_id property to check): the Python path takes those.

ReplayDecider turns the fast path on only where `fast_path_applies` says so, and replay_raw declines what
`fast_path_declines` gives; both read these declarations, nothing else. tests/ops/test_replay_settings.py fails
on a field without one, and tests/broker/test_hotpath.py compares both paths over generated settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from dlxtool.conventions import BUILT_IN, X_DEATH, Convention, fast_path_triggers, may_be_dramatiq
from dlxtool.selection import Selection

if TYPE_CHECKING:
    from dlxtool.editing.edits import Edits

FAST = "fast_path"  # the metadata key

Declines = Callable[[bytes, bytes], bool]  # (encoded properties, body) -> the Python path must decide this one


@dataclass(frozen=True)
class FastPath:
    """How the fast path stands to one setting (the module docstring)."""

    why: str
    applies: Callable[[Any], bool] | None = None                        # only_when: the value's test
    declines: Callable[[ReplaySettings], Declines | None] | None = None  # per_message: the settings' byte test


def applied(why: str) -> dict[str, FastPath]:
    return {FAST: FastPath(why)}


def only_when(applies: Callable[[Any], bool], why: str) -> dict[str, FastPath]:
    return {FAST: FastPath(why, applies=applies)}


def per_message(declines: Callable[[ReplaySettings], Declines | None], why: str) -> dict[str, FastPath]:
    return {FAST: FastPath(why, declines=declines)}


def _dramatiq_bodies(settings: ReplaySettings) -> Declines | None:
    return (lambda _props, body: may_be_dramatiq(body)) if settings.reset_body_retries else None


def _reply_tos(settings: ReplaySettings) -> Declines | None:
    from dlxtool.broker.wire.frames import has_reply_to

    return (lambda props, _body: has_reply_to(props)) if settings.check_replies else None


def _user_ids(settings: ReplaySettings) -> Declines | None:
    from dlxtool.broker.wire.frames import has_user_id

    if settings.publisher is None or settings.impersonator is not False:
        return None
    return lambda props, _body: has_user_id(props)


@dataclass
class ReplaySettings:
    source: str = field(metadata=applied("the provenance's `from`, written by the same ProvenanceWriter"))
    selection: Selection = field(default_factory=Selection, metadata=only_when(
        lambda selection: not selection.checks(), "a criterion reads the decoded message"))
    to_queue: str | None = field(default=None, metadata=applied("decided per shape (Shape.queue)"))
    keep_history: bool = field(default=False, metadata=applied("the headers the splice drops"))
    reset_headers: tuple[str, ...] = field(default=(), metadata=applied("the headers the splice drops and reports"))
    max_replays: int | None = field(default=None, metadata=applied("the loop guard, ReplayDecider.guard"))
    # opt-in: routing key = queue name (see dlxtool.ops.replay_decision's docstring)
    default_exchange: bool = field(default=False, metadata=applied("the route, ReplayDecider.way"))
    # do not restore a per-message TTL from x-death original-expiration
    drop_expiration: bool = field(default=False, metadata=applied(
        "decided per shape; a TTL to restore is a property: such shapes are the Python path's (Shape.fast)"))
    # replay into a full drop-head origin anyway (it pushes out its head)
    allow_displace: bool = field(default=False, metadata=applied("the engine's admit hook, after the decision"))
    # replay where the origin's dead-letter exchange would drop the key (or unchecked)
    allow_dlx_drop: bool = field(default=False, metadata=applied("the routes, Routes.checked wraps both paths"))
    # opt-in body rewrite: Dramatiq's options.retries back to 0
    reset_body_retries: bool = field(default=False, metadata=per_message(
        _dramatiq_bodies, "a body it may rewrite is parsed by the Python path"))
    # Where origins are read from (dlxtool.conventions): the built-in conventions and the broker's own from
    # the config, as `history` reads them; origin_from forces one (--origin-from CONVENTION).
    conventions: tuple[Convention, ...] = field(default=BUILT_IN, metadata=only_when(
        lambda conventions: fast_path_triggers(conventions) is not None,
        "the headers that may make another convention explain a message must be known (the scan's slow names)"))
    origin_from: str | None = field(default=None, metadata=only_when(
        lambda origin_from: origin_from in (None, X_DEATH), "the fast path reads x-death only"))
    # an exchange origin that reaches several queues: publish anyway (copies)
    allow_fanout: bool = field(default=False, metadata=applied(
        "exchange origins are never the fast path's (Shape.fast: a queue)"))
    # The user the replay publishes as, and whether it may publish a user_id property that is not its own (the
    # impersonator tag; None: not known, and then the broker's own refusal is what isolates such a message). A
    # message whose user_id is another user's is refused by RabbitMQ (406): it stays with the reason, or with
    # drop_user_id goes without it (recorded in the provenance).
    publisher: str | None = field(default=None, metadata=per_message(
        _user_ids, "a message with a user_id property is checked by the Python path"))
    impersonator: bool | None = field(default=None, metadata=per_message(
        _user_ids, "with `publisher`: a message with a user_id property is checked by the Python path"))
    drop_user_id: bool = field(default=False, metadata=per_message(
        _user_ids, "read only for a message with a user_id property, which the Python path decides"))
    # replay --edit (dlxtool.editing): the messages shown in the editor, found again by fingerprint and origin, each
    # replayed as edited (the selection was applied when they were read); every other message stays
    edits: Edits | None = field(default=None, metadata=only_when(
        lambda edits: edits is None, "each message is found again and edited: the decoded message"))
    # The run id the provenance's `id` starts with (None: a new one): a guarded replay (dlxtool.ops.canary) names it
    # to know its own copies when they die again
    run_id: str | None = field(default=None, metadata=applied("the provenance's id: both paths take next_id"))
    # A request whose reply cannot arrive (its reply_to a direct reply-to address, or a reply queue gone) stays,
    # unless --allow-dead-replies (dlxtool.ops.replay_replies)
    check_replies: bool = field(default=True, metadata=per_message(
        _reply_tos, "a message with a reply_to property is checked by the Python path"))


def declaration(name: str) -> FastPath | None:
    """The fast path's declaration of one setting (None: undeclared, which the tests refuse)."""
    for f in fields(ReplaySettings):
        if f.name == name:
            found = f.metadata.get(FAST)
            return found if isinstance(found, FastPath) else None
    raise KeyError(name)


def fast_path_applies(settings: ReplaySettings) -> bool:
    """Whether the fast path may run at all with these settings: every `only_when` test passes."""
    for f in fields(ReplaySettings):
        declared = f.metadata[FAST]
        if declared.applies is not None and not declared.applies(getattr(settings, f.name)):
            return False
    return True


def fast_path_declines(settings: ReplaySettings) -> tuple[Declines, ...]:
    """The byte tests after which the fast path leaves a message to the Python path (`per_message`), once each."""
    made: dict[Any, Declines] = {}
    for f in fields(ReplaySettings):
        declared = f.metadata[FAST]
        if declared.declines is not None and declared.declines not in made:
            test = declared.declines(settings)
            if test is not None:
                made[declared.declines] = test
    return tuple(made.values())

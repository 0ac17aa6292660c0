"""Replay's checks before anything is read: who publishes (impersonation), whether the routes can be checked,
whether this user may publish that way (dlxtool.ops.publish_rights), the DLQ's type and limits, the target's
management API. Each refuses (exit 6) or says what it could not check; none changes a queue."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dlxtool import waits
from dlxtool.broker import queues
from dlxtool.broker.management import QueueInfo
from dlxtool.errors import ConnectError, DlxtoolError, ManagementMismatch, QueueNotFound, RefusedError, UnavailableError
from dlxtool.ops.replay_decision import ReplaySettings
from dlxtool.ops.session import Reporter, Session

if TYPE_CHECKING:
    from dlxtool.ops.session import MoveSession as ReplaySession


def impersonator(target: Session) -> bool | None:
    """Whether the user may publish a user_id property that is not its own (the impersonator tag, from the
    management API's whoami); None where that cannot be read."""
    if target.management is None:
        return None
    try:
        tags: Any = target.management.get("/whoami").get("tags") or []  # JSON: a string or a list of them
    except (DlxtoolError, AttributeError):
        return None
    return "impersonator" in (tags.split(",") if isinstance(tags, str) else tags)


def check_to_queue(session: ReplaySession, name: str) -> None:
    """--to names a queue that must exist: one that does not is "not found" (exit 4), said before anything is read,
    with the names closest to it where the DLQ's broker is the one asked (another broker's names would mislead)."""
    to = session.to
    try:
        queues.counts(to.conn.channel(), name, to.vhost)
    except QueueNotFound as exc:
        where = f" on --target-broker {to.broker!r}" if session.target is not None else ""
        raise QueueNotFound(name, to.vhost, f"--to queue {name!r} not found in vhost {to.vhost!r}{where}",
                            hint="nothing was read or changed: create it, or name an existing queue with --to "
                            "(`dlxtool queues` lists them)", suggest=session.target is None) from exc


def refuse_unchecked_routes(session: ReplaySession, settings: ReplaySettings) -> None:
    """Without the origins' broker's management API no dead-letter route can be checked: every message would stay
    (a message whose next dead-lettering there is dropped would be lost), so the run is refused before anything
    is read, unless --allow-dlx-drop accepts that risk."""
    to = session.to
    if settings.allow_dlx_drop or to.management is not None:
        return
    if not queues.ready(session.source.conn, settings.source, session.source.timeout):
        return  # nothing to replay: nothing to refuse
    raise RefusedError(
        f"nothing can be replayed: each origin's dead-letter exchange cannot be checked (management API not "
        f"reachable) — {to.management_error or 'no management API'} —, and a message whose next dead-lettering there "
        f"would be dropped must not go; every message is still in {settings.source!r}",
        hint="make the management API reachable (--management-url), or --allow-dlx-drop to replay without that check")


def check_publish_rights(session: ReplaySession, settings: ReplaySettings) -> str | None:
    """Before anything is read: refused (exit 6) where this user may not publish the way the replay would (the
    broker asked with probes that change nothing: dlxtool.broker.permissions). Returns why messages that stay
    cannot be republished to the DLQ's tail (they are then held and given back in place), or None."""
    from dlxtool.broker.permissions import probe_temporary_exchanges, probe_write
    from dlxtool.ops.publish_rights import refuse_without_publish_rights, user_words

    source, to = session.source, session.to
    user = user_words(to)
    refuse_without_publish_rights(to, default_exchange=settings.default_exchange, nothing="nothing can be replayed")
    temporary: str | None = "not asked (--default-exchange)" if settings.default_exchange else None
    if session.target is not None or settings.default_exchange:  # the DLQ's broker: asked apart
        temporary = probe_temporary_exchanges(source.conn, source.timeout)
    if temporary is None:
        return None
    default = probe_write(source.conn, "", source.timeout)
    if default is None:
        return None
    return (f"cannot be republished to the tail of {settings.source!r}: {user} may not publish there (the broker "
            f"said: {default})")


def queue_info(source: Session, dlq: str, report: Reporter) -> QueueInfo | None:
    """The DLQ's type and limits from the management API (None when unreachable); refuses a stream and a
    drop-head length limit (keeping messages republishes them to the tail)."""
    from dlxtool.ops.held import HELD_HINT, held_elsewhere, reclaim_dead_runs

    channel = source.conn.channel()
    # a missing DLQ is "not found" (4), API or no API
    counted = queues.counts(channel, dlq, source.vhost, source.management)
    if counted.consumers and reclaim_dead_runs(source.management, source.vhost, report, source.timeout):
        counted = queues.counts(channel, dlq, source.vhost, source.management)
    channel.close()  # pyright: ignore[reportUnknownMemberType]  # pika's stub leaves its return unannotated
    info: QueueInfo | None = None
    if source.management is not None:
        try:
            info = source.management.queue(source.vhost, dlq)
        except ManagementMismatch:
            raise  # another broker's API: exit 3, as when the first proof finds it
        except ConnectError as exc:
            source.management, source.management_error = None, exc.message
    if source.management is None or info is None:
        report.warn(f"check not made: {source.management_error or 'no management API'}: type and limits of "
                    f"{dlq!r} unknown")
        return None
    if (unreachable := queues.without_majority(info)) is not None:
        raise unreachable
    if info.type == "stream":
        raise RefusedError(f"{dlq!r} is a stream: messages cannot be removed from it, so it cannot be replayed",
                           hint="consume it with a stream consumer and publish with `dlxtool load`")
    from dlxtool.ops.busy import check_not_busy

    competing = check_not_busy(info, source.management, "replayed", counted.consumers)
    if competing is not None:
        report.warn(competing)
    if info.type == "quorum" and not counted.ready:
        counted = settled_quorum_counts(source, dlq, info, counted)
    held = held_elsewhere(info, source.management, counted.ready, counted.consumers)
    if held is not None and not counted.ready:  # not "nothing to replay": they are there, held
        raise UnavailableError(f"nothing to replay now: {held}", hint=HELD_HINT)
    if held is not None:
        report.warn(held)
    from dlxtool.ops.purge import check_tail_republish

    check_tail_republish(info.tail_republish_risk)
    return info


def settled_quorum_counts(source: Session, dlq: str, info: QueueInfo, counted: Any) -> Any:
    """A quorum queue that has just lost its leader answers a passive declare with 0 for a moment (measured on a
    3.10.8 cluster: 0 at once after kill -9 of the leader's node, all 300 half a second later), and its messages
    held by a consumer on that node return then: "nothing to replay" would be false. Where the API has no
    figures for it (a new leader) or says it holds messages, ask again for up to two seconds; still nothing and
    no figures: not now (exit 7)."""
    unknown = info.raw.get("messages") is None
    if not unknown and not info.raw.get("messages"):
        return counted
    wait = waits.Wait(f"quorum queue {dlq!r} to count the messages its new leader gets back", 2.0, 0.25)
    while wait.pause():
        channel = source.conn.channel()
        counted = queues.counts(channel, dlq, source.vhost, source.management)
        channel.close()  # pyright: ignore[reportUnknownMemberType]  # pika's stub leaves its return unannotated
        if counted.ready:
            return counted
    if unknown:
        raise UnavailableError(f"{dlq!r} (a quorum queue) answers 0 ready, and the management API has no figures for "
                               "it: its leader changed moments ago and the messages a consumer held on the lost node "
                               "are being returned; its depth is not known yet",
                               hint="run it again in a few seconds")
    return counted


def refuse_unread_dlq_limits(source: Session, settings: ReplaySettings) -> None:
    """Messages that stay are republished to the DLQ's tail; with its limits unread (no management API) it
    may be a full drop-head queue that would push out its head for each of them. Refused (exit 6) before
    anything is read, unless --allow-displace; an empty DLQ has nothing to keep."""
    from dlxtool.ops.purge import check_keep_by_republish

    channel = source.conn.channel()
    try:
        ready = queues.counts(channel, settings.source, source.vhost).ready
    finally:
        channel.close()  # pyright: ignore[reportUnknownMemberType]  # pika's stub leaves its return unannotated
    if ready:
        check_keep_by_republish(settings.source, None, source.management_error or "no management API",
                                allow_displace=settings.allow_displace)


def check_target_management(session: ReplaySession, report: Reporter) -> None:
    """Another broker's management API is asked once here: unreachable, it is not asked per target later."""
    target = session.target
    if target is None or target.management is None:
        return
    try:
        target.management.overview(columns=["rabbitmq_version"])
    except ConnectError as exc:
        target.management, target.management_error = None, exc.message
        report.warn(f"cannot reach the target broker's management API ({exc.message}): the origins' dead-letter "
                    "routes cannot be checked there, so nothing goes there unless --allow-dlx-drop")

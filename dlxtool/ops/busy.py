"""A queue someone else is reading: said at once, never waited on.

A single-active-consumer queue with an active consumer delivers to that consumer only: dlxtool's consumer would
wait behind it, silently, for as long as it stays. An exclusive queue belongs to one connection. Both are refused
before anything is read (exit 6), naming who holds the queue; a queue with ordinary competing consumers is read
anyway (they take messages while dlxtool reads, so a run covers what it receives), and that is said."""

from __future__ import annotations

from urllib.parse import quote

from dlxtool.broker.management import ManagementClient, QueueInfo
from dlxtool.errors import DlxtoolError, RefusedError
from dlxtool.json_shapes import is_object


def check_not_busy(info: QueueInfo | None, management: ManagementClient | None, what: str,
                   consumers: int | None = None) -> str | None:
    """Refuse (RefusedError) when `info`'s queue is held by another consumer or connection; else a warning to say
    when it has competing consumers (None: none). `what` says what would not happen ("replayed"); `consumers`:
    the count a passive declare gave (exact and current, where the API's is a sample)."""
    if info is None:
        return None
    consumers = info.consumers if consumers is None else consumers
    raw = info.raw
    owner = raw.get("owner_pid_details") if raw.get("exclusive") else None
    if is_object(owner):
        raise RefusedError(f"{info.name!r} is an exclusive queue of connection {connection_named(management, owner)}: "
                           f"it cannot be {what} by another connection", hint="it goes away with that connection")
    active = [c for c in raw.get("consumer_details") or () if is_object(c) and c.get("active", True)]
    if _single_active(info) and consumers:
        holder = active[0].get("channel_details") if active else None
        raise RefusedError(f"{info.name!r} is a single-active-consumer queue and its active consumer (connection "
                           f"{connection_named(management, holder)}) gets every message: dlxtool's consumer would wait "
                           f"behind it, so nothing would be {what}",
                           hint="stop that consumer first, then run this again")
    if consumers:
        return (f"{info.name!r} has {consumers} other consumer(s): they take messages while dlxtool reads, so "
                "this run covers only the messages it receives")
    return None


def _single_active(info: QueueInfo) -> bool:
    """Single-active-consumer is a setting of the queue: its x-single-active-consumer argument (or a policy's
    single-active-consumer, should the broker take one). Never the API's `single_active_consumer_tag`: RabbitMQ
    4.3 sets it on any quorum queue with a consumer (issue 35: one ordinary consumer made replay, purge --backup
    and dump --remove refuse, exit 6)."""
    return bool(info.setting("single-active-consumer"))


def exclusive_owner(management: ManagementClient, vhost: str, queue: str) -> str | None:
    """The connection an exclusive queue belongs to, as `connection_named` names it; None where the API does not say."""
    try:
        row = management.get(f"queues/{quote(vhost, safe='')}/{quote(queue, safe='')}")
    except DlxtoolError:
        return None
    owner = row.get("owner_pid_details") if is_object(row) else None
    return connection_named(management, owner) if is_object(owner) else None


def connection_named(management: ManagementClient | None, details: object) -> str:
    """A connection as a person finds it: its name, and the name its client gave it, where the API says it."""
    if not is_object(details):  # the API has no figures for it: not yet ([]), or none kept (statistics off)
        return "(not known to the management API: no statistics for it yet, or none kept)"
    name = str(details.get("connection_name") or details.get("name") or "?")
    given = None
    if management is not None and name != "?":
        try:
            given = management.get(f"/connections/{quote(name, safe='')}").get("user_provided_name")
        except (DlxtoolError, AttributeError):
            given = None
    return f"{given!r} ({name})" if given else repr(name)

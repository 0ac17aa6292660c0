"""A queue as the broker sees it now: whether it exists, its ready and consumer counts (a passive
queue.declare: exact and current, unlike the management API's sampled figures) and its type (an AMQP
probe, for when the management API cannot be used). The one place a passive declare is written, and where
RabbitMQ's refusals of one become dlxtool errors. Shared by every command that looks at a queue before
touching it (peek, history, dump, purge, replay, load), so that none imports another's module for it.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlxtool.errors import ConnectError, DlxtoolError, QueueLocked, QueueNotFound, UnavailableError

if TYPE_CHECKING:
    from dlxtool.config import BrokerProfile


# A classic queue whose home node is down: "NOT_FOUND - home node 'rabbit@c2' of durable queue 'q' in vhost 'v' is
# down or inaccessible" (rabbit_amqqueue, 3.x and 4.x). The queue exists; its messages cannot be reached now.
_NODE_DOWN = re.compile(r"home node '([^']*)' of .* is down or inaccessible")


@dataclass(frozen=True)
class Counts:
    """What a passive queue.declare answers."""

    ready: int       # messages ready (not held unacked by a consumer)
    consumers: int


def declare(channel: Any, queue: str) -> Counts:
    """A passive declare on `channel` (an AsyncChannel, or a blocking pika channel). A missing queue
    closes the channel: the broker's refusal is raised as it comes (AsyncChannel: ChannelClosed; a
    blocking channel: pika's ChannelClosedByBroker) — `counts` turns it into a dlxtool error."""
    from dlxtool.broker.channel import AsyncChannel

    if isinstance(channel, AsyncChannel):
        method = channel.call("queue_declare", queue, passive=True).method
    else:
        method = channel.queue_declare(queue, passive=True).method
    return Counts(int(method.message_count), int(method.consumer_count))


def counts(channel: Any, queue: str, vhost: str) -> Counts:
    """`declare`, with the broker's refusal (not found, exclusive, no access) as a dlxtool error."""
    try:
        return declare(channel, queue)
    except Exception as exc:
        refused = refusal(exc, queue, vhost)
        if refused is None:
            raise
        raise refused from None


def refusal(exc: BaseException, queue: str, vhost: str) -> DlxtoolError | None:
    """The dlxtool error for the broker's refusal of a passive declare of `queue`, or None (not a refusal)."""
    code = getattr(exc, "reply_code", None)
    text = getattr(exc, "reply_text", None) or str(exc)
    unreachable = _NODE_DOWN.search(text) if code == 404 else None
    if unreachable is not None:
        return UnavailableError(f"queue {queue!r} in vhost {vhost!r} lives on node {unreachable.group(1)}, which is "
                                "down or cannot be reached: its messages are not lost, but cannot be read or counted "
                                f"now (the broker said: {code} {text})",
                                hint="run it again once the node is back; `dlxtool queues` shows which nodes are down")
    if code == 404:
        return QueueNotFound(queue, vhost)
    if code == 405:
        return QueueLocked(queue, vhost)
    if code == 403:
        return ConnectError(f"access to queue {queue!r} in vhost {vhost!r} refused: {text}",
                            hint="the user needs read/configure permissions on it")
    return None


def without_majority(info: Any) -> UnavailableError | None:
    """A quorum queue with no majority of its members online (the API's `members` and `online`), or None. The API
    still says "running" and names its old leader, a passive declare still answers; a read times out inside the
    broker (541 {timeout, …}; measured on the 3.10.8 cluster with 2 of 3 members stopped)."""
    if info.type != "quorum":  # a stream's members are replicas of a log: read from a replica, not by majority
        return None
    members, online = info.raw.get("members"), info.raw.get("online")
    if not isinstance(members, list) or not isinstance(online, list) or not members or len(online) * 2 > len(members):
        return None
    down = ", ".join(sorted(str(m) for m in members if m not in online))
    return UnavailableError(f"quorum queue {info.name!r} has only {len(online)} of its {len(members)} members online "
                            f"({down} down): without a majority it cannot be read or written; its messages are not "
                            "lost, nothing was read or changed",
                            hint="run it again once a majority of its nodes is back; `dlxtool queues` shows them")


def close_names(name: str, names: Iterable[str], n: int = 3) -> list[str]:
    """The names in `names` closest to `name` (difflib's ratio, case ignored): the queue a typo meant. Only those
    about as close as the closest one: queues that share a long prefix (orders.work, orders.retry, orders.dlq) are
    all somewhat close to a typo of one of them, and naming them all would not help."""
    wanted = name.lower()
    scored: dict[str, tuple[float, str]] = {}
    matcher = difflib.SequenceMatcher(b=wanted)
    for other in names:
        lowered = other.lower() if other else ""
        if not other or other == name or lowered in scored:
            continue
        matcher.set_seq1(lowered)
        if matcher.real_quick_ratio() >= 0.6 and matcher.quick_ratio() >= 0.6:
            scored[lowered] = (matcher.ratio(), other)
    ranked = sorted((v for v in scored.values() if v[0] >= 0.6), key=lambda v: (-v[0], v[1]))
    if not ranked:
        return []
    best = ranked[0][0]
    return [other for ratio, other in ranked[:n] if ratio >= best - 0.05]


def did_you_mean(name: str, names: Iterable[str]) -> str | None:
    """"did you mean 'invoices.dlq'?" for a queue name that does not exist, or None when nothing is close."""
    close = close_names(name, names)
    return f"did you mean {' or '.join(repr(c) for c in close)}?" if close else None


def names_in(management: Any, vhost: str, timeout: float = 3.0) -> list[str]:
    """The vhost's queue names from a (proven) management client; none where it cannot list them."""
    if management is None:
        return []
    try:
        rows = management.queues(vhost, columns=["name"], unsorted=True, timeout=timeout)
    except DlxtoolError:
        return []
    return [str(r["name"]) for r in rows if isinstance(r, dict) and r.get("name")]


def ready(conn: Any, queue: str, timeout: float) -> int | None:
    """The ready count of `queue` on a throwaway channel of `conn` (a missing queue closes the channel), or
    None when the broker refuses the declare (the queue does not exist, or is not ours to see)."""
    counted = now(conn, queue, timeout)
    return None if counted is None else counted.ready


def now(conn: Any, queue: str, timeout: float) -> Counts | None:
    """`queue`'s ready and consumer counts on a throwaway channel of `conn`, or None when the broker refuses the
    declare (the queue does not exist, or is not ours to see)."""
    from dlxtool.broker.channel import AsyncChannel, ChannelClosed

    channel = AsyncChannel(conn, timeout)
    try:
        return declare(channel, queue)
    except ChannelClosed as exc:
        # Only the broker's "no such queue" (or "not yours to see") is None: a queue whose node is down or times out
        # is there, unreachable now — said as such (UnavailableError), never counted as gone or empty.
        refused = refusal(exc, queue, _vhost_of(conn))
        if isinstance(refused, QueueNotFound | ConnectError):
            return None
        raise refused or exc from None
    finally:
        channel.close()


def _vhost_of(conn: Any) -> str:
    """The vhost a pika connection was opened on (its parameters), for the words of a refusal."""
    params = getattr(getattr(conn, "_impl", conn), "params", None)
    return str(getattr(params, "virtual_host", "") or "?")


def exists(conn: Any, queue: str, timeout: float) -> bool:
    """The queue exists on `conn`'s vhost (and this user may see it)."""
    return ready(conn, queue, timeout) is not None


def exchange_exists(conn: Any, exchange: str, timeout: float) -> bool:
    """The exchange exists on `conn`'s vhost: a passive declare on a throwaway channel (a missing exchange
    closes the channel it is asked on). The default exchange cannot be declared, even passively: it exists."""
    from dlxtool.broker.channel import AsyncChannel, ChannelClosed

    if exchange == "":
        return True
    channel = AsyncChannel(conn, timeout)
    try:
        channel.call("exchange_declare", exchange, passive=True)
        return True
    except ChannelClosed:
        return False
    finally:
        channel.close()


def probe_type(profile: BrokerProfile, name: str, *, conn: Any = None, timeout: float | None = None) -> str:
    """classic | quorum | stream | unknown, learnt over AMQP without touching a message's position or count, on
    a throwaway channel of `conn` (else a connection of its own, opened and closed here).

    A passive declare does not say the type. A consumer asking for the stream offset `next` does, on every version
    the suite runs (dlxtool.broker.versions.STREAM_OFFSET_REFUSAL): a classic or quorum queue refuses it before
    anything is delivered, naming its type (406, which closes the channel only); a stream takes it, and `next`
    delivers nothing that is there (the consumer is cancelled at once, then the channel closed; reading a stream
    never removes anything). No global QoS (a deprecated feature: 4.3 accepts it on a quorum queue and delivers,
    which a channel close then counted as a delivery attempt), no delivery of a classic or quorum message.
    "unknown": the broker refused it otherwise (another queue type, an exclusive queue, no read permission)."""
    from dlxtool.broker.channel import AsyncChannel, ChannelClosed
    from dlxtool.broker.connection import close_quietly, connect
    from dlxtool.broker.versions import type_from_refusal

    own = conn is None
    if own:
        conn = connect(profile)
    channel = None
    try:
        channel = AsyncChannel(conn, timeout if timeout is not None else profile.timeout)
        channel.call("basic_qos", prefetch_count=1)
        consumed: list[Any] = []
        tag = channel.impl.basic_consume(name, lambda *_: None, auto_ack=False,
                                         arguments={"x-stream-offset": "next"}, callback=consumed.append)
        channel.wait_for(lambda: bool(consumed), "basic.consume")
        channel.cancel_consumer(tag)  # without pika's rejects of what may arrive meanwhile: a stream refuses them
        return "stream"
    except ChannelClosed as exc:
        return type_from_refusal(exc.reply_text or "") or "unknown"
    finally:
        if channel is not None:
            channel.close()
        if own:
            close_quietly(conn)

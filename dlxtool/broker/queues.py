"""A queue as the broker sees it now: whether it exists, its ready and consumer counts (a passive
queue.declare: exact and current, unlike the management API's sampled figures) and its type (an AMQP
probe, for when the management API cannot be used). The one place a passive declare is written, and where
RabbitMQ's refusals of one become dlxtool errors. Shared by every command that looks at a queue before
touching it (peek, history, dump, purge, replay, load), so that none imports another's module for it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dlxtool.broker.majority import LOST_MAJORITY_HINT as LOST_MAJORITY_HINT
from dlxtool.broker.majority import METADATA_TIMEOUT as METADATA_TIMEOUT
from dlxtool.broker.majority import lost_majority as lost_majority
from dlxtool.errors import ConnectError, DlxtoolError, QueueLocked, QueueNotFound, UnavailableError
from dlxtool.json_shapes import is_array, is_object

if TYPE_CHECKING:
    from dlxtool.config import BrokerProfile


# A classic queue whose home node is down: "NOT_FOUND - home node 'rabbit@c2' of durable queue 'q' in vhost 'v' is
# down or inaccessible" (rabbit_amqqueue, 3.x and 4.x). The queue exists; its messages cannot be reached now.
_NODE_DOWN = re.compile(r"home node '([^']*)' of .* is down or inaccessible")
# The same on RabbitMQ 4.x with Khepri (measured on the 4.3.6 cluster, versions.Behaviour.down_queue_not_found): the
# queue's record stays in the metadata store while its node is away, and the broker answers 404 with the reason
# its process cannot be reached, not naming the node — "NOT_FOUND - queue 'q' in vhost 'v' process is stopped by
# supervisor" (its node's app stopped), "... has crashed and failed to restart", "NOT_FOUND - failed to perform
# operation on queue 'q' in vhost 'v' due to timeout" (its node killed, seen in issue 35). 3.x can say these too.
_PROCESS_AWAY = re.compile(r"process is stopped by supervisor|has crashed and failed to restart|due to timeout$")


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


def counts(channel: Any, queue: str, vhost: str, management: Any = None) -> Counts:
    """`declare`, with the broker's refusal (not found, exclusive, no access) as a dlxtool error. `management`: a
    management client (or a callable giving one) to name the node of a queue that cannot be reached, and to say it
    before declaring: a passive declare of a queue whose node was killed waits inside the broker (4.3.6: 73 s,
    then 404 "... due to timeout"), past any --timeout."""
    if management is not None and (away := _on_a_node_down(management, vhost, queue)) is not None:
        raise UnavailableError(f"queue {queue!r} in vhost {vhost!r} is unavailable: its node {away} is down; its "
                               "messages are not lost, but cannot be read or counted now (the management API lists "
                               "the node as not running)",
                               hint="run it again once the node is back; `dlxtool queues` shows which nodes are down")
    try:
        return declare(channel, queue)
    except Exception as exc:
        refused = refusal(exc, queue, vhost, management)
        if refused is None:
            raise
        raise refused from None


def refusal(exc: BaseException, queue: str, vhost: str, management: Any = None) -> DlxtoolError | None:
    """The dlxtool error for the broker's refusal of a passive declare of `queue`, or None (not a refusal).
    A queue whose node is away is never "not found" (exit 4): unavailable (exit 7), its node named — from the
    broker's words (3.x), else from `management` (a client, or a callable giving one) where it can say."""
    code = getattr(exc, "reply_code", None)
    text = getattr(exc, "reply_text", None) or str(exc)
    unreachable = _NODE_DOWN.search(text) if code == 404 else None
    node = unreachable.group(1) if unreachable is not None else None
    if code == 404 and node is None and _PROCESS_AWAY.search(text):
        node = _node_of(management, vhost, queue) or "(not known: no management API)"
    if node is not None:
        return UnavailableError(f"queue {queue!r} in vhost {vhost!r} is unavailable: its node {node} is down or cannot "
                                "be reached; its messages are not lost, but cannot be read or counted now (the broker "
                                f"said: {code} {text})",
                                hint="run it again once the node is back; `dlxtool queues` shows which nodes are down")
    if code == 404:
        return QueueNotFound(queue, vhost)
    if code == 405:
        return QueueLocked(queue, vhost)
    if code == 403:
        return ConnectError(f"access to queue {queue!r} in vhost {vhost!r} refused: {text}",
                            hint="the user needs read/configure permissions on it")
    return None


def _on_a_node_down(management: Any, vhost: str, queue: str) -> str | None:
    """The node a classic `queue` lives on when the API lists that node as not running now (a node's `running` is
    its cluster membership, not a statistics sample), else None — also where the API cannot say. One request while
    every node runs; the queue's node is looked up only when one does not. Not a quorum queue or a stream: the API's
    `node` is their leader, and another member takes over while a majority runs (`without_majority` says when not)."""
    try:
        client: Any = management() if callable(management) else management
        counted = client.nodes_running() if client is not None else None
    except (DlxtoolError, AttributeError):  # AttributeError: a client without a node list (a stand-in)
        return None
    if counted is None or not counted[2]:
        return None
    node = _node_of(client, vhost, queue, classic_only=True)
    return node if node is not None and node in counted[2] else None


def _node_of(management: Any, vhost: str, queue: str, *, classic_only: bool = False) -> str | None:
    """The node the API lists `queue` on (its list: the queue's own endpoint may answer 404 while its node is away),
    or None where it cannot say (or, `classic_only`, the queue is of another type)."""
    try:
        client: Any = management() if callable(management) else management
        if client is None:
            return None
        rows = client.queues(vhost, columns=["name", "node", "type"], unsorted=True, timeout=3.0)
    except DlxtoolError:
        return None
    row = next((r for r in rows if is_object(r) and r.get("name") == queue), None)
    if row is None or not row.get("node") or (classic_only and row.get("type") != "classic"):
        return None
    return str(row["node"])


# Khepri's answer when a majority of the cluster's nodes is away (RabbitMQ 4.3: 541 INTERNAL_ERROR "Could not declare
# queue 'q' in vhost 'v' on node 'n' because the metadata store operation timed out", after 30 s).
def cluster_without_majority(management: Any, version: Any) -> UnavailableError | None:
    """Before anything waits on the metadata store: a Khepri cluster (versions.khepri) with a majority of its nodes
    away, from the API's node list, or None. Every change (dlxtool's own probe queue first) would wait 30 s inside
    the broker and end with a 541 (issue 35: every command, exit 3 'metadata store operation timed out')."""
    from dlxtool.broker import versions

    if management is None or not versions.khepri(version):
        return None
    counted = management.nodes_running()
    if counted is None:
        return None
    running, total, down = counted
    return lost_majority(running, total, down) if running * 2 <= total else None


def without_majority(info: Any) -> UnavailableError | None:
    """A quorum queue with no majority of its members online (the API's `members` and `online`), or None. The API
    still says "running" and names its old leader, a passive declare still answers; a read times out inside the
    broker (541 {timeout, …}; measured on the 3.10.8 cluster with 2 of 3 members stopped)."""
    if info.type != "quorum":  # a stream's members are replicas of a log: read from a replica, not by majority
        return None
    members, online = info.raw.get("members"), info.raw.get("online")
    if not is_array(members) or not is_array(online) or not members or len(online) * 2 > len(members):
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
    import difflib  # deferred: only a queue or vhost not found needs it, not every read's start-up

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
    return [str(r["name"]) for r in rows if is_object(r) and r.get("name")]


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
        tag = channel.impl.basic_consume(name, _ignore, auto_ack=False,
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


def _ignore(*_: object) -> None:
    """A pika callback whose calls carry nothing wanted (the deliveries of a consume only started, a return)."""

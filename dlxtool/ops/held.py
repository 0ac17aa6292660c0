"""Messages of a queue held unacked by someone, decided from live facts (issue 35).

The management API's unacked count is a sample, emitted every statistics interval (5 s by default, later under
load): right after a run of dlxtool's own it still counted that run's prefetch, and a refusal made on it ("held
by a consumer the API does not name", exit 7) was false. What the broker says now decides instead:

- the consumer count of a passive declare (exact, now): no consumer, and the sample's unacked count is read
  again after the next sample (a consumer that went is gone from the API at once, its count only at the next
  sample: measured 4.7 s on 3.10.8, at once on 4.3.6); still counted then, it is held (a quorum queue on 3.x keeps
  what a consumer on a dead node had taken; a basic.get channel holds without being a consumer);
- a connection of an earlier dlxtool run on this host whose process is gone (killed, or cut off half-open: the
  broker keeps its deliveries until its heartbeat gives up, up to two heartbeats) is closed through the API, so
  that what it held comes back now instead of "nothing to do" — its name carries host and pid
  (dlxtool.broker.naming.process_gone). A connection of a run still going, or of another host, is named, never
  closed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import quote

from dlxtool import waits
from dlxtool.broker.management import sampled_text
from dlxtool.broker.naming import process_gone
from dlxtool.errors import DlxtoolError
from dlxtool.json_shapes import is_object, items_of

if TYPE_CHECKING:
    from dlxtool.broker.management import ManagementClient, QueueInfo
    from dlxtool.ops.session import Reporter

STATS_WAIT = 6.0  # the management API's statistics interval (5 s by default) and a margin
HELD_HINT = ("run it again once they are back (`dlxtool peek` shows ready and unacked); closing the connection "
             "that holds them (management UI, or rabbitmqctl close_connection) gives them back at once")


def reclaim_dead_runs(management: ManagementClient | None, vhost: str, report: Reporter,
                      timeout: float) -> list[str]:
    """Close the connections of `vhost` that dlxtool runs of this host left behind (their process is gone), so that
    the broker gives back now what they held; the names closed. Where the API cannot list or close them, nothing
    is closed and nothing is said here (the held count says the rest)."""
    if management is None:
        return []
    try:
        rows = management.get(f"vhosts/{quote(vhost, safe='')}/connections", columns="name,user_provided_name")
    except DlxtoolError:
        return []
    dead = [(str(r["name"]), str(r.get("user_provided_name") or "")) for r in items_of(rows)
            if is_object(r) and r.get("name") and process_gone(str(r.get("user_provided_name") or ""))]
    closed: list[str] = []
    for name, given in dead:
        try:
            management.request("DELETE", f"connections/{quote(name, safe='')}")
        except DlxtoolError as exc:
            report.warn(f"connection {given!r} ({name}) of an earlier dlxtool run on this host is still open on the "
                        f"broker though its process is gone; closing it was refused ({exc.message}): what it holds "
                        "comes back when the broker's heartbeat gives up on it")
            continue
        closed.append(given)
    if closed:
        _wait_gone(management, vhost, {n for n, _g in dead}, timeout)
        report.warn(f"closed {len(closed)} connection(s) of earlier dlxtool runs on this host whose process is gone "
                    f"({', '.join(repr(c) for c in closed)}): the broker gave back what they held")
    return closed


def _wait_gone(management: ManagementClient, vhost: str, names: set[str], timeout: float) -> None:
    wait = waits.Wait(f"the broker to close {len(names)} connection(s) of earlier dlxtool runs", timeout, 0.2)
    while not wait.over():
        try:
            rows = management.get(f"vhosts/{quote(vhost, safe='')}/connections", columns="name")
        except DlxtoolError:
            return
        if not any(is_object(r) and r.get("name") in names for r in items_of(rows)):
            return
        wait.pause()


def held_elsewhere(info: QueueInfo | None, management: ManagementClient | None, ready: int, consumers: int,
                   ) -> str | None:
    """Messages of the queue held unacked: who holds them and when they come back, or None. `consumers`: the
    passive declare's count (now). With no consumer now, the API's count is read again after its next sample
    (at most STATS_WAIT): a count from before the last consumer went is no holding. They are not lost; a run
    covers only the ready ones."""
    from dlxtool.ops.busy import connection_named

    if info is None or not info.messages_unacked:
        return None
    unacked = info.messages_unacked
    if not consumers:
        info = _after_next_sample(management, info)
        unacked = info.messages_unacked
        if not unacked:
            return None
    holders = [c.get("channel_details") for c in info.raw.get("consumer_details") or () if is_object(c)]
    who = ", ".join(dict.fromkeys(connection_named(management, h) for h in holders if is_object(h)))
    if not who and info.type == "quorum":  # see broker/versions.py: QUORUM_KEEPS_A_LOST_CONSUMERS_MESSAGES
        who = ("a consumer the management API does not name -- on RabbitMQ 3.x a quorum queue keeps what a consumer "
               "on a node that died had taken, even once the node is back, until the queue's leader moves "
               "(rabbitmq-queues transfer_leadership, or the leader's node in maintenance mode)")
    elif not who:
        who = ("no consumer (a basic.get of a peek still running holds them without one; or a consumer on a node "
               "that is down keeps them until it is back)")
    ours = " (dlxtool's own: a run the broker blocked, or one still going)" if "'dlxtool " in who else ""
    again = "" if consumers else ", counted again after its next sample"
    return (f"{unacked} message(s) of {info.name!r} are held unacked by {who}{ours} ({sampled_text(info)}"
            f"{again}): they come back to it when that connection closes (or, blocked by an alarm, when the "
            "alarm clears); " + ("none is ready now" if not ready else f"this run covers the {ready} ready"))


def _after_next_sample(management: ManagementClient | None, info: QueueInfo) -> QueueInfo:
    """The queue as the API has it once it sampled the queue again (its unacked count changed, or STATS_WAIT
    passed)."""
    if management is None:
        return info
    first = info.messages_unacked
    wait = waits.Wait(f"the management API's next sample of {info.name!r} (its unacked count, with no consumer now)",
                      STATS_WAIT, 0.5)
    while wait.pause():
        try:
            info = management.queue(info.vhost, info.name)
        except DlxtoolError:
            return info
        if info.messages_unacked != first:
            return info
    return info


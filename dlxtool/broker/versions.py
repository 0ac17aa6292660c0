"""What RabbitMQ does that dlxtool's safety depends on, and where it differs by version: one table, each fact
proven against every broker the suite starts (tests/broker/test_versions.py measures each one on the broker under
test and compares it with what this table says for that broker's version, so the table cannot drift).

A fact is keyed by the broker's version from the AMQP server properties (`server_version`; connection.start's
`version`), where it changed between versions, and by what the broker says about its configuration where it
depends on that (a deprecated feature an operator denied: /api/deprecated-features; metrics collection switched
off: /api/overview's `disable_stats`). A fact that holds on every version the suite runs is a plain constant.

Measured with pika 1.4 on RabbitMQ 3.10.8 (Debian bookworm), 4.0.5 (Debian trixie) and 4.3.6 (Debian sid);
`scripts/dev-broker` starts each. Rows for versions not run here (3.13, 4.1, 4.2) carry what RabbitMQ's release
notes and maintainers say and are marked so (`Behaviour.measured`); their neighbours' facts otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from dlxtool.json_shapes import is_array, is_object

# basic.publish's `expiration` (a per-message TTL in ms, as text): RabbitMQ takes an optional sign and ASCII digits
# whose value is at most ten years; anything else closes the channel (406 PRECONDITION_FAILED - invalid
# expiration). Measured on 3.10.8, 4.0.5 and 4.3.6: 315360000000 taken, 315360000001 refused, "-0" and "+5" taken,
# " 5", "1.5" and "" refused; tests/broker/test_refusals.py checks expiration_taken against each broker the suite runs.
MAX_EXPIRATION_MS = 315_360_000_000
_EXPIRATION = re.compile(r"[+-]?[0-9]+")


def expiration_taken(value: str) -> bool:
    """Whether RabbitMQ takes `value` as a message's expiration property."""
    return _EXPIRATION.fullmatch(value) is not None and 0 <= int(value) <= MAX_EXPIRATION_MS


# -- the version --------------------------------------------------------------------------------------------------

@dataclass(frozen=True, order=True)
class Version:
    """A RabbitMQ version, ordered: major.minor.patch."""

    major: int
    minor: int = 0
    patch: int = 0

    @classmethod
    def parse(cls, text: Any) -> Version | None:
        """"4.3.6" (server properties, /api/overview), b"3.10.8", "4.1.0-rc.1" -> Version; None when not a version."""
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        match = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", text) if isinstance(text, str) else None
        if match is None:
            return None
        return cls(int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}"


def server_version(conn: Any) -> Version | None:
    """The version the broker gave in connection.start (its server properties), for a pika BlockingConnection
    (or its underlying connection); None when it said none."""
    impl = getattr(conn, "_impl", conn)
    props: object = getattr(impl, "server_properties", None) or {}
    return Version.parse(props.get("version")) if is_object(props) else None


def as_version(version: Version | str | None) -> Version | None:
    return version if isinstance(version, Version) or version is None else Version.parse(version)


# -- the table ----------------------------------------------------------------------------------------------------

GiveBack = Literal["close", "cancel", "nack", "reject", "lost"]
# What each give-back is, as measured (tests/broker/test_versions.py):
#   close   basic.get (or a consumer's deliveries) held unacked, then channel.close
#   cancel  a consumer's deliveries held unacked, basic.cancel, then channel.close
#   nack    basic.get held unacked, then basic.nack(multiple, requeue=true), at most 32 at a time, each chunk
#           applied before the next (dlxtool.broker.giveback: more in flight are scrambled; and on 4.3 the ones
#           still stashed in the client when the channel closes are returned by the close, which counts)
#   reject  basic.get held unacked, then basic.reject(requeue=true)
#   lost    basic.get held unacked, then the connection's socket dropped without a close (what the broker's own 541
#           close, a network fault or a killed process leave behind): every version counts it
GIVE_BACKS: tuple[GiveBack, ...] = ("close", "cancel", "nack", "reject", "lost")

# AMQP 1.0 (RabbitMQ 4.x): how a receiver gives an unsettled delivery back (dlxtool.broker.amqp10.outcomes):
#   released  the `released` outcome
#   modified  `modified` with delivery-failed=false, undeliverable-here=false (no annotations)
#   failed    `modified` with delivery-failed=true (what a consumer's "I failed" is)
#   detach    the link detached (closed) with the delivery unsettled
#   lost      the connection's socket dropped with the delivery unsettled
Amqp10GiveBack = Literal["released", "modified", "failed", "detach", "lost"]
AMQP10_GIVE_BACKS: tuple[Amqp10GiveBack, ...] = ("released", "modified", "failed", "detach", "lost")


@dataclass(frozen=True)
class Behaviour:
    """What RabbitMQ does from version `since` on (until the next row)."""

    since: Version
    measured: str  # the version the suite measures this row on, or where the facts come from when not measured

    # Quorum queues ------------------------------------------------------------------------------------------
    # The give-backs that count a delivery attempt (x-delivery-count + 1; past the limit the message is
    # dead-lettered or dropped). 3.10 and 4.0: every one. 4.3 (rabbitmq-server#15387): basic.nack does not
    # count (the message keeps its place; x-acquired-count + 1), basic.reject, a channel close and a cancel do.
    quorum_counted: frozenset[GiveBack]
    # A consumer that holds a delivery past the queue's x-consumer-timeout (3.12+ as a queue argument; quorum
    # queues only on 4.3, which refuses it on a classic queue): 4.0 closes the channel (406, checked once a minute)
    # and the return counts; 4.3's quorum queue returns the message itself (x-acquired-count + 1), uncounted, and
    # the consumer stays. None: not measured (3.10 has no such argument; its broker-wide consumer_timeout is 30 min).
    consumer_timeout_counted: bool | None
    # Where a nacked basic.get goes on a quorum queue with no delivery limit in effect: the back of the queue
    # (3.x without a limit, 4.0 with -1), else in place (returned messages are served first, as a block at the
    # head, each new return at the back of that block). 4.3: in place with or without a limit.
    quorum_unlimited_nack_to_back: bool
    # The limit of a quorum queue declared without one: none on 3.x, 20 from 4.0.
    default_delivery_limit: int | None
    # A negative x-delivery-limit (argument or policy): 3.x has no "off" switch, it acts as 0 (a message is
    # dead-lettered or dropped at its first counted return); 4.x: no limit, unless the other of argument and
    # policy is >= 0 (then that one: the broker takes the larger where either is negative, else the smaller).
    negative_delivery_limit_is_off: bool
    # The headers a quorum queue adds to a delivery: x-delivery-count on a message's first delivery
    # (3.x: 0; 4.x: absent until a counted return); x-acquired-count (4.3: absent on a first delivery, then
    # every delivery after a give-back, counted or not, adds one).
    first_delivery_count_header: bool
    acquired_count_header: bool
    # A dead letter rejected by a quorum queue (or, on 4.3, any rejected dead letter) reaches a quorum DLQ with
    # delivery counters already set: its first delivery there has x-delivery-count (4.3: and x-acquired-count) of 1
    # or more, and its first returns in the DLQ leave them as they were (the header shows the larger of the carried
    # and the DLQ's own count; measured on 4.0.5 and 4.3.6). The headers then cannot tell a dead letter returned
    # once in the DLQ from one never delivered there (`returned_here`), and a peek takes the API's count of the
    # returned messages at the head (`messages_ready_returned`, 4.x) instead. 3.x: 0 at the first delivery there.
    dead_letters_carry_delivery_counts: bool

    # AMQP 1.0 (4.x): the give-backs of an unsettled delivery that count a delivery attempt on a quorum queue, and
    # whether a given-back message keeps its place (classic and quorum queues alike; the returns in the order
    # given). None: no AMQP 1.0 on the broker's AMQP port (3.x: a plugin, address v1, not supported here).
    # 4.0.5: every give-back counts, `released` and uncounted `modified` too; 4.3.6: only `failed` and a lost
    # connection (`released`, `modified` and a detach leave x-delivery-count, raise x-acquired-count).
    amqp10_counted: frozenset[Amqp10GiveBack] | None
    # A message whose application properties hold a char or a uuid cannot be delivered to an AMQP 0.9.1 consumer:
    # the broker closes that connection (541 INTERNAL_ERROR, mc_amqpl:to_091 function_clause) and the message stays
    # where it was (the lost connection gave it back). Measured on 4.0.5 and 4.3.6, each type alone.
    amqp10_char_uuid_close_091: bool
    # The mirror image: a message published over 0.9.1 with a decimal header cannot be delivered to an AMQP 1.0
    # receiver: the broker ends the 1.0 session (internal-error, mc_amqpl:from_091(decimal, …) function_clause) and
    # the message stays where it was. Measured on 4.0.5 and 4.3.6.
    decimal_header_ends_amqp10_session: bool

    # Dead-lettering ------------------------------------------------------------------------------------------
    # An application republishes a dead letter with the x-death it received and it dies again: 3.10 counts on
    # (count 3 after three rounds); 4.x ignores a client's x-death and starts afresh (count 1), as 3.13.0-3.13.2 did.
    x_death_restarts_on_republish: bool
    # x-last-death-* headers (3.13 and later; dlxtool.deaths reads their presence as "restarts x-death").
    writes_x_last_death: bool

    # Deprecated features -------------------------------------------------------------------------------------
    # basic.qos(global=true) and then a consumer on a quorum queue: refused with 540 NOT_IMPLEMENTED (which closes
    # the connection) on 3.10 and 4.0; accepted by 4.3.6, also with deprecated_features.permit.global_qos = false.
    # (dlxtool sends neither: AVOIDED_DEPRECATED_FEATURES.)
    global_qos_refused_on_quorum: bool
    # GET /api/deprecated-features: absent on 3.10 (404); listed on 4.0; with each one's `state` (permitted |
    # denied) on 4.3.
    deprecated_features_listed: bool
    deprecated_feature_state: bool

    # Management API ------------------------------------------------------------------------------------------
    # A quorum queue's row has `delivery_limit`, the limit in effect (argument, policy and default resolved;
    # "unlimited" for none): 4.0 and 4.3, once the row has its first statistics sample (4.3 also in a row without
    # statistics). 3.10 does not report it; where it is missing dlxtool resolves it (effective_delivery_limit).
    api_reports_delivery_limit: bool
    # A queue row has its `policy` and `effective_policy_definition` without statistics (GET /api/queues with
    # disable_stats=true, or metrics collection denied): 4.3. 3.10 and 4.0 only with statistics (a queue
    # declared moments ago has none until its first sample, up to 5 s).
    api_policy_without_stats: bool
    # A user asks the API about a vhost it may not use: 401 "not authorised to access virtual host" on 3.10 and
    # 4.0; 404 "Not Found" on 4.3, for the vhost's queues that exist too (dlxtool then says it may be either).
    api_404_for_a_vhost_not_permitted: bool = False

    # Clusters (measured on the 3.10.8 and 4.3.6 clusters, tests/scripts/test_dev_broker_cluster.py)
    # The metadata store (queues, bindings, users...): Mnesia on 3.x and 4.0/4.1 (Khepri there only when enabled);
    # Khepri on 4.3 (feature flag khepri_db enabled on a new cluster). Khepri is a Raft cluster of every node: with a
    # majority of the nodes away every metadata change (a queue.declare, dlxtool's own exclusive probe queue too)
    # waits 30 s and the connection is closed with 541 "... because the metadata store operation timed out".
    khepri: bool = False
    # A passive queue.declare (or basic.get, basic.consume) of a classic queue whose node has its app stopped, through
    # another member: 404 naming the node ("home node 'N' of durable queue 'q' in vhost 'v' is down or inaccessible")
    # on 3.10; on 4.3 404 "queue 'q' in vhost 'v' process is stopped by supervisor", no node named (the API's queue
    # list still names it). Either way the queue exists: dlxtool says it is unavailable (exit 7), never "not found".
    down_queue_404_names_node: bool = True
    # The API's `single_active_consumer_tag` in a quorum queue's row: set on 4.0.5 and 4.3.6 for any consumer (the
    # queue need not be single-active-consumer, issue 35), from a sample on; 3.10 for a single-active-consumer queue
    # only. dlxtool
    # reads single-active-consumer from the queue's argument (ops/busy.py), never from the tag.
    api_sac_tag_on_any_quorum_consumer: bool = False


BEHAVIOURS: tuple[Behaviour, ...] = (
    Behaviour(
        since=Version(3, 0), measured="3.10.8",
        quorum_counted=frozenset(GIVE_BACKS), consumer_timeout_counted=None, amqp10_counted=None,
        amqp10_char_uuid_close_091=False, decimal_header_ends_amqp10_session=False,
        quorum_unlimited_nack_to_back=True, default_delivery_limit=None,
        negative_delivery_limit_is_off=False, first_delivery_count_header=True, acquired_count_header=False,
        dead_letters_carry_delivery_counts=False, x_death_restarts_on_republish=False, writes_x_last_death=False,
        global_qos_refused_on_quorum=True, deprecated_features_listed=False, deprecated_feature_state=False,
        api_reports_delivery_limit=False, api_policy_without_stats=False),
    Behaviour(  # not run here: RabbitMQ 3.13.0's release notes (x-death, x-last-death-*; reverted in 3.13.3)
        since=Version(3, 13), measured="not measured (RabbitMQ 3.13.0 release notes)",
        quorum_counted=frozenset(GIVE_BACKS), consumer_timeout_counted=None, amqp10_counted=None,
        amqp10_char_uuid_close_091=False, decimal_header_ends_amqp10_session=False,
        quorum_unlimited_nack_to_back=True, default_delivery_limit=None,
        negative_delivery_limit_is_off=False, first_delivery_count_header=True, acquired_count_header=False,
        dead_letters_carry_delivery_counts=False, x_death_restarts_on_republish=True, writes_x_last_death=True,
        global_qos_refused_on_quorum=True, deprecated_features_listed=True, deprecated_feature_state=False,
        api_reports_delivery_limit=False, api_policy_without_stats=False),
    Behaviour(
        since=Version(3, 13, 3), measured="not measured (RabbitMQ 3.13.3 release notes)",
        quorum_counted=frozenset(GIVE_BACKS), consumer_timeout_counted=None, amqp10_counted=None,
        amqp10_char_uuid_close_091=False, decimal_header_ends_amqp10_session=False,
        quorum_unlimited_nack_to_back=True, default_delivery_limit=None,
        negative_delivery_limit_is_off=False, first_delivery_count_header=True, acquired_count_header=False,
        dead_letters_carry_delivery_counts=False, x_death_restarts_on_republish=False, writes_x_last_death=True,
        global_qos_refused_on_quorum=True, deprecated_features_listed=True, deprecated_feature_state=False,
        api_reports_delivery_limit=False, api_policy_without_stats=False),
    Behaviour(  # also 4.1 and 4.2 (not run here): the give-back rules changed in 4.3 (rabbitmq-server#15387)
        since=Version(4, 0), measured="4.0.5",
        quorum_counted=frozenset(GIVE_BACKS), consumer_timeout_counted=True,
        amqp10_counted=frozenset(AMQP10_GIVE_BACKS), amqp10_char_uuid_close_091=True,
        decimal_header_ends_amqp10_session=True,
        quorum_unlimited_nack_to_back=True, default_delivery_limit=20,
        negative_delivery_limit_is_off=True, first_delivery_count_header=False, acquired_count_header=False,
        dead_letters_carry_delivery_counts=True, x_death_restarts_on_republish=True, writes_x_last_death=True,
        global_qos_refused_on_quorum=True, deprecated_features_listed=True, deprecated_feature_state=False,
        api_reports_delivery_limit=True, api_policy_without_stats=False, api_sac_tag_on_any_quorum_consumer=True),
    Behaviour(
        since=Version(4, 3), measured="4.3.6",
        quorum_counted=frozenset({"close", "cancel", "reject", "lost"}), consumer_timeout_counted=False,
        amqp10_counted=frozenset({"failed", "lost"}), amqp10_char_uuid_close_091=True,
        decimal_header_ends_amqp10_session=True,
        quorum_unlimited_nack_to_back=False,
        default_delivery_limit=20, negative_delivery_limit_is_off=True, first_delivery_count_header=False,
        acquired_count_header=True, dead_letters_carry_delivery_counts=True, x_death_restarts_on_republish=True,
        writes_x_last_death=True,
        global_qos_refused_on_quorum=False, deprecated_features_listed=True, deprecated_feature_state=True,
        api_reports_delivery_limit=True, api_policy_without_stats=True, api_404_for_a_vhost_not_permitted=True,
        khepri=True, down_queue_404_names_node=False, api_sac_tag_on_any_quorum_consumer=True),
)

# A broker that gave no version (no RabbitMQ does): the 3.x facts (no default limit, a negative one acts as 0), and
# every give-back counts — the reading that never spends a delivery attempt unasked.
UNKNOWN = BEHAVIOURS[0]


def behaviour(version: Version | str | None) -> Behaviour:
    """The row for `version` (a Version, or text as the broker says it)."""
    parsed = as_version(version)
    if parsed is None:
        return UNKNOWN
    found = UNKNOWN
    for row in BEHAVIOURS:
        if row.since <= parsed:
            found = row
    return found


def measured_versions() -> tuple[str, ...]:
    """The versions the suite measures the table on."""
    return tuple(row.measured for row in BEHAVIOURS if row.measured[0].isdigit())


# -- what the commands ask ------------------------------------------------------------------------------------------

def quorum_give_back_counts(version: Version | str | None, how: GiveBack) -> bool:
    """Whether giving quorum messages back by `how` uses one of their delivery attempts (x-delivery-count + 1)."""
    return how in behaviour(version).quorum_counted


def amqp10_give_back_counts(version: Version | str | None, how: Amqp10GiveBack) -> bool:
    """Whether giving an unsettled AMQP 1.0 delivery back to a quorum queue by `how` uses one of its delivery
    attempts. A broker without AMQP 1.0 facts (3.x): every way counts (the reading that spends nothing unasked)."""
    counted = behaviour(version).amqp10_counted
    return counted is None or how in counted


def amqp10_peek_give_back(version: Version | str | None) -> Amqp10GiveBack | None:
    """The outcome a peek over AMQP 1.0 gives messages back with so that no delivery attempt is spent on a quorum
    queue: `released` where it does not count (4.3), else an uncounted `modified`; None where every give-back
    counts (4.0: a peek of a quorum queue with a delivery limit spends attempts, like a 0.9.1 nack there)."""
    choices: tuple[Amqp10GiveBack, ...] = ("released", "modified")
    for how in choices:
        if not amqp10_give_back_counts(version, how):
            return how
    return None


def speaks_amqp10(version: Version | str | None) -> bool:
    """Whether the broker has the AMQP 1.0 facts here (RabbitMQ 4.x: AMQP 1.0 in the core, address v2)."""
    return behaviour(version).amqp10_counted is not None


def char_uuid_poison_091(version: Version | str | None) -> bool:
    """Whether an AMQP 1.0 message with a char or uuid application property closes a 0.9.1 connection it is
    delivered to (4.3.6)."""
    return behaviour(version).amqp10_char_uuid_close_091


def decimal_poison_amqp10(version: Version | str | None) -> bool:
    """Whether a 0.9.1 message with a decimal header ends the AMQP 1.0 session it is delivered to."""
    return behaviour(version).decimal_header_ends_amqp10_session


def quorum_nack_to_back(version: Version | str | None, delivery_limit: int | None) -> bool:
    """Whether nacked basic.gets go to the back of a quorum queue whose limit in effect is `delivery_limit`
    (None: none) — a peek then reorders it. With a limit they keep their place (as a block at the head)."""
    return delivery_limit is None and behaviour(version).quorum_unlimited_nack_to_back


def returned_here(version: Version | str | None, headers: dict[str, Any] | None) -> bool | None:
    """Whether a quorum queue delivered this message before and it came back to it (True), never did (False), or
    the headers cannot tell (None: a dead letter that carries its origin's counters, on a version where it does —
    `Behaviour.dead_letters_carry_delivery_counts`). On 4.3 a nack raises x-acquired-count only: a count above
    x-delivery-count can only come from returns here."""
    headers = headers or {}
    counted, acquired = _count(headers.get("x-delivery-count")), _count(headers.get("x-acquired-count"))
    if not counted and not acquired:
        return False
    if not behaviour(version).dead_letters_carry_delivery_counts:
        return True
    if acquired > counted:
        return True
    carried = "x-death" in headers or any(str(k).startswith("x-first-death-") for k in headers)
    return None if carried else True


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def khepri(version: Version | str | None) -> bool:
    """Whether the broker's cluster keeps its metadata in Khepri (a majority of its nodes must run for any change)."""
    return behaviour(version).khepri


def default_delivery_limit(version: Version | str | None) -> int | None:
    """The delivery limit a quorum queue gets when none is set."""
    return behaviour(version).default_delivery_limit


def effective_delivery_limit(version: Version | str | None, argument: Any, policy: Any) -> int | None:
    """The delivery limit in effect from the queue's `x-delivery-limit` argument and its policy's `delivery-limit`
    (either None when unset); None when there is none.

    Both set: the smaller wins (rabbit_queue_type_util:args_policy_lookup with min/2; seen on 3.10: argument 10,
    policy 2 -> 2). 4.x: where either is negative the larger wins (argument -1 with policy 7: 7, seen on 4.0.5 and
    4.3.6; 4.3 reports the same in the API's `delivery_limit`), and a negative result means no limit. 3.x has no
    "off" switch: a negative limit acts as 0 (argument -1, policy 7: dropped at the first return on 3.10.8)."""
    row = behaviour(version)
    values = [int(v) for v in (argument, policy) if isinstance(v, int | float) and not isinstance(v, bool)]
    if not values:
        return row.default_delivery_limit
    if row.negative_delivery_limit_is_off:
        limit = max(values) if min(values) < 0 else min(values)
        return None if limit < 0 else limit
    return max(min(values), 0)


def api_delivery_limit(version: Version | str | None, raw: dict[str, Any]) -> tuple[bool, int | None]:
    """(reported, limit): the limit in effect as the management API's queue row says it (4.x: `delivery_limit`, a
    number or "unlimited"); (False, None) where the row does not have it."""
    value = raw.get("delivery_limit")
    if not behaviour(version).api_reports_delivery_limit:
        return False, None
    if value == "unlimited":
        return True, None
    if not isinstance(value, int) or isinstance(value, bool):
        return False, None
    return True, (None if value < 0 else value)


# -- the AMQP type probe (dlxtool.broker.queues.probe_type) ------------------------------------------------------

# basic.consume with the stream argument `x-stream-offset`: a classic or quorum queue refuses it before anything is
# delivered, naming its type: "406 PRECONDITION_FAILED - invalid arg 'x-stream-offset' for queue 'q' in vhost 'v'
# of queue type rabbit_quorum_queue"; a stream takes it (with prefetch; offset "next" delivers nothing that is
# there). The same on 3.10.8, 4.0.5 and 4.3.6, a queue with delivery limit 1 left as it was (no x-delivery-count,
# no redelivered flag). Its refusal is a channel error: the connection stays.
STREAM_OFFSET_REFUSAL = re.compile(r"invalid arg 'x-stream-offset' for queue .* of queue type (\w+)")
PROBE_TYPES = {"rabbit_classic_queue": "classic", "rabbit_quorum_queue": "quorum"}


def type_from_refusal(text: str) -> str | None:
    """classic | quorum from the broker's refusal of the x-stream-offset consumer; None when it says otherwise."""
    match = STREAM_OFFSET_REFUSAL.search(text or "")
    return PROBE_TYPES.get(match.group(1)) if match else None


# -- deprecated features ----------------------------------------------------------------------------------------

# What hosted RabbitMQ 4.3 brokers deny and dlxtool never uses: basic.qos with global=true, and a queue declared
# durable=false and exclusive=false (with it denied, 4.3.6 closes the *connection*: 541 INTERNAL_ERROR "Feature
# `transient_nonexcl_queues` is deprecated"). tests/support/deprecated.py fails a test where dlxtool sends either.
AVOIDED_DEPRECATED_FEATURES = ("global_qos", "transient_nonexcl_queues")
# Denied by an operator, the management API keeps no figures: /api/overview says `disable_stats: true`, queue rows
# have no message counts, consumer counts or rates, /api/connections lists nothing and /api/consumers answers 400
# (seen on 4.3.6). dlxtool then says what it cannot tell (`dlxtool queues`, a peek's unacked count).
METRICS_FEATURE = "management_metrics_collection"


def feature_denied(listed: Any, name: str) -> bool | None:
    """From GET /api/deprecated-features: whether the broker denies `name` (True/False), None when it does not say
    (3.10 has no such endpoint; 4.0 lists the features without their state)."""
    if not is_array(listed):
        return None
    for item in listed:
        if is_object(item) and item.get("name") == name:
            state = item.get("state")
            return None if state is None else state == "denied"
    return False


def stats_disabled(overview: Any) -> bool:
    """Whether the management API keeps no figures (metrics collection denied, or stats disabled), from
    /api/overview."""
    return is_object(overview) and overview.get("disable_stats") is True


# A quorum queue whose consumer's node was killed (kill -9) keeps the messages that consumer had taken checked out
# ("unacked", held by a consumer the management API no longer names), also once the node is back: measured on a
# 3.10.8 cluster, 290 held for more than two minutes after the node returned; moving the leader
# (rabbit_quorum_queue:transfer_leadership) gave them back at once. Said by replay when it finds them
# (dlxtool.ops.held.held_elsewhere), with that remedy. Not yet measured on 4.x.
QUORUM_KEEPS_A_LOST_CONSUMERS_MESSAGES = ("3.10",)

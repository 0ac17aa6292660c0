"""Whether the management API's view of a queue's policy is current.

The API reports a queue's policy (`policy`, `effective_policy_definition`) from its statistics, sampled every
5 s: for up to that long after a policy is set, changed or deleted, a queue shows the old one (measured on 3.10
and 4.0: 4.5-4.9 s), and a decision on its limits or dead-letter exchange would be made on settings the broker
no longer applies. The policy list itself (/api/policies/VHOST) is current at once; the policy RabbitMQ applies
to a queue is the highest-priority one whose pattern matches its name and whose apply-to covers it
(rabbit_policy). So the queue's reported policy is checked against that list; a mismatch means a stale sample
(the caller waits for a fresh one). Operator policies are not read (they need an administrator's tag): they
only lower numeric limits, so a reported number below the policy's is taken as theirs.
"""

from __future__ import annotations

import re
from typing import Any

from dlxtool.json_shapes import is_object

# apply-to values that cover a queue of each type (3.12+ adds the per-type ones)
_COVERS = {"classic": ("all", "queues", "classic_queues"), "quorum": ("all", "queues", "quorum_queues"),
           "stream": ("all", "queues", "streams")}
# A quorum queue takes a policy only if every key of it is one quorum queues apply
# (rabbit_quorum_queue:is_policy_applicable; classic queues take any): an `ha-mode: all` policy matching
# everything is not a quorum queue's policy. Keys known either way; any other key: cannot be told here.
_QUORUM_KEYS = frozenset(("max-length", "max-length-bytes", "overflow", "expires", "message-ttl", "delivery-limit",
                          "dead-letter-exchange", "dead-letter-routing-key", "dead-letter-strategy",
                          "queue-leader-locator", "max-in-memory-length", "max-in-memory-bytes",
                          "target-group-size"))
_NOT_QUORUM_KEYS = frozenset(("ha-mode", "ha-params", "ha-sync-mode", "ha-sync-batch-size", "ha-promote-on-shutdown",
                              "ha-promote-on-failure", "queue-mode", "queue-master-locator", "queue-version",
                              "max-priority", "max-age", "stream-max-segment-size-bytes"))


def _applies(policy: dict[str, Any], queue_type: str) -> bool | None:
    """Whether RabbitMQ applies this (matching) policy to a queue of this type; None: cannot be told."""
    if queue_type == "classic":
        return True
    if queue_type != "quorum":
        return None  # streams: not followed here (nothing is replayed into a stream)
    definition: Any = policy.get("definition") or {}
    keys = set[Any](definition.keys())
    if keys & _NOT_QUORUM_KEYS:
        return False
    return True if keys <= _QUORUM_KEYS else None


def winner(policies: list[dict[str, Any]], queue: str, queue_type: str) -> dict[str, Any] | None | bool:
    """The policy RabbitMQ applies to `queue` (None: none), or False when that cannot be told here (a pattern
    Python's re does not take, or two matching policies with the same priority)."""
    covers = _COVERS.get(queue_type, ("all", "queues"))
    matching: list[dict[str, Any]] = []
    for policy in policies:
        if policy.get("apply-to", "all") not in covers:
            continue
        try:
            if re.search(str(policy.get("pattern", "")), queue) is None:
                continue
        except re.error:
            return False
        applies = _applies(policy, queue_type)
        if applies is None:
            return False
        if applies:
            matching.append(policy)
    if not matching:
        return None
    matching.sort(key=lambda p: int(p.get("priority") or 0), reverse=True)
    if len(matching) > 1 and int(matching[0].get("priority") or 0) == int(matching[1].get("priority") or 0):
        return False
    return matching[0]


def current(raw: dict[str, Any], policies: list[dict[str, Any]]) -> bool:
    """Whether the API's answer for one queue (`raw`) shows the policy the list says applies to it."""
    expected = winner(policies, str(raw.get("name", "")), str(raw.get("type") or "classic"))
    if expected is False:
        return True  # cannot be told: the sample is taken as it is (as before this check)
    if expected is None:
        return not raw.get("policy")
    assert is_object(expected)
    if raw.get("policy") != expected.get("name"):
        return False
    shown: object = raw.get("effective_policy_definition") or {}
    if not is_object(shown):
        return False
    definition: Any = expected.get("definition") or {}
    for key, value in definition.items():
        got = shown.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            if not isinstance(got, int | float) or got > value:  # lower: an operator policy's
                return False
        elif got != value:
            return False
    return True

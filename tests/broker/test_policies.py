"""Which policy RabbitMQ applies to a queue, and whether the API's sampled view shows it (no broker needed; the
real staleness is proven in tests/cli/test_capacity.py)."""

from dlxtool.broker.policies import current, winner

DLX = {"name": "dlx", "pattern": "^orders\\.", "apply-to": "queues", "priority": 0,
       "definition": {"dead-letter-exchange": "orders.dlx"}}
LIMIT = {"name": "limit", "pattern": "^orders\\.work$", "apply-to": "quorum_queues", "priority": 5,
         "definition": {"max-length": 5, "overflow": "drop-head"}}


def test_the_highest_priority_matching_policy_that_covers_the_queue_type_wins() -> None:
    assert winner([DLX, LIMIT], "orders.work", "quorum") is LIMIT
    assert winner([DLX, LIMIT], "orders.work", "classic") is DLX  # quorum_queues does not cover a classic queue
    assert winner([DLX, LIMIT], "payments.work", "classic") is None
    assert winner([DLX, {**DLX, "name": "twin"}], "orders.x", "classic") is False  # a tie: cannot be told
    assert winner([{**DLX, "pattern": "(?<!x"}], "orders.x", "classic") is False  # not a pattern Python takes


def test_a_sample_is_current_only_when_it_shows_the_policy_that_applies() -> None:
    raw = {"name": "orders.work", "type": "classic", "policy": None, "effective_policy_definition": {}}
    assert current(raw, []) and not current(raw, [DLX])  # set moments ago: the sample does not show it yet
    shown = {**raw, "policy": "dlx", "effective_policy_definition": {"dead-letter-exchange": "orders.dlx"}}
    assert current(shown, [DLX]) and not current(shown, [])  # deleted moments ago
    edited = {**DLX, "definition": {"dead-letter-exchange": "orders.dlx2"}}
    assert not current(shown, [edited])  # changed in place: the old definition is still shown
    quorum = {"name": "orders.work", "type": "quorum", "policy": "limit",
              "effective_policy_definition": {"max-length": 3, "overflow": "drop-head"}}
    assert current(quorum, [DLX, LIMIT])  # a lower number: an operator policy's, not a stale one
    assert not current({**quorum, "effective_policy_definition": {"max-length": 9, "overflow": "drop-head"}},
                       [DLX, LIMIT])


def test_a_policy_a_quorum_queue_does_not_take_is_not_its_policy() -> None:
    """RabbitMQ applies a policy to a quorum queue only when it has no key quorum queues do not apply: with an
    `ha-mode: all` policy on everything, a quorum queue shows no policy, and that sample is current."""
    ha = {"name": "ha", "pattern": ".*", "apply-to": "all", "priority": 0, "definition": {"ha-mode": "all"}}
    quorum = {"name": "orders.work", "type": "quorum", "policy": None, "effective_policy_definition": {}}
    assert winner([ha], "orders.work", "quorum") is None and current(quorum, [ha])
    assert winner([ha], "orders.work", "classic") is ha
    odd = {**ha, "name": "odd", "definition": {"some-plugin-key": 1}}
    assert winner([odd], "orders.work", "quorum") is False and current(quorum, [odd])  # unknown: the sample stands

"""pika's exceptions as one plain line (issue 19.4): what the broker said, or that the connection is gone."""

import pika.exceptions as pe
import pytest

from dlxtool.broker.connection import amqp_failure, broker_said
from dlxtool.cli.output import exit_status
from dlxtool.ops.engine import describe_error

LOST = "the connection to the broker was lost (the broker or the network closed it)"


@pytest.mark.parametrize(("exc", "status", "message"), [
    (pe.StreamLostError("Transport indicated EOF"), 3, LOST),
    (pe.StreamLostError("Stream connection lost: ConnectionResetError(104, 'Connection reset by peer')"), 3, LOST),
    (pe.ConnectionWrongStateError("Channel is closed."), 3, LOST),
    (pe.ConnectionClosedByBroker(320, "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"),
     3, "the broker closed the connection: 320 CONNECTION_FORCED - broker forced connection closure with reason "
        "'shutdown'"),
    (pe.ChannelClosedByBroker(404, "NOT_FOUND - no queue 'q' in vhost '/'"), 4,
     "the broker said: 404 NOT_FOUND - no queue 'q' in vhost '/'"),
    (pe.ChannelClosedByBroker(403, "ACCESS_REFUSED - access to queue 'q' refused"), 3,
     "the broker refused: 403 ACCESS_REFUSED - access to queue 'q' refused"),
    (pe.ChannelClosedByBroker(406, "PRECONDITION_FAILED - unknown delivery tag 7"), 1,
     "the broker refused: 406 PRECONDITION_FAILED - unknown delivery tag 7"),
    # a quorum queue whose leader's node just stopped, before the cluster noticed (measured on the 3.10.8 cluster:
    # a basic.get through another member about 5 s into `stop_app`): its messages are there, not lost
    (pe.ConnectionClosedByBroker(541, "INTERNAL_ERROR - Cannot get a message from queue 'queue 'q' in vhost '/'': "
                                      "noproc"),
     7, "a node the queue lives on is down (the broker said: 541 INTERNAL_ERROR - Cannot get a message from queue "
        "'queue 'q' in vhost '/'': noproc): its messages are not lost, but cannot be reached now"),
    # a quorum queue with 2 of its 3 members stopped (the 3.10.8 cluster): a basic.get times out
    (pe.ConnectionClosedByBroker(541, "INTERNAL_ERROR - Cannot get a message from queue 'queue 'q' in vhost '/'': "
                                      "{timeout,\n {'%2F_q', 'dlxtool-c1@localhost'}}"), 7, None),
])
def test_pika_failures_become_one_plain_line(exc: Exception, status: int, message: str | None) -> None:
    error = amqp_failure(exc)
    message = message or error.message  # None: the status is what is checked
    assert (int(exit_status(error.status)), error.message) == (status, message)
    assert describe_error(exc) == message  # the transfer summaries (replay, purge, dump --remove) say the same


def test_what_the_broker_said_is_read_from_pikas_wrapped_text() -> None:
    # connect() gets ProbableAuthenticationError whose only argument is the text of the inner exception
    exc = pe.ProbableAuthenticationError("ConnectionClosedByBroker: (403) 'ACCESS_REFUSED - Login was refused'")
    assert broker_said(exc) == "403 ACCESS_REFUSED - Login was refused"


def test_a_node_that_refuses_connections_is_said_down_and_one_that_listens_is_not() -> None:
    """node_refuses: a TCP connect to where the lost connection was (its pika parameters); refused = nothing
    listens there (the node or its RabbitMQ down); a listener, or parameters it cannot read, say nothing."""
    import socket
    from types import SimpleNamespace

    from dlxtool.broker.connection import node_refuses

    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen(8)
        port = listening.getsockname()[1]
        assert node_refuses(SimpleNamespace(params=SimpleNamespace(host="127.0.0.1", port=port))) is None
    # closed now: nothing listens on that port any more
    said = node_refuses(SimpleNamespace(_impl=SimpleNamespace(params=SimpleNamespace(host="127.0.0.1", port=port))))
    assert said == f"127.0.0.1:{port} refuses connections now"
    assert node_refuses(SimpleNamespace(params=None)) is None
    # a name that does not resolve says nothing, and the probe is bounded whatever the resolver does
    from dlxtool.broker.connection import refuses

    assert refuses("no-such-host.invalid", port) is None
    try:  # an IPv6 address is said bracketed, as a URL has it
        with socket.socket(socket.AF_INET6) as listening6:
            listening6.bind(("::1", 0))
            port6 = listening6.getsockname()[1]
    except OSError:
        return  # no IPv6 loopback on this machine
    assert refuses("::1", port6) == f"[::1]:{port6} refuses connections now"

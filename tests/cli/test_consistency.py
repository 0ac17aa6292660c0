"""Small consistencies (issue 37): DLXTOOL_VHOST as --vhost's environment variable, did-you-mean for a vhost
and a command as for queues and options."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.once  # no broker version or queue type decides these: the 3.x pass only


def plain_url(broker) -> str:
    """The broker's URL without a vhost in its path (the vhost then comes from --vhost, $DLXTOOL_VHOST, else /)."""
    return f"amqp://guest:guest@{broker.host}:{broker.amqp_port}/"


def test_dlxtool_vhost_names_the_vhost_and_a_typed_vhost_wins(run, broker, qname) -> None:
    with broker.channel() as ch:
        ch.queue_declare(qname, durable=True)
    broker.publish(qname, [b"in the test vhost"])
    found = run("peek", qname, "--url", plain_url(broker), "-f", "json", env={"DLXTOOL_VHOST": broker.vhost})
    assert found.exit_code == 0, found.stderr  # was: read vhost '/' (issue 37)
    assert [r["body"] for r in json.loads(found.stdout)] == ["aW4gdGhlIHRlc3Qgdmhvc3Q="]
    listed = run("queues", "--url", plain_url(broker), "-f", "json", env={"DLXTOOL_VHOST": broker.vhost})
    assert qname in [row["queue"] for row in json.loads(listed.stdout)]
    typed = run("peek", qname, "--url", plain_url(broker), "--vhost", broker.vhost + "-nope",
                env={"DLXTOOL_VHOST": broker.vhost})
    assert typed.exit_code == 4 and f"vhost '{broker.vhost}-nope' not found" in typed.stderr


def test_a_vhost_typo_gets_a_did_you_mean_proven_over_amqp(run, broker, qname) -> None:
    typo = broker.vhost[:-1]  # the run's vhost less its last character: close to it, and to no other
    result = run("peek", qname, "--url", plain_url(broker), "--vhost", typo)
    assert result.exit_code == 4
    assert f"vhost '{typo}' not found on broker" in result.stderr
    assert f"did you mean '{broker.vhost}'?" in result.stderr
    far = run("peek", qname, "--url", plain_url(broker), "--vhost", "zz-no-such-vhost-anywhere")
    assert far.exit_code == 4 and "did you mean" not in far.stderr


def test_a_vhost_the_api_names_but_amqp_does_not_reach_is_not_suggested(cli_env, broker) -> None:
    """The names come from a management API no AMQP connection could prove (none opens on a missing vhost): one is
    said only once AMQP reaches it. An API of another broker (here: one that lists a vhost this broker lacks)
    must not put a name in the user's mouth."""
    from dlxtool.cli.app import App
    from dlxtool.config import BrokerProfile

    profile = BrokerProfile(name="t", urls=(plain_url(broker),), source="test", env=cli_env, vhost="x",
                            management_url=broker.management_url)
    app = App(env=cli_env)
    assert app.vhost_did_you_mean(profile, broker.vhost[:-1]) == f"did you mean '{broker.vhost}'?"
    # the same API, asked about a broker it does not answer for: AMQP on a closed port reaches nothing
    elsewhere = BrokerProfile(name="t", urls=("amqp://guest:guest@127.0.0.1:1/",), source="test", env=cli_env,
                              vhost="x", management_url=broker.management_url, timeout=2.0)
    assert app.vhost_did_you_mean(elsewhere, broker.vhost[:-1]) is None


def test_a_vhost_the_user_has_no_permissions_on_is_still_suggested(cli_env, broker) -> None:
    """AMQP refuses a connection to a vhost the user has no permissions on (403 ACCESS_REFUSED): the vhost exists,
    so it is a fair suggestion. Told by the error's class (dlxtool.errors.AccessRefused), not its words."""
    from urllib.parse import quote

    from dlxtool.broker.connection import connect
    from dlxtool.cli.app import App
    from dlxtool.config import BrokerProfile
    from dlxtool.errors import AccessRefused

    closed = f"{broker.vhost}-np"
    broker.mgmt.request("PUT", f"vhosts/{quote(closed, safe='')}", {})  # before the try: its error, not the DELETE's
    try:
        # the API gives the user who makes a vhost its permissions there: taken away again
        broker.mgmt.request("DELETE", f"permissions/{quote(closed, safe='')}/guest")
        profile = BrokerProfile(name="t", urls=(plain_url(broker),), source="test", env=cli_env, vhost="x",
                                management_url=broker.management_url)
        with pytest.raises(AccessRefused):
            connect(BrokerProfile(name="t", urls=(plain_url(broker),), source="test", env=cli_env, vhost=closed))
        said = App(env=cli_env).vhost_did_you_mean(profile, closed[:-1])  # the run's own vhost is close too
        assert said is not None and said.startswith(f"did you mean '{closed}'"), said
    finally:
        broker.mgmt.request("DELETE", f"vhosts/{quote(closed, safe='')}")


def test_a_command_typo_gets_a_did_you_mean(run) -> None:
    result = run("peak", "orders")
    assert result.exit_code == 2
    assert "No such command 'peak': did you mean 'peek'?" in result.stderr
    assert "did you mean" not in run("frobnicate").stderr
    assert "did you mean 'replay'?" in run("replya", "q").stderr

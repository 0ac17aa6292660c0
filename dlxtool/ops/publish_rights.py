"""Before anything moves: may this user publish the way the command would? (issue 28)

Asked of the broker with probes that change nothing (dlxtool.broker.permissions): the default exchange with a key
no queue has, or a throwaway `dlxtool.probe.*` exchange for the route through dlxtool's temporary exchanges. A
"no" refuses the whole run (exit 6) before a message is read or published, naming the permission and suggesting
the other route only where the broker said it would work."""

from __future__ import annotations

from dlxtool.errors import RefusedError
from dlxtool.ops.session import Session

DEFAULT_ROUTE_NEEDS = ("the user needs write permission on amq.default, or configure and write on exchanges named "
                       "dlxtool.* (the default route, without --default-exchange)")


def user_words(session: Session) -> str:
    return f"user {session.profile.username!r}" if session.profile is not None else "this user"


def refuse_without_publish_rights(session: Session, *, default_exchange: bool, nothing: str) -> None:
    """Refused (RefusedError) when `session`'s user may not publish by the route the command takes: the default
    exchange (`default_exchange`), else dlxtool's temporary exchanges. `nothing` starts the sentence ("nothing can
    be replayed")."""
    from dlxtool.broker.permissions import probe_temporary_exchanges, probe_write

    user, vhost = user_words(session), session.vhost
    if default_exchange:
        said = probe_write(session.conn, "", session.timeout)
        if said is not None:
            raise RefusedError(f"{nothing}: {user} may not publish to the default exchange in vhost {vhost!r} (the "
                               f"broker said: {said})", hint=DEFAULT_ROUTE_NEEDS)
        return
    temporary = probe_temporary_exchanges(session.conn, session.timeout)
    if temporary is None:
        return
    default = probe_write(session.conn, "", session.timeout)
    raise RefusedError(
        f"{nothing}: the route that keeps each message's routing key publishes through a temporary exchange "
        f"(dlxtool.*), and {user} may not declare or publish to one in vhost {vhost!r} (the broker said: "
        f"{temporary})",
        hint="--default-exchange publishes without one (routing key = the queue's name)" if default is None
        else "the user needs configure and write permission on exchanges named dlxtool.* (or write permission on "
             f"amq.default, for --default-exchange: {default})")

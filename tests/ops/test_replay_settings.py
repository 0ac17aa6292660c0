"""Every replay setting declares how the fast path stands to it (dlxtool.ops.replay_settings): a new setting without
a declaration fails here, before it can make the fast path and the Python path disagree. Pure logic."""

from __future__ import annotations

from dataclasses import MISSING, fields, replace

from dlxtool.conventions import X_DEATH
from dlxtool.ops.replay_settings import FAST, FastPath, ReplaySettings, fast_path_applies, fast_path_declines
from dlxtool.selection import Selection


def test_every_setting_declares_how_the_fast_path_stands_to_it() -> None:
    undeclared = [f.name for f in fields(ReplaySettings) if not isinstance(f.metadata.get(FAST), FastPath)]
    assert undeclared == [], f"declare the fast path's stand in dlxtool/ops/replay_settings.py: {undeclared}"
    for f in fields(ReplaySettings):
        declared = f.metadata[FAST]
        assert declared.why, f.name
        assert declared.applies is None or declared.declines is None, f"{f.name}: one of the three, not two"


def test_the_defaults_leave_the_fast_path_on_declining_only_requests() -> None:
    settings = ReplaySettings(source="q.dlq")
    # a request (reply_to) goes to the Python path, which asks whether its reply can arrive; nothing else does
    [replies] = fast_path_declines(settings)
    assert replies(b"\x02\x00", b"") and not replies(b"\x00\x00", b"") and not replies(b"\xfd\xfc", b"")
    assert fast_path_applies(settings) and fast_path_declines(replace(settings, check_replies=False)) == ()
    for f in fields(ReplaySettings):  # a default that turned the fast path off would make every replay slow
        if f.default is not MISSING or f.default_factory is not MISSING:
            assert f.metadata[FAST].applies is None or f.metadata[FAST].applies(getattr(settings, f.name)), f.name


def test_only_when_settings_turn_it_off_and_per_message_ones_add_a_test() -> None:
    base = ReplaySettings(source="q.dlq")
    assert not fast_path_applies(replace(base, selection=Selection(origins=("q",))))
    assert not fast_path_applies(replace(base, origin_from="spring"))
    assert fast_path_applies(replace(base, origin_from=X_DEATH))

    class Unknown:  # a convention that does not say which headers it reads
        name = label = "team"

        def read(self, _message: object) -> None:
            return None

    assert not fast_path_applies(replace(base, conventions=(Unknown(),)))
    base = replace(base, check_replies=False)
    [dramatiq] = fast_path_declines(replace(base, reset_body_retries=True))
    assert dramatiq(b"", b'{"options": {"retries": 3}, "actor_name": "a"}') and not dramatiq(b"", b"plain")
    # publisher, impersonator and drop_user_id share one test: made once
    assert len(fast_path_declines(replace(base, publisher="guest", impersonator=False, drop_user_id=True))) == 1
    assert fast_path_declines(replace(base, publisher="guest", impersonator=True)) == ()

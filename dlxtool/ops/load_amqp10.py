"""`load --protocol 1.0` (issue 39): publish records that hold a whole AMQP 1.0 message (their `amqp10` field, written
by `dump --protocol 1.0`, `peek --protocol 1.0 --format jsonl`, `replay --protocol 1.0 --save`) over AMQP 1.0 on
RabbitMQ 4.x, so that each arrives as it was dumped.

The load is the same LoadPolicy (dlxtool.ops.load) with the same plan, routes, room and dead-letter checks; the
pipeline runs it over 1.0 (dlxtool.ops.file_pass_amqp10 says what is sent and how each record counts). What is
its own: what the file and the broker must be before anything is asked or published (check_amqp10_load).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dlxtool.errors import UsageError
from dlxtool.ops.load import Load, LoadPlan, LoadSettings
from dlxtool.ops.pipeline_amqp10 import require_amqp10

if TYPE_CHECKING:
    from dlxtool.ops.session import Session


class Amqp10Load(Load):
    """A load over AMQP 1.0 (LoadSettings.protocol "1.0"): the 0.9.1 load's plan and checks, and this file's."""

    def check_file(self, plan: LoadPlan) -> None:
        check_amqp10_load(self.session, plan, self.settings)


def check_amqp10_load(session: Session, plan: LoadPlan, settings: LoadSettings) -> None:
    """Refuse (exit 2), before anything is asked or published: a broker without AMQP 1.0 (3.x), and a file with
    records that hold no AMQP 1.0 message (read over 0.9.1: there is nothing to send them as)."""
    require_amqp10(session)
    if plan.without_amqp10_total:
        shown = ", ".join(plan.without_amqp10) + ("…" if plan.without_amqp10_total > len(plan.without_amqp10) else "")
        raise UsageError(f"{plan.without_amqp10_total} of the {plan.records} record(s) of {settings.name} hold no AMQP "
                         f"1.0 message (no `amqp10` field: read over AMQP 0.9.1), e.g. {shown}: --protocol 1.0 "
                         "publishes what a read over AMQP 1.0 kept whole; nothing was published",
                         hint="load this file over 0.9.1: --protocol 0-9-1")

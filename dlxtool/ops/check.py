"""Health check of broker profiles: AMQP and management API, each half reported on its own."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from dlxtool.broker.connection import close_quietly, connect, describe_connection
from dlxtool.broker.identity import verified_management
from dlxtool.broker.management import ManagementClient
from dlxtool.config import BrokerProfile
from dlxtool.errors import ConfigError, DlxtoolError, ManagementMismatch
from dlxtool.outcome import Status
from dlxtool.urls import mask_any_url


@dataclass
class BrokerCheck:
    broker: str
    url: str  # masked
    amqp_ok: bool = False
    version: str | None = None
    cluster_name: str | None = None
    latency_ms: float | None = None
    amqp_error: str | None = None
    amqp_status: Status | None = None  # the AMQP failure's: CONNECT cannot connect, NOT_FOUND vhost not found
    management_url: str | None = None
    management_ok: bool = False
    management_version: str | None = None
    management_error: str | None = None
    management_mismatch: bool = False  # the API answers for another broker than the one AMQP reached
    config_error: str | None = None  # e.g. password_env unset: nothing was tried

    @property
    def ok(self) -> bool:
        return self.amqp_ok and self.management_ok

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "ok": self.ok}


def check_broker(profile: BrokerProfile) -> BrokerCheck:
    result = BrokerCheck(broker=profile.name, url=", ".join(profile.masked_urls()),
                         management_url=mask_any_url(profile.management_url or ""))
    try:
        profile.password()
    except ConfigError as exc:
        result.config_error = str(exc)
        return result
    conn = None
    try:
        started = time.monotonic()
        conn = connect(profile)
        info = describe_connection(conn, profile, (time.monotonic() - started) * 1000)
        result.amqp_ok = True
        result.version = info.version
        result.cluster_name = info.cluster_name
        result.latency_ms = info.latency_ms
        result.url = info.node_url
    except DlxtoolError as exc:
        result.amqp_error = exc.message
        result.amqp_status = exc.status
    try:
        client = ManagementClient.for_profile(profile)
        result.management_url = client.masked_url
        if conn is not None:  # the API must answer for the broker AMQP reached, or it is not this broker's
            client = verified_management(conn, profile, client)
        started = time.monotonic()
        overview = client.overview()
        result.management_ok = True
        result.management_version = overview.get("rabbitmq_version")
        result.cluster_name = result.cluster_name or overview.get("cluster_name")
        result.version = result.version or result.management_version
        if result.latency_ms is None:
            result.latency_ms = round((time.monotonic() - started) * 1000, 1)
    except ManagementMismatch as exc:
        result.management_error = exc.message
        result.management_mismatch = True
    except DlxtoolError as exc:
        result.management_error = exc.message
    finally:
        close_quietly(conn)
    return result


def check_brokers(profiles: Sequence[BrokerProfile]) -> list[BrokerCheck]:
    """Check all profiles in parallel; a slow or dead broker costs its own timeout, not the sum."""
    if not profiles:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(profiles))) as pool:
        return list(pool.map(check_broker, profiles))

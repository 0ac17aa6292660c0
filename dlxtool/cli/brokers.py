"""`dlxtool brokers list|check`: the configured broker profiles and whether they answer."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from dlxtool.cli.app import App
from dlxtool.cli.options import common_options
from dlxtool.cli.output import exit_status
from dlxtool.config import literal_password_warnings
from dlxtool.outcome import Outcome, Status
from dlxtool.urls import mask_any_url

if TYPE_CHECKING:
    from dlxtool.ops.check import BrokerCheck


@click.group()
def brokers() -> None:
    """Configured broker profiles: list them, check that they answer.

    \b
    Examples:
      dlxtool brokers list
      dlxtool brokers check --all
    """


@brokers.command("list")
@common_options
@click.pass_obj
def list_(app: App) -> None:
    """List broker profiles from the config file (passwords masked; * marks the default).

    \b
    Examples:
      dlxtool brokers list
      dlxtool brokers list --format json | jq '.[].name'
    """
    config = app.config()
    for warning in literal_password_warnings(config):
        app.warn(warning)
    rows: list[dict[str, Any]] = [
        {
            "name": p.name,
            "default": p.name == config.default,
            "urls": p.masked_urls(),
            "vhost": p.vhost,
            "user": p.username,
            "password": p.password_source,
            "management_url": mask_any_url(p.management_url) if p.management_url else None,
            "tls": any(n.tls for n in p.nodes),
            "source": p.source,
        }
        for p in sorted(config.brokers.values(), key=lambda p: p.name)
    ]
    fmt = app.output_format()
    if fmt != "table":
        app.emit_json(rows, fmt)
        return
    app.write_table(
        [[r["name"] + (" *" if r["default"] else ""), ", ".join(r["urls"]), r["vhost"], r["user"],
          r["password"], r["management_url"]] for r in rows],
        ["name", "urls", "vhost", "user", "password", "management"],
    )
    if config.path is None:
        app.info("no config file found; using the built-in local broker (see README: config file)")


@brokers.command()
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--all", "all_", is_flag=True, help="Check every configured broker.")
@common_options
@click.pass_obj
def check(app: App, names: tuple[str, ...], all_: bool) -> Outcome:
    """Connect to brokers over AMQP and the management API, in parallel, and report.

    With no NAME, checks the selected broker (--broker/--url or the default).
    Exit 0 when every checked broker answered on both; 3 when one did not
    answer over AMQP, or its management API answers for another broker than
    the one AMQP reached (see --management-url); 4 when a vhost does not
    exist; 2 when a profile is wrong (e.g. its password_env is unset); 5 when
    only a management API failed.

    \b
    Examples:
      dlxtool brokers check
      dlxtool brokers check prod-eu prod-us
      dlxtool brokers check --all --format json
    """
    from dlxtool.ops.check import check_brokers

    config = app.config()
    if all_:
        profiles = sorted(config.brokers.values(), key=lambda p: p.name)
    elif names:
        profiles = [app.profile(n) for n in names]
    else:
        profiles = [app.profile()]
    results = check_brokers(profiles)
    fmt = app.output_format()
    if fmt != "table":
        # amqp_status: the exit code of the AMQP failure alone (3 cannot connect, 4 vhost not found)
        app.emit_json([{**r.to_json(), "amqp_status": int(exit_status(r.amqp_status)) if r.amqp_status else None}
                       for r in results], fmt)
    else:
        app.write_table(
            [[r.broker, "yes" if r.amqp_ok else "NO", r.version or "", r.cluster_name or "",
              f"{r.latency_ms:g} ms" if r.latency_ms is not None else "",
              "yes" if r.management_ok else "NO", r.url] for r in results],
            ["broker", "amqp", "version", "cluster", "latency", "management", "url"],
        )
    for r in results:
        if r.config_error:
            app.info(f"dlxtool: error: {r.config_error}")
        if r.amqp_error:
            app.info(f"{r.broker}: AMQP: {r.amqp_error}")
        if r.management_error:
            app.info(f"{r.broker}: management API: {r.management_error}")
    return check_outcome(results)


def check_outcome(results: list[BrokerCheck]) -> Outcome:
    """3 when an AMQP connection failed (or an API answers for another broker), else 4 when only vhosts were not
    found, 2 for a config error, 5 when a management API did not answer: each already said above."""
    amqp_failed = [r for r in results if not r.amqp_ok and not r.config_error]
    if any(r.amqp_status is not Status.NOT_FOUND for r in amqp_failed) or any(r.management_mismatch for r in results):
        return Outcome(Status.CONNECT)
    if amqp_failed:  # only vhosts not found
        return Outcome(Status.NOT_FOUND)
    if any(r.config_error for r in results):
        return Outcome(Status.USAGE)
    if any(not r.management_ok for r in results):
        return Outcome(Status.PARTIAL)
    return Outcome()

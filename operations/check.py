"""`pressroom check`: is each of the three services configured, reachable and ready (and, given
the checks of operations/readiness.py, is what running needs there)?

Each check answers in one line that names its service, so an operator reading a failure knows
where to look without a traceback.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.service import RPCError, RPCStatusCode

from operations.answers import CheckReport, ServiceCheck
from pressroom import database
from pressroom.database import DatabaseUnavailable
from pressroom.providers.port import ProviderError
from pressroom.providers.wiring import provider_from_settings, provider_title
from pressroom.settings import ConfigurationError, Settings
from pressroom.temporal import SEARCH_ATTRIBUTES, TemporalUnavailable, connect, describe_rpc_error

CHECK_TIMEOUT_SECONDS = 15


@dataclass(frozen=True)
class CheckResult:
    service: str
    ok: bool
    detail: str
    checked: bool = True  # False: not checked, since what it needs is not ready
    warning: bool = False  # ok, but something to act on before it fails (a missing DMARC record)

    @property
    def state(self) -> str:
        """The one word `pressroom check` and the dashboard's health page both show."""
        if not self.checked:
            return "skip"
        if not self.ok:
            return "FAIL"
        return "warn" if self.warning else "ok"


async def check_postgres(settings: Settings) -> CheckResult:
    url = settings.require_database()
    async with database.connection(url) as conn:
        latest = max(version for version, _ in database.migrations())
        applied = await conn.fetchval("SELECT max(version) FROM schema_migrations") \
            if await conn.fetchval("SELECT to_regclass('schema_migrations') IS NOT NULL") else None
    where = database.describe_url(url)
    if applied != latest:
        return CheckResult("PostgreSQL", False, f"{where}: the schema is not up to date "
                                                f"(at {applied or 'nothing'}, latest {latest}); "
                                                "run `pressroom migrate`")
    return CheckResult("PostgreSQL", True, f"{where}, schema {latest}")


async def check_temporal(settings: Settings) -> CheckResult:
    client = await connect(settings)
    where = f"{settings.temporal_address} namespace {settings.temporal_namespace}"
    try:
        listed = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=settings.temporal_namespace))
    except RPCError as error:  # Temporal Cloud does not offer this call to API keys
        if error.status not in (RPCStatusCode.UNIMPLEMENTED, RPCStatusCode.PERMISSION_DENIED):
            raise
        return CheckResult("Temporal", True, f"{where} (search attributes not checked: {error.status.name})")
    missing = [key.name for key in SEARCH_ATTRIBUTES if key.name not in listed.custom_attributes]
    if missing:
        return CheckResult("Temporal", False, f"{where}: search attributes {', '.join(missing)} are not registered; "
                                              "run `pressroom temporal setup`")
    return CheckResult("Temporal", True, where)


async def check_provider(settings: Settings) -> CheckResult:
    """The email provider answers with this account's credentials (Mailgun: a one-event query; SES:
    the account's sending quota): each provider says how (`check_account`)."""
    provider = provider_from_settings(settings)
    try:
        return CheckResult(provider.title, True, await provider.check_account())
    finally:
        await provider.aclose()


async def run_checks(settings: Settings, more: Sequence[tuple[str, Callable]] = ()) -> list[CheckResult]:
    """Every check, side by side; a failure becomes a result that names its service. `more`: checks
    of what running needs, `(name, check(client, settings))`, made once Temporal answered."""
    async def guarded(service: str, check) -> CheckResult:
        try:
            return await asyncio.wait_for(check(settings), CHECK_TIMEOUT_SECONDS)
        except (ConfigurationError, DatabaseUnavailable, TemporalUnavailable, ProviderError) as error:
            return CheckResult(service, False, str(error))
        except RPCError as error:
            return CheckResult(service, False, describe_rpc_error(error, settings))
        except TimeoutError:
            return CheckResult(service, False, f"no answer within {CHECK_TIMEOUT_SECONDS} s")

    results = list(await asyncio.gather(guarded("PostgreSQL", check_postgres), guarded("Temporal", check_temporal),
                                        guarded(provider_title(settings), check_provider)))
    if not more:
        return results
    if not all(result.ok for result in results[:2]):
        unready = " and ".join(result.service for result in results[:2] if not result.ok)
        return results + [CheckResult(name, False, f"not checked: {unready} not ready", checked=False)
                          for name, _ in more]
    client = await connect(settings)
    return results + list(await asyncio.gather(*(
        guarded(name, lambda settings, check=check: check(client, settings)) for name, check in more)))


def check_report(results: Sequence[CheckResult]) -> CheckReport:
    """The checks as `check --json` and the health page show them."""
    return CheckReport(ok=all(r.ok for r in results),
                       services=[ServiceCheck(service=r.service, ok=r.ok, warning=r.warning, state=r.state,
                                                detail=r.detail)
                                 for r in results])

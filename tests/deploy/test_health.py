"""Health endpoints an orchestrator probes: the worker's (beside its metrics) says which dependency
it lost, and the front door's names the dependency that is missing (docs/production.md "Health")."""

from __future__ import annotations

import httpx
from temporalio.testing import WorkflowEnvironment

from devstack.servers import find_binary
from operations.worker_health import HEALTH_PATH, serving_health
from tests.frontdoor.conftest import close_door, open_door
from tests.newsletter.test_failures import wait_until
from worker import running_worker


async def test_a_worker_is_healthy_while_it_polls_and_reaches_postgresql_and_names_what_it_lost(
        dev_env, settings):
    async with running_worker(dev_env.client, settings), serving_health(dev_env.client, settings, 0) as port:
        url = f"http://{settings.metrics_host}:{port}{HEALTH_PATH}"
        async with httpx.AsyncClient(timeout=30) as http:
            async def healthy() -> bool:  # healthy once the worker's first poll reached the server
                return (await http.get(url)).status_code == 200
            await wait_until(healthy, 60)
            assert (await http.get(url)).text == "ok"

    # Temporal gone: a client whose server has stopped.
    gone = await WorkflowEnvironment.start_local(dev_server_existing_path=find_binary("temporal"))
    await gone.shutdown()
    async with serving_health(gone.client, settings, 0) as port, httpx.AsyncClient(timeout=30) as http:
        response = await http.get(f"http://{settings.metrics_host}:{port}{HEALTH_PATH}")
    assert (response.status_code, response.text) == (503, "temporal unavailable (the task queue cannot be described)")

    # PostgreSQL gone, and a queue this process does not poll (Temporal up, the worker's poller lost).
    other = settings.model_copy(update={"database_url": "postgresql://nobody@127.0.0.1:1/none",
                                        "task_queue": f"{settings.task_queue}-unpolled"})
    async with serving_health(dev_env.client, other, 0) as port, httpx.AsyncClient(timeout=30) as http:
        response = await http.get(f"http://{settings.metrics_host}:{port}{HEALTH_PATH}")
    assert response.status_code == 503
    assert "postgresql unavailable" in response.text
    assert f"this worker has not polled task queue {other.task_queue} lately" in response.text


def temporal_address(client) -> str:
    return client.service_client.config.target_host


async def test_the_front_doors_health_names_the_dependency_that_is_missing(dev_env, webhook_settings):
    door = await open_door(webhook_settings, temporal_address=temporal_address(dev_env.client))
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            assert ((response := await http.get(f"{door.base}/healthz")).status_code, response.text) == (200, "ok")
    finally:
        await close_door(door)

    gone = await WorkflowEnvironment.start_local(dev_server_existing_path=find_binary("temporal"))
    address = temporal_address(gone.client)
    await gone.shutdown()
    door = await open_door(webhook_settings, temporal_address=address)
    try:
        async with httpx.AsyncClient(timeout=30) as http:
            response = await http.get(f"{door.base}/healthz")
            assert response.status_code == 200  # the members' links and webhooks still work
            assert response.text.startswith("ok; temporal unavailable (")
            assert response.text.endswith("the dashboard cannot send")
            await door.door.pool.close()
            response = await http.get(f"{door.base}/healthz")
        assert response.status_code == 503
        assert response.text.startswith("postgresql unavailable (") and "; temporal unavailable (" in response.text
    finally:
        await close_door(door)

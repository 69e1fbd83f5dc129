"""`pressroom temporal setup` registers the search attributes a namespace lacks, once."""

from __future__ import annotations

import asyncio
import uuid

from google.protobuf.duration_pb2 import Duration
from temporalio.api.workflowservice.v1 import RegisterNamespaceRequest
from temporalio.client import Client

from pressroom.temporal import SEARCH_ATTRIBUTES, register_search_attributes
from tests.foundation.test_cli import pressroom


async def test_setup_registers_what_is_missing_then_nothing(dev_env):
    namespace = f"setup-{uuid.uuid4().hex[:8]}"
    await dev_env.client.workflow_service.register_namespace(RegisterNamespaceRequest(
        namespace=namespace, workflow_execution_retention_period=Duration(seconds=86400)))
    address = dev_env.client.service_client.config.target_host
    client = await Client.connect(address, namespace=namespace)
    for _ in range(50):  # a new namespace takes a moment to reach every service
        try:
            added = await register_search_attributes(client)
            break
        except Exception:  # noqa: BLE001 (the server may refuse in several ways while it starts)
            await asyncio.sleep(0.2)
    assert added == sorted(key.name for key in SEARCH_ATTRIBUTES)

    again = await asyncio.to_thread(pressroom, "temporal", "setup",
                                    env={"TEMPORAL_ADDRESS": address, "TEMPORAL_NAMESPACE": namespace})
    assert again.returncode == 0, again.stderr
    assert "already registered" in again.stdout

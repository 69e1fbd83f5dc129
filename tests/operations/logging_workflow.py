"""A sandboxed workflow that logs, in a module of its own: it imports only the workflow API, as
the sandbox sees Pressroom's own workflows (a test module would pass its imports through)."""

from temporalio import workflow


@workflow.defn
class LoggingWorkflow:
    @workflow.run
    async def run(self, address: str) -> None:
        workflow.logger.info("a workflow line for %s", address)

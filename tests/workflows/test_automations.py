"""AutomationRunWorkflow's decisions: each step reached through advance_run, a wait a durable timer
of the step's length, an uncertain send looked at again after its wait, a run that ends early ends
there; new deliveries of the outbox enter the welcome automation (the patch)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity

from activities.automations.models import AdvanceInput, AutomationRunInput, SendStepInput, SendStepResult, StepPlan
from activities.outbox.models import EntryInput, EntryResult
from tests.workflows.conftest import worker_for, workflow_id
from workflows.automations import AutomationRunWorkflow
from workflows.outbox import DeliverOutboxEntryWorkflow

PATH = [StepPlan(action_id="a1", type="send_email"), StepPlan(action_id="a2", type="wait", wait_seconds=3 * 86400),
        StepPlan(action_id="a3", type="send_email")]


class FakeRun:
    def __init__(self, path: list[StepPlan], sends: list[SendStepResult] | None = None) -> None:
        self.path, self.sends = path, list(sends or [])
        self.advanced: list[str | None] = []
        self.sent: list[str] = []

    @activity.defn(name="advance_run")
    async def advance_run(self, input: AdvanceInput) -> StepPlan:
        self.advanced.append(input.after_action_id)
        ids = [step.action_id for step in self.path]
        at = 0 if input.after_action_id is None else ids.index(input.after_action_id) + 1
        return self.path[at] if at < len(self.path) else StepPlan(ended="completed")

    @activity.defn(name="send_step")
    async def send_step(self, input: SendStepInput) -> SendStepResult:
        self.sent.append(input.action_id)
        return self.sends.pop(0) if self.sends else SendStepResult(provider_id=f"p-{input.action_id}")


async def test_a_run_takes_each_step_and_waits_on_a_durable_timer(env):
    fake = FakeRun(PATH)
    async with worker_for(env, [AutomationRunWorkflow], [fake.advance_run, fake.send_step]) as queue:
        before = await env.get_current_time()
        result = await env.client.execute_workflow(AutomationRunWorkflow.run, AutomationRunInput(run_id="r1"),
                                                   id=workflow_id("automation"), task_queue=queue)
        waited = await env.get_current_time() - before
    assert result == "completed" and fake.sent == ["a1", "a3"] and fake.advanced == [None, "a1", "a2", "a3"]
    assert waited >= timedelta(days=3)


async def test_an_uncertain_send_is_looked_at_again_not_resent_blindly(env):
    fake = FakeRun(PATH[:1], [SendStepResult(confirm_in_seconds=30), SendStepResult(provider_id="found")])
    async with worker_for(env, [AutomationRunWorkflow], [fake.advance_run, fake.send_step]) as queue:
        result = await env.client.execute_workflow(AutomationRunWorkflow.run, AutomationRunInput(run_id="r2"),
                                                   id=workflow_id("automation"), task_queue=queue)
    assert result == "completed" and fake.sent == ["a1", "a1"]


async def test_a_run_that_ends_early_ends_with_the_reason(env):
    fake = FakeRun([PATH[0], StepPlan(action_id="a2", ended="exited_early", reason="member unsubscribed")])
    async with worker_for(env, [AutomationRunWorkflow], [fake.advance_run, fake.send_step]) as queue:
        result = await env.client.execute_workflow(AutomationRunWorkflow.run, AutomationRunInput(run_id="r3"),
                                                   id=workflow_id("automation"), task_queue=queue)
    assert result == "exited_early: member unsubscribed" and fake.sent == ["a1"]
    refused = FakeRun(PATH, [SendStepResult(ended="exited_early", reason="failed")])
    async with worker_for(env, [AutomationRunWorkflow], [refused.advance_run, refused.send_step]) as queue:
        result = await env.client.execute_workflow(AutomationRunWorkflow.run, AutomationRunInput(run_id="r4"),
                                                   id=workflow_id("automation"), task_queue=queue)
    assert result == "exited_early: failed" and refused.sent == ["a1"]


async def test_a_new_delivery_enters_the_welcome_automation(env):
    seen: list[EntryInput] = []

    @activity.defn(name="handle_entry")
    async def handle_entry(input: EntryInput) -> EntryResult:
        seen.append(input)
        return EntryResult(result={"provider_id": "p"}, completed=True)

    async with worker_for(env, [DeliverOutboxEntryWorkflow], [handle_entry]) as queue:
        await env.client.execute_workflow(DeliverOutboxEntryWorkflow.run, EntryInput(outbox_id="o1"),
                                          id=workflow_id("outbox"), task_queue=queue)
    assert seen[0].automation and seen[0].complete and seen[0].confirm

"""Every stored history of every release replays with today's workflow code.

A workflow change that alters the commands a run issues (an activity added, removed or reordered,
a timer moved, a child started differently) breaks runs that are in flight when it is deployed.
These histories were recorded by earlier releases (tests/histories/<version>/, made by
tests/histories/capture.py); replaying them here fails on any such change, naming the file. A
change that must alter commands goes behind `workflow.patched` (docs/production.md: "Deploying a
change while runs are in flight").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from pressroom.temporal import data_converter
from worker import WORKFLOWS

HISTORIES = Path(__file__).resolve().parents[1] / "histories"


def stored_histories() -> list[tuple[Path, dict[str, str]]]:
    found = []
    for manifest in sorted(HISTORIES.glob("*/manifest.json")):
        for name, entry in json.loads(manifest.read_text()).items():
            found.append((manifest.parent / f"{name}.json", entry))
    return found


def test_every_release_has_a_corpus_covering_every_workflow_type():
    releases = {path.parent.name for path, _ in stored_histories()}
    assert "0.1.0" in releases
    covered = {entry["workflow_type"] for _, entry in stored_histories()}
    registered = {cls.__name__ for cls in WORKFLOWS}  # each registered under its class name
    assert registered <= covered, f"no stored history for {sorted(registered - covered)}"


@pytest.mark.parametrize("path, entry", stored_histories(),
                         ids=[f"{p.parent.name}/{p.stem}" for p, _ in stored_histories()])
async def test_stored_history_replays_with_todays_code(path: Path, entry: dict[str, str]):
    history = WorkflowHistory.from_json(entry["workflow_id"], path.read_text())
    replayer = Replayer(workflows=WORKFLOWS, data_converter=data_converter())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    if result.replay_failure is not None:
        pytest.fail(f"{path.relative_to(HISTORIES.parent.parent)} ({entry['state']}) no longer replays: "
                    f"{result.replay_failure}", pytrace=False)

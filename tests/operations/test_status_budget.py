"""`newsletter status` waits on Temporal only for what is left of its budget, counted from its
process's start (on a busy machine the interpreter's start alone takes seconds), never less than
the time a live worker needs to answer."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from operations.waiting import QUERY_TIMEOUT, STATUS_BUDGET_SECONDS, STATUS_LEAST_SECONDS, status_query_seconds

ROOT = Path(__file__).resolve().parents[2]


def test_the_age_of_a_process_is_counted_from_its_start_not_from_its_first_question():
    code = ("import time; time.sleep(1.5); from operations.waiting import process_age_seconds; "
            "print(process_age_seconds())")
    age = float(subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                               check=True).stdout)
    assert 1.5 <= age < 60, age


@pytest.mark.parametrize("age, bound", [
    (0.2, QUERY_TIMEOUT.total_seconds()),  # a quick start: the queries' own bound
    (STATUS_BUDGET_SECONDS - 2.0, 2.0),  # a slow start: what is left
    (STATUS_BUDGET_SECONDS - 0.1, STATUS_LEAST_SECONDS),  # nearly spent: still time for a live worker
    (30.0, STATUS_LEAST_SECONDS),
    (None, QUERY_TIMEOUT.total_seconds()),  # no command (a server, a test calling the operation)
])
def test_what_is_left_of_the_budget_bounds_the_questions(age, bound):
    assert status_query_seconds(age) == pytest.approx(bound)

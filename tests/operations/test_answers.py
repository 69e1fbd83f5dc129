"""The answers' models are the `--json` contract: the document in docs/ is generated from them, and
an answer with a key its model lacks is refused instead of printed."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from pydantic import ValidationError

from operations.answers import OpensBucket, OpensOverTime, OutboxStatus, shapes_markdown

DOC = Path(__file__).parents[2] / "docs" / "answers.md"


def test_docs_answers_md_is_generated_from_the_models():
    assert DOC.read_text() == shapes_markdown(), "run: python -m operations.answers > docs/answers.md"


def test_a_key_the_model_lacks_is_refused():
    with pytest.raises(ValidationError, match="clicked"):
        OutboxStatus.model_validate({"counts": {}, "oldest_pending_seconds": None, "waiting": [], "skipped": [],
                                     "clicked": 3})


def test_times_keep_their_offset_as_json_has_always_written_them():
    at = datetime(2026, 11, 25, 15, 34, 10, 123456, tzinfo=UTC)
    opens = OpensOverTime(bucket_seconds=60, buckets=[OpensBucket(at=at, opens=2)])
    assert opens.as_json() == {"bucket_seconds": 60, "buckets": [{"at": "2026-11-25T15:34:10.123456+00:00",
                                                                 "opens": 2}]}
    assert opens.model_dump()["buckets"][0]["at"] == at  # the printers read the time itself

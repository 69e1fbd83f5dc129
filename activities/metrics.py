"""Metric instruments an activities class creates once and reuses, rather than on every call."""

from __future__ import annotations

from typing import Any

from temporalio import activity
from temporalio.common import MetricCounter, MetricGaugeFloat, MetricHistogramFloat


class Instruments:
    """The instruments of one activities instance (one per worker), made on first use.

    `activity.metric_meter()` is made for each activity execution and labels what it creates with
    that execution's namespace, task queue and activity type; an instrument keeps those labels, and
    creating one calls into the SDK's core each time. So an instrument is created by the first
    execution of each activity type and reused by the next ones, which carry the same labels.
    """

    def __init__(self) -> None:
        self._made: dict[tuple[str, ...], Any] = {}

    def _get(self, kind: str, name: str, description: str, unit: str | None) -> Any:
        info = activity.info()
        key = (kind, name, info.namespace, info.task_queue, info.activity_type)
        made = self._made.get(key)
        if made is None:
            made = self._made[key] = getattr(activity.metric_meter(), f"create_{kind}")(name, description, unit)
        return made

    def counter(self, name: str, description: str, unit: str | None = None) -> MetricCounter:
        return self._get("counter", name, description, unit)

    def histogram_float(self, name: str, description: str, unit: str | None = None) -> MetricHistogramFloat:
        return self._get("histogram_float", name, description, unit)

    def gauge_float(self, name: str, description: str, unit: str | None = None) -> MetricGaugeFloat:
        return self._get("gauge_float", name, description, unit)

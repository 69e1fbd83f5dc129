"""worker.py lists what it registers: every workflow and every activity in the code is on its lists."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import activities
import workflows
from pressroom.dependencies import Dependencies
from pressroom.settings import load_settings
from worker import WORKFLOWS, build_activities


def classes(package, suffix: str) -> dict[str, type]:
    found = {}
    for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}."):
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and name.endswith(suffix):
                found[name] = cls
    return found


def test_every_workflow_class_is_registered():
    assert {cls.__name__ for cls in WORKFLOWS} == set(classes(workflows, "Workflow"))


def test_every_public_async_method_of_an_activities_class_is_registered():
    """A new activity method that nobody adds to build_activities fails here, not in production.
    (Building the classes needs settings only; no activity runs.)"""
    expected = {(cls.__name__, name) for cls in classes(activities, "Activities").values()
                for name, member in inspect.getmembers(cls, inspect.iscoroutinefunction) if not name.startswith("_")}
    registered = {(type(method.__self__).__name__,
                   method.__name__) for method in build_activities(Dependencies(settings=load_settings(), pool=None,
                                                                                provider=None, temporal=None))}
    assert registered == expected

"""`pressroom worker`: a worker on the task queue (worker.py), until SIGINT or SIGTERM."""

from __future__ import annotations

import typer

import worker as worker_module
from commands import run_async
from pressroom.settings import get_settings

app = typer.Typer()


@app.command()
def worker() -> None:
    """Run a worker on the task queue until SIGINT or SIGTERM."""
    worker_module.configure_logging(get_settings())
    run_async(worker_module.run())

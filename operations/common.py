"""What every operation needs: a Temporal client from the settings, and a time read from the operator."""

from __future__ import annotations

from datetime import datetime

from pressroom.settings import Settings, get_settings


async def temporal_client(settings: Settings | None = None):
    from pressroom.temporal import connect

    return await connect(settings or get_settings())


def parse_moment(text: str, option: str) -> datetime:
    """An ISO 8601 time with its offset, in this century (pressroom/inputs.py), else one-line BadInput."""
    from pressroom.inputs import moment

    return moment(text, option)

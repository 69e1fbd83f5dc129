"""The front door's plain answers to a member's browser (the unsubscribe page, a link not found):
one small HTML page, and the uuid a link carries read as the reference platform writes it."""

from __future__ import annotations

import uuid as uuid_module

from aiohttp import web


def canonical_uuid(value: str | None) -> str | None:
    """The uuid as the reference platform writes it (lowercase, hyphenated), or None."""
    if not value or len(value) != 36:
        return None
    try:
        parsed = str(uuid_module.UUID(value))
    except ValueError:
        return None
    return parsed if parsed == value.lower() else None


def page(title: str, body: str, status: int = 200) -> web.Response:

    text = (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="robots" content="noindex"><title>{title}</title>'
            f'<style>body{{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;padding:0 1rem}}'
            f'button{{margin:.25rem 0;padding:.5rem 1rem}}</style></head>'
            f'<body><main><h1>{title}</h1>{body}</main></body></html>')
    return web.Response(status=status, text=text, content_type="text/html",
                        headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                                 "X-Frame-Options": "DENY",
                                 "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
                                                            "form-action 'self'"})

"""The reference platform's shapes: its JSON envelope, its error envelope, and browse's options
(`filter`, `limit`, `page`, `order`, `fields`, `include`) checked once, where they enter."""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

DEFAULT_LIMIT = 15
MAX_LIMIT = 1000  # a number above it is refused; `all` is the reference's way to ask for everything


class ApiError(Exception):
    """An answer in the reference's error envelope: {"errors": [{"message", "context", "type", …}]}."""

    def __init__(self, status: int, type: str, message: str, *, context: str | None = None,
                 code: str | None = None, property: str | None = None, reason: str | None = None) -> None:
        super().__init__(message)
        self.status, self.type, self.message, self.context = status, type, message, context
        self.code, self.property = code, property
        self.reason = reason  # ours, for the count and the log; never sent

    def body(self) -> dict:
        return {"errors": [{"message": self.message, "context": self.context, "type": self.type,
                            "details": None, "property": self.property, "help": None, "code": self.code,
                            "id": str(uuid.uuid4()), "ghostErrorCode": None}]}


def not_found(what: str) -> ApiError:
    return ApiError(404, "NotFoundError", "Resource not found error, cannot read " + what + ".",
                    context=f"{what.capitalize()} not found.")


def invalid(message: str, *, property: str | None = None, context: str | None = None) -> ApiError:
    return ApiError(422, "ValidationError", message, context=context, property=property)


def unsupported(what: str, supported: str) -> ApiError:
    return ApiError(501, "NotImplementedError", f"{what} is not supported by Pressroom's Admin API",
                    context=f"Supported: {supported}. See docs/admin-api.md.")


def iso(moment: datetime | None) -> str | None:
    """A time as the reference writes it: UTC, milliseconds, Z."""
    if moment is None:
        return None
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def dumps(body: Any) -> str:
    return json.dumps(body, default=lambda v: iso(v) if isinstance(v, datetime) else str(v), ensure_ascii=False)


@dataclass
class Browse:
    """Browse's options, checked: SQL is made from the resource's own field names only."""

    page: int = 1
    limit: int | None = DEFAULT_LIMIT  # None: all
    order: list[tuple[str, str]] = field(default_factory=list)  # (column, ASC|DESC)
    fields: list[str] = field(default_factory=list)
    include: list[str] = field(default_factory=list)
    filter: str | None = None

    @property
    def offset(self) -> int:
        return 0 if self.limit is None else (self.page - 1) * self.limit

    def pagination(self, total: int) -> dict:
        limit = self.limit or max(total, 1)
        pages = max((total + limit - 1) // limit, 1)
        return {"pagination": {"page": self.page, "limit": "all" if self.limit is None else self.limit,
                               "pages": pages, "total": total, "next": self.page + 1 if self.page < pages else None,
                               "prev": self.page - 1 if self.page > 1 else None}}


_ORDER = re.compile(r"\s*([a-z_]+)(?:\s+(asc|desc))?\s*", re.IGNORECASE)


def browse_options(query, *, orderable: dict[str, str], default_order: str, includes: tuple[str, ...],
                   known_fields: tuple[str, ...]) -> Browse:
    """The query's browse options; anything outside what the resource has is refused by name."""
    options = Browse()
    limit = query.get("limit")
    if limit is not None:
        if limit == "all":
            options.limit = None
        elif limit.isdigit() and 1 <= int(limit) <= MAX_LIMIT:
            options.limit = int(limit)
        else:
            raise invalid(f"limit must be a number from 1 to {MAX_LIMIT}, or all", property="limit")
    page = query.get("page")
    if page is not None:
        if not page.isdigit() or not 1 <= int(page) <= 1_000_000:
            raise invalid("page must be a number from 1", property="page")
        options.page = int(page)
    for part in (query.get("order") or default_order).split(","):
        match = _ORDER.fullmatch(part)
        if not match or match.group(1).lower() not in orderable:
            raise invalid(f"order {part.strip()[:60]!r} is not one of: {', '.join(sorted(orderable))} "
                          "with asc or desc", property="order")
        options.order.append((orderable[match.group(1).lower()], (match.group(2) or "asc").upper()))
    options.fields = _names(query.get("fields"), known_fields, "fields")
    options.include = _names(query.get("include"), includes, "include")
    options.filter = query.get("filter") or None
    if options.filter is not None and len(options.filter) > 2000:
        raise invalid("filter is longer than 2000 characters", property="filter")
    return options


def _names(value: str | None, allowed: tuple[str, ...], option: str) -> list[str]:
    if not value:
        return []
    names = [n.strip() for n in value.split(",") if n.strip()]
    unknown = [n for n in names if n not in allowed]
    if unknown:
        raise invalid(f"Validation (AllowedValues) failed for {option}: {unknown[0][:60]!r}", property=option,
                      context=f"{option} may be: {', '.join(allowed) or 'nothing for this resource'}")
    return names


def project(item: dict, fields: list[str]) -> dict:
    return {k: v for k, v in item.items() if k in fields} if fields else item


# `key:value`, `key:-value`, `key:[a,b]`, joined by `+` (and): the part of the filter language the
# resources other than members take, over their own fields.
_TERM = re.compile(r"([a-z_]+):(-?)(\[[^\]]*\]|'[^']*'|[^+,\[\]()']+)")


def simple_filter(text: str | None, columns: dict[str, str], first_param: int) -> tuple[str, list[list[str]]]:
    """(SQL predicate, values) for a filter of `key:value` terms joined by `+`; each value bound."""
    if not text:
        return "TRUE", []
    sql: list[str] = []
    values: list[list[str]] = []
    for part in text.split("+"):
        match = _TERM.fullmatch(part.strip())
        if not match or match.group(1) not in columns:
            raise invalid(f"filter {part.strip()[:60]!r} is not supported here", property="filter",
                          context=f"terms key:value, key:-value or key:[a,b] joined by + over: "
                                  f"{', '.join(sorted(columns))}")
        raw = match.group(3)
        items = [v.strip().strip("'") for v in raw[1:-1].split(",")] if raw.startswith("[") else [raw.strip("'")]
        values.append(items)
        test = f"{columns[match.group(1)]}::text = ANY(${first_param + len(values) - 1}::text[])"
        sql.append(f"NOT ({test})" if match.group(2) else test)
    return " AND ".join(sql), values

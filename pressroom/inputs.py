"""What commands accept, each refused in one line that names the input and what is wrong with it.

Checked before anything is written. Bounds:
- ids (posts, emails, outbox entries): 1 to 100 printable characters without spaces;
- member addresses: a valid address by `email-validator` (through pydantic), at most 191 characters;
- member names: at most 191 characters (191 is Ghost's column width for both), printable or one of
  the invisible characters real names hold (a no-break space, an emoji's zero-width joiner);
- label and tier slugs: lowercase letters, digits, `_` and `-` (not first), at most 191 characters,
  so that a recipient filter can name them (pressroom/recipient_filter.py);
- labels: at most MAX_LABELS (100) on a member, and so in one command or one imported row: enough
  for any real use, and a bound on what one row of a file can make (and on a filter naming them);
- times: ISO 8601 with a UTC offset, in this century (2000-01-01 to 2099-12-31, UTC): outside it a
  time is a slip of the keyboard (0001 for 2001, 2206 for 2026); a backfill window also not in
  the future, since it has no events yet.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from datetime import UTC, datetime

from email_validator import SPECIAL_USE_DOMAIN_NAMES, EmailNotValidError, validate_email
from pydantic import EmailStr, TypeAdapter, ValidationError

from pressroom.errors import BadInput, shorten

MAX_ID = 100
# The shape of an id taken from a URL's path (the Admin API's and the dashboard's routes): whatever
# else a segment holds (a decoded `/`, `?`, `..`) never reaches an operation or a page's link.
PATH_ID = r"[A-Za-z0-9_-]{1,100}"
MAX_TEXT = 191
MAX_LABELS = 100
EARLIEST = datetime(2000, 1, 1, tzinfo=UTC)
LATEST = datetime(2100, 1, 1, tzinfo=UTC)


def entity_id(value: str, what: str) -> str:
    """`post_id`, `email_id`, …: not empty, no spaces or control characters, at most 100 characters."""
    if not value or not value.strip():
        raise BadInput(f"the {what} id is empty")
    if len(value) > MAX_ID:
        raise BadInput(f"the {what} id {shorten(value, 40)!r} is {len(value):,} characters long; at most {MAX_ID}")
    if not value.isprintable() or any(c.isspace() for c in value):
        raise BadInput(f"the {what} id {shorten(value, 40)!r} contains spaces or control characters")
    return value


def email_address(value: str, what: str | None = None) -> str:
    """A deliverable-looking address (syntax only: no DNS lookup), normalised as email-validator does.

    Refused in one line that quotes it; with `what` (an imported row's "the email"), in one line that
    names it so and repeats neither the address nor a part of it.
    """
    text = value.strip()
    if len(text) > MAX_TEXT:
        named = what or f"the address {shorten(text, 40)!r}"
        raise BadInput(f"{named} is {len(text):,} characters long; at most {MAX_TEXT}")
    if what and not text.isprintable():
        raise BadInput(f"{what} holds a line break or control character")
    try:
        return _normalised_address(text)
    except ValueError as error:
        if what is None:
            raise BadInput(f"{shorten(text, 60)!r} is not an e-mail address: {error}") from None
        reason = str(error).rstrip(".")
        parts = [part for part in text.rpartition("@")[::2] if len(part) >= 3]
        said = "" if any(part.casefold() in reason.casefold() for part in parts) else f": {reason}"
        raise BadInput(f"{what} is not a valid address{said}") from None


@functools.cache
def _email_checks():

    # Built once: building the adapter costs more than a check. A special-use domain is one of the
    # names or ends in "." and one of them.
    special = "|".join(re.escape(name) for name in SPECIAL_USE_DOMAIN_NAMES)
    return re.compile(PLAIN_ADDRESS), re.compile(rf"(?:^|\.)(?:{special})\Z"), TypeAdapter(EmailStr)


def _normalised_address(text: str) -> str:
    """The address as email-validator (through pydantic) makes it, or ValueError with its reason.

    One of the plain ASCII shape (PLAIN_ADDRESS), within email-validator's lengths and outside its
    special-use domains, is what email-validator would make of it: the domain in lower case. Any
    other goes through email-validator, which takes some 50 µs: most of a large import's time when
    every row took it.
    """

    shape, special, adapter = _email_checks()
    if shape.fullmatch(text):
        local, _, domain = text.rpartition("@")
        domain = domain.lower()
        # A punycode label ("xn--") is left to email-validator, which gives the domain in Unicode:
        # `idn@xn--exmple-cua.com` and `idn@exämple.com` are one mailbox and one member.
        if "xn--" not in domain and len(local) <= 64 and len(domain) <= PLAIN_DOMAIN_LENGTH and \
                not special.search(domain):
            return f"{local}@{domain}"
    try:
        return adapter.validate_python(text)
    except ValidationError as error:
        raise ValueError(error.errors()[0]["msg"].removeprefix("value is not a valid email address: ")) from None


# The plain ASCII shape nearly every address has (dot-atom local part, dotted host names, a letter
# top-level domain), which email-validator accepts: a stored address of this shape, within the
# lengths (the domain at most PLAIN_DOMAIN_LENGTH characters, so no label is longer than DNS allows)
# and outside the special-use domains below, is taken as a recipient without a closer look
# (PostgreSQL matches it over a whole audience at once); any other is checked by email-validator.
# No bounded repetition ({0,61}) in the pattern: PostgreSQL's regex engine spends about ten times as
# long on one as on the rest of the match.
PLAIN_ADDRESS = (r"^[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+(\.[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+)*"
                 r"@([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z][A-Za-z]+$")
PLAIN_DOMAIN_LENGTH = 63
SPECIAL_USE_DOMAINS = ("arpa", "invalid", "local", "localhost", "onion")  # email-validator's, less "test"


def recipient_problem(address: str) -> str | None:
    """Why a stored address cannot be a recipient, in words that never repeat it; None when it can.

    email-validator decides (syntax only, no DNS; `.test` domains allowed, as the development stack
    uses them); a comma or a line break is named first, since each would change the request.
    """

    if "," in address:
        return "holds a comma"
    if any(not c.isprintable() for c in address):
        return "holds a line break or control character"
    if any(c.isspace() for c in address):
        return "holds a space"
    if len(address) > 254:
        return "is longer than 254 characters"
    try:
        validate_email(address, check_deliverability=False, test_environment=True)
    except EmailNotValidError as error:
        reason = str(error).rstrip(".")
        parts = [part for part in address.rpartition("@")[::2] if len(part) >= 3]
        said = "" if any(part.casefold() in reason.casefold() for part in parts) else f": {reason}"
        return f"is not a valid address{said}"
    return None


def slug(value: str, what: str) -> str:
    """A label's or tier's slug as a recipient filter names it."""
    text = (value or "").strip()
    if not re.fullmatch(r"[a-z0-9_][a-z0-9_-]{0,190}", text):
        raise BadInput(f"the {what} {shorten(text, 40)!r} is not a slug: lowercase letters, digits, _ and - "
                       f"(not first), at most {MAX_TEXT} characters")
    return text


# Invisible characters that legitimate names hold: spaces other than U+0020 (a no-break space
# between a first name and a particle), the zero-width joiner and non-joiner (emoji sequences,
# Indic and Persian scripts) and the tag characters of subdivision flags. Any other control or
# format character (bidirectional overrides, zero-width spaces, line separators) is refused.
_NAME_INVISIBLES = frozenset("\u200c\u200d") | {chr(c) for c in range(0xE0020, 0xE0080)}


def _unprintable(c: str) -> bool:
    if c.isprintable() or c in _NAME_INVISIBLES:
        return False
    return unicodedata.category(c) != "Zs"


def free_text(value: str | None, what: str, limit: int = MAX_TEXT) -> str | None:
    """A name or similar: trimmed, at most `limit` characters, no control characters; empty is None."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    if len(text) > limit:
        raise BadInput(f"the {what} is {len(text):,} characters long; at most {limit}")
    at = None if text.isprintable() else next((i for i, c in enumerate(text) if _unprintable(c)), None)
    if at is not None:
        # Not repeated in the error: a name is personal data, and this one may hide what it holds.
        raise BadInput(f"the {what} contains a control or invisible character (U+{ord(text[at]):04X}, "
                       f"character {at + 1})")
    return text


def moment(text: str, option: str, *, latest: datetime | None = None, latest_words: str = "") -> datetime:
    """An ISO 8601 time with its offset, in this century and not after `latest`."""

    def refused(why: str) -> BadInput:  # the value shortened only when refused: an import checks millions
        return BadInput(f"{option} {shorten(text.strip(), 40)!r} {why}")

    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise refused("is not an ISO 8601 time (such as 2026-11-01T00:00:00+00:00)") from None
    if value.tzinfo is None:
        raise refused("needs a UTC offset (such as +00:00 or Z)")
    try:
        utc = value.astimezone(UTC)
    except OverflowError:  # year 1 with a positive offset is before the first representable instant
        utc = None
    if utc is None or utc < EARLIEST:
        raise refused(f"is before {EARLIEST.date().isoformat()}")
    if utc >= LATEST:
        raise refused("is after 2099")
    if latest is not None and utc > latest:
        raise refused(f"is {latest_words or 'too late'} (after {latest.isoformat(timespec='seconds')})")
    return value


def publish_time(text: str, option: str = "--at") -> datetime:
    return moment(text, option)


def past_time(text: str, option: str) -> datetime:
    return moment(text, option, latest=datetime.now(UTC), latest_words="in the future")

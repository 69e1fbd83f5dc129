"""An email's recipient filter, in the reference platform's syntax, parsed into a tree.

Grammar (whitespace between tokens is ignored; `,` outside brackets is "or", `+` is "and" and binds
tighter, so `a,b+c` is `a,(b+c)`):

    filter  := "all" | or
    or      := and ("," and)*
    and     := atom ("+" atom)*
    atom    := "(" or ")" | term
    term    := KEY ":" ["-"] values          -- "-": members without any of the values
    values  := VALUE | "[" VALUE ("," VALUE)* "]"      -- any of (with "-": none of)
             | "[" VALUE "+" VALUE ("+" VALUE)* "]"    -- all of (not after "-", as the reference)
    KEY     := "status" | "label" | "labels" | "tier" | "tiers" | "product" | "products"
    VALUE   := SLUG | "'" SLUG "'"           -- quoted as the reference quotes (a backslash keeps the next character)
    SLUG    := [A-Za-z0-9_][A-Za-z0-9_-]*    -- for status one of free, paid, comped

The keys' plural forms and `product` are the reference's other names for label and tier. Double
quotes are not part of the reference's language (its lexer refuses them), and so not of this one.
`label:[a+b]` is read as `label:a+label:b`: the same members, one term per value.

The Admin API's posts filter is the same language over a post's keys (`POST_KEYS`: `tag:news`,
`status:published`, …), where a time key also takes a comparison, as the reference's NQL writes it:
`published_at:>'2026-01-01'` (or `>=`, `<`, `<=`; the value a date or an ISO 8601 time).

A hand-written tokenizer and recursive-descent parser: anything outside the grammar is refused
with the position and the text that does not fit, never guessed. Pure: no I/O. What a tree means
in SQL is pressroom/store/audience.py's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NoReturn

MEMBER_STATUSES = ("free", "paid", "comped")
KEYS = {"status": "status", "label": "label", "labels": "label", "tier": "tier", "tiers": "tier",
        "product": "tier", "products": "tier"}  # as written: as read
_WORD_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_WORD = _WORD_START | {"-"}
_PUNCTUATION = frozenset("()[],+:-")
_COMPARISONS = (">=", "<=", ">", "<")
# The posts filter's keys (as written: as read), its time keys and the values its status takes.
POST_KEYS = {"tag": "tag", "tags": "tag", "author": "author", "authors": "author", "status": "status",
             "slug": "slug", "id": "id", "uuid": "uuid", "visibility": "visibility", "newsletter": "newsletter",
             "published_at": "published_at", "created_at": "created_at", "updated_at": "updated_at"}
POST_TIMES = frozenset({"published_at", "created_at", "updated_at"})
POST_STATUSES = ("draft", "scheduled", "published", "sent")
_SLUG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")
_SHOWN = 40  # characters of a refused filter quoted in its error
# Bounds on one filter (docs/audiences.md, "Limits"): the reference platform's own filters (its
# segments, a few labels and tiers) stay far below them; a deeper or longer filter is refused where
# it enters, before its recursion or its query can run away.
MAX_LENGTH = 20_000  # characters
MAX_DEPTH = 20  # parentheses inside one another
MAX_TERMS = 100  # `key:values` terms
MAX_VALUES = 1_000  # values, over all terms


class FilterError(ValueError):
    """The filter is outside the grammar; the message names what does not fit, in one line."""


@dataclass(frozen=True)
class Term:
    key: str  # status | label | tier (the other names read as these); a posts filter's POST_KEYS
    values: tuple[str, ...]
    negated: bool = False
    compare: str = ""  # a time key's >, >=, < or <= (its one value a time); "" is "any of the values"

    def __str__(self) -> str:
        if self.compare:
            return f"{self.key}:{self.compare}'{self.values[0]}'"
        values = self.values[0] if len(self.values) == 1 else f"[{','.join(self.values)}]"
        return f"{self.key}:{'-' if self.negated else ''}{values}"


@dataclass(frozen=True)
class And:
    parts: tuple[Node, ...]

    def __str__(self) -> str:
        return "+".join(f"({p})" if isinstance(p, Or) else str(p) for p in self.parts)


@dataclass(frozen=True)
class Or:
    parts: tuple[Node, ...]

    def __str__(self) -> str:
        return ",".join(str(p) for p in self.parts)


@dataclass(frozen=True)
class Everyone:
    def __str__(self) -> str:
        return "all"


Node = Term | And | Or | Everyone


@dataclass(frozen=True)
class _Token:
    kind: str  # a punctuation character, "word" or "end"
    text: str  # a quoted word without its quotes
    at: int
    quoted: bool = False


def _tokens(text: str, what: str = "recipient filter") -> list[_Token]:
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c.isspace():
            i += 1
        elif c in "<>":
            sign = text[i:i + 2] if text[i:i + 2] in _COMPARISONS else c
            out.append(_Token("compare", sign, i))
            i += len(sign)
        elif c in _WORD_START:
            start = i
            while i < len(text) and text[i] in _WORD:
                i += 1
            out.append(_Token("word", text[start:i], start))
        elif c in _PUNCTUATION:
            out.append(_Token(c, c, i))
            i += 1
        elif c == "'":
            word, end = _quoted_word(text, i, what)
            out.append(_Token("word", word, i, quoted=True))
            i = end
        elif c == '"':
            raise FilterError(f"{what} {_quoted(text)}: double quote at {i + 1}; the filter language "
                              "quotes with ' (label:'vip')")
        else:
            raise FilterError(f"{what} {_quoted(text)}: character {c!r} at {i + 1} is not part of a filter")
    out.append(_Token("end", "", len(text)))
    return out


def _quoted_word(text: str, start: int, what: str) -> tuple[str, int]:
    """The word quoted from `start` (a '), a backslash keeping the character after it, and where it ends."""
    chars, i = [], start + 1
    while i < len(text) and text[i] != "'":
        if text[i] == "\\" and i + 1 < len(text):
            i += 1
        chars.append(text[i])
        i += 1
    if i >= len(text):
        raise FilterError(f"{what} {_quoted(text)}: the quote at {start + 1} is not closed")
    if not chars:
        raise FilterError(f"{what} {_quoted(text)}: empty quotes at {start + 1}")
    return "".join(chars), i + 1


def _quoted(text: str) -> str:
    return repr(text if len(text) <= _SHOWN else text[:_SHOWN] + "…")


@dataclass(frozen=True)
class _Language:
    what: str  # the filter's name in its errors
    keys: dict[str, str]
    statuses: tuple[str, ...]
    times: frozenset[str] = frozenset()

    def keys_named(self) -> str:
        shown = [f"{k}:" for k in dict.fromkeys(self.keys.values())]
        return ", ".join(shown[:-1]) + f" or {shown[-1]}"


_MEMBERS = _Language("recipient filter", {**KEYS}, MEMBER_STATUSES)
_POSTS = _Language("posts filter", POST_KEYS, POST_STATUSES, POST_TIMES)


class _Parser:
    def __init__(self, text: str, language: _Language = _MEMBERS) -> None:
        self.text = text
        self.language = language
        self.what = language.what
        self.tokens = _tokens(text, self.what)
        self.i = 0
        self.depth = 0
        self.terms = 0
        self.values = 0

    def peek(self) -> _Token:
        return self.tokens[self.i]

    def take(self, kind: str, what: str) -> _Token:
        token = self.peek()
        if token.kind != kind:
            self.refuse(what)
        self.i += 1
        return token

    def refuse(self, what: str) -> NoReturn:
        token = self.peek()
        found = "the end" if token.kind == "end" else repr(token.text)
        raise FilterError(f"{self.what} {_quoted(self.text)}: expected {what} at {token.at + 1}, found {found}")

    def filter(self) -> Node:
        first = self.peek()
        if first.kind == "word" and not first.quoted and first.text.lower() == "all" and self.tokens[1].kind == "end":
            return Everyone()
        tree = self.or_()
        if self.peek().kind != "end":
            self.refuse("',', '+' or the end")
        return tree

    def or_(self) -> Node:
        parts = [self.and_()]
        while self.peek().kind == ",":
            self.i += 1
            parts.append(self.and_())
        return parts[0] if len(parts) == 1 else Or(tuple(parts))

    def and_(self) -> Node:
        parts = [self.atom()]
        while self.peek().kind == "+":
            self.i += 1
            parts.append(self.atom())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def atom(self) -> Node:
        if self.peek().kind == "(":
            self.depth += 1
            if self.depth > MAX_DEPTH:
                raise FilterError(f"{self.what} {_quoted(self.text)}: parentheses nested deeper than "
                                  f"{MAX_DEPTH} at {self.peek().at + 1}")
            self.i += 1
            inner = self.or_()
            self.take(")", "')'")
            self.depth -= 1
            return inner
        return self.term()

    def term(self) -> Term | And:
        self.terms += 1
        if self.terms > MAX_TERMS:
            raise FilterError(f"{self.what} {_quoted(self.text)}: more than {MAX_TERMS} terms")
        named = self.language.keys_named() if self.language is not _MEMBERS else "status:, label:, tier: or product:"
        key_token = self.take("word", f"a term ({named})")
        key = self.language.keys.get(key_token.text.lower()) if not key_token.quoted else None
        if key is None:
            raise FilterError(f"{self.what} {_quoted(self.text)}: unknown term {key_token.text!r} "
                              f"at {key_token.at + 1}; use {named}")
        self.take(":", f"':' after {key_token.text}")
        if key in self.language.times:
            return self.time_term(key)
        negated = self.peek().kind == "-"
        if negated:
            self.i += 1
        if self.peek().kind != "[":
            return Term(key, (self.value(key),), negated)
        self.i += 1
        values = [self.value(key)]
        joiner = self.peek().kind if self.peek().kind in ",+" and len(values) == 1 else ","
        if joiner == "+" and negated:
            self.refuse("',' or ']' (the reference has no -[a+b])")
        while self.peek().kind == joiner:
            self.i += 1
            values.append(self.value(key))
        self.take("]", f"'{joiner}' or ']'")
        values = list(dict.fromkeys(values))
        if joiner == "+" and len(values) > 1:  # all of: one term per value
            return And(tuple(Term(key, (value,)) for value in values))
        return Term(key, tuple(values), negated)

    def time_term(self, key: str) -> Term:
        """`key:>'TIME'` (or >=, <, <=, or none: that very time)."""
        compare = self.take("compare", "a comparison").text if self.peek().kind == "compare" else "="
        token = self.take("word", f"a time after {key}:{'' if compare == '=' else compare}")
        self.values += 1
        return Term(key, (token.text,), compare=compare)

    def value(self, key: str) -> str:
        self.values += 1
        if self.values > MAX_VALUES:
            raise FilterError(f"{self.what} {_quoted(self.text)}: more than {MAX_VALUES} values")
        token = self.take("word", f"a {key} value")
        if key == "status":
            statuses = self.language.statuses
            if token.text.lower() not in statuses:
                raise FilterError(f"{self.what} {_quoted(self.text)}: unknown status {token.text!r} at "
                                  f"{token.at + 1}; use {', '.join(statuses[:-1])} or {statuses[-1]}")
            return token.text.lower()
        if token.quoted and not _SLUG.fullmatch(token.text):
            raise FilterError(f"{self.what} {_quoted(self.text)}: the {key} {_quoted(token.text)} at "
                              f"{token.at + 1} is not a slug (letters, digits, _ and -)")
        return token.text


def parse(text: str | None) -> Node:
    """The filter's tree; an empty filter is refused (the reference platform's `all` means everyone)."""
    text = text or ""
    if not text.strip():
        raise FilterError("recipient filter is empty: use all, or terms such as status:-free, label:vip, tier:gold")
    if len(text) > MAX_LENGTH:
        raise FilterError(f"recipient filter {_quoted(text)}: longer than {MAX_LENGTH:,} characters")
    return _Parser(text).filter()


def parse_posts(text: str) -> Node:
    """A posts filter's tree (the Admin API's `filter` on posts): POST_KEYS, time keys compared."""
    if not text.strip():
        raise FilterError("posts filter is empty")
    if len(text) > MAX_LENGTH:
        raise FilterError(f"posts filter {_quoted(text)}: longer than {MAX_LENGTH:,} characters")
    return _Parser(text, _POSTS).filter()


def terms(tree: Node) -> list[Term]:
    """Every term of the tree, left to right."""
    if isinstance(tree, Term):
        return [tree]
    if isinstance(tree, (And, Or)):
        return [t for part in tree.parts for t in terms(part)]
    return []


def slugs(tree: Node, key: str) -> list[str]:
    """The label or tier slugs the tree names, each once: they must exist before a send."""
    return list(dict.fromkeys(v for t in terms(tree) if t.key == key for v in t.values))


def statuses_only(tree: Node) -> frozenset[str]:
    """The member statuses a tree of status terms selects (a block's data-gh-segment, the report's
    segments); a label or tier term is refused here, where only statuses can be judged."""
    if isinstance(tree, Everyone):
        return frozenset(MEMBER_STATUSES)
    if isinstance(tree, Term):
        if tree.key != "status":
            raise FilterError(f"{tree} is not a status term")
        chosen = frozenset(tree.values)
        return frozenset(MEMBER_STATUSES) - chosen if tree.negated else chosen
    sets = [statuses_only(part) for part in tree.parts]
    if isinstance(tree, And):
        return frozenset.intersection(*sets)
    return frozenset.union(*sets)

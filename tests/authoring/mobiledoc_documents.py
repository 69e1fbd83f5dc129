"""Mobiledoc documents (0.3.1) as the reference's older editor saved them: its sections and markups,
and every card with the same payloads as the Lexical cards (tests/authoring/lexical_documents.py)."""

from __future__ import annotations

import json

from tests.authoring.lexical_documents import CARDS as LEXICAL_CARDS

# Mobiledoc names two cards apart from Lexical, and an embed's kind is its `type`.
_NAMES = {"horizontalrule": "hr"}


def _payload(card: dict) -> dict:
    payload = {k: v for k, v in card.items() if k not in ("type", "version")}
    if card["type"] == "embed":
        payload["type"] = payload.pop("embedType")
    return payload


CARDS = {name: [_NAMES.get(name, name), _payload(card)] for name, card in LEXICAL_CARDS.items()}
CARDS["code"] = ["code", {"code": "print('<hi>')", "language": "python", "caption": "A line of code"}]

MARKUPS = [["strong"], ["em"], ["a", ["href", "https://example.com/read"]], ["code"]]
CORE_SECTIONS = [
    [1, "h2", [[0, [], 0, "A heading"]]],
    [1, "p", [[0, [], 0, "Plain, "], [0, [0], 1, "bold"], [0, [], 0, " and "], [0, [1], 1, "italic"],
              [0, [], 0, " and "], [0, [3], 1, "code"], [1, [], 0, 0], [0, [2], 1, "a link"]]],
    [1, "blockquote", [[0, [], 0, "A quoted line"]]],
    [3, "ul", [[[0, [], 0, "first"]], [[0, [], 0, "second"]]]],
    [3, "ol", [[[0, [], 0, "one"]]]],
    [1, "aside", [[0, [], 0, "An aside"]]],
]


def document(*cards: list, sections: list | None = None, markups: list | None = None,
             atoms: list | None = None) -> str:
    """A mobiledoc: the given sections, then one card section per card."""
    return json.dumps({"version": "0.3.1", "ghostVersion": "4.0", "atoms": atoms or [["soft-return", "", {}]],
                       "markups": markups if markups is not None else MARKUPS, "cards": list(cards),
                       "sections": (sections or []) + [[10, n] for n in range(len(cards))]})


def core() -> str:
    return document(sections=CORE_SECTIONS)


def every_card() -> str:
    return document(*CARDS.values(), sections=CORE_SECTIONS)

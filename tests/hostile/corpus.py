"""Hostile member data and headers: what a signup form, an import or an attacker may store.

Every promise about outside input is tested against these values (tests/hostile/), and the log-scan
test checks that none of them, in any encoding, reaches an output.
"""

from __future__ import annotations

PHISHING_NAME = 'Bob <a href="https://evil.example/x">Claim your refund</a>'

# Names that must reach a reader as text and never reach a log line.
NAMES = {
    "html": PHISHING_NAME,
    "script": "Eve <script>alert(1)</script><img src=x onerror=alert(2)>",
    "homoglyph": "Раураl Suрроrt",  # Cyrillic letters that read as "Paypal Support"
    "right-to-left": "Mallory \u202egnp.exe\u202c",  # shows as "Mallory exe.png"
    "quotes-and-commas": 'Smith, "Agent" O\'Brien',
    "10kb": "Longname " + "x" * 10_000,
}

# Addresses email-validator accepts that a careless parser would not.
STRANGE_ADDRESSES = {
    "quoted-local-part": '"john..doe"@hostile.example',
    "plus-addressing": "reader+news@hostile.example",
    "idn-domain": "leser@bücher.example",
    "unicode-local-part": "jürgen@hostile.example",
    "apostrophe": "o'connor@hostile.example",
    # Of the plain shape, with a domain longer than the plain one's bound: checked, and kept.
    "long-domain": "ivan@" + "news." * 12 + "hostile.example",
}

# What a stored address may hold that no recipient can: each row is left out of its batch. (The
# members table itself refuses an address without an @ in it, and PostgreSQL text cannot hold NUL.)
UNUSABLE_ADDRESSES = {
    "comma": "alice,bob@hostile.example",
    "crlf": "carol@hostile.example\r\nBcc: victim@hostile.example",
    "nul": "dave\x00@hostile.example",
    "two-ats": "erin@@hostile.example",
    "space": "frank smith@hostile.example",
    "no-domain-dot": "grace@localhost",
    # Of the plain shape but for a label longer than DNS allows (63 characters).
    "label-too-long": "heidi@" + "a" * 64 + ".hostile.example",
}

# Header values that must be refused where they enter, naming the field.
HOSTILE_SUBJECTS = {"crlf": "News\r\nBcc: everyone@hostile.example", "lf": "News\nX-Injected: yes", "nul": "News\x00"}
HOSTILE_SENDER_NAME = 'Weekly "News", Inc.'

"""The errors a person sees: each is one line in the domain's words, never a traceback."""


class PressroomError(Exception):
    """Something the operator must act on; the CLI prints its message and exits 1."""


class NotFound(PressroomError):
    """A named thing (email, post, outbox entry) does not exist."""


class BadInput(PressroomError):
    """A command or workflow input is malformed; nothing was written."""


# Arguments are echoed in messages; one of 130 KB must not flood the terminal.
LONGEST_WORD = 80


def shorten(text: str, limit: int = LONGEST_WORD) -> str:
    """`text`, or its head and tail around a count of what was left out."""
    text = str(text)
    if len(text) <= limit:
        return text
    keep = (limit - 20) // 2
    return f"{text[:keep]}…({len(text) - 2 * keep} more characters)…{text[-keep:]}"


def one_line(text: str) -> str:
    """The message on one line, every overlong word shortened."""
    words = " ".join(str(text).split()).split(" ")
    return " ".join(shorten(word) for word in words)

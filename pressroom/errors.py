"""The errors a person sees: each is one line in the domain's words, never a traceback."""


class PressroomError(Exception):
    """Something the operator must act on; the CLI prints its message and exits 1."""


class NotFound(PressroomError):
    """A named thing (email, post, outbox entry) does not exist."""


class BadInput(PressroomError):
    """A command or workflow input is malformed; nothing was written."""

"""Folders and files only their owner reads: the stack's passwords, keys and certificates."""

from __future__ import annotations

import os
from pathlib import Path


def private_folder(path: Path) -> Path:
    """A folder only its owner enters (0700), made so from the start."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.chmod(0o700)
    return path


def private_file(path: Path, text: str) -> Path:
    """A file only its owner reads (0600), never briefly wider while it is written."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # a file that existed keeps its mode through O_CREAT
    with os.fdopen(descriptor, "w") as file:
        file.write(text)
    return path

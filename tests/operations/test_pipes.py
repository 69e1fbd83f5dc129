"""In a pipe, a command's notes on stderr read as notes, whole, after the lines they are about."""

from __future__ import annotations

import asyncio
import sys

from tests.newsletter.conftest import seed_email
from tests.operations.test_waiting import ROOT, cli_env


async def test_notes_follow_the_lines_they_are_about_when_both_go_to_one_pipe(dev_env, settings, db):
    seeded = await seed_email(db, members=1)
    await db.execute("UPDATE emails SET status = 'failed', error = 'The email failed to send.' WHERE id = $1",
                     seeded.email_id)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "starter", "newsletter", "list", "--newsletter", seeded.newsletter_id, cwd=ROOT,
        env=cli_env(settings, dev_env), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    out, _ = await asyncio.wait_for(process.communicate(), 120)
    lines = out.decode().splitlines()
    assert process.returncode == 0, lines
    header = next(n for n, line in enumerate(lines) if line.startswith("email "))
    row = next(n for n, line in enumerate(lines) if line.startswith(seeded.email_id))
    # The note says it is one (no colour in a pipe to tell it from the answer), after the row it is about.
    note = next(n for n, line in enumerate(lines) if line.startswith(f"note: email {seeded.email_id} will not go out"))
    assert header < row < note, lines

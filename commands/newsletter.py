"""`pressroom newsletter …`: send an email, following it with a progress bar; preview it; send a test copy."""

from __future__ import annotations

import dataclasses
import time

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from commands import (
    AFTER_OPTION,
    JSON_OPTION,
    LIMIT_OPTION,
    SINCE_OPTION,
    console,
    plural,
    print_json,
    print_page,
    print_rows,
    repeated_filters,
    run_async,
    warn,
)
from operations.answers import EmailClicks, EmailReport, FailureReason, NewsletterStatus, OpensOverTime
from operations.authoring import retry_email
from operations.common import temporal_client
from operations.finding import list_page
from operations.newsletter import (
    cancel_newsletter,
    follow_newsletter,
    newsletter_status,
    preview_email,
    progress_words,
    resume_newsletter,
    send_test_email,
    start_newsletter,
)
from operations.reports import newsletter_report
from operations.waiting import no_answer_message, no_worker_message, process_age_seconds
from pressroom.errors import BadInput, PressroomError
from pressroom.readable import when
from workflows.newsletter_models import newsletter_workflow_id

app = typer.Typer(help="Send newsletters: one durable run per email.", no_args_is_help=True)


@app.command("send")
def newsletter_send(email_id: str = typer.Argument(..., help="The email to send (emails.id)."),
                    wait: bool = typer.Option(False, "--wait", help="Follow the send with a progress bar."),
                    as_json: bool = JSON_OPTION) -> None:
    """Send an email to every recipient, once; a second start finds the first run."""
    if as_json and wait:
        raise BadInput("give --json or --wait, not both (`newsletter status EMAIL_ID --json` follows a send)")

    async def work():
        client = await temporal_client()
        start = await start_newsletter(email_id, client=client)
        if as_json:
            print_json(dataclasses.asdict(start))
        else:
            console.print(start.message, highlight=False)
        if start.warning:  # said before the send goes far: most clients show it whole, Gmail clips it
            warn(start.warning)
        if as_json or not wait or (not start.started and not start.run_id):
            return None
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TextColumn("batches · {task.fields[recipients]} recipients"), TimeElapsedColumn(),
                      console=console) as bar:
            task = bar.add_task(f"email {email_id}", total=None, recipients="0")

            waiting = {"words": None}

            def describe() -> str:
                return f"email {email_id}" + (f" · {waiting['words']}" if waiting["words"] else "")

            def show(progress) -> None:
                bar.update(task, total=progress.batches_total or None, completed=progress.batches_sent
                           + progress.batches_failed, description=describe(),
                           recipients=f"{progress.recipients_sent:,}/{progress.recipients_total:,}")

            def wait_for(words) -> None:
                waiting["words"] = words
                bar.update(task, description=describe())

            outcome = await follow_newsletter(start.workflow_id, client=client, on_progress=show, say=warn,
                                              on_waiting=wait_for)
            if outcome.counts:
                c = outcome.counts
                bar.update(task, total=c.batches_total, completed=c.batches_submitted + c.batches_failed,
                           recipients=f"{c.recipients_submitted:,}/{c.recipients_total:,}")
            return outcome

    outcome = run_async(work())
    if outcome is not None:
        print_outcome(email_id, outcome)
        if outcome.status == "failed":
            raise PressroomError(f"email {email_id} failed: {outcome.message}")


def print_outcome(email_id: str, outcome) -> None:
    """An ended send in one line; a failed one then becomes an error (exit 1)."""
    console.print(f"email {email_id}: {outcome.status}" + (f" — {outcome.message}" if outcome.message else ""),
                  highlight=False)


def drift_note(status: NewsletterStatus) -> str:
    """The site's own recipient count, when the recipients written differed from it by 1% or more."""
    expected = status.recipients_expected
    if not expected:
        return ""
    return (f" (the site counted {expected:,}: {100 * (status.recipients - expected) / expected:+.1f}%, "
            "email_count corrected)")


@app.command("cancel")
def newsletter_cancel(email_id: str = typer.Argument(..., help="The email (emails.id)."),
                      by: str = typer.Option(None, "--by", help="Who cancels (default: your login)."),
                      wait: bool = typer.Option(False, "--wait", help="Wait until the send has stopped."),
                      as_json: bool = JSON_OPTION) -> None:
    """Stop an email's send between batches (batches already accepted stay sent); safe to repeat."""
    cancel = run_async(cancel_newsletter(email_id, by=by, wait=wait))
    if as_json:
        return print_json({"email_id": cancel.email_id, "status": cancel.status, "cancelled_by": cancel.by,
                           "cancelled_at": cancel.at, "message": cancel.message})
    console.print(cancel.message, highlight=False)


@app.command("resume")
def newsletter_resume(email_id: str = typer.Argument(..., help="The email (emails.id)."),
                      by: str = typer.Option(None, "--by", help="Who resumes (default: your login)."),
                      as_json: bool = JSON_OPTION) -> None:
    """Go on with a send paused for its early bounce or complaint rate; safe to repeat."""
    resumed = run_async(resume_newsletter(email_id, by=by))
    if as_json:
        return print_json(resumed.model_dump(mode="json"))
    console.print(resumed.message, highlight=False)
@app.command("retry")
def newsletter_retry(email_id: str = typer.Argument(..., help="The failed email (emails.id)."),
                     recipient_filter: str = typer.Option(None, "--filter", metavar="FILTER",
                                                          help="The corrected recipient filter."),
                     subject: str = typer.Option(None, "--subject", help="The corrected subject."),
                     as_json: bool = JSON_OPTION) -> None:
    """Correct a failed email (filter, subject) and send it again."""
    retry = run_async(retry_email(email_id, recipient_filter=recipient_filter, subject=subject))
    if as_json:
        return print_json(retry.model_dump())
    console.print(retry.message, highlight=False)


@app.command("status")
def newsletter_status_command(email_id: str = typer.Argument(..., help="The email (emails.id)."),
                              as_json: bool = JSON_OPTION) -> None:
    """The email's state, its batches, and its run."""
    # The budget counts from the process's start: on a busy machine, starting Python takes seconds.
    started = time.monotonic() - process_age_seconds()
    status = run_async(newsletter_status(email_id, command_started=started))
    if as_json:
        return print_json(status)
    run = status.run
    console.print(f"email {email_id}: {status.status}" + (f" — {status.error}" if status.error else ""),
                  highlight=False)
    b = status.batches
    console.print(f"batches: {b.submitted}/{b.total} submitted, {b.failed} failed; "
                  f"{status.recipients:,} recipients" + drift_note(status), highlight=False)
    if status.skipped_recipients:
        console.print(f"left out: {status.skipped_recipients:,} members whose address cannot be a recipient "
                      f"(pressroom members list --left-out-of {email_id} --reason unusable-address)",
                      highlight=False)
    console.print(f"run: {status.workflow_id} " + (f"{run.status} (run {run.run_id}, task queue "
                                                   f"{run.task_queue})" if run else "unknown: Temporal "
                                                   "is unreachable" if status.temporal else "never started"),
                  highlight=False)
    if status.progress:
        console.print(f"now: {progress_words(status.progress, counts=False)}", highlight=False)
    if run and run.status == "running":
        console.print(f"waits for: {status.waiting_for or 'nothing (its batches are being sent)'}",
                      highlight=False)
    if run and run.worker_polling is False:
        warn(no_worker_message(run.task_queue))
    elif run and run.worker_answering is False:
        warn(no_answer_message(run.task_queue, run.query_seconds))
    if status.temporal:
        warn(status.temporal)


@app.command("follow")
def newsletter_follow(email_id: str = typer.Argument(..., help="The email (emails.id)."),
                      as_json: bool = JSON_OPTION) -> None:
    """Follow the email's run until it ends; print its outcome."""
    async def work():
        client = await temporal_client()
        last: dict[str, str] = {}

        def line(text: str) -> None:
            if not as_json and last.get("line") != text:
                console.print(text, highlight=False)
                last["line"] = text

        def show(progress) -> None:
            line(progress_words(progress))

        def wait_for(words) -> None:
            if words and words.startswith("no worker"):
                line(f"waits for: {words}")
        return await follow_newsletter(newsletter_workflow_id(email_id), client=client, on_progress=show,
                                       say=warn, on_waiting=wait_for)

    outcome = run_async(work())
    if as_json:
        print_json(outcome.model_dump())
    else:
        print_outcome(email_id, outcome)
    if outcome.status == "failed":
        raise PressroomError(f"email {email_id} failed: {outcome.message}")


@app.command("preview")
def newsletter_preview(email_id: str = typer.Argument(..., help="The email (emails.id)."),
                       member: str = typer.Option(None, "--member", metavar="ID|ADDRESS",
                                                  help="Show what this member (id or address) gets."),
                       segment: str = typer.Option(None, "--segment", help="free or paid: a reader with no name."),
                       text: bool = typer.Option(False, "--text", help="The plain-text part instead of the HTML.")
                       ) -> None:
    """Print what a member gets (subject, then the HTML or the text); nothing is sent."""
    preview = run_async(preview_email(email_id, member_id=member, segment=segment))
    sizes = ", ".join(f"{segment} {size:,} bytes" for segment, size in preview.sizes.items())
    print(f"Subject: {preview.subject}\nX-Preview-For: {preview.reader}\nX-Size-Per-Segment: {sizes}\n")
    if preview.warning:
        warn(preview.warning)
    print(preview.text if text else preview.html)


@app.command("test")
def newsletter_test(email_id: str = typer.Argument(..., help="The email (emails.id)."),
                    to: str = typer.Option(..., "--to", help="The address that gets the test copy."),
                    segment: str = typer.Option(None, "--segment", help="free or paid; by default the member's own "
                                                                        "or paid.")) -> None:
    """Send one untracked copy with "[TEST]" in the subject; the email's status, batches and statistics stay."""
    message_id = run_async(send_test_email(email_id, to, segment=segment))
    console.print(f"test copy of email {email_id} sent ({message_id})", highlight=False)


@app.command("list")
def newsletter_list(status: str = typer.Option(None, "--status",
                                               metavar="pending|submitting|submitted|failed|cancelled",
                                               help="Only emails in this state."),
                    newsletter: str = typer.Option(None, "--newsletter", metavar="ID|SLUG",
                                                   help="Only this newsletter's emails."),
                    since: str = SINCE_OPTION, limit: int = LIMIT_OPTION, after: str = AFTER_OPTION,
                    as_json: bool = JSON_OPTION) -> None:
    """Emails, newest first, a page at a time, with the figures analytics fetched so far."""
    page = run_async(list_page("email", status=status, newsletter=newsletter, since=since, after=after, limit=limit))
    if as_json:
        return print_json(page)
    again = repeated_filters(status=status, newsletter=newsletter, since=since)
    print_page(page, {"email_id": "email", "subject": "subject", "status": "status", "newsletter": "newsletter",
                      "post_id": "post", "recipients": "recipients", "delivered": "delivered", "opened": "opened",
                      "failed": "failed", "created_at": "created", "error": "why it failed"},
               empty="no emails match", more=f"pressroom newsletter list{again}")
    for row in page.items:
        if row.will_not_go_out:
            warn(f"email {row.email_id} will not go out: {row.will_not_go_out}")


LEFT_OUT_WORDS = {"suppressed-bounce": "suppressed after a bounce",
                  "suppressed-complaint": "suppressed after a complaint",
                  "disabled": "email disabled", "not-subscribed": "not subscribed to the newsletter",
                  "not-in-filter": "not in the email's filter", "other": "other (joined the audience later)"}


@app.command("report")
def newsletter_report_command(email_id: str = typer.Argument(..., help="The email (`newsletter list` shows them)."),
                              as_json: bool = JSON_OPTION) -> None:
    """How an email did: delivered, opened, failed, unsubscribed, complained; why members were left out;
    opens over time."""
    report = run_async(newsletter_report(email_id))
    if as_json:
        return print_json(report)
    print_report(report)


def failure_words(failure: FailureReason) -> str:
    """A failure's codes and message, each code said once (FailureReason.words)."""
    return failure.words()


def print_report(r: EmailReport) -> None:
    console.print(f"email {r.email_id} \"{r.subject}\": {r.status}"
                  + (f", sent {when(r.submitted_at)}" if r.submitted_at else "")
                  + (f" by {r.cancelled_by} at {when(r.cancelled_at)}" if r.cancelled_by else "")
                  + f" (post {r.post_id}, newsletter {r.newsletter or '-'}, filter {r.recipient_filter})",
                  highlight=False)
    if r.error:
        console.print(f"why: {r.error}", highlight=False, markup=False)
    notes = {"sent": "accepted by the provider",
             "failed": f"permanent {r.failed_permanent:,}, temporary {r.failed_temporary:,}",
             "unsubscribed": "no longer subscribed to the newsletter; through this email: "
                             f"{r.unsubscribed_through_email.link:,} by its link, "
                             f"{r.unsubscribed_through_email.provider:,} by the provider"}
    rows = [["", "members", "of sent", ""], ["recipients", f"{r.recipients:,}", "", ""],
            ["sent", f"{r.sent:,}", "", notes["sent"]]]
    for key in ("delivered", "opened", "failed", "unsubscribed", "complained"):
        rate = getattr(r.rates, key)
        rows.append([key, f"{getattr(r, key):,}", "-" if rate is None else f"{rate:.1f}%", notes.get(key, "")])
    print_rows(rows)
    reputation = r.reputation
    if reputation.hard_bounce_rate is not None:
        complaints = reputation.complaint_rate
        console.print(f"reputation: hard bounces {reputation.hard_bounce_rate:.2f}% of sent, complaints "
                      + ("-" if complaints is None else f"{complaints:.2f}%") + " of delivered (mailbox providers "
                      "ask for complaints under 0.3%; `pressroom check` reads the last 30 days)", highlight=False)
    if r.segments:
        console.print("[bold]per segment[/bold]")
        print_rows([["segment", "recipients", "delivered", "opened", "unsubscribed"]]
                   + [[seg.segment] + [f"{getattr(seg, k):,}" for k in ("recipients", "delivered", "opened",
                                                                         "unsubscribed")]
                      for seg in r.segments])
    if r.top_failures:
        console.print("[bold]top failure reasons[/bold]")
        for f in r.top_failures:
            console.print(f"  {f.n:>8,}  {f.severity:<9} {failure_words(f)}", highlight=False, markup=False)
    left_out = {reason: n for reason, n in r.left_out.items() if n}
    if left_out:
        console.print(f"[bold]left out[/bold]: {plural(sum(left_out.values()), 'member')} who joined before the email "
                      "was made did not get it", highlight=False)
        for reason, n in left_out.items():
            console.print(f"  {n:>8,}  {LEFT_OUT_WORDS[reason]:<34} pressroom members list --left-out-of "
                          f"{r.email_id} --reason {reason}", highlight=False, markup=False)
    else:
        console.print("left out: nobody", highlight=False)
    print_opens_chart(r.opens_over_time)
    print_clicks(r.clicks)


def print_clicks(c: EmailClicks) -> None:
    """Members who clicked, with the rate over delivered, the top links, and what was set apart."""
    rate = "" if c.rate is None else f" ({c.rate:.1f}% of delivered)"
    console.print(f"[bold]clicked[/bold]: {plural(c.clicked, 'member')}{rate}, {plural(c.clicks, 'click')}"
                  + (f" ({c.without_member:,} through forwarded links)" if c.without_member else ""),
                  highlight=False)
    if c.set_apart:
        why = ", ".join(f"{n:,} by {reason}" for reason, n in sorted(c.set_apart_by.items()))
        console.print(f"set apart as mail scanners' (in no figure above): {plural(c.set_apart, 'request')} "
                      f"({why})", highlight=False)
    if c.top_links:
        print_rows([["link", "members", "clicks"]]
                   + [[link.target, f"{link.clickers:,}", f"{link.clicks:,}"] for link in c.top_links])


def print_opens_chart(opens: OpensOverTime, width: int = 40) -> None:
    """Opens per time bucket as bars, one line per bucket."""
    if not opens.buckets or opens.bucket_seconds is None:
        return console.print("opens over time: no opens recorded yet (`pressroom analytics run --wait` fetches them)",
                             highlight=False)
    seconds = opens.bucket_seconds
    unit = (f"{seconds // 86400} d" if seconds >= 86400 else f"{seconds // 3600} h" if seconds >= 3600
            else f"{seconds // 60} min" if seconds >= 60 else f"{seconds} s")
    console.print(f"[bold]opens over time[/bold] (per {unit})")
    top = max(b.opens for b in opens.buckets)
    for bucket in opens.buckets:
        eighths = round(width * 8 * bucket.opens / top) if top else 0
        bar = "█" * (eighths // 8) + ("", "▏", "▎", "▍", "▌", "▋", "▊", "▉")[eighths % 8]
        console.print(f"  {when(bucket.at)}  {bar:<{width}} {bucket.opens:,}", highlight=False, markup=False)

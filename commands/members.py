"""`pressroom members …`: add a member (their welcome email goes out through the outbox), list them, show one."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from activities.outbox import outbox_workflow_id
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
from operations.answers import MemberProfile
from operations.finding import list_page
from operations.member_export import export_members
from operations.member_import import ROWS_SHOWN, import_members
from operations.members import (
    add_member,
    delete_member,
    member_profile,
    resubscribe_member,
    unsubscribe_member,
    update_member,
)
from operations.reports import left_out_members
from pressroom.errors import BadInput
from pressroom.readable import when

app = typer.Typer(help="Members of the site.", no_args_is_help=True)


@app.command("add")
def members_add(email: str = typer.Argument(..., help="The member's e-mail address."),
                name: str = typer.Option(None, "--name", metavar="TEXT", help="The member's name."),
                status: str = typer.Option("free", "--status", metavar="free|paid|comped", help="Their status."),
                labels: list[str] = typer.Option(None, "--label", metavar="NAME",
                                                 help="A label by name or slug (made if new, with that name); "
                                                      "repeat for more."),
                tiers: list[str] = typer.Option(None, "--tier", metavar="SLUG",
                                                help="A tier (one of the site's); repeat for more."),
                welcome: bool = typer.Option(False, "--welcome",
                                             help="Send their welcome email (none unless asked, as the reference).")
                ) -> None:
    """Add a member; with --welcome, their welcome email (paid for comped members) goes out through the outbox."""
    added = run_async(add_member(email, name, status=status, labels=labels or (), tiers=tiers or (),
                                 welcome=welcome))
    welcome_line = f"; welcome email queued ({outbox_workflow_id(added.welcome_key)})" if added.welcome_key else \
        "; no welcome email (--welcome sends one)" if not welcome else "; no welcome email"
    console.print(f"member {added.member_id} added{welcome_line}", highlight=False)


@app.command("resubscribe")
def members_resubscribe(member: str = typer.Argument(..., metavar="ID|ADDRESS",
                                                     help="The member's id or address.")) -> None:
    """Mail a member again whom the site subscribed again: off Mailgun's suppression lists, and Pressroom's."""
    done = run_async(resubscribe_member(member))
    lists = "; ".join(f"{domain}: {', '.join(tables)}" for domain, tables in done.removed.items() if tables)
    console.print(f"member {done.member_id} resubscribed: "
                  + (f"removed from Mailgun's {lists}" if lists else "on none of Mailgun's suppression lists")
                  + (f"; Pressroom's {done.suppression} suppression lifted" if done.suppression else ""),
                  highlight=False)


@app.command("update")
def members_update(member: str = typer.Argument(..., metavar="ID|ADDRESS", help="The member's id or address."),
                   name: str = typer.Option(None, "--name", metavar="TEXT", help="Their name (\"\" clears it)."),
                   status: str = typer.Option(None, "--status", metavar="free|paid|comped", help="Their status."),
                   newsletter: list[str] = typer.Option([], "--newsletter", metavar="ID|SLUG",
                                                        help="Subscribe them to this newsletter (repeatable)."),
                   no_newsletter: list[str] = typer.Option([], "--no-newsletter", metavar="ID|SLUG",
                                                           help="Take them off this newsletter (repeatable)."),
                   label: list[str] = typer.Option([], "--label", metavar="NAME",
                                                   help="Give them this label (by name or slug), made with that "
                                                        "name if the site has none (repeatable)."),
                   no_label: list[str] = typer.Option([], "--no-label", metavar="NAME",
                                                      help="Take this label off them (repeatable)."),
                   as_json: bool = JSON_OPTION) -> None:
    """Change a member's name, status, newsletters or labels; every input is checked before anything is written."""
    done = run_async(update_member(member, name=name, status=status, newsletters=newsletter,
                                   no_newsletters=no_newsletter, labels=label, no_labels=no_label))
    if as_json:
        return print_json({"member_id": done.member_id, "changed": done.changed, "subscribed": done.subscribed,
                           "unsubscribed": done.unsubscribed, "labels": done.labels})
    if not done.changed:
        return console.print(f"member {done.member_id} unchanged (it already read so)", highlight=False)
    console.print(f"member {done.member_id} updated: {', '.join(done.changed)}"
                  + (f"; subscribed to {', '.join(done.subscribed)}" if done.subscribed else "")
                  + (f"; unsubscribed from {', '.join(done.unsubscribed)}" if done.unsubscribed else "")
                  + (f"; labels now {', '.join(done.labels) or 'none'}" if "labels" in done.changed else ""),
                  highlight=False)


@app.command("delete")
def members_delete(member: str = typer.Argument(..., metavar="ID|ADDRESS", help="The member's id or address."),
                   yes: bool = typer.Option(False, "--yes", help="Delete without asking."),
                   as_json: bool = JSON_OPTION) -> None:
    """Delete a member and their personal data; records of sent emails keep their id, never their address."""
    if not yes:
        if not sys.stdin.isatty():
            raise BadInput("members delete asks before deleting; give --yes to delete without asking")
        typer.confirm(f"Delete member {member} and their personal data? This cannot be undone", abort=True)
    done = run_async(delete_member(member))
    if as_json:
        return print_json({"member_id": done.member_id, "deleted": True, "suppression": done.suppression,
                           "recipients_cleared": done.recipients_cleared,
                           "recipients_removed": done.recipients_removed})
    console.print(f"member {done.member_id} deleted; {plural(done.recipients_cleared, 'email recipient record')} "
                  "kept by id with the address and name cleared"
                  + (f", {plural(done.recipients_removed, 'recipient')} of unsent batches removed"
                     if done.recipients_removed else "")
                  + (f"; their suppression {done.suppression}" if done.suppression else ""), highlight=False)


@app.command("import")
def members_import(file: str = typer.Argument(..., metavar="FILE.csv",
                                             help="Members in the reference platform's export format, or a "
                                                  "Mailchimp export (CSV)."),
                   welcome: bool = typer.Option(False, "--welcome", help="Queue the welcome email of each member "
                                                                         "added (none without it)."),
                   dry_run: bool = typer.Option(False, "--dry-run", help="Check every row and report what an import "
                                                                         "would do; write nothing."),
                   as_json: bool = JSON_OPTION) -> None:
    """Add or update members from a CSV export: every row checked; refused rows reported by line and why."""
    errors = Console(stderr=True)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=errors, disable=not errors.is_terminal, transient=True) as bar:
        tasks = {"read": bar.add_task("reading rows", total=None), "write": bar.add_task("writing", total=None)}

        def progress(phase: str, done: int, total: int) -> None:
            bar.update(tasks[phase], completed=done, total=total or None)

        report = run_async(import_members(file, welcome=welcome, dry_run=dry_run, progress=progress))
    if as_json:
        return print_json(asdict(report))
    for line in import_summary(report, welcome=welcome):
        console.print(line, highlight=False, markup=False)


def import_summary(r, *, welcome: bool) -> list[str]:
    """The import's report in lines: what was read, done (or would be, in a dry run), and refused."""
    verb = "would import" if r.dry_run else "imported"
    lines = [f"{verb} {r.file} ({r.format}): {plural(r.rows, 'row')}: {r.added:,} added, {r.updated:,} updated, "
             f"{r.unchanged:,} unchanged, {len(r.refused):,} refused"]
    lines += [f"  line {refused['line']}: {refused['reason']}" for refused in r.refused[:ROWS_SHOWN]]
    if len(r.refused) > ROWS_SHOWN:
        lines.append(f"  and {len(r.refused) - ROWS_SHOWN:,} more refused rows (--json lists them all)")
    if r.labels_made or r.labels_given:
        lines.append(f"labels: {r.labels_given:,} given to members; {plural(r.labels_made, 'label')} the site "
                     "did not have made")
    if r.tiers_given:
        lines.append(f"tiers: {r.tiers_given:,} given to members")
    if r.comped_default_tier:
        lines.append(f"{plural(r.comped_default_tier, 'complimentary member')} given the site's default tier")
    if r.comped_without_tier:
        lines.append(f"{plural(r.comped_without_tier, 'complimentary member')} without a tier: the site has no "
                     "active paid tier")
    if r.paid_stripe:
        lines.append(f"{plural(r.paid_stripe, 'member')} with a Stripe customer imported paid, with their tiers")
    if r.stripe_without_tier:
        shown = ", ".join(str(line) for line in r.stripe_without_tier[:ROWS_SHOWN])
        lines.append(f"{plural(len(r.stripe_without_tier), 'member')} with a Stripe customer but no tier imported "
                     f"free (Pressroom cannot ask Stripe for a subscription): lines {shown}"
                     + (", …" if len(r.stripe_without_tier) > ROWS_SHOWN else ""))
    if r.created_in_future:
        lines.append(f"{plural(r.created_in_future, 'member')} created in the future given the import's time")
    if r.names_changed:
        lines.append(f"{plural(r.names_changed, 'name')} with line breaks or tabs imported with spaces instead")
    if r.ignored_columns:
        lines.append(f"columns not imported: {', '.join(r.ignored_columns)}")
    if r.suppressions_restored:
        lines.append(f"{plural(r.suppressions_restored, 'suppression')} of addresses deleted before and "
                     "imported again restored")
    lines.append(f"{plural(r.welcome_queued, 'welcome email')} queued" if welcome else
                 "no welcome emails queued (--welcome queues them for the members added)")
    if r.dry_run:
        lines.append("dry run: nothing was written")
    return lines


@app.command("export")
def members_export(file: str = typer.Argument("-", metavar="[FILE.csv]",
                                             help="Where to write (default: standard output)."),
                   recipient_filter: str = typer.Option(None, "--filter", metavar="FILTER",
                                                        help="Only these members, in the recipient filter's "
                                                             "language (label:vip, status:-free, …)."),
                   as_json: bool = JSON_OPTION) -> None:
    """Write members in the reference platform's CSV export format, which its importer (and ours) reads."""
    done = run_async(export_members(file, recipient_filter=recipient_filter))
    # The file may be standard output: the summary then goes to stderr.
    out = Console(stderr=True) if file == "-" else console
    if as_json:
        out.print(json.dumps({"file": done.file, "members": done.members, "filter": done.filter,
                              "paid_without_tier": done.paid_without_tier}), highlight=False, markup=False)
        return
    out.print(f"exported {plural(done.members, 'member')}" + (f" to {done.file}" if file != "-" else "")
              + (f" (filter {done.filter})" if done.filter else ""), highlight=False, markup=False)
    if done.paid_without_tier:
        warn(f"{plural(done.paid_without_tier, 'paid member')} without a tier: the format says paid only with a "
             "tier or a Stripe customer, so an import reads them free")


@app.command("list")
def members_list(status: str = typer.Option(None, "--status", metavar="free|paid|comped", help="Only this status."),
                 newsletter: str = typer.Option(None, "--newsletter", metavar="ID|SLUG",
                                                help="Only subscribers of this newsletter."),
                 label: str = typer.Option(None, "--label", metavar="SLUG", help="Only members with this label."),
                 tier: str = typer.Option(None, "--tier", metavar="SLUG",
                                          help="Only members of this tier (whose tier has not ended)."),
                 since: str = SINCE_OPTION,
                 left_out_of: str = typer.Option(None, "--left-out-of", metavar="EMAIL_ID",
                                                 help="The members this email was not sent to, with why."),
                 reason: str = typer.Option(None, "--reason", metavar="REASON",
                                            help="With --left-out-of: suppressed-bounce, suppressed-complaint, "
                                                 "disabled, not-subscribed, not-in-filter or other."),
                 limit: int = LIMIT_OPTION, after: str = AFTER_OPTION, as_json: bool = JSON_OPTION) -> None:
    """Members, newest first, a page at a time; or those an email left out, and why."""
    if left_out_of is not None:
        page = run_async(left_out_members(left_out_of, reason=reason, after=after, limit=limit))
        if as_json:
            return print_json(page)
        return print_page(page, {"member_id": "member", "email": "address", "status": "status", "reason": "why",
                                 "suppressed_by": "suppressed after email", "created_at": "joined"},
                          empty=f"email {left_out_of} left nobody out" + (f" for {reason}" if reason else ""),
                          more=f"pressroom members list --left-out-of {left_out_of}"
                               + (f" --reason {reason}" if reason else ""))
    page = run_async(list_page("member", status=status, newsletter=newsletter, since=since, after=after,
                               limit=limit, label=label, tier=tier))
    if as_json:
        return print_json(page)
    print_page(page, {"member_id": "member", "email": "address", "name": "name", "status": "status",
                      "suppressed": "suppressed", "email_disabled": "disabled", "email_count": "emails",
                      "email_open_rate": "open %", "created_at": "joined"},
               empty="no members match",
               more="pressroom members list" + repeated_filters(status=status, newsletter=newsletter, label=label,
                                                                tier=tier, since=since))


@app.command("show")
def members_show(member: str = typer.Argument(..., metavar="ID|ADDRESS", help="The member's id or address."),
                 emails: int = typer.Option(10, "--emails", min=0, max=1000,
                                            help="How many of their last emails (0: none)."),
                 as_json: bool = JSON_OPTION) -> None:
    """One member: status, note, subscriptions, suppression and why, outbox entries, and their last emails."""
    profile = run_async(member_profile(member, emails=emails))
    if as_json:
        return print_json(profile)
    p = profile
    console.print(f"member {p.member_id}: {p.email}" + (f" ({p.name})" if p.name else ""), highlight=False)
    console.print(f"status: {p.status}; joined {when(p.created_at)}; "
                  f"{'email disabled' if p.email_disabled else 'email enabled'}", highlight=False)
    if p.note:  # outside input, of several lines: shown indented, what a terminal would act on blanked
        lines = "".join(c if c.isprintable() or c == "\n" else " " for c in p.note).splitlines()
        console.print("note: " + "\n      ".join(lines), highlight=False, markup=False)
    open_rate = (f"{p.email_open_rate}%" if p.email_open_rate is not None
                 else "none yet (shown once 5 emails with open tracking were received)")
    console.print(f"received {plural(p.email_count, 'email')}, opened {p.email_opened_count:,}; "
                  f"open rate {open_rate}; last seen {when(p.last_seen_at) if p.last_seen_at else 'never'}",
                  highlight=False)
    s = p.suppression
    console.print("suppressed: no" if s is None else
                  f"suppressed: yes, after a {'complaint' if s.reason == 'spam' else 'bounce'} "
                  f"on {when(s.created_at)}" + (f" (email {s.email_id})" if s.email_id else "")
                  + "; newsletters are not sent to this address", highlight=False)
    tiers = [t.slug + (f" (ended {when(t.expiry_at)})" if t.expired else
                       f" (until {when(t.expiry_at)})" if t.expiry_at else "") for t in p.tiers]
    console.print(f"labels: {', '.join(p.labels) or 'none'}; tiers: {', '.join(tiers) or 'none'}",
                  highlight=False, markup=False)
    subscribed = [n.slug for n in p.subscriptions if n.subscribed]
    other = [n.slug for n in p.subscriptions if not n.subscribed]
    console.print(f"subscribed to: {', '.join(subscribed) or 'no newsletter'}"
                  + (f"; not to: {', '.join(other)}" if other else ""), highlight=False)
    for n in p.subscriptions:
        if n.left_at is not None:
            console.print(f"left {n.slug} {when(n.left_at)} by {LEFT_BY.get(n.left_by or '', n.left_by)}"
                          + (f" (email {n.left_through_email})" if n.left_through_email else ""),
                          highlight=False)
    for entry in p.outbox:
        console.print(f"outbox {entry.outbox_id}: {entry.event_type} {entry.status} "
                      f"({plural(entry.attempts, 'attempt')}"
                      + (f", last error {entry.last_error_code}" if entry.last_error_code else "")
                      + f"), created {when(entry.created_at)}", highlight=False)
    for sent in p.automated_emails:
        console.print(f"automated email {sent.slug}: {sent.send_outcome or 'not sent'} "
                      f"({when(sent.created_at)})", highlight=False)
    for run in p.automation_runs:
        console.print(f"automation run {run.id}: {run.status}" + (f" ({run.exit_reason})" if run.exit_reason else "")
                      + ", steps: " + ", ".join(f"{s.type} {s.status}" for s in run.steps), highlight=False,
                      markup=False)
    print_member_clicks(p)
    if not emails:
        return
    if not p.emails:
        return console.print("no newsletter emails yet", highlight=False)
    console.print("[bold]last emails[/bold]")
    rows = [["email", "subject", "made", "what happened", "when"]]
    for e in p.emails:
        moment = e.complained_at or e.failed_at or e.opened_at or e.delivered_at or e.sent_at
        outcome = e.outcome + (f": {e.failure_words()}" if e.failure else "")
        rows.append([e.email_id, e.subject or "", when(e.created_at), outcome, when(moment)])
    print_rows(rows)


def print_member_clicks(p: MemberProfile) -> None:
    """Their last clicks on newsletters' links, a scanner's marked as such."""
    if not p.clicks:
        return console.print("clicks: none", highlight=False)
    console.print("[bold]last clicks[/bold]")
    print_rows([["when", "email", "link", ""]]
               + [[when(c.at), c.email_id or "-", c.target, f"scanner ({c.scanner})" if c.scanner else ""]
                  for c in p.clicks])


LEFT_BY = {"link": "their unsubscribe link", "provider": "the provider's unsubscribe event", "operator": "an operator"}


@app.command("unsubscribe")
def members_unsubscribe(member: str = typer.Argument(..., metavar="ID|ADDRESS", help="The member's id or address."),
                        newsletter: str = typer.Option(None, "--newsletter", metavar="ID|SLUG",
                                                       help="Only this newsletter (default: every newsletter)."),
                        as_json: bool = JSON_OPTION) -> None:
    """Unsubscribe a member the way their own link does (recorded as an operator's); safe to repeat."""
    done = run_async(unsubscribe_member(member, newsletter))
    if as_json:
        return print_json(asdict(done))
    what = f"newsletter {done.newsletter_id}" if done.newsletter_id else "every newsletter"
    console.print(f"member {done.member_id} unsubscribed from {what}: "
                  + (f"{plural(done.removed, 'subscription')} removed" if done.removed else "already not subscribed"),
                  highlight=False)

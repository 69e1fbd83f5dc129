"""Benchmark: rendering a newsletter body per segment, and one batch's recipient variables (not a test).

Pure CPU, no servers: a post of `--paragraphs` personalised paragraphs with a paid-only block and a
members-only marker, rendered for each segment (what a worker does once per email and segment; the
body cache keeps it), against the raw HTML5 parse of the same post in the same run; then the
Mailgun recipient variables of a batch of `--recipients` members (what every batch does). Each is
measured without and with click tracking (every link rewritten through a redirect, docs/clicks.md).
Last, the designed email against the body alone, for the post with every card and 40 images.

    .venv/bin/python bench/rendering.py --paragraphs 400 --recipients 1000
    .venv/bin/python bench/rendering.py --paragraphs 400 --recipients 100000 --runs 3
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from operations.authoring import post_lexical
from pressroom.email_rendering import FREE, NOT_FREE, EmailContent, _parse, member_values, render
from pressroom.email_template import EmailTemplate
from tests.authoring import lexical_documents

PARAGRAPH = ('<p>Hello %%{first_name "there"}%%, some <b>text</b> with '
             '<a href="https://site.test/r?u=%%{uuid}%%">a link</a> and '
             '<a href="https://example.com/story/{n}">a story</a>.</p>')  # one distinct target a paragraph


def best_of(runs: int, work) -> float:
    best = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paragraphs", type=int, default=400)
    parser.add_argument("--recipients", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    def paragraphs(count: int, first: int) -> str:
        return "".join(PARAGRAPH.replace("{n}", str(first + n)) for n in range(count))

    html = (paragraphs(args.paragraphs // 10, 0) + '<div data-gh-segment="status:-free"><p>Paid bonus</p></div>'
            "<!--members-only-->" + paragraphs(args.paragraphs, args.paragraphs))
    untracked = EmailContent(email_id="e1", subject='Issue for %%{first_name "you"}%%', html=html,
                             visibility="paid", post_url="https://site.test/p/",
                             upgrade_url="https://site.test/#/portal/account/plans", site_url="https://site.test")
    print(f"post: {len(html.encode()):,} bytes, {args.paragraphs + args.paragraphs // 10:,} paragraphs")
    parse = best_of(args.runs, lambda: _parse(html).body.inner_html)
    print(f"raw parse + serialise:      {parse * 1000:8.1f} ms")
    members = [dict(name=f"Member {n}", email=f"member{n}@example.com", uuid=f"00000000-0000-0000-0000-{n:012d}",
                    status="paid") for n in range(args.recipients)]
    for track in (False, True):
        content = dataclasses.replace(untracked, track_clicks=track)
        print("with every link through a redirect (clicks tracked):" if track else "links as written:")
        for segment in (FREE, NOT_FREE):
            seconds = best_of(args.runs, lambda: render(content, segment))  # noqa: B023 - measured here
            rendered = render(content, segment)
            print(f"  render {segment:<13}      {seconds * 1000:8.1f} ms  ({rendered.size:,} bytes of body, "
                  f"{len(rendered.links):,} redirects)")

        rendered = render(content, NOT_FREE)

        def batch() -> dict:
            return {m["email"]: rendered.recipient_variables(member_values(  # noqa: B023 - measured here
                **m, site_url="https://site.test", link_secret="bench", email_id="e1")) for m in members}

        seconds = best_of(args.runs, batch)
        size = len(json.dumps(batch(), separators=(",", ":")))
        print(f"  recipient variables, {args.recipients:,} members: {seconds * 1000:8.1f} ms  "
              f"({size / 1024:,.0f} KiB as sent)")

    # The designed email (pressroom/email_template.py) against the body alone: the same post with
    # every card of the reference's editor and 40 image cards (Lexical, rendered for email once, when
    # the post is saved), per segment (once per worker and segment) and per batch (what each adds).
    document = lexical_documents.document(*lexical_documents.CORE, *lexical_documents.CARDS.values(), *[
        {**lexical_documents.CARDS["image"], "src": f"https://cdn.test/{n}.jpg", "caption": f"Picture {n}"}
        for n in range(40)])
    saved = best_of(args.runs, lambda: post_lexical(document))
    cards = post_lexical(document)["email_html"]
    print(f"every card and 40 images as Lexical: {len(document):,} bytes, rendered to web and email HTML "
          f"(once, when saved) in {saved * 1000:.1f} ms")
    body_only = dataclasses.replace(untracked, html=cards + html, track_clicks=True)
    designed = dataclasses.replace(body_only, template=EmailTemplate(
        site_title="site.test", post_title="A long read", site_url="https://site.test", post_url="https://site.test/p/",
        excerpt="What it is about", byline="Ada Lovelace", feature_image="https://cdn.test/feature.jpg",
        feature_image_caption="The feature", newsletter_name="Weekly",
        design={"show_excerpt": True, "footer_content": "<p>Thanks for reading.</p>"}))
    print("the designed email against the body alone (every card, 40 images, clicks tracked):")
    for segment in (FREE, NOT_FREE):
        plain = best_of(args.runs, lambda: render(body_only, segment))  # noqa: B023 - measured here
        fancy = best_of(args.runs, lambda: render(designed, segment))  # noqa: B023 - measured here
        size = render(designed, segment).size
        print(f"  per segment {segment:<13} body {plain * 1000:7.1f} ms, template {fancy * 1000:7.1f} ms: "
              f"x{fancy / plain:.2f}  ({size:,} bytes)")
    for name, content in (("body", body_only), ("template", designed)):
        rendered = render(content, NOT_FREE)

        def one_batch() -> None:
            for m in members:
                rendered.recipient_variables(member_values(  # noqa: B023 - measured here
                    **m, site_url="https://site.test", link_secret="bench", email_id="e1"))

        timings = best_of(args.runs, one_batch)
        if name == "body":
            body_batch = timings
        else:
            print(f"  per batch of {args.recipients:,}: body {body_batch * 1000:7.1f} ms, template "
                  f"{timings * 1000:7.1f} ms: x{timings / body_batch:.2f} (the template adds no per-reader work)")


if __name__ == "__main__":
    main()

"""A newsletter's design (schema/0083): the reference's columns and defaults, read and written
through the Admin API and `pressroom newsletters edit`, each value checked where it enters."""

from __future__ import annotations

import json
import os

import pytest

from operations.authoring import design_fields
from pressroom.errors import BadInput
from tests.admin_api.test_resources import one
from tests.admin_api.test_tokens import error_of
from tests.foundation.test_cli import assert_one_line_error, pressroom

# The reference platform's defaults for a newsletter that sets nothing.
DEFAULTS = {"header_image": None, "show_header_icon": True, "show_header_title": True, "show_header_name": True,
            "title_font_category": "sans_serif", "title_alignment": "center", "show_post_title_section": True,
            "show_feature_image": True, "body_font_category": "sans_serif", "show_byline": True,
            "show_excerpt": False, "footer_content": None, "show_badge": True, "background_color": "light",
            "border_color": None, "title_color": None, "link_color": None, "button_color": None}


def test_design_values_are_checked_and_the_footer_sanitised():
    assert design_fields({"background_color": "#AABBCC", "border_color": None, "title_color": "accent"}) == {
        "background_color": "#aabbcc", "border_color": None, "title_color": "accent"}
    footer = design_fields({"footer_content": '<p onclick="x()">Thanks <a href="javascript:go()">a</a>'
                                              '<script>steal()</script></p>'})["footer_content"]
    assert "onclick" not in footer and "script" not in footer and "javascript" not in footer and "Thanks" in footer
    for wrong in ({"background_color": "red"}, {"background_color": None}, {"title_font_category": "comic"},
                  {"title_alignment": "right"}, {"show_badge": "yes"}, {"header_image": "javascript:alert(1)"},
                  {"header_image": "https://x.test/a b.png"}, {"link_color": "#abc"}, {"bogus": 1}):
        with pytest.raises(BadInput):
            design_fields(wrong)


async def test_the_admin_api_answers_the_defaults_and_edits_the_design(api, db):
    added = one(await api.post("newsletters/", json={"newsletters": [{"name": "Designed"}]}), "newsletters")
    assert {k: added[k] for k in DEFAULTS} == DEFAULTS
    change = {"header_image": "https://cdn.example.com/head.png", "show_header_icon": False,
              "title_font_category": "serif", "title_alignment": "left", "show_byline": False,
              "footer_content": "<p>Sent with care <img src=x onerror=alert(1)></p>", "background_color": "dark",
              "border_color": "#112233", "title_color": "auto", "show_excerpt": True}
    edited = one(await api.put(f"newsletters/{added['id']}/", json={"newsletters": [change]}), "newsletters")
    assert edited["footer_content"].startswith("<p>Sent with care") and "onerror" not in edited["footer_content"]
    assert {k: edited[k] for k in change if k != "footer_content"} == {k: v for k, v in change.items()
                                                                       if k != "footer_content"}
    read = one(await api.get(f"newsletters/{added['id']}/"), "newsletters")
    assert read == edited
    stored = await db.fetchrow("SELECT title_font_category, border_color FROM newsletters WHERE id = $1", added["id"])
    assert dict(stored) == {"title_font_category": "serif", "border_color": "#112233"}
    refused = await api.put(f"newsletters/{added['id']}/", json={"newsletters": [
        {"name": "Renamed", "title_color": "pink"}]})
    assert refused.status_code == 422 and error_of(refused)["property"] == "title_color", refused.text
    assert one(await api.get(f"newsletters/{added['id']}/"), "newsletters")["name"] == "Designed"  # nothing written


async def test_newsletters_edit_sets_the_design_from_the_command_line(settings, db):
    env = {**os.environ, "DATABASE_URL": settings.database_url}
    assert pressroom("newsletters", "add", "Weekly", env=env).returncode == 0
    done = pressroom("newsletters", "edit", "weekly", "--title-font", "serif", "--no-badge", "--background-color",
                     "#FFEEDD", "--footer", "<p>Bye</p>", "--title-color", "none", "--json", env=env)
    assert done.returncode == 0, done.stderr
    edited = json.loads(done.stdout)
    assert (edited["title_font_category"], edited["show_badge"], edited["background_color"],
            edited["footer_content"], edited["title_color"]) == ("serif", False, "#ffeedd", "<p>Bye</p>", None)
    assert_one_line_error(pressroom("newsletters", "edit", "weekly", "--body-font", "comic", env=env),
                          "body_font_category")

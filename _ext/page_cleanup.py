"""Small fixes to every HTML page.

Jupyter Book 1.x registers the inline settings of sphinx-thebe and sphinx-togglebutton twice, so
each page declared ``const THEBE_JS_URL`` twice and the browser logged a SyntaxError on every page.
This keeps the first copy of every script and style sheet a page would load.

sphinx-exercise titles a solution "Solution to" followed by a link whose text starts with a space,
so the link's underline started with a blank. The space is moved out of the link.
"""

from __future__ import annotations

import re

_SOLUTION_TITLE = re.compile(r'Solution to(<a class="reference internal" href="[^"]*">)\s+')


def _key(asset) -> tuple:
    """An inline script is registered once with filename None and once with '': the same script."""
    attributes = getattr(asset, "attributes", {})
    filename = getattr(asset, "filename", str(asset)) or ""
    return filename, tuple(sorted((k, str(v)) for k, v in attributes.items()))


def _dedupe(app, pagename, templatename, context, doctree) -> None:
    for name in ("script_files", "css_files"):
        assets, seen, kept = context.get(name) or [], set(), []
        for asset in assets:
            key = _key(asset)
            if key not in seen:
                seen.add(key)
                kept.append(asset)
        if assets:
            assets[:] = kept  # the builder keeps using the same list object


def _solution_titles(app, pagename, templatename, context, doctree) -> None:
    if "body" in context:
        context["body"] = _SOLUTION_TITLE.sub(r"Solution to \1", context["body"])


def setup(app):
    app.connect("html-page-context", _dedupe, priority=999)
    app.connect("html-page-context", _solution_titles)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

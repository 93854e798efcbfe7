"""The book's Sphinx extension: a self-contained build, and the ``{source}`` role.

``{source}`summary``` marks where a statement about a paper comes from -- ``abstract`` (the
paper's abstract), ``summary`` (the summaries of the paper the book was given), ``secondary``
(a secondary reading digest, unverified) or ``ours`` (the book's own construction, constant or
reading). It renders as a small bracketed tag with an explanatory tooltip; any other value is an
error, so the build (run with warnings as errors) fails on a typo.

Self-contained build:

Jupyter Book 1.x always loads ``sphinx_thebe``, whose page setup is included twice by the
theme (a JavaScript error, ``THEBE_JS_URL`` declared twice) and names a remote script. Launch
buttons are off in this book, so thebe is removed from every page.
"""

from __future__ import annotations

from docutils import nodes

SOURCES = {
    "abstract": "Source: the paper's abstract.",
    "summary": "Source: the summaries of the paper the book was given (the full text was not "
               "available).",
    "secondary": "Source: a secondary reading digest of the paper (unverified).",
    "ours": "Ours: the book's own construction, constant or reading, not the paper's.",
}


def source_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    key = text.strip()
    if key not in SOURCES:
        msg = inliner.reporter.error(
            f"{{source}}`{key}`: unknown source; accepted: {', '.join(SOURCES)}", line=lineno)
        return [inliner.problematic(rawtext, rawtext, msg)], [msg]
    html = (f'<span class="paper-source source-{key}" title="{SOURCES[key]}">[{key}]</span>')
    return [nodes.raw(rawtext, html, format="html")], []


def _drop_thebe(app, pagename, templatename, context, doctree):
    def is_thebe(asset) -> bool:
        name = str(getattr(asset, "filename", asset) or "")
        body = str(getattr(asset, "attributes", {}).get("body", ""))
        return "thebe" in name.lower() or "THEBE_JS_URL" in body or "thebe" in body.lower()

    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [a for a in context[key] if not is_thebe(a)]


def setup(app):
    app.add_role("source", source_role)
    app.connect("html-page-context", _drop_thebe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

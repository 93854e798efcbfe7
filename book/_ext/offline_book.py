"""The book's Sphinx extension: a self-contained build, and the ``{source}`` role.

``{source}`summary``` marks where a statement about a paper comes from -- ``abstract`` (the
paper's abstract), ``summary`` (the summaries of the paper the book was given), ``secondary``
(a secondary reading digest, unverified) or ``ours`` (the book's own construction, constant or
reading). It renders as a small bracketed tag with an explanatory tooltip; any other value is an
error, so the build (run with warnings as errors) fails on a typo.

Self-contained build:

Jupyter Book 1.x always loads ``sphinx_thebe``, whose page setup is included twice by the
theme (a JavaScript error, ``THEBE_JS_URL`` declared twice) and names a remote script. Launch
buttons of the theme are off in this book, so thebe is removed from every page.

Launch menu: when the book has a home (``moe_launch`` in the Sphinx configuration, written by
``moe_book.home`` from ``BOOK_REPOSITORY_URL``), every chapter page gets a launch menu of two
links, Binder and Colab, built from the URL templates there (``NAME`` stands for the chapter).
Without a home nothing is added.
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


def _launch_menu(app, pagename, templatename, context, doctree):
    launch = app.config.moe_launch
    if not launch or not pagename.startswith("chapters/") or "header_buttons" not in context:
        return
    name = pagename.split("/", 1)[1]
    links = [("Binder", "Open this chapter in JupyterLab on Binder",
              "_static/images/logo_binder.svg", launch["binder_prefix"]),
             ("Colab", "Open this chapter's notebook in Colab",
              "_static/images/logo_colab.png", launch["colab_prefix"])]
    context["header_buttons"].append({
        "type": "group", "tooltip": "Run this chapter", "icon": "fas fa-rocket",
        "label": "launch-buttons",
        "buttons": [{"type": "link", "text": text, "tooltip": tip, "icon": icon,
                     "url": url.replace("NAME", name)} for text, tip, icon, url in links]})


def setup(app):
    app.add_role("source", source_role)
    app.add_config_value("moe_launch", None, "html")
    app.connect("html-page-context", _drop_thebe, priority=900)
    app.connect("html-page-context", _launch_menu, priority=502)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

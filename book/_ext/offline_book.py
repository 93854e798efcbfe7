"""The book's Sphinx extension: a self-contained build, and the ``{source}`` role.

``{source}`summary``` marks where a statement about a paper comes from -- ``abstract`` (the
paper's abstract), ``summary`` (the summaries of the paper the book was given), ``secondary``
(a secondary reading digest, unverified) or ``ours`` (the book's own construction, constant or
reading). It renders as a small bracketed tag with an explanatory tooltip; any other value is an
error, so the build (run with warnings as errors) fails on a typo. A tooltip needs a mouse, so
the meaning is also reachable without one: each tag carries it as visually hidden text (read by
screen readers after the tag), and every page that uses tags opens with a visible legend of the
tags it uses (:func:`_source_legend`), which keyboard and touch readers see.

Formulas that scroll: on a narrow screen a display formula (and a long inline one) is wider
than its column and scrolls sideways inside its own box (``book/_static/companion.css``);
``_static/moe-scroll.js``, added to every page, marks such a box with the side that has more
(a shadow there is the cue to scroll) and makes it reachable with the keyboard (``tabindex``).

Self-contained build:

Jupyter Book 1.x always loads ``sphinx_thebe``, whose page setup is included twice by the
theme (a JavaScript error, ``THEBE_JS_URL`` declared twice) and names a remote script. Launch
buttons of the theme are off in this book, so thebe is removed from every page.

Bibliography: its entries are given the list-item role of the list that holds them
(:func:`_citation_roles`).

Accessible names (WCAG 2.5.3, label in name; axe-core's ``label-content-name-mismatch``): a
control's accessible name contains the words it shows. The theme's search button and colour-mode
button are overridden in ``book/_templates`` (``search-button-field.html``: named by what it
shows, "Search Ctrl+K", no ``aria-label`` that would say less; ``theme-switcher.html``: its icons
without titles, so that "Color mode" names a button that shows no words); a hidden cell's toggle
(myst-nb's ``<summary aria-label="Toggle hidden content">`` around "Show code cell source") loses
its ``aria-label`` (:func:`_cell_toggle_names`) and is named by the words it shows.

Served pages only (:func:`_served_pages_only`, at the end of an HTML build): the themes' Jinja
fragments that Sphinx copies into ``_static`` with their static files (``webpack-macros.html``,
``sbt-webpack-macros.html``: imported by the templates at build time, linked from no page) are
removed from the site, and the site's ``index.html``, a redirect to the first page, gets a
language and a title like every page (sphinx-external-toc writes a bare ``<meta>`` line).

Launch menu: when the book has a home (``moe_launch`` in the Sphinx configuration, written by
``moe_book.home`` from ``BOOK_REPOSITORY_URL``), every chapter page gets a launch menu of two
links, Binder and Colab, built from the URL templates there (``NAME`` stands for the chapter).
Without a home nothing is added.
"""

from __future__ import annotations

import html
from pathlib import Path

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
    html = (f'<span class="paper-source source-{key}" title="{SOURCES[key]}">[{key}]'
            f'<span class="visually-hidden"> ({SOURCES[key]})</span></span>')
    return [nodes.raw(rawtext, html, format="html")], []


LEGEND_MARK = 'class="paper-source source-'


def _source_legend(app, doctree, docname):
    """A legend at the top of a page that uses ``{source}`` tags: each tag it uses and what it
    means, in the order of :data:`SOURCES` (a tooltip alone is out of reach of a keyboard or a
    touch screen)."""
    used = set()
    for raw in doctree.findall(nodes.raw):
        text = raw.astext()
        if LEGEND_MARK in text:
            used.update(k for k in SOURCES if f"{LEGEND_MARK}{k}" in text)
    section = next(iter(doctree.findall(nodes.section)), None)
    if not used or section is None:
        return
    items = "".join(f'<li><span class="paper-source source-{k}">[{k}]</span> '
                    f'{SOURCES[k].split(": ", 1)[1]}</li>' for k in SOURCES if k in used)
    legend = (f'<aside class="source-legend" aria-label="Source tags on this page">'
              f'<p class="source-legend-title">Source tags on this page</p>'
              f'<ul>{items}</ul></aside>')
    title = next(iter(section.findall(nodes.title)), None)
    at = section.index(title) + 1 if title is not None and title.parent is section else 0
    section.insert(at, nodes.raw("", legend, format="html"))


def _drop_thebe(app, pagename, templatename, context, doctree):
    def is_thebe(asset) -> bool:
        name = str(getattr(asset, "filename", asset) or "")
        body = str(getattr(asset, "attributes", {}).get("body", ""))
        return "thebe" in name.lower() or "THEBE_JS_URL" in body or "thebe" in body.lower()

    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [a for a in context[key] if not is_thebe(a)]


def _citation_roles(app, pagename, templatename, context, doctree):
    """The bibliography's entries as list items of their list. Docutils writes the citations as
    ``<div role="list">`` holding ``<div role="doc-biblioentry">``: a role that DPUB-ARIA 1.1
    deprecated and that is not a list item, so a screen reader is told of a list with no items
    (axe-core: aria-required-children, critical)."""
    body = context.get("body")
    if body and 'role="doc-biblioentry"' in body:
        context["body"] = body.replace('role="doc-biblioentry"', 'role="listitem"')


def _cell_toggle_names(app, pagename, templatename, context, doctree):
    """A hidden cell's toggle named by what it shows ("Show code cell source"): myst-nb's
    ``aria-label="Toggle hidden content"`` on the ``<summary>`` names it with words it does not
    show (WCAG 2.5.3; axe-core: label-content-name-mismatch, serious)."""
    body = context.get("body")
    if body and '<summary aria-label="Toggle hidden content">' in body:
        context["body"] = body.replace('<summary aria-label="Toggle hidden content">', "<summary>")


def _served_pages_only(app, exception):
    """At the end of an HTML build: no Jinja fragment of a theme left in ``_static`` as a page
    without a title or a language, and the redirect ``index.html`` a page with both."""
    if exception is not None or app.builder.name != "html":
        return
    out = Path(app.outdir)
    for fragment in (out / "_static").rglob("*.html"):
        if "{%" in fragment.read_text(encoding="utf-8", errors="replace"):
            fragment.unlink()
    root = app.config.root_doc
    if root != "index":
        title = html.escape(app.config.html_title or app.config.project or root)
        url = html.escape(f"{root}.html")
        (out / "index.html").write_text(
            f'<!DOCTYPE html>\n<html lang="{html.escape(app.config.language or "en")}">\n'
            f'<head>\n<meta http-equiv="Refresh" content="0; url={url}" />\n<meta charset="utf-8" />\n'
            f"<title>{title}</title>\n</head>\n"
            f'<body><p><a href="{url}">{title}</a></p></body>\n</html>\n', encoding="utf-8")


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
    app.connect("doctree-resolved", _source_legend)
    app.add_js_file("moe-scroll.js", loading_method="defer")
    app.add_config_value("moe_launch", None, "html")
    app.connect("html-page-context", _drop_thebe, priority=900)
    app.connect("html-page-context", _launch_menu, priority=502)
    app.connect("html-page-context", _citation_roles)
    app.connect("html-page-context", _cell_toggle_names)
    # before sphinx-external-toc's own (priority 500), which writes a bare redirect when none exists
    app.connect("build-finished", _served_pages_only, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""Keep the built book self-contained.

Jupyter Book 1.x always loads ``sphinx_thebe``, whose page setup is included twice by the
theme (a JavaScript error, ``THEBE_JS_URL`` declared twice) and names a remote script. Launch
buttons are off in this book, so thebe is removed from every page.
"""

from __future__ import annotations


def _drop_thebe(app, pagename, templatename, context, doctree):
    def is_thebe(asset) -> bool:
        name = str(getattr(asset, "filename", asset) or "")
        body = str(getattr(asset, "attributes", {}).get("body", ""))
        return "thebe" in name.lower() or "THEBE_JS_URL" in body or "thebe" in body.lower()

    for key in ("script_files", "css_files"):
        if key in context:
            context[key] = [a for a in context[key] if not is_thebe(a)]


def setup(app):
    app.connect("html-page-context", _drop_thebe, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

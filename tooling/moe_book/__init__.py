"""moe_book: the tooling that turns the chapters into the companion book.

It is the second product of this repository, beside the science library ``moe_routing`` (which
it imports and which never imports it):

* :mod:`moe_book.project` -- the base every command shares: layout, parameters, validation,
  keys, the checks of recorded outputs, failures, where the PDFs lie (it imports no command);
* :mod:`moe_book.pipeline` -- the command line on top (the Makefile's
  ``execute``/``html``/``student``), with :mod:`moe_book.execution` (execute one chapter:
  content-addressed, atomic, logged) and :mod:`moe_book.staging` (stage the Jupyter Book
  source, leaving unchanged files untouched);
* :mod:`moe_book.keys` -- what a chapter's cached execution depends on;
* :mod:`moe_book.pages` -- the generated pages (reproduction ledger, execution status,
  exercises);
* :mod:`moe_book.myst` -- the one reader of MyST directive fences, used by
* :mod:`moe_book.classroom` (the student edition: solutions cut from the sources) and
  :mod:`moe_book.exercises` (the exercise index);
* :mod:`moe_book.assignments`, :mod:`moe_book.grading` -- the otter-grader assignments;
* :mod:`moe_book.environment` -- environment.yml from the lock file;
* :mod:`moe_book.home` -- the book's repository: repository and launch buttons, or none;
* :mod:`moe_book.pdf` -- the PDF edition (one-page build printed by headless Chromium);
* :mod:`moe_book.dist` -- the release bundle with its manifest.
"""

import sys as _sys

# Start-up time.  jsonschema (imported by nbformat, jupytext, Sphinx's notebook parser and Ray)
# imports ``rfc3987_syntax`` when it is installed -- jupyter-events, a dependency of JupyterLab,
# asks for ``jsonschema[format-nongpl]`` --, and that module compiles 39 Lark grammars at import
# time: 2-3 s of CPU in every process of the build (each ``moe_book.pipeline`` call, each
# ``jupyter-book`` run).  Its only use is jsonschema's "iri"/"iri-reference" *format* check, which
# nothing here asks for (format checks run only with an explicit FormatChecker; nbformat's
# validation uses none).  Marking the module absent makes jsonschema skip that check, exactly as
# in an environment without the package.  A process that imported it already keeps it.
# benchmarks/bench_startup.py measures the difference; tests/test_startup.py holds it.
_sys.modules.setdefault("rfc3987_syntax", None)

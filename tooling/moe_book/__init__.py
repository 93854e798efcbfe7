"""moe_book: the tooling that turns the chapters into the companion book.

It is the second product of this repository, beside the science library ``moe_routing`` (which
it imports and which never imports it):

* :mod:`moe_book.pipeline` -- execute chapters (content-addressed, atomic, incremental), stage
  the Jupyter Book source, report failures (the Makefile's ``execute``/``html``/``student``);
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

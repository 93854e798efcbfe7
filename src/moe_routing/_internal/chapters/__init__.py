"""What each chapter draws and tabulates: one module per chapter, named after it, whose
functions the chapter calls so that a reader sees the call that makes each figure and table
(the drawing and the frames' bookkeeping live here, the numbers they show come from the
experiments and the papers' modules).  Part of the book's plumbing, not the science.
"""

"""The book's home: where its repository lives, and the buttons that point there.

A book built without a home (the default) shows no repository, issue or launch buttons: it is a
self-contained set of static pages.  With a home -- one setting, the environment variable
``BOOK_REPOSITORY_URL`` (``make html REPOSITORY=https://github.com/<owner>/<repo>``; the
publishing workflow sets it to the repository it runs in) -- every page gets the theme's
repository and issues buttons, and every chapter page a launch menu:

* **Binder** opens the chapter's MyST source (``notebooks/<name>.md``) in JupyterLab on the
  repository's branch; Binder builds the lean environment of ``binder/`` (``environment.yml``:
  the library's dependencies, its ``notebooks`` extra and jupytext; ``postBuild``: torch from
  ``TORCH_INDEX``, the library, and jupytext opening ``.md`` files as notebooks);
* **Colab** opens the executed chapter notebook of the published site
  (``_sources/chapters/<name>.ipynb`` on the ``gh-pages`` branch that ``make publish`` writes),
  whose first cell installs the library by itself when it runs on Colab (the same version as
  the book: the repository at the commit the book was built from) and does nothing elsewhere.

Buttons are plain links: opening a page makes no network request.  Binder and Colab need a
GitHub repository, so any other URL is refused before the build starts.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

ENV_URL = "BOOK_REPOSITORY_URL"
ENV_BRANCH = "BOOK_REPOSITORY_BRANCH"
PAGES_BRANCH = "gh-pages"            # the branch `make publish` pushes the HTML to
BINDER = "https://mybinder.org"
COLAB = "https://colab.research.google.com"
_GITHUB = re.compile(r"https://github\.com/(?P<owner>[A-Za-z0-9](?:[A-Za-z0-9-]{0,38}))/"
                     r"(?P<repo>[A-Za-z0-9._-]{1,100}?)(?:\.git)?/?")
_BRANCH = re.compile(r"[A-Za-z0-9._/-]{1,200}")


@dataclass(frozen=True)
class Home:
    """A GitHub repository that holds the book's sources (``branch``) and its published HTML
    (``pages_branch``)."""

    owner: str
    repo: str
    branch: str = "main"
    pages_branch: str = PAGES_BRANCH

    @property
    def url(self) -> str:
        return f"https://github.com/{self.owner}/{self.repo}"

    @property
    def site(self) -> str:
        """Where GitHub Pages serves the published HTML."""
        return f"https://{self.owner.lower()}.github.io/{self.repo}"

    def binder(self, name: str) -> str:
        return (f"{BINDER}/v2/gh/{self.owner}/{self.repo}/{self.branch}"
                f"?urlpath=lab/tree/notebooks/{name}.md")

    def colab(self, name: str) -> str:
        return (f"{COLAB}/github/{self.owner}/{self.repo}/blob/{self.pages_branch}"
                f"/_sources/chapters/{name}.ipynb")


def parse(url: str, branch: str | None = None) -> Home:
    """A :class:`Home` from a repository URL; ValueError naming the value otherwise."""
    m = _GITHUB.fullmatch(url.strip())
    if not m:
        raise ValueError(f"{ENV_URL} = {url!r} is not a GitHub repository URL; accepted: "
                         "https://github.com/<owner>/<repo> (Binder and Colab launch from GitHub)")
    branch = "main" if branch in (None, "") else branch
    if not _BRANCH.fullmatch(branch) or ".." in branch:
        raise ValueError(f"{ENV_BRANCH} = {branch!r} is not a branch name; accepted: letters, "
                         "digits and . _ - /")
    return Home(m["owner"], m["repo"], branch)


def from_environment(environ=os.environ) -> Home | None:
    """The home configured in the environment, or None (no buttons)."""
    url = environ.get(ENV_URL, "").strip()
    return parse(url, environ.get(ENV_BRANCH)) if url else None


def configure(cfg: dict, home: Home | None) -> dict:
    """The Jupyter Book configuration ``cfg`` with the buttons of ``home`` switched on (a new
    dict; ``cfg`` is not changed).  Without a home the configuration is returned as it is: its
    repository URL is empty and every button is off."""
    if home is None:
        return cfg
    cfg = {**cfg, "repository": {**cfg.get("repository", {}), "url": home.url,
                                 "branch": home.branch, "path_to_book": "book"}}
    cfg["html"] = {**cfg.get("html", {}), "use_repository_button": True,
                   "use_issues_button": True}
    sphinx = dict(cfg.get("sphinx", {}))
    sphinx["config"] = {**sphinx.get("config", {}), "moe_launch": {
        "binder_prefix": home.binder("NAME"), "colab_prefix": home.colab("NAME")}}
    cfg["sphinx"] = sphinx
    return cfg


__all__ = ["BINDER", "COLAB", "ENV_BRANCH", "ENV_URL", "Home", "PAGES_BRANCH", "configure",
           "from_environment", "parse"]

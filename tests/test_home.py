"""The book's home: repository and launch buttons only when a GitHub repository is configured
(moe_book.home, the launch menu of book/_ext/offline_book.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from moe_book import home

ROOT = Path(__file__).resolve().parents[1]
CONFIG = yaml.safe_load((ROOT / "book" / "_config.yml").read_text(encoding="utf-8"))


def _extension():
    spec = importlib.util.spec_from_file_location("offline_book",
                                                  ROOT / "book" / "_ext" / "offline_book.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("url", ["https://github.com/moe-lab/routing-book",
                                 "https://github.com/moe-lab/routing-book.git",
                                 "https://github.com/moe-lab/routing-book/"])
def test_github_urls_are_accepted(url):
    h = home.parse(url)
    assert (h.owner, h.repo, h.branch) == ("moe-lab", "routing-book", "main")
    assert h.colab("training") == ("https://colab.research.google.com/github/moe-lab/"
                                   "routing-book/blob/gh-pages/_sources/chapters/training.ipynb")
    assert h.binder("training") == ("https://mybinder.org/v2/gh/moe-lab/routing-book/main"
                                    "?urlpath=lab/tree/notebooks/training.md")
    assert h.site == "https://moe-lab.github.io/routing-book"


@pytest.mark.parametrize("url", ["https://gitlab.com/a/b", "github.com/a/b", "https://github.com/a",
                                 "https://github.com/a/b/tree/main", "ftp://github.com/a/b"])
def test_other_urls_are_refused_with_the_value(url):
    with pytest.raises(ValueError, match=r"BOOK_REPOSITORY_URL = .*accepted: https://github.com"):
        home.parse(url)


def test_bad_branch_is_refused():
    with pytest.raises(ValueError, match=r"BOOK_REPOSITORY_BRANCH = 'a b'"):
        home.parse("https://github.com/a/b", "a b")


def test_environment_decides():
    assert home.from_environment({}) is None
    assert home.from_environment({"BOOK_REPOSITORY_URL": "  "}) is None
    h = home.from_environment({"BOOK_REPOSITORY_URL": "https://github.com/a/b",
                               "BOOK_REPOSITORY_BRANCH": "release/1"})
    assert h.branch == "release/1"


def test_without_a_home_every_button_stays_off():
    cfg = home.configure(CONFIG, None)
    assert cfg["repository"]["url"] == ""
    assert not cfg["html"]["use_repository_button"] and not cfg["html"]["use_issues_button"]
    assert "moe_launch" not in cfg["sphinx"]["config"]
    lb = cfg["launch_buttons"]
    assert lb["binderhub_url"] == lb["colab_url"] == lb["jupyterhub_url"] == ""


def test_a_home_switches_the_buttons_on_without_changing_the_source_config():
    before = yaml.safe_dump(CONFIG)
    cfg = home.configure(CONFIG, home.parse("https://github.com/a/b"))
    assert yaml.safe_dump(CONFIG) == before
    assert cfg["repository"]["url"] == "https://github.com/a/b"
    assert cfg["html"]["use_repository_button"] and cfg["html"]["use_issues_button"]
    assert cfg["sphinx"]["config"]["mathjax3_config"] == CONFIG["sphinx"]["config"]["mathjax3_config"]
    # the theme's own launch buttons stay off: they would point at book/chapters/*.ipynb,
    # which the repository does not have
    assert cfg["launch_buttons"]["binderhub_url"] == cfg["launch_buttons"]["colab_url"] == ""
    launch = cfg["sphinx"]["config"]["moe_launch"]
    assert launch["binder_prefix"].endswith("notebooks/NAME.md")


def _page(ext, launch, pagename):
    app = SimpleNamespace(config=SimpleNamespace(moe_launch=launch))
    context = {"header_buttons": []}
    ext._launch_menu(app, pagename, "page.html", context, None)
    return context["header_buttons"]


def test_launch_menu_on_chapter_pages_only():
    ext = _extension()
    launch = home.configure(CONFIG, home.parse("https://github.com/a/b"))["sphinx"]["config"][
        "moe_launch"]
    (menu,) = _page(ext, launch, "chapters/boundary_mass")
    urls = {b["text"]: b["url"] for b in menu["buttons"]}
    assert urls == {"Binder": home.parse("https://github.com/a/b").binder("boundary_mass"),
                    "Colab": home.parse("https://github.com/a/b").colab("boundary_mass")}
    assert all(not b["icon"].startswith("http") for b in menu["buttons"])     # local icons
    assert _page(ext, launch, "generated/ledger") == []
    assert _page(ext, None, "chapters/boundary_mass") == []

"""Conventions of the chapters' MyST sources that a reader would see broken in the book."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted(p for p in (ROOT / "notebooks").glob("*.md") if p.name != "README.md")
PRF = re.compile(r"^(`{3,}|:{3,})\{prf:(\w+)\}(?P<title>.*)$", re.M)


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_prf_titles_do_not_nest_parentheses(path):
    """sphinx-proof prints a title in parentheses ("Theorem 5.1 (title)"): a title that holds
    parentheses itself renders nested ones."""
    bad = [m.group("title").strip() for m in PRF.finditer(path.read_text(encoding="utf-8"))
           if "(" in m.group("title")]
    assert bad == []


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_paper_results_carry_their_paper(path):
    """Paper results are written A-Thm 4.2, B-Thm 5.17, B-Prop 6.3 (the book numbers its own
    results, so a bare "Theorem 4.2" could be either)."""
    text = path.read_text(encoding="utf-8")
    prose = re.sub(r"```\{code-cell\}.*?\n```", "", text, flags=re.S)
    bare = re.findall(r"(?<![\w-])(?:Theorem|Proposition) (?:4\.1|4\.2|4\.7|5\.17|6\.3)\b", prose)
    assert bare == []


CODE_WIDTH = 90        # the column shows about 90 characters of code without a scroll bar


def code_lines(text: str):
    """(line number, line) of every code line of the chapter's code cells, the cell's
    ``---`` metadata block (figure captions, tags) excluded: it is not shown as code."""
    cell = meta = False
    for n, line in enumerate(text.splitlines(), 1):
        if not cell:
            cell = line.startswith("```{code-cell}")
            meta = False
            continue
        if line.startswith("```"):
            cell = False
        elif line == "---":
            meta = not meta
        elif not meta:
            yield n, line


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_code_fits_the_column(path):
    wide = [f"{n}: {len(line)}" for n, line in code_lines(path.read_text(encoding="utf-8"))
            if len(line) > CODE_WIDTH]
    assert wide == []


def test_code_lines_skip_metadata_and_prose():
    text = ("prose " * 30 + "\n```{code-cell} ipython3\n---\nmystnb:\n  figure:\n    caption: "
            + "c" * 120 + "\n---\nx = 1\n```\n" + "y" * 120 + "\n")
    assert list(code_lines(text)) == [(8, "x = 1")]


def ledger_problems(text: str) -> list[str]:
    """What keeps a chapter's verdict boxes from saying which scale measured them: a chapter
    that records claims starts its ledger once, with ``begin(…, profile=profile, …)``."""
    starts = re.findall(r"\bbegin\(([^)]*)\)", text)
    if "ledger.record(" not in text:
        return []
    if len(starts) != 1:
        return [f"{len(starts)} calls of begin( in a chapter that records claims"]
    return [] if "profile=profile" in starts[0] else [f"begin({starts[0]}) without the profile"]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_every_ledger_states_the_profile_its_numbers_come_from(path):
    """A verdict box must say which scale measured it (smoke, default or paper)."""
    assert ledger_problems(path.read_text(encoding="utf-8")) == []


def test_the_ledger_check_sees_a_chapter_without_its_profile():
    recording = 'ledger.record("A-x", measured="…", verdict=v)\n'
    assert sum("ledger.record(" in p.read_text(encoding="utf-8") for p in CHAPTERS) >= 10
    assert ledger_problems('ledger = begin("c", profile=profile)\n' + recording) == []
    assert ledger_problems('ledger = begin("c", seed=0)\n' + recording) == [
        'begin("c", seed=0) without the profile']
    assert ledger_problems(recording) == ["0 calls of begin( in a chapter that records claims"]
    assert ledger_problems("x = 1\n") == []


def test_the_training_chapter_states_the_sizes_of_its_default_profile():
    """"Both use d_model 32, two heads, experts of 8 neurons": the prose must be the default
    profile's values (the budgets and the variant's changes are glued from the parameters),
    and the calibration it cites must have run at that width and cell, with rows for the
    profile's models.  Its budget is printed from its own file: it is not the profile's."""
    import json


    from moe_book import project as pl

    text = " ".join((ROOT / "notebooks" / "training.md").read_text(encoding="utf-8").split())
    p = pl.load_params(pl.Project(ROOT), "default")["training"]
    words = {1: "one", 2: "two", 4: "four"}
    assert (f"**`d_model` {p['d_model']}, {words[p['n_heads']]} heads, experts of "
            f"{p['d_expert']} neurons** in the default profile") in text
    assert "{glue:text}`training-steps` steps" in text
    assert "**{glue:text}`training-variant-changes`**" in text
    codes = p["codes_variant"]["entity_codes"]
    cal = json.loads((ROOT / "benchmarks" / "results" / "codes_calibration.json").read_text())
    common = cal["common"]
    assert (common["n_heads"], common["d_model"]) == (p["n_heads"], p["d_model"])
    assert common["n_tasks"] == p["fig2_tasks"]
    assert {(r["codes"], r["n_experts"], r["d_expert"]) for r in cal["rows"]} >= {
        (codes, 1, p["d_expert"]),
        (codes, p["fig2_experts"], p["d_expert"]), (None, 1, p["d_expert"])}
    for r in cal["rows"]:
        assert r["accuracy_low"] <= r["accuracy"] <= r["accuracy_high"]
        assert 0 <= r["accuracy_experts_off"] <= 1


# Chapters whose figures were checked for typeset labels and run-independent alt texts.
TYPESET_FIGURES = [ROOT / "notebooks" / f"{n}.md"
                   for n in ("soft_to_hard", "gamma_convergence", "symmetry_breaking")]
LABEL = re.compile(r"""(?:\blabel\s*=|set_[xy]label\()\s*[rRfF]{0,2}(["'])(?P<s>.*?)\1""")


def pseudo_tex_labels(text: str) -> list[str]:
    """Axis and legend labels of the code cells with a subscript or power typed as plain
    text (``L_0``, ``τ^p``): matplotlib prints the underscore or caret literally unless it
    sits in mathtext ``$…$``. Format fields ``{…}`` of f-strings are code, not label text."""
    bad = []
    for _, line in code_lines(text):
        for m in LABEL.finditer(line):
            shown = re.sub(r"\$[^$]*\$", "", m.group("s"))
            shown = re.sub(r"\{[^{}]*\}", "", shown)
            if "_" in shown or "^" in shown:
                bad.append(m.group("s"))
    return bad


def alt_texts(text: str) -> list[str]:
    """The ``alt:`` texts of the figure metadata, one string each."""
    return [" ".join(m.group(1).split())
            for m in re.finditer(r"\n {4}alt: (.*?)\n(?! {6}\S)", text, re.S)]


@pytest.mark.parametrize("path", TYPESET_FIGURES, ids=lambda p: p.stem)
def test_figure_labels_typeset_subscripts_with_mathtext(path):
    assert pseudo_tex_labels(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("path", TYPESET_FIGURES, ids=lambda p: p.stem)
def test_alt_texts_hold_no_measured_numbers(path):
    """Alt text is static metadata: a decimal number in it cannot come from the run (glue
    does not reach it), so it goes stale with the first different run or profile."""
    alts = alt_texts(path.read_text(encoding="utf-8"))
    assert alts, "no alt text found: the pattern no longer matches the metadata"
    assert [a for a in alts if re.search(r"\d\.\d|\d+ times|\btimes higher\b", a)] == []


def test_label_and_alt_checks_see_what_they_should():
    code = ('```{code-cell} ipython3\nax.set_ylabel("|L_τ − L_0|")\n'
            'ax.plot(x, y, label=rf"fit ${c:.3f}\\,\\tau^{{{p:.3f}}}$")\n'
            'ax.plot(x, y, label=f"τ = {taus[0]:g}")\n```\n')
    assert pseudo_tex_labels(code) == ["|L_τ − L_0|"]
    meta = ("---\nmystnb:\n  image:\n    alt: A curve with a minimum near b equals 0.27\n"
            "      and a dashed line.\ntags: [hide-input]\n---\n")
    assert alt_texts(meta) == ["A curve with a minimum near b equals 0.27 and a dashed line."]


ALL_CHAPTERS = sorted(p for p in (ROOT / "notebooks").glob("*.md") if p.name != "README.md")


@pytest.mark.parametrize("path", ALL_CHAPTERS, ids=lambda p: p.stem)
def test_alt_texts_pass_the_browser_checks_rule_before_the_build(path):
    """The rendered-book check refuses an alt text with a "/" (a file path, or a fraction a
    screen reader reads as "slash") or under 20 characters: the same rule on the sources, so a
    chapter fails here in seconds instead of after the smoke book's build."""
    bad = [a for a in alt_texts(path.read_text(encoding="utf-8")) if "/" in a or len(a) < 20]
    assert bad == []


def test_the_earlier_calibrations_the_training_chapter_cites_are_in_the_repository():
    """The chapter names the two earlier calibrations' scripts and their tables in
    benchmarks/results/: both must be there (a reader is sent to them)."""
    text = (ROOT / "notebooks" / "training.md").read_text(encoding="utf-8")
    for script, table in (("calibrate_training.py", "training_calibration.json"),
                          ("calibrate_capacity.py", "capacity_probe.json")):
        assert f"benchmarks/{script}" in text
        assert (ROOT / "benchmarks" / script).is_file()
        assert json.loads((ROOT / "benchmarks" / "results" / table).read_text())["commit"]


def test_the_recorded_controls_are_the_default_profiles_variant():
    """The training chapter shows benchmarks/variant_controls.py's record in the default
    profile only if it was measured on that profile's variant: the record must exist, carry
    its commit and match (a change of the default variant must re-run the script)."""
    import json

    from moe_book import project as pl
    from moe_routing._internal.chapters.training import recorded_controls

    p = pl.load_params(pl.Project(ROOT), "default")["training"]
    rec = json.loads((ROOT / "benchmarks" / "results" / "variant_controls.json").read_text())
    assert rec["commit"] and len(rec["rows"]) == 4
    assert recorded_controls(rec, p["codes_variant"], p["seeds"],
                             (p["fig2_tasks"], p["fig2_experts"])) is rec
    assert "benchmarks/variant_controls.py" in (ROOT / "notebooks" / "training.md").read_text()


#: the bridge chapter reads the training chapter's A-Fig. 2 models: the knobs that define them
BRIDGE_SHARED = ("seeds", "n_relations", "n_pairs", "n_templates", "fig2_tasks", "fig2_experts",
                 "d_model", "n_heads", "d_expert", "steps", "batch_size", "lr")


def _cell_values(name: str) -> dict:
    import ast

    from moe_book.project import parameters_cell_names

    _, src = parameters_cell_names(ROOT / "notebooks" / f"{name}.md")
    out = {}
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = ast.literal_eval(node.value)
    return out


@pytest.mark.parametrize("profile", ["smoke", "default", "paper"])
def test_the_bridge_measures_the_training_chapters_models(profile):
    """Its runs are the training chapter's only if every knob that defines them is equal: in
    the parameters cells (smoke) and in both profile files, where both chapters take them from
    one shared group (``shared: {fig2: …}``, ``use: [fig2]``)."""
    import yaml

    from moe_book import project as pl

    if profile == "smoke":
        bridge, training = _cell_values("bridge"), _cell_values("training")
    else:
        data = pl.load_params(pl.Project(ROOT), profile)
        bridge, training = data["bridge"], data["training"]
        raw = yaml.safe_load((ROOT / "notebooks" / "params" / f"{profile}.yaml").read_text())
        assert set(raw["shared"]["fig2"]) == set(BRIDGE_SHARED)         # written once
        assert raw["bridge"]["use"] == raw["training"]["use"] == ["fig2"]
    differ = {k: (bridge.get(k), training.get(k)) for k in BRIDGE_SHARED
              if k != "seeds" and bridge.get(k) != training.get(k)}
    assert differ == {}
    assert set(bridge["seeds"]) <= set(training["seeds"])     # the bridge reads some of them


def papermill_unparsed(source: str) -> list[str]:
    """The lines of a parameters cell that papermill cannot read: it splits a line at its one
    ``=`` (a second one, even in a comment, makes it log "Unable to parse line" and then call
    the injected value an unknown parameter in the chapter's log)."""
    import logging

    from nbformat.v4 import new_code_cell
    from papermill.translators import PythonTranslator

    seen: list[str] = []

    class Catch(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    logger, handler = logging.getLogger("papermill"), Catch()
    logger.addHandler(handler)
    try:
        PythonTranslator.inspect(new_code_cell(source))
    finally:
        logger.removeHandler(handler)
    return [m for m in seen if m.startswith("Unable to parse")]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_papermill_reads_every_parameter_line(path):
    from moe_book.project import parameters_cell_names

    assert papermill_unparsed(parameters_cell_names(path)[1]) == []


def test_papermill_check_sees_a_second_equals_sign():
    """The check above can fail: a comment with an ``=`` is what broke two chapters' logs."""
    assert papermill_unparsed("n = 4                # size = n\n") != []
    assert papermill_unparsed("n = 4                # size of n\n") == []


def glued_twice(text: str) -> list[str]:
    """The literal glue keys a chapter's code glues at two places that can both run: in two
    cells, or twice in one cell outside the two arms of one ``if``.  Jupyter Book refuses a
    duplicate key only at the end of a full build (minutes later); this finds it in the source."""
    import ast

    sites: dict[str, list[tuple[int, tuple]]] = {}
    cells = re.findall(r"```\{code-cell\}[^\n]*\n(.*?)\n```", text, flags=re.S)
    for i, cell in enumerate(cells):
        body = "\n".join(ln for ln in cell.splitlines() if not ln.startswith(":"))
        body = re.sub(r"^---\n.*?\n---\n", "", body, flags=re.S)

        def walk(node, path, cell):
            if isinstance(node, ast.If):
                for arm, stmts in (("then", node.body), ("else", node.orelse)):
                    for s in stmts:
                        walk(s, path + ((id(node), arm),), cell)
                walk(node.test, path, cell)
                return
            if (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "glue"
                    and node.args and isinstance(node.args[0], ast.Constant)):
                sites.setdefault(node.args[0].value, []).append((cell, path))
            for child in ast.iter_child_nodes(node):
                walk(child, path, cell)

        walk(ast.parse(body), (), i)

    def exclusive(a, b) -> bool:          # the two arms of one if, in one cell
        return a[0] == b[0] and any(x[0] == y[0] and x[1] != y[1]
                                    for x, y in zip(a[1], b[1]))

    return sorted(k for k, s in sites.items()
                  if any(not exclusive(a, b) for j, a in enumerate(s) for b in s[j + 1:]))


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_no_glue_key_is_glued_twice(path):
    assert glued_twice(path.read_text(encoding="utf-8")) == []


def test_glued_twice_finds_a_duplicate_and_spares_the_arms_of_an_if():
    cell = "```{{code-cell}} ipython3\n{}\n```\n"
    if_else = cell.format('if x:\n    glue("a", 1)\nelse:\n    glue("a", 2)')
    assert glued_twice(if_else) == []
    assert glued_twice(if_else + cell.format('glue("a", 3)')) == ["a"]
    assert glued_twice(cell.format('glue("b", 1)\nglue("b", 2)')) == ["b"]
    assert glued_twice(cell.format('if x:\n    glue("c", 1)\nglue("c", 2)')) == ["c"]

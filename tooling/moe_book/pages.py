"""Pages generated from a run: execution status (provenance) and the reproduction ledger.

They are written into the staged book source on every ``stage``; nothing here executes a
notebook.  The ledger joins the claims every notebook recorded (``artifacts/*/claims.json``)
with the registry of all the papers' claims, so a claim no chapter has measured yet is listed as
*pending* instead of silently missing.
"""

from __future__ import annotations

import html
import json
from collections import Counter
from pathlib import Path

import yaml

from moe_routing._internal.ledger import BADGES, anchor, load_claims, registry
from moe_routing._internal.verdicts import VERDICTS

from . import findings, home
from .myst import table_cell

# Symbols from the basic fonts (DejaVu), not emoji: the book must look right on machines
# without an emoji font.
VERDICT_BADGE = {**{v: f"{BADGES[v]} {v}" for v in VERDICTS}, "pending": "… pending"}


def _chapter_link(row: dict) -> str:
    return f"[{row['notebook']}](../chapters/{row['notebook']}.ipynb)" if row["notebook"] else ""


def _title(md_path: Path) -> str:
    for line in md_path.read_text(encoding="utf-8").splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return md_path.stem


def chapter_order(project) -> list[str]:
    """Chapters in the order of the table of contents (then any others, alphabetically)."""
    names = project.notebook_names()
    toc_path = project.book_dir / "_toc.yml"
    if not toc_path.exists():
        return names
    toc = yaml.safe_load(toc_path.read_text(encoding="utf-8"))
    order = [toc["root"]] + [c["file"] for part in toc.get("parts", [])
                             for c in part.get("chapters", [])]
    ranked = [f.split("/", 1)[1] for f in order if f.startswith("chapters/")]
    return [n for n in ranked if n in names] + sorted(set(names) - set(ranked))


def paper_scale_note(project, profile: str) -> str:
    """One sentence: which scale the numbers of this build are, and whether the `paper`
    profile has ever been executed here (with the command, and the projection of
    ``make gpu-check`` when one was recorded)."""
    if profile == "paper":
        return "The numbers of this build are those of the papers' scale (`paper` profile)."
    same = _same_as_paper(project, profile)
    names = [f"`{n}`" for n in same]
    names = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else "".join(names)
    at_scale = (f" For {names} the `{profile}` profile is the `paper` profile (`same_as: "
                "paper`): those chapters show the papers' scale in this build." if same else "")
    done = sorted(p.stem for p in (project.build_dir("paper") / "state").glob("*.json"))
    if done:
        return (f"The numbers of this build are those of the `{profile}` profile"
                + ("" if same else ", not the papers' scale") + "; the `paper` profile has "
                "been executed here for "
                + ", ".join(f"`{n}`" for n in done) + " (`build/paper/`)." + at_scale)
    report = project.root / "build" / "gpu-check" / "report.json"
    projection = ""
    try:
        proj = json.loads(report.read_text(encoding="utf-8")).get("projection") or {}
        if proj.get("projected_s"):
            projection = (f" `make gpu-check` projected {proj['projected_s'] / 3600:.1f} h for "
                          "its training grid on the GPU it ran on.")
    except (OSError, ValueError):
        pass
    return (f"The numbers of this build are those of the `{profile}` profile." + at_scale
            + (" The `paper` profile of the other chapters" if same else " The `paper` profile")
            + " (the papers' data sizes) has never been executed for this "
            "book: `make execute PROFILE=paper DEVICE=cuda` runs it (its training chapter is a "
            "GPU workload; `make gpu-check` times it on a GPU and projects the whole grid)."
            + (projection or " No such projection has been recorded."))


def _same_as_paper(project, profile: str) -> list[str]:
    """The chapters whose ``profile`` block is ``{same_as: paper}``."""
    try:
        data = yaml.safe_load(project.params_file(profile).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return []
    return sorted(n for n, b in data.items() if isinstance(b, dict) and b.get("same_as") == "paper")


def status_page(project, profile: str, states: dict[str, dict | None],
                downloads: list[str] = ()) -> str:
    lines = [
        "# Execution status",
        "",
        f"Every chapter of this build was executed by the book pipeline with the **`{profile}`** "
        "profile (parameters in `notebooks/params/" + profile + ".yaml`). A chapter is "
        "re-executed only when its source, its parameters, the lock file or the package "
        "source changed; the table shows the run whose outputs you are reading.",
        "",
    ]
    order = chapter_order(project)
    ran = [states[n] for n in order if states.get(n) is not None]
    # device, torch and commit: said once above the table when every run shares them, a
    # column only for those that differ between chapters
    fields = (("device_name", "Device"), ("torch_version", "torch"), ("git_commit", "Commit"))
    values = {k: {(st.get("provenance") or {}).get(k, "") for st in ran} for k, _ in fields}
    common = {k: next(iter(v)) for k, v in values.items() if len(v) == 1 and next(iter(v))}
    varying = [(k, head) for k, head in fields if k not in common]
    if ran and common:
        said = {"device_name": f"on **{table_cell(common.get('device_name', ''))}**",
                "torch_version": f"with torch **{table_cell(common.get('torch_version', ''))}**",
                "git_commit": f"from commit `{table_cell(common.get('git_commit', ''))}`"}
        lines += ["", "Every chapter listed ran "
                  + ", ".join(said[k] for k, _ in fields if k in common) + "."]
    lines += ["", "| Chapter | Status | Wall time |" + "".join(f" {h} |" for _, h in varying),
              "|---|---|---|" + "---|" * len(varying)]
    errors = []
    finished = []
    for name in order:
        st = states.get(name)
        title = _title(project.notebook_path(name))
        link = f"[{table_cell(title)}](../chapters/{name}.ipynb)"
        if st is None:
            lines.append(f"| {link} | not executed | |" + " |" * len(varying))
            continue
        prov = st.get("provenance", {})
        status = "✓ ok" if st["status"] == "ok" else "✗ " + st["status"]
        finished.append(st.get("finished_at", ""))
        cells = [(f"`{table_cell(prov.get(k, ''))}`" if k == "git_commit"
                  else table_cell(prov.get(k, ""))) for k, _ in varying]
        lines.append(f"| {link} | {status} | {st.get('wall_s', 0):.1f} s |"
                     + "".join(f" {c} |" for c in cells))
        if st.get("error"):
            errors.append(f"- **{table_cell(title)}**: `{table_cell(st['error'])}`")
    total = sum((s or {}).get("wall_s", 0) for s in states.values())
    lines += ["", f"Total execution time of the listed runs: {total:.1f} s"
              + (f"; the latest finished at {max(finished)} (UTC)." if finished else ".")
              + " A commit marked `+dirty` had uncommitted changes when the chapter ran."]
    lines += ["", paper_scale_note(project, profile)]
    if errors:
        lines += ["", "## Failures", "", "The outputs shown for these chapters, if any, are "
                  "those of their last successful run.", "", *errors]
    lines += ["", "## Run the chapters yourself", "",
              "Each chapter's page offers its executed notebook (`.ipynb`, download button at the "
              "top of the page); its parameters cell holds the values of this build. The "
              "notebooks need the library `moe_routing` with its notebook extras:"]
    if downloads:
        wheel = downloads[0]
        lines += ["", f"* the library's wheel: {{download}}`{wheel} <../_static/downloads/{wheel}>` — "
                  f"`pip install \"{wheel}[notebooks]\"` (any Python ≥ 3.11 environment with "
                  "torch ≥ 2.4; a GPU build of torch is kept as it is);"]
    lines += ["* or, in a clone of the repository, `pip install -e \".[notebooks]\"`.", "",
              "The chapters' MyST sources (the text form of each notebook, which JupyterLab "
              "opens as a notebook through jupytext): "
              + ", ".join(f"{{download}}`{n}.md <../_static/downloads/{n}.md>`"
                          for n in chapter_order(project))
              + "."]
    return "\n".join(lines) + "\n"


def ledger_rows(project, profile: str) -> list[dict]:
    """One row per claim: recorded ones with their measurement, the others as pending. The
    claim's wording, one-line form and source are joined from ``claims.yaml`` now, so editing
    the wording needs no re-execution."""
    recorded = {c["id"]: c for c in load_claims(project.build_dir(profile) / "artifacts")}
    rows = []
    for cid, entry in registry().items():
        wording = {"paper": entry["paper"], "where": entry["where"], "claim": entry["claim"],
                   "short": entry.get("short", entry["claim"]),
                   "source": entry.get("source", "")}
        if cid in recorded:
            rows.append({**recorded[cid], **wording})
        else:
            rows.append({"id": cid, **wording, "measured": "", "verdict": "pending", "key": "",
                         "reason": "", "rule": "", "notebook": "",
                         "note": entry.get("criterion", "")})
    rows += [{"short": c["claim"], "source": "ours", **c}
             for cid, c in sorted(recorded.items()) if cid not in registry()]
    return rows


def _indent(text: str, by: int = 4) -> str:
    return "\n".join((" " * by + ln) if ln else "" for ln in text.splitlines())


def glance_table(sel: list[dict]) -> list[str]:
    """The "At a glance" table of one paper's claims (a MyST list-table of class
    ``ledger-glance``, laid out by book/_static/companion.css): the verdict as a symbol in a
    narrow first column; the claim in one line with its id, chapter, kind and source; then
    the key number, a sentence in words on the verdict where the row has one
    (:func:`findings.plain_why`), and the rule's own reason folded in a ``<details>``. It fits
    the text column at desktop width (tested in the browser) and its rows become cards on a
    phone."""
    lines = ["```{list-table}", ":header-rows: 1", ":widths: 11 43 46",
             ":class: ledger-glance", "",
             "* - Verdict", "  - Claim", "  - Measured, and why"]
    for r in sel:
        src = f" *[{r['source']}]*" if r["source"] else ""
        meta = " · ".join(x for x in (f"[{r['id']}](#{anchor(r['id'])})", _chapter_link(r),
                                      findings.claim_kind(r)) if x)
        claim = (f'<span class="ledger-claim">{table_cell(r["short"])}</span>{src}\n\n'
                 f'<span class="ledger-meta">{meta}</span>')
        parts = [f"**{table_cell(r.get('key') or '—')}**"]
        human = findings.plain_why(r)
        if human:
            parts.append(table_cell(human))
        reason = r.get("reason") or ("" if r["measured"] else r.get("note", ""))
        if reason:
            label = ("What a reproduction has to show" if not r["measured"] else
                     "The rule's reason" if r.get("rule") and r["rule"] != "literal" else
                     "The reason")
            parts += [f'<details class="ledger-more"><summary>{label}</summary>',
                      f"{table_cell(reason)} ([row {r['id']}](#{anchor(r['id'])}))",
                      "</details>"]
        lines += [f"* - {findings.verdict_symbol(r['verdict'])}",
                  "  - " + _indent(claim, 4).lstrip(),
                  "  - " + _indent("\n\n".join(parts), 4).lstrip()]
    return lines + ["```"]


PAPER_HEADINGS = (("A", "Paper A — task routing (arXiv 2606.14398)"),
                  ("B", "Paper B — boundary mass (arXiv 2605.02124)"),
                  ("ours", "The book's own extensions"))


def ledger_page(project, profile: str) -> str:
    rows = ledger_rows(project, profile)
    counts = Counter(r["verdict"] for r in rows)
    B = findings.verdict_symbol  # noqa: N806 -- the legend's symbols, as in the tables
    summary = ", ".join(f"{counts[v]} {v}" for v in (*VERDICTS, "pending") if counts[v])
    out = [
        "# Reproduction ledger",
        "",
        "Every claim of the two papers, confronted with what this book measured. Each row is "
        "written by the chapter that made the measurement (the measured text is built from "
        "the executed cell's values, and the verdict is decided by a named, tested rule of "
        "`moe_routing._internal.verdicts`) and gathered here at build time; rows marked *pending* "
        f"are claims no executed chapter has measured yet. Profile of this build: **`{profile}`**.",
        "",
        f"**Summary:** {summary}.",
        "",
        f"Verdicts: {B('reproduced')} *reproduced* — the paper's result came out again in "
        f"our measurement; {B('reproduced for our construction')} "
        "*reproduced for our construction* — the theorem's conclusion holds for our own "
        "construction (which adds parts and hypotheses of its own); "
        f"{B('holds by definition')} *holds by definition* — the statement follows from the "
        "definitions, so what was checked is our implementation of them, not a result; "
        f"{B('partly')} *partly* — part of the claim holds, or only under conditions the "
        f"reason states; {B('not reproduced')} *not reproduced* — adequate evidence "
        "(converged runs, intervals that resolve the difference, a quantity the model can "
        f"test at its size) disagrees with a paper's claim; {B('inconclusive')} "
        "*inconclusive* — the evidence cannot decide, in either direction; "
        f"{B('our extension')} *our extension* — a claim of the book itself, not of the "
        f"papers, that held; {B('not supported')} *not supported* — a claim of the book "
        f"itself that the evidence does not bear out; {B('pending')} *pending* — not "
        "measured in this build.",
        "",
        "Source: where our knowledge of the statement comes from — the paper's *abstract*, the "
        "*summary* of the paper the book was given, a *secondary summary* (a reading digest, "
        "unverified), or *ours*. The full texts of the papers were not available to the book.",
        "",
        "The same data, machine-readable: {download}`ledger.json <ledger.json>`.",
        "",
        "## At a glance",
        "",
        "One table per paper; a verdict's symbol is its word (the legend above; the word "
        "itself is read out by a screen reader and shows on a phone, and on hover). *Kind*: a "
        "**theorem checked** (a proved statement confronted with a computation that could "
        "contradict it), an **empirical result** (a measurement of trained models, which "
        "depends on data, sizes and seeds) or a **definition** (holds by construction and is "
        "tabulated). Each row gives the key number, a sentence on the verdict where the "
        "chapter's record has one, and, folded, the deciding rule's own words; the claim's "
        "full row is below the tables.",
    ]
    for paper, heading in PAPER_HEADINGS:
        sel = [r for r in rows if r["paper"] == paper]
        if sel:
            out += ["", f"**{heading}** — {findings.counts_sentence(sel)}", "",
                    *glance_table(sel)]
    for paper, heading in PAPER_HEADINGS:
        sel = [r for r in rows if r["paper"] == paper]
        if not sel:
            continue
        out += ["", f"## {heading}"]
        for r in sel:
            said = ("**The claim (ours).**" if paper == "ours" else
                    f"**The paper says** ({r['source'] or 'source not recorded'}).")
            verdict = (f"**Verdict:** {VERDICT_BADGE[r['verdict']]}"
                       + (f" — recorded in {_chapter_link(r)}." if r["notebook"] else "."))
            out += ["", f"({anchor(r['id'])})=", f"### `{r['id']}` — {r['where']}", "",
                    verdict, "", f'{said} <span class="ledger-claim">{r["claim"]}</span>', ""]
            if r["measured"]:
                out += [_measured(r), ""]
                if r.get("reason"):
                    rule = r.get("rule", "")
                    by = f" (rule `{rule}`)" if rule and rule != "literal" else ""
                    note = f" *{r['note']}*" if r.get("note") else ""
                    out += [f"**Why this verdict.** {r['reason']}{by}.{note}", ""]
                elif r.get("note"):
                    out += [f"*{r['note']}*", ""]
            else:
                out += [f"**Not measured yet.** What a reproduction has to show: {r['note']}", ""]
    out += ["", "## How to cite", "",
            findings.citation(project.root, project.book_dir, home.from_environment())]
    return "\n".join(out) + "\n"


#: a measurement longer than this is folded under its key number on the ledger page
FOLD_MEASURED = 240


def _measured(r: dict) -> str:
    """The "We measured" paragraph of a claim's row: in full when short, else folded in a
    ``<details>`` whose summary is the key number (the page stays short; the full text is one
    click away, and in ``ledger.json``)."""
    scale = f" (profile `{r['profile']}`)" if r.get("profile") else ""
    if len(r["measured"]) <= FOLD_MEASURED or not r.get("key"):
        return f"**We measured{scale}.** {r['measured']}"
    scale_html = (f" (profile <code>{html.escape(r['profile'])}</code>)"
                  if r.get("profile") else "")
    return "\n\n".join([
        f'<details class="ledger-measured"><summary><strong>We measured{scale_html}.</strong> '
        f"{html.escape(r['key'])} <span class=\"ledger-unfold\">(the full measurement)</span>"
        "</summary>", r["measured"], "</details>"])


def generated_pages(project, profile: str, states: dict[str, dict | None],
                    downloads: list[str] = ()) -> dict[str, str]:
    from .exercises import exercise_index, exercises_page

    rows = ledger_rows(project, profile)
    names = chapter_order(project)
    exercises = exercises_page(exercise_index(project.notebooks_dir, names),
                               {n: _title(project.notebook_path(n)) for n in names})
    titles = {n: _title(project.notebook_path(n)) for n in names}
    return {"status.md": status_page(project, profile, states, downloads),
            "exercises.md": exercises,
            "findings.md": findings.findings_page(rows, profile),
            # fragments the introduction includes (not in the toc: built only where included)
            "chapter_map.md": findings.chapter_map(rows, project.book_dir / "_toc.yml", titles),
            "cite.md": findings.citation(project.root, project.book_dir,
                                         home.from_environment()),
            "ledger.md": ledger_page(project, profile),
            "ledger.json": json.dumps(rows, indent=2, ensure_ascii=False) + "\n"}


def not_executed_notebook(name: str, state: dict | None) -> str:
    """A page standing in for a chapter with no successful execution, saying so plainly."""
    import nbformat

    why = f"Its last attempt failed: `{state['error']}`." if state and state.get("error") else \
        "It has not been executed yet."
    nb = nbformat.v4.new_notebook()
    # A fixed cell id: nbformat draws a random one, which would make every staging rewrite the
    # page and every no-op build re-read it.
    nb.cells.append(nbformat.v4.new_markdown_cell(
        f"# {name}\n\nThis chapter has no executed output in this build. {why} "
        "See the execution status page.", id="not-executed"))
    return nbformat.writes(nb)


def staged_toc(toc_path: Path, notebook_names: list[str]) -> str:
    """The book's table of contents without chapters whose notebook does not exist (yet)."""
    toc = yaml.safe_load(toc_path.read_text(encoding="utf-8"))
    have = {f"chapters/{n}" for n in notebook_names}

    def keep(entry: dict) -> bool:
        f = entry.get("file", "")
        return not f.startswith("chapters/") or f in have

    parts = []
    for part in toc.get("parts", []):
        chapters = [c for c in part.get("chapters", []) if keep(c)]
        if chapters:
            parts.append({**part, "chapters": chapters})
    toc["parts"] = parts
    return yaml.safe_dump(toc, sort_keys=False, allow_unicode=True)


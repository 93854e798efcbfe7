"""The library reference's Sphinx extension: the library's docstrings read as they are written.

The library's docstrings are plain text with Sphinx roles (``:func:`…```), read in a terminal
and by ``help()`` as often as in the book; autodoc parses them as reStructuredText, where some
habits of that plain text mean something else. This extension (an ``autodoc-process-docstring``
handler, for the ``moe_routing`` objects only) reads them as their authors meant:

* ``|x|`` is an absolute value or a norm (``|∇g|``, ``|x_1|^p``), never a reStructuredText
  substitution: every ``|`` outside inline literals, roles, literal blocks and grid tables is
  escaped (:func:`escape_bars`), so the text shows as written instead of failing the build;
* a role names an object the way Python reaches it from the module at hand: ``:mod:`.laws```
  (a sibling module), ``:func:`collect_router_logits``` (a name the package re-exports),
  ``:class:`moe_routing.model.MoETransformer``` (the package's public path). Sphinx knows each
  object at the one place autodoc documents it, where it is defined, and would leave these
  without a link (or, for a relative ``.routers`` that two packages have, warn that the target
  is ambiguous). Each target is resolved in Python and rewritten to that place
  (:func:`canonical_target`), the text shown unchanged; a target that does not resolve is left
  as written;
* a module constant shows its value only when it is short and plain (:func:`shown_value`: a
  number, a string, a tuple of them, ...): autodoc would print any value's ``repr`` -- whole
  tables, a function object's address, the absolute path of the checkout the book was built
  in -- so the book's configuration turns values off (``no-value``) and this gives the short
  ones back, as a line ``Value: ...`` after the description;
* a docstring that still does not parse as reStructuredText (a column layout of fields with
  hanging indents, say) is shown as written, one block of plain text as ``help()`` shows it
  (:func:`verbatim`), instead of failing the build, whose warnings are errors; the build's log
  names each such object (``api_docstrings: the docstring of ... is not reStructuredText``);
* a dataclass field whose default comes from a factory is shown ``= list()``, not
  ``= <factory>`` (:func:`factory_defaults`), which would make the whole signature unreadable.

It also gives the reference its one directive, ``moe-submodules``: every public module of a
package (names without a leading underscore, sub-packages included, in name order), each under
its own heading and documented by ``automodule`` with the members it defines. A module added to
the package is in the reference with no edit of the page. Its option ``exclude`` names members
(``module.Member``, comma-separated) to leave out of the reference.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import re
import sys
import types

from docutils import nodes
from docutils.frontend import get_default_settings
from docutils.parsers.rst import Parser, directives
from docutils.utils import new_document
from docutils.statemachine import StringList
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

PACKAGE = "moe_routing"
#: the objects whose docstrings this build showed as written (:func:`verbatim`)
VERBATIM: set[str] = set()
logger = logging.getLogger(__name__)

# inline literals, roles with their content, interpreted text and references: left as they are
_INLINE = re.compile(r"``.+?``|:[A-Za-z][\w:.-]*:`[^`]*`|`[^`]*`_{0,2}")
_ROLE = re.compile(r":(?:py:)?(mod|func|class|meth|attr|data|obj|exc|const):`([^`<>]+)`")


def _escape_line(line: str) -> str:
    out, pos = [], 0
    for m in _INLINE.finditer(line):
        out.append(line[pos:m.start()].replace("\\|", "|").replace("|", "\\|"))
        out.append(m.group(0))
        pos = m.end()
    out.append(line[pos:].replace("\\|", "|").replace("|", "\\|"))
    return "".join(out)


_GRID_BORDER = re.compile(r"^\+([-=]+\+)+$")


def escape_bars(lines: list[str]) -> list[str]:
    """``lines`` of a docstring with every ``|`` escaped outside inline literals, roles,
    literal blocks (after a paragraph ending in ``::``), doctest blocks (``>>>``) and grid
    tables (a block of lines that opens with a ``+---+`` border)."""
    out: list[str] = []
    literal_indent = None            # indentation of the paragraph that opened a literal block
    doctest = table = False
    previous = ""
    for line in lines:
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if not previous.strip() and _GRID_BORDER.match(stripped):
            table = True
        previous = line
        if table:
            if stripped:
                out.append(line)
                continue
            table = False
        if literal_indent is not None:
            if not stripped or indent > literal_indent:
                out.append(line)
                continue
            literal_indent = None
        if doctest:
            if stripped:
                out.append(line)
                continue
            doctest = False
        if stripped.startswith(">>>"):
            doctest = True
            out.append(line)
            continue
        out.append(_escape_line(line))
        if stripped.endswith("::"):
            literal_indent = indent
    return out


def _resolve(path: str):
    """The object a dotted path names (the longest importable module, then attributes), with
    the path where it is defined: a module's name, a class's or function's ``__module__`` and
    ``__qualname__``, an attribute's owner's path and its name. None when it does not resolve."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        name = ".".join(parts[:i])
        try:
            obj = sys.modules.get(name) or importlib.import_module(name)
        except Exception:  # noqa: BLE001 -- not a module (or not importable): fewer parts
            continue
        where = obj.__name__
        for attr in parts[i:]:
            try:
                obj = getattr(obj, attr)
            except AttributeError:
                return None
            if isinstance(obj, types.ModuleType):
                where = obj.__name__
            elif (isinstance(getattr(obj, "__qualname__", None), str)
                  and isinstance(getattr(obj, "__module__", None), str)
                  and "<locals>" not in obj.__qualname__ and (isinstance(obj, type)
                                                               or callable(obj))):
                where = f"{obj.__module__}.{obj.__qualname__}"
            else:
                where = f"{where}.{attr}"
        return obj, where
    return None


def canonical_target(target: str, module: str) -> str | None:
    """Where the object that a role's ``target`` names, read from the module ``module``, is
    defined (its documented name), or None when it does not resolve in the library.

    A leading ``.`` is relative to the package ``module`` belongs to (the package itself for a
    package's docstring); an unqualified name is looked up in ``module``, then in its package,
    then as an absolute path."""
    name = target.lstrip("~")
    mod = sys.modules.get(module)
    package = module if getattr(mod, "__path__", None) is not None else module.rpartition(".")[0]
    if name.startswith("."):
        candidates = [f"{package}{name}"]
    else:
        candidates = [f"{module}.{name}", f"{package}.{name}", name]
    for candidate in candidates:
        found = _resolve(candidate)
        if found is not None and found[1].startswith(PACKAGE + "."):
            return found[1]
    return None


def link_roles(lines: list[str], module: str) -> list[str]:
    """``lines`` with each role's target rewritten to the documented name of its object
    (:func:`canonical_target`), shown as written (without the ``~``: its last part)."""
    def fix(m: re.Match) -> str:
        role, target = m.group(1), m.group(2).strip()
        where = canonical_target(target, module)
        if where is None or where == target:
            return m.group(0)
        shown = target.lstrip("~")
        shown = shown.rsplit(".", 1)[-1] if target.startswith("~") else shown.lstrip(".")
        return f":py:{role}:`{shown} <{where}>`"

    return [_ROLE.sub(fix, line) for line in lines]


#: the longest value :func:`shown_value` shows (characters of its ``repr``)
VALUE_CHARS = 60
_PLAIN = (bool, int, float, complex, str, bytes, type(None))


def shown_value(value) -> str | None:
    """The ``repr`` of a module constant if it is plain and short enough to show, else None:
    a number, a string (no path separator, no backslash) or a tuple or list of them, at most
    :data:`VALUE_CHARS` characters (not a set: its order, and so its ``repr``, changes from one
    process to the next)."""
    items = value if isinstance(value, (tuple, list)) else (value,)
    if not all(isinstance(v, _PLAIN) for v in items):
        return None
    text = repr(value)
    if len(text) > VALUE_CHARS or "\\" in text or "/" in text or "`" in text:
        return None
    return text


_ANY_ROLE = re.compile(r":[A-Za-z][\w:.+-]*:`([^`]*)`|(?<![`\w])`([^`]+)`(?!`)_{0,2}")


def parses_cleanly(lines: list[str]) -> bool:
    """Whether the reStructuredText ``lines`` parse without a warning or an error (roles and
    interpreted text read as literals: the check is about the text's structure, indentation,
    tables and inline markup, not about where a role points)."""
    text = "\n".join(_ANY_ROLE.sub(lambda m: "``" + (m.group(1) or m.group(2) or " ") + "``", line)
                     for line in lines)
    document = new_document("<docstring>", _check_settings())
    Parser().parse(text, document)
    return not any(m["level"] >= 2 for m in document.findall(nodes.system_message))


@functools.cache
def _check_settings():
    import io

    settings = get_default_settings(Parser)
    for key, value in {"report_level": 5, "halt_level": 5, "warning_stream": io.StringIO(),
                       "file_insertion_enabled": False, "raw_enabled": False}.items():
        setattr(settings, key, value)
    return settings


def verbatim(lines: list[str]) -> list[str]:
    """A docstring shown as written, as ``help()`` shows it: one block of plain text."""
    body = [f"   {line}" if line.strip() else "" for line in lines]
    return [".. code-block:: text", "", *body, ""] if any(body) else []


def _module_of(name: str) -> str:
    """The module a documented object's full name lives in (the longest imported prefix)."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        if isinstance(sys.modules.get(".".join(parts[:i])), types.ModuleType):
            return ".".join(parts[:i])
    return name


def process_docstring(app, what, name, obj, options, lines):
    if not (name == PACKAGE or name.startswith(PACKAGE + ".")):
        return
    read = link_roles(escape_bars(lines), _module_of(name))
    if parses_cleanly(read):
        lines[:] = read
    else:
        logger.info(f"api_docstrings: the docstring of {name} is not reStructuredText; shown "
                    "as written")
        VERBATIM.add(name)
        lines[:] = verbatim(lines)
    value = shown_value(obj) if what == "data" else None
    if value is not None:
        lines[:] = [*lines, *([""] if lines and lines[-1].strip() else []),
                    f"Value: ``{value}``"]


def public_submodules(package: str) -> list[str]:
    """Every module and sub-package under ``package`` whose dotted name has no part starting
    with an underscore, in name order."""
    pkg = importlib.import_module(package)
    return sorted(m.name for m in pkgutil.walk_packages(pkg.__path__, package + ".")
                  if not any(part.startswith("_") for part in m.name.split(".")))


def automodule_lines(module: str, exclude: list[str]) -> list[str]:
    """The ``automodule`` directive of ``module`` with the members of ``exclude`` (full names,
    ``module.Member``) that belong to it left out."""
    skip = [name.rpartition(".")[2] for name in exclude if name.rpartition(".")[0] == module]
    return [f".. automodule:: {module}", *([f"   :exclude-members: {', '.join(skip)}"]
                                            if skip else [])]


class Submodules(SphinxDirective):
    """``.. moe-submodules:: moe_routing.boundary`` (see the module docstring): one section per
    public submodule, titled by its name relative to the package. The sections carry ids, not
    names, so that a title shared with another page (``routers``) is no cross-reference label."""

    required_arguments = 1
    option_spec = {"exclude": directives.unchanged}

    def run(self):
        package = self.arguments[0].strip()
        exclude = [n.strip() for n in self.options.get("exclude", "").split(",") if n.strip()]
        modules = public_submodules(package)
        unknown = [n for n in exclude if n.rpartition(".")[0] not in modules]
        if unknown:
            raise self.error(f"moe-submodules {package}: exclude names {unknown}, not members "
                             f"of its submodules ({', '.join(modules)})")
        sections = []
        for module in modules:
            short = module.removeprefix(package + ".")
            section = nodes.section(ids=[nodes.make_id(f"api-{module}")])
            section += nodes.title("", "", nodes.literal(short, short))
            self.state.nested_parse(StringList(automodule_lines(module, exclude),
                                               source=self.get_source_info()[0]),
                                    self.content_offset, section)
            sections.append(section)
        return sections


def factory_defaults(obj, signature: str | None) -> str | None:
    """A dataclass's signature with each ``= <factory>`` (a field's ``default_factory``, which
    is what ``inspect`` shows) written as the call that makes the default (``= list()``), or
    ``= ...`` for a factory without a plain name: ``<factory>`` is no Python expression, and a
    signature that does not parse is shown raw, every annotation a long unbroken path."""
    import dataclasses

    if not signature or "<factory>" not in signature or not dataclasses.is_dataclass(obj):
        return signature
    for field in dataclasses.fields(obj):
        factory = field.default_factory
        if factory is dataclasses.MISSING:
            continue
        name = getattr(factory, "__qualname__", "")
        call = f"{name}()" if name.isidentifier() else "..."
        signature = re.sub(rf"(\b{re.escape(field.name)}\b[^,=()]*=\s*)<factory>",
                           lambda m, call=call: m.group(1) + call, signature, count=1)
    return signature.replace("<factory>", "...")


def process_signature(app, what, name, obj, options, signature, return_annotation):
    if not (name == PACKAGE or name.startswith(PACKAGE + ".")):
        return None
    fixed = factory_defaults(obj, signature)
    return None if fixed == signature else (fixed, return_annotation)


def setup(app):
    app.setup_extension("sphinx.ext.autodoc")
    app.connect("autodoc-process-docstring", process_docstring)
    app.connect("autodoc-process-signature", process_signature)
    app.add_directive("moe-submodules", Submodules)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

"""The ``hf`` extra of the library (part of :mod:`moe_routing.hf`): the transformers releases
it installs (:data:`TRANSFORMERS_RANGE`), :func:`require_transformers` -- where the package
imports ``transformers``, refusing a missing or another release by naming the extra -- and what
the extra adds to an install (:func:`extra_install_size`, read from the packages' metadata).

Separate because every other module of the package calls :func:`require_transformers` before it
touches a model, and none of them needs the install's size.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._internal.validation import fail, require

#: the optional dependency group of pyproject.toml that installs transformers
EXTRA = "hf"
#: the transformers releases this package is written against (the extra's range)
TRANSFORMERS_RANGE = (">=5.2", "<6")


def require_transformers():
    """The ``transformers`` module, or an ImportError naming the extra that installs it."""
    try:
        import transformers
    except ImportError as err:
        raise ImportError(
            f"moe_routing.hf needs Hugging Face transformers {','.join(TRANSFORMERS_RANGE)}, the "
            f"library's {EXTRA!r} extra: pip install 'moe_routing[{EXTRA}]' (in a checkout: "
            f"pip install -e '.[{EXTRA}]')") from err
    from packaging.version import Version

    v = Version(transformers.__version__)
    require(Version("5.2") <= v < Version("6"), "transformers.__version__",
            transformers.__version__, f"a release {','.join(TRANSFORMERS_RANGE)} (the "
            f"{EXTRA!r} extra); its routers are recorded differently in other series")
    return transformers



# ------------------------------------------------------------------------ the extra's size
@dataclass(frozen=True)
class InstallSize:
    """What the ``extra`` adds to the base install: ``packages`` ``(name, version, bytes)``,
    largest first, ``total_bytes``, and ``base_packages`` (how many the base install has)."""

    extra: str
    packages: tuple[tuple[str, str, int], ...]
    total_bytes: int
    base_packages: int

    @property
    def total_mib(self) -> float:
        return self.total_bytes / 2 ** 20


def _closure(requirements) -> set[str]:
    """Canonical names of the installed distributions ``requirements`` (packaging
    Requirements) pull in, themselves included; environment markers are evaluated, extras of
    a requirement followed, requirements not installed skipped (they are not on disk)."""
    from importlib import metadata

    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen, names, todo = set(), set(), list(requirements)
    while todo:
        req = todo.pop()
        key = (canonicalize_name(req.name), tuple(sorted(req.extras)))
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(req.name)
        except metadata.PackageNotFoundError:
            continue
        names.add(key[0])
        envs = [dict(default_environment(), extra=e) for e in (req.extras or {""})]
        for line in dist.requires or []:
            r = Requirement(line)
            if r.marker is None or any(r.marker.evaluate(env) for env in envs):
                todo.append(r)
    return names


def extra_install_size(extra: str = EXTRA, package: str = "moe_routing") -> InstallSize:
    """The on-disk size of what the library's ``extra`` adds to its base install: the
    distributions the extra's requirements pull in (read from the installed ``package``'s
    metadata, markers evaluated) that its base requirements do not, each measured as the sum
    of the files its ``RECORD`` lists (what ``pip uninstall`` removes: its folders in
    site-packages, metadata, scripts).  Refused, naming the extra, when it is not installed."""
    from importlib import metadata

    from packaging.requirements import Requirement

    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        fail("package", package, "an installed distribution (pip install -e .)")
    reqs = [Requirement(r) for r in dist.requires or []]
    base = [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]
    wanted = [r for r in reqs if r.marker is not None and not r.marker.evaluate({"extra": ""})
              and r.marker.evaluate({"extra": extra})]
    require(len(wanted) > 0, "extra", extra, f"an extra of {package} with requirements")
    added = _closure(wanted) - _closure(base)
    for r in wanted:
        try:
            metadata.distribution(r.name)
        except metadata.PackageNotFoundError:
            fail("extra", extra, f"an installed extra ({r.name} is missing: pip install -e "
                 f"'.[{extra}]')")
    sizes = []
    for name in added:
        d = metadata.distribution(name)
        total = 0
        for f in d.files or []:
            path = d.locate_file(f)
            if path.is_file():
                total += path.stat().st_size
        sizes.append((name, d.version, total))
    sizes.sort(key=lambda t: (-t[2], t[0]))
    return InstallSize(extra, tuple(sizes), sum(t[2] for t in sizes), len(_closure(base)))

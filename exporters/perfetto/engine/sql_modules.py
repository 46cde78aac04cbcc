"""SQL modules: the .sql files the readers load into an opened trace, by name, each once.

A module is a .sql file under the `exporters` package, named by its path from there with
dots and without `.sql` (`analysis.gaps` is exporters/analysis/gaps.sql), as Perfetto's
standard library names its modules.  Its leading comment declares what it is:

    -- needs: perfetto.engine.xpu_views, analysis.span   modules it reads (loaded first)
    -- inputs: _xpu_op_opening                           tables Python makes before it (`once`)
    -- defines: xpu_gpu_gap, xpu_focus_gap               the views/tables/functions it creates
    -- params: span_all bool, steps_glob str             its parameters, `$name` in its text

A module that defines nothing is a query: its text is one SELECT whose rows `rows()`
returns (`-- returns:` lists their columns).  Parameters reach the text as typed literals,
never as pasted text: `int`, `float` and `bool` as numbers, `str` quoted, `str_list` as
quoted literals separated by commas (inside `IN (...)`), `ident` only where it is a plain
identifier, `relation` only as VIEW or TABLE.

What is loaded is recorded on the trace (`Trace.sql_loaded`: module name -> the parameters
it was loaded with), so a module runs once per opened trace; asking again with other
parameters is an error (the views and tables it made answer for the first ones).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable

from exporters.perfetto.engine.trace_processor import QueryError, Row, Trace, sql_literal

HEADER_KEYS = ("needs", "inputs", "defines", "params", "returns")
PARAM_TYPES = ("int", "float", "bool", "str", "str_list", "ident", "relation")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_PLACEHOLDER = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")
_MISSING = re.compile(r"no such (?:table|view|function|column): (\w+)", re.IGNORECASE)


class SqlModuleError(ValueError):
    """A module cannot be found, read or loaded as asked; the message names the module."""


@dataclass(frozen=True)
class SqlModule:
    name: str
    text: str  # as written, `$name` where a parameter goes
    needs: tuple[str, ...]
    inputs: tuple[str, ...]
    defines: tuple[str, ...]
    params: dict[str, str]  # name -> type
    returns: tuple[str, ...]

    def render(self, params: Mapping[str, object]) -> str:
        """The text with each `$name` replaced by its parameter as a typed SQL literal."""
        missing = [p for p in self.params if p not in params]
        if missing:
            raise SqlModuleError(f"SQL module {self.name} needs parameter(s) {', '.join(missing)}")
        literals = {p: _literal(self.name, p, t, params[p]) for p, t in self.params.items()}
        return _PLACEHOLDER.sub(lambda m: literals[m.group(1)], self.text)


def _literal(module: str, name: str, kind: str, value: object) -> str:
    where = f"SQL module {module}, parameter {name} ({kind})"
    if kind == "bool" and isinstance(value, bool):
        return "1" if value else "0"
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if (
        kind == "float"
        and isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
    ):
        return repr(float(value))
    if kind == "str" and isinstance(value, str):
        return sql_literal(value)
    if (
        kind == "str_list"
        and isinstance(value, list | tuple)
        and all(isinstance(v, str) for v in value)
    ):
        return ", ".join(sql_literal(v) for v in value)
    if kind == "ident" and isinstance(value, str) and _IDENT.match(value):
        return value
    if kind == "relation" and value in ("VIEW", "TABLE"):
        return str(value)
    raise SqlModuleError(f"{where}: not a valid value: {value!r}")


def parse(name: str, text: str) -> SqlModule:
    """A module from its text: the header lines of its leading comment, checked."""
    header: dict[str, list[str]] = {k: [] for k in HEADER_KEYS}
    last = None  # the key a `--   ` line continues
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if not stripped.startswith("--"):
            break  # the header is the leading comment
        key, colon, rest = stripped[2:].strip().partition(":")
        if colon and key in HEADER_KEYS:
            last = key
        elif last is not None and stripped.startswith("--   "):
            rest = stripped[2:]
        else:
            last = None
            continue
        header[last].extend(v.strip() for v in rest.split(",") if v.strip())
    params: dict[str, str] = {}
    for item in header["params"]:
        parts = item.split()
        if len(parts) != 2 or parts[1] not in PARAM_TYPES or not _IDENT.match(parts[0]):
            raise SqlModuleError(
                f"SQL module {name}: bad `-- params:` entry {item!r} (write `name type`, "
                f"type one of {', '.join(PARAM_TYPES)})"
            )
        params[parts[0]] = parts[1]
    if not header["defines"] and not header["returns"]:
        raise SqlModuleError(
            f"SQL module {name}: its header declares neither `-- defines:` (the views and "
            "tables it creates) nor `-- returns:` (the columns of its rows)"
        )
    used = set(_PLACEHOLDER.findall(text))
    if used != set(params):
        raise SqlModuleError(
            f"SQL module {name}: its `$` parameters ({', '.join(sorted(used)) or 'none'}) "
            f"are not those its `-- params:` declares ({', '.join(params) or 'none'})"
        )
    return SqlModule(
        name,
        text,
        tuple(header["needs"]),
        tuple(header["inputs"]),
        tuple(header["defines"]),
        params,
        tuple(header["returns"]),
    )


class Library:
    """The modules under one folder (the `exporters` package; a test's own folder)."""

    def __init__(self, root: Traversable) -> None:
        self.root = root
        self._modules: dict[str, SqlModule] = {}

    def module(self, name: str) -> SqlModule:
        found = self._modules.get(name)
        if found is None:
            parts = name.split(".")
            if not all(_IDENT.match(p) for p in parts):
                raise SqlModuleError(f"not a SQL module name: {name!r}")
            path = self.root.joinpath(*parts[:-1], parts[-1] + ".sql")
            if not path.is_file():
                raise SqlModuleError(f"no SQL module {name} ({'/'.join(parts)}.sql)")
            found = self._modules[name] = parse(name, path.read_text())
        return found

    def names(self) -> list[str]:
        """Every module of the library, sorted."""
        found: list[str] = []

        def walk(folder: Traversable, prefix: tuple[str, ...]) -> None:
            for entry in folder.iterdir():
                if entry.is_dir() and _IDENT.match(entry.name):
                    walk(entry, (*prefix, entry.name))
                elif entry.name.endswith(".sql"):
                    found.append(".".join((*prefix, entry.name.removesuffix(".sql"))))

        walk(self.root, ())
        return sorted(found)

    def order(self, name: str) -> list[SqlModule]:
        """`name` after everything it needs, each once, needs in their declared order."""
        out: list[SqlModule] = []
        seen: set[str] = set()

        def visit(current: str, path: tuple[str, ...]) -> None:
            if current in path:
                raise SqlModuleError(f"SQL modules need each other: {' -> '.join(path)}")
            if current in seen:
                return
            module = self.module(current)
            for need in module.needs:
                visit(need, (*path, current))
            seen.add(current)
            out.append(module)

        visit(name, ())
        return out

    def definer(self, relation: str) -> str | None:
        """The module that defines `relation`, None where none does."""
        return next((n for n in self.names() if relation in self.module(n).defines), None)

    # -- the per-trace work

    def load(self, trace: Trace, name: str, **params: object) -> None:
        """Load module `name` into `trace` after what it needs, each module once per trace.
        `params` go to every module of the load that declares them; a module loaded before
        with other values of those it is given is an error."""
        for module in self.order(name):
            given = {p: params[p] for p in module.params if p in params}
            loaded = trace.sql_loaded.get(module.name)
            if loaded is not None:
                differ = {p: v for p, v in given.items() if loaded.get(p) != v}
                if differ:
                    was = ", ".join(f"{p}={loaded.get(p)!r}" for p in differ)
                    now = ", ".join(f"{p}={v!r}" for p, v in differ.items())
                    raise SqlModuleError(
                        f"SQL module {module.name} is already loaded on this trace with "
                        f"{was}, not {now}"
                    )
                continue
            if not module.defines:
                raise SqlModuleError(
                    f"SQL module {module.name} is a query (it defines nothing to load): "
                    "read its rows with sql_modules.rows(), need what it reads instead"
                )
            self._check_inputs(trace, module)
            text = module.render(given)
            self._run(trace, module, text)
            trace.sql_loaded[module.name] = given
            self._check_defined(trace, module)

    def script(self, name: str, skip: Iterable[str] = (), **params: object) -> str:
        """The text of module `name` and of what it needs, in order (all but `skip` and
        what they need): one script for a trace that loaded `skip` (a batch query)."""
        done = {m.name for s in skip for m in self.order(s)}
        return "\n".join(
            m.render({p: params[p] for p in m.params if p in params})
            for m in self.order(name)
            if m.name not in done
        )

    def rows(self, trace: Trace, name: str, **params: object) -> list[Row]:
        """The rows of query module `name` (what it needs loaded first)."""
        module = self.module(name)
        if module.defines or not module.returns:
            raise SqlModuleError(f"SQL module {name} is not a query (it defines tables)")
        for need in module.needs:
            self.load(trace, need, **params)
        text = module.render({p: params[p] for p in module.params if p in params})
        try:
            columns, found = trace.query_columns(text)
        except QueryError as exc:
            raise self._explained(module, exc) from None
        if tuple(columns) != module.returns:
            raise SqlModuleError(
                f"SQL module {name} returned columns {', '.join(columns)}, not those its "
                f"`-- returns:` declares ({', '.join(module.returns)})"
            )
        return [dict(zip(columns, row, strict=True)) for row in found]

    def _run(self, trace: Trace, module: SqlModule, text: str) -> None:
        try:
            trace.execute(text)
        except QueryError as exc:
            raise self._explained(module, exc) from None

    def _explained(self, module: SqlModule, exc: QueryError) -> QueryError:
        """The engine's error, with the module named and, where it reads something another
        module defines that its header does not name, which one to add."""
        message = f"SQL module {module.name}: {exc}"
        missing = _MISSING.search(str(exc))
        if missing:
            definer = self.definer(missing.group(1))
            if definer is not None and definer not in {m.name for m in self.order(module.name)}:
                message += f" ({missing.group(1)} is defined by {definer}: add it to `-- needs:`)"
        return type(exc)(message)

    def _check_inputs(self, trace: Trace, module: SqlModule) -> None:
        missing = [t for t in module.inputs if t not in trace.sql_loaded]
        if missing:
            raise SqlModuleError(
                f"SQL module {module.name} reads {', '.join(missing)}, made by Python before "
                "it is loaded (sql_modules.once); it was not made on this trace"
            )

    def _check_defined(self, trace: Trace, module: SqlModule) -> None:
        listed = ", ".join(sql_literal(d) for d in module.defines)
        found = {
            str(r["name"])
            for r in trace.query(f"select name from sqlite_master where name in ({listed})")
        }
        absent = [d for d in module.defines if d not in found]
        if absent:
            raise SqlModuleError(
                f"SQL module {module.name} declares `-- defines: {', '.join(absent)}` but "
                "did not create it: fix its header or its statements"
            )


@cache
def library() -> Library:
    """The project's modules (under the `exporters` package): files of the installed code,
    each parsed once per process (what a trace has loaded is the trace's record)."""
    return Library(resources.files("exporters"))


def load(trace: Trace, name: str, **params: object) -> None:
    """Load module `name` (and what it needs) into `trace`, once: see Library.load."""
    library().load(trace, name, **params)


def rows(trace: Trace, name: str, **params: object) -> list[Row]:
    """The rows of query module `name`: see Library.rows."""
    return library().rows(trace, name, **params)


def script(name: str, skip: Iterable[str] = (), **params: object) -> str:
    """Module `name`'s text and its needs': see Library.script."""
    return library().script(name, skip, **params)


def loaded(trace: Trace, name: str) -> Mapping[str, object] | None:
    """The parameters module `name` was loaded with on `trace`, None where it was not."""
    return trace.sql_loaded.get(name)


def once(trace: Trace, table: str, create: Callable[[Trace], None]) -> None:
    """Make `table` with Python (`create(trace)`) once per trace, recorded beside the
    modules: a module that reads it declares it in `-- inputs:`."""
    if table not in trace.sql_loaded:
        create(trace)
        trace.sql_loaded[table] = {}

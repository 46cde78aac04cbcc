"""The SQL module loader (exporters/perfetto/engine/sql_modules.py) and the modules it loads.

Every .sql under exporters/ declares what it needs, defines and takes, and the declarations
are true: each module loads on its own on a real trace (the real trace_processor) with only
what its header names, defines exactly what it says, and reads nothing another module
defines that its needs do not bring.  The loader's own contract runs on modules of a test's
folder: an undeclared need or a definition that is not made fails with a message naming the
module, a second load runs nothing, parameters reach the SQL as typed values only."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from exporters.analysis import busy, step_busy
from exporters.perfetto.engine import sql_modules
from exporters.perfetto.engine.sql_modules import Library, SqlModuleError, parse
from exporters.perfetto.engine.trace_processor import QueryError, Trace, open_trace

from . import analysis_traces

LIBRARY = sql_modules.library()
EXPORTERS = Path(sql_modules.__file__).resolve().parents[2]

# A value for every parameter any module declares (the defaults the commands use).
PARAMS: dict[str, object] = {
    "window": 0,
    "whole_trace": True,
    "gpu_op_as": "VIEW",
    "span_all": False,
    "period": 1_000_000,
    "launch_host_ns": 50_000,
    "short_ns": 2_000_000,
    "loop_share": 0.9,
    "stale_ns": 1_000_000_000,
    "steps_on": True,
    "steps_glob": "ProfilerStep#*",
    "detect": True,
    "interval_metrics": ["sm active", "tensor active"],
    "steps": "ProfilerStep#*",
    "top": 5,
    "gaps": "xpu_gpu_gap",
    "asked_steps": "",
    "steps_how": "",
    "chosen_steps": "ProfilerStep#*",
}

# The tables Python makes for a module to read (`-- inputs:`), by who makes them.
MAKERS: dict[str, Callable[[Trace], None]] = {
    "_xpu_op_opening": busy.create_openings,
    "_xpu_step_kind_busy": step_busy.kind_busy_table,
}

_CREATES = re.compile(r"\bCREATE\s+PERFETTO\s+(VIEW|TABLE|INDEX|\$\w+)\s+(\w+)", re.IGNORECASE)
_OURS = re.compile(r"\b_?xpu_\w+")


def _code(text: str) -> str:
    """The SQL without its comments and string literals (each literal left as '')."""
    return re.sub(r"--[^\n]*|'(?:[^']|'')*'", lambda m: "" if m[0][0] == "-" else "''", text)


def _sql_files() -> list[str]:
    return sorted(
        ".".join(p.relative_to(EXPORTERS).with_suffix("").parts) for p in EXPORTERS.rglob("*.sql")
    )


def test_every_sql_file_is_a_module_of_the_library() -> None:
    assert LIBRARY.names() == _sql_files()
    assert len(LIBRARY.names()) >= 20


@pytest.mark.parametrize("name", _sql_files())
def test_header_says_what_the_module_defines_reads_and_takes(name: str) -> None:
    module = LIBRARY.module(name)
    code = _code(module.text)
    creates = _CREATES.findall(code)
    made = [n for kind, n in creates if kind.upper() != "INDEX"]
    indexes = {n for kind, n in creates if kind.upper() == "INDEX"}
    # defines: exactly what it creates (a query module creates nothing and says its columns).
    assert list(module.defines) == made
    assert module.defines or module.returns
    for need in module.needs:
        LIBRARY.module(need)  # a real module
    # Every relation of ours it reads is its own, an input, or brought by its needs.
    brought = {d for m in LIBRARY.order(name) for d in m.defines}
    read = set(_OURS.findall(code)) - indexes
    unexplained = read - brought - set(module.inputs)
    assert not unexplained, f"{name} reads {sorted(unexplained)}: add to -- needs/-- inputs"
    assert set(module.inputs) <= set(MAKERS)
    assert set(module.params) <= set(PARAMS)


def test_no_two_modules_define_the_same_relation() -> None:
    seen: dict[str, str] = {}
    for name in LIBRARY.names():
        for relation in LIBRARY.module(name).defines:
            assert relation not in seen, f"{relation}: {seen.get(relation)} and {name}"
            seen[relation] = name


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sqlmod") / "sync.perfetto-trace"
    analysis_traces.write(path, "sync", steps=6)
    return path


def _load_alone(trace: Trace, name: str) -> None:
    """`name` on a fresh trace with nothing but what its header brings: the inputs Python
    makes are made where the order reaches the module reading them."""
    for module in LIBRARY.order(name):
        for table in module.inputs:
            sql_modules.once(trace, table, MAKERS[table])
        if module.defines:
            LIBRARY.load(trace, module.name, **PARAMS)
        else:
            LIBRARY.rows(trace, module.name, **PARAMS)


@pytest.mark.parametrize("name", _sql_files())
def test_each_module_loads_alone_on_a_real_trace(scenario: Path, name: str) -> None:
    with open_trace(scenario) as trace:
        _load_alone(trace, name)
        module = LIBRARY.module(name)
        if module.defines:
            assert sql_modules.loaded(trace, name) == {p: PARAMS[p] for p in module.params}
            for relation in module.defines:
                trace.query(f"select * from {relation} limit 1")  # readable
        # What it needs was loaded, nothing else.
        expected = {m.name for m in LIBRARY.order(name) if m.defines}
        assert {k for k in trace.sql_loaded if "." in k} == expected


def test_the_commands_modules_on_the_scenario_give_what_its_construction_says(
    scenario: Path,
) -> None:
    from exporters.analysis.analyze import analyze

    with open_trace(scenario) as trace:
        analysis = analyze(trace)
        assert analysis.steps is not None and analysis.steps.count == 6
        assert "analysis.scope" in trace.sql_loaded
        # Asked again, nothing is loaded twice: the same answer.
        assert analyze(trace).span == analysis.span


# -- the loader's contract, on modules of a test's own folder


def _library(tmp_path: Path, modules: dict[str, str]) -> Library:
    for name, text in modules.items():
        path = tmp_path.joinpath(*name.split(".")).with_suffix(".sql")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return Library(tmp_path)


A = "-- defines: t_a\nCREATE PERFETTO TABLE t_a AS SELECT 1 AS x;\n"


@pytest.fixture(scope="module")
def trace_path(scenario: Path) -> Path:
    return scenario


class _Counting:
    """Counts the statements a trace runs (wraps its execute)."""

    def __init__(self, trace: Trace) -> None:
        self.statements: list[str] = []
        run = trace.execute

        def execute(script: str) -> None:
            self.statements.append(script)
            run(script)

        trace.execute = execute  # type: ignore[method-assign]


def test_needs_load_first_and_a_second_load_runs_nothing(tmp_path: Path, trace_path: Path) -> None:
    lib = _library(
        tmp_path,
        {
            "base.a": A,
            "top.b": "-- needs: base.a\n-- defines: t_b\n"
            "CREATE PERFETTO TABLE t_b AS SELECT x + 1 AS y FROM t_a;\n",
        },
    )
    with open_trace(trace_path) as trace:
        counting = _Counting(trace)
        lib.load(trace, "top.b")
        assert [s.split("AS", 1)[0] for s in counting.statements] == [
            "-- defines: t_a\nCREATE PERFETTO TABLE t_a ",
            "-- needs: base.a\n-- defines: t_b\nCREATE PERFETTO TABLE t_b ",
        ]
        assert trace.scalar("select y from t_b") == 2
        lib.load(trace, "top.b")
        lib.load(trace, "base.a")
        assert len(counting.statements) == 2  # loaded once per trace
    with open_trace(trace_path) as other:
        assert other.sql_loaded == {}  # the record is the trace's, not the process's
        lib.load(other, "base.a")
        assert other.scalar("select x from t_a") == 1


def test_an_undeclared_need_fails_naming_the_module_and_the_missing_one(
    tmp_path: Path, trace_path: Path
) -> None:
    lib = _library(
        tmp_path,
        {
            "a": A,
            "b": "-- defines: t_b\nCREATE PERFETTO TABLE t_b AS SELECT x FROM t_a;\n",
        },
    )
    with open_trace(trace_path) as trace, pytest.raises(QueryError) as exc:
        lib.load(trace, "b")
    message = str(exc.value)
    assert message.startswith("SQL module b: ")
    assert "t_a is defined by a: add it to `-- needs:`" in message
    assert "\n" not in message


def test_a_declared_definition_not_made_fails_naming_the_module(
    tmp_path: Path, trace_path: Path
) -> None:
    lib = _library(
        tmp_path,
        {"c": "-- defines: t_c, t_missing\nCREATE PERFETTO TABLE t_c AS SELECT 1 AS x;\n"},
    )
    declared = r"SQL module c declares `-- defines: t_missing`"
    with open_trace(trace_path) as trace, pytest.raises(SqlModuleError, match=declared):
        lib.load(trace, "c")


def test_unknown_module_cycles_and_missing_inputs_fail_clearly(
    tmp_path: Path, trace_path: Path
) -> None:
    lib = _library(
        tmp_path,
        {
            "p": "-- needs: q\n-- defines: t_p\nCREATE PERFETTO TABLE t_p AS SELECT 1 AS x;\n",
            "q": "-- needs: p\n-- defines: t_q\nCREATE PERFETTO TABLE t_q AS SELECT 1 AS x;\n",
            "r": "-- inputs: t_python\n-- defines: t_r\n"
            "CREATE PERFETTO TABLE t_r AS SELECT * FROM t_python;\n",
        },
    )
    with open_trace(trace_path) as trace:
        with pytest.raises(SqlModuleError, match=r"no SQL module nowhere \(nowhere.sql\)"):
            lib.load(trace, "nowhere")
        with pytest.raises(SqlModuleError, match="need each other: p -> q"):
            lib.load(trace, "p")
        with pytest.raises(SqlModuleError, match="r reads t_python, made by Python"):
            lib.load(trace, "r")

        def make(t: Trace) -> None:
            t.execute("CREATE PERFETTO TABLE t_python AS SELECT 7 AS x")

        sql_modules.once(trace, "t_python", make)
        sql_modules.once(trace, "t_python", make)  # once: a second would fail (it exists)
        lib.load(trace, "r")
        assert trace.scalar("select x from t_r") == 7


PARAMETERISED = (
    "-- defines: t_p\n-- params: n int, f float, on bool, s str, names str_list, col ident\n"
    "CREATE PERFETTO TABLE t_p AS\n"
    "SELECT $n AS n, $f AS f, $on AS on_, $s AS s, 'b' IN ($names) AS listed, 5 AS $col;\n"
)


def test_parameters_reach_the_sql_as_typed_values(tmp_path: Path, trace_path: Path) -> None:
    lib = _library(tmp_path, {"p": PARAMETERISED})
    hostile = "x'); DROP TABLE slice; --"
    params = {"n": 3, "f": 0.5, "on": True, "s": hostile, "names": ["a", "b"], "col": "k"}
    with open_trace(trace_path) as trace:
        lib.load(trace, "p", **params)
        row = trace.query("select * from t_p")[0]
        assert row == {"n": 3, "f": 0.5, "on_": 1, "s": hostile, "listed": 1, "k": 5}
        assert trace.scalar("select count(*) from slice") > 0  # the text stayed a value
        # Loaded: the same values again are nothing to do, others an error naming the module.
        lib.load(trace, "p", **params)
        with pytest.raises(SqlModuleError, match=r"SQL module p is already loaded .* n=3, not n=4"):
            lib.load(trace, "p", **{**params, "n": 4})


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("n", "3; DROP TABLE slice"),
        ("n", True),  # a bool is no int
        ("n", 2.5),
        ("f", float("nan")),
        ("on", 1),
        ("s", 3),
        ("names", "ab"),
        ("col", "k; DROP TABLE slice"),
        ("col", "1k"),
    ],
)
def test_a_parameter_of_the_wrong_type_is_refused_before_any_sql(
    tmp_path: Path, key: str, value: object
) -> None:
    module = parse("p", PARAMETERISED)
    params = {"n": 3, "f": 0.5, "on": True, "s": "", "names": ["a"], "col": "k", key: value}
    with pytest.raises(SqlModuleError, match=rf"SQL module p, parameter {key} \("):
        module.render(params)


def test_a_header_that_does_not_match_the_text_is_refused() -> None:
    with pytest.raises(SqlModuleError, match=r"its `\$` parameters \(n\)"):
        parse("m", "-- defines: t\nCREATE PERFETTO TABLE t AS SELECT $n AS n;\n")
    with pytest.raises(SqlModuleError, match=r"declares \(n\)"):
        parse("m", "-- defines: t\n-- params: n int\nCREATE PERFETTO TABLE t AS SELECT 1;\n")
    with pytest.raises(SqlModuleError, match="bad `-- params:` entry 'n integer'"):
        parse("m", "-- defines: t\n-- params: n integer\nSELECT $n;\n")
    with pytest.raises(SqlModuleError, match="neither `-- defines:`"):
        parse("m", "-- A query without its columns.\nSELECT 1;\n")
    with pytest.raises(SqlModuleError, match=r"SQL module m needs parameter\(s\) n"):
        parse("m", "-- defines: t\n-- params: n int\nSELECT $n;\n").render({})


def test_a_query_module_returns_its_declared_columns(tmp_path: Path, trace_path: Path) -> None:
    lib = _library(
        tmp_path,
        {
            "a": A,
            "q": "-- needs: a\n-- params: k int\n-- returns: x, k\nSELECT x, $k AS k FROM t_a;\n",
            "bad": "-- returns: x\nSELECT 1 AS y;\n",
        },
    )
    with open_trace(trace_path) as trace:
        assert lib.rows(trace, "q", k=9) == [{"x": 1, "k": 9}]
        assert sql_modules.loaded(trace, "a") == {}  # its needs loaded first
        with pytest.raises(SqlModuleError, match=r"returned columns y, not .* \(x\)"):
            lib.rows(trace, "bad")
        with pytest.raises(SqlModuleError, match=r"SQL module q is a query"):
            lib.load(trace, "q", k=9)
        with pytest.raises(SqlModuleError, match=r"SQL module a is not a query"):
            lib.rows(trace, "a")


def test_the_batch_script_is_the_modules_after_those_already_loaded() -> None:
    from exporters.report.ranks import ranks_sql

    script = ranks_sql("it's*")
    # span.sql, gpu_busy.sql, ranks.sql, then the table: not the views a worker loads.
    assert "CREATE PERFETTO TABLE xpu_analysis_op" in script
    assert "CREATE PERFETTO VIEW xpu_report_window" in script
    assert "xpu_scope_thread AS" not in script and "xpu_gpu_op AS" not in script
    assert "GLOB 'it''s*'" in script and "$" not in _code(script)
    assert script.rstrip().endswith("SELECT * FROM xpu_rank")

"""The views for Spark SQL, translated from the DuckDB ``.sql`` files with sqlglot.

``spark_views()`` gives every view of ``analysis/sql`` (in dependency order) as Spark SQL;
``spark_tables()`` the lake's tables (``runs``, ``cache``, ``memory``, ...) as Spark views
over the stored rows, with the columns the DuckDB file computes at ingest
(``lake.lake_table_sql``, translated the same way); ``ember views --dialect spark`` prints
both.

How: sqlglot parses each DuckDB file and writes Spark SQL. Before that, the rewrites
that sqlglot does not do, on the parsed tree:

- the macros of ``sql/macros.sql`` are inlined (Spark has no macros): a call
  ``ember_key(k, s, t)`` becomes the macro's body with its parameters replaced;
- DuckDB's ``lambda x: ...`` is written ``x -> ...`` (sqlglot reads the arrow form);
- functions with no Spark twin of the same meaning (``_FUNCTIONS``):
  ``make_timestamp_ns`` (Spark timestamps are microseconds: ``timestamp_micros(ns div
  1000)``), ``regexp_extract`` with a list of group names (a ``named_struct`` of one
  ``regexp_extract`` per group), ``list_bool_or`` (``exists``), ``quantile_cont``
  (``percentile``), ``json_extract_string(x, '$')`` and casts to ``JSON`` (Spark keeps a
  JSON value as its text already);
- ``SELECT * ... QUALIFY <cond>`` (Spark has none; sqlglot's rewrite would add its window
  as a column ``_w``) keeps the row as a struct beside ``<cond>`` and selects the struct's
  fields (``_qualify_star``).

An ``ASOF LEFT JOIN`` (Spark has none) is rewritten for any CTE whose FROM is one
(``_asof_ctes``): the nearest right row at or after each left key, by a join and ``min_by``.
Hand-written (``_HAND``), because the DuckDB form has no translation: the LRU stack
distances of ``cache_what_if`` (a window whose frame size comes from the row, which Spark
does not allow: a self-join that counts the distinct keys between two lookups of a key).
It replaces one named CTE of the DuckDB view; the rest is translated from its file.
"""

from __future__ import annotations

import re
from functools import cache

import sqlglot
from sqlglot import exp

from ember.analysis.db import VIEW_NAMES, view_sql

__all__ = ["HAND_WRITTEN", "spark_tables", "spark_views", "to_spark"]


def _lambdas(sql: str) -> str:
    # DuckDB's lambda x: ... -> x -> ...; len(list) -> array_length (length stays a string's)
    sql = re.sub(r"\blen\s*\(", "array_length(", sql)
    return re.sub(r"\blambda\s+(\w+)\s*:", r"\1 ->", sql)


@cache
def _macros() -> dict[str, tuple[list[str], exp.Expr]]:
    """name -> (parameters, body) of each macro in ``sql/macros.sql``, bodies inlined."""
    text = _lambdas(view_sql("macros"))
    text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("--"))
    out: dict[str, tuple[list[str], exp.Expr]] = {}
    for m in re.finditer(
        r"CREATE\s+OR\s+REPLACE\s+MACRO\s+(\w+)\s*\(([^)]*)\)\s+AS\s+(.*?);\s*(?=CREATE|\Z)",
        text,
        re.S | re.I,
    ):
        name, params, body = m.group(1), m.group(2), m.group(3)
        tree = sqlglot.parse_one(f"SELECT {body}", read="duckdb").expressions[0]
        out[name.lower()] = ([p.strip() for p in params.split(",") if p.strip()], tree)
    # a macro may call one defined before it
    for name, (params, body) in list(out.items()):
        out[name] = (params, _inline(body, out))
    return out


def _inline(tree: exp.Expr, macros: dict[str, tuple[list[str], exp.Expr]]):
    def visit(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Anonymous) and str(node.this).lower() in macros:
            params, body = macros[str(node.this).lower()]
            args = dict(zip(params, node.expressions, strict=True))
            new = body.copy()

            def sub(n: exp.Expr) -> exp.Expr:
                if isinstance(n, exp.Column) and not n.table and n.name in args:
                    return args[n.name].copy()
                return n

            return new.transform(sub)
        return node

    return tree.transform(visit)


def _laterals(select: exp.Select) -> exp.Select:
    """``FROM t, unnest(list) AS u(x), range(a, b) AS d(i)`` -> ``FROM t LATERAL VIEW
    explode(list) u AS x LATERAL VIEW explode(<range>) d AS i`` (in their order)."""
    joins = select.args.get("joins") or []
    keep, laterals = [], list(select.args.get("laterals") or [])
    for join in joins:
        target = join.this
        series = target.this if isinstance(target, exp.Table) else None
        if join.args.get("on") is None and (
            isinstance(target, exp.Unnest) or isinstance(series, exp.GenerateSeries)
        ):
            alias = target.args.get("alias")
            values = target.expressions[0] if isinstance(target, exp.Unnest) else series
            assert values is not None
            assert alias is not None
            laterals.append(
                exp.Lateral(
                    this=exp.Explode(this=values.copy()),
                    view=True,
                    alias=exp.TableAlias(
                        this=alias.this.copy(), columns=[c.copy() for c in alias.columns]
                    ),
                )
            )
        else:
            keep.append(join)
    if len(keep) != len(joins):
        select.set("joins", keep)
        select.set("laterals", laterals)
    return select


def _zip_unnests(select: exp.Select) -> None:
    """``SELECT k, unnest(a) AS x, unnest(b) AS y`` (DuckDB unnests side by side, padding
    with NULL) -> ``SELECT k, inline(arrays_zip(a, b)) AS (x, y)`` (Spark allows one
    generator a SELECT)."""
    items = select.expressions
    unnests = [
        (i, e)
        for i, e in enumerate(items)
        if isinstance(e, exp.Alias) and isinstance(e.this, (exp.Unnest, exp.Explode))
    ]
    if len(unnests) < 2:
        return
    lists = []
    for _, e in unnests:
        inner = e.this
        lists.append((inner.expressions[0] if isinstance(inner, exp.Unnest) else inner.this).copy())
    zipped = exp.Aliases(
        this=exp.func("inline", exp.func("arrays_zip", *lists)),
        expressions=[exp.to_identifier(e.alias) for _, e in unnests],
    )
    first = unnests[0][0]
    drop = {i for i, _ in unnests}
    new = [zipped if i == first else e for i, e in enumerate(items) if i == first or i not in drop]
    select.set("expressions", new)


def _list_aggs(node: exp.Expr) -> exp.Expr:
    """DuckDB's ``list(x [ORDER BY k])`` keeps NULLs, follows its ORDER BY and is NULL for no
    rows; Spark's ``collect_list`` drops NULLs, has no order and gives []: collect
    ``struct(k..., x)``, sort, take ``x``, and NULL when empty (run once, last)."""
    where = None
    agg = node
    if isinstance(node, exp.Filter) and isinstance(node.this, exp.ArrayAgg):
        agg, where = node.this, node.expression
    elif not isinstance(node, exp.ArrayAgg) or isinstance(node.parent, exp.Filter):
        return node
    inner, order, distinct = agg.this, [], False
    if isinstance(inner, exp.Order):
        order, inner = list(inner.expressions), inner.this
    if isinstance(inner, exp.Distinct):
        distinct, inner = True, inner.expressions[0]
    if any(o.args.get("desc") for o in order):
        return node  # not used by the views; left to sqlglot
    fields = [f"'k{i}', {o.this.sql(dialect='spark')}" for i, o in enumerate(order)]
    fields.append(f"'v', {inner.sql(dialect='spark')}")
    collect = f"collect_list({'DISTINCT ' if distinct else ''}named_struct({', '.join(fields)}))"
    if where is not None:
        collect += f" FILTER ({where.sql(dialect='spark')})"
    sort = f"array_sort({collect})" if order else collect
    sql = f"CASE WHEN size({collect}) > 0 THEN transform({sort}, _s -> _s.v) END"
    return sqlglot.parse_one(sql, read="spark")


def _ordered_pick(node: exp.Expr) -> exp.Expr | None:
    """``any_value(x ORDER BY k)`` / ``first(x ORDER BY k)`` (the first non-NULL x by k) ->
    ``min_by(x, struct(x IS NULL, k...))``."""
    inner = node.this if isinstance(node, exp.IgnoreNulls) else node
    if not isinstance(inner, (exp.AnyValue, exp.First)) or not isinstance(inner.this, exp.Order):
        return None
    order = inner.this
    if any(o.args.get("desc") for o in order.expressions):
        return None
    value = order.this
    keys = [exp.Is(this=value.copy(), expression=exp.Null())] + [
        o.this.copy() for o in order.expressions
    ]
    return exp.Anonymous(
        this="min_by", expressions=[value.copy(), exp.Anonymous(this="struct", expressions=keys)]
    )


def _qualify_star(select: exp.Select) -> exp.Expr | None:
    """``SELECT * FROM t QUALIFY <cond>`` (Spark has no QUALIFY; sqlglot's rewrite selects
    ``*, <window> AS _w`` in a subquery and keeps ``_w`` among the columns) ->
    ``SELECT _q.* FROM (SELECT struct(*) AS _q, <cond> AS _keep FROM t) WHERE _keep``:
    the same columns as ``t``."""
    qualify = select.args.get("qualify")
    if qualify is None or not (len(select.expressions) == 1 and select.is_star):
        return None
    inner = select.copy()
    comments, inner.comments = inner.comments, None  # the view's header stays on top
    inner.set("qualify", None)
    inner.set(
        "expressions",
        [
            exp.alias_(exp.Anonymous(this="struct", expressions=[exp.Star()]), "_q"),
            exp.alias_(qualify.this.copy(), "_keep"),
        ],
    )
    outer = (
        exp.select(exp.Column(this=exp.Star(), table=exp.to_identifier("_q")))
        .from_(exp.alias_(exp.Subquery(this=inner), "_t", table=True))
        .where(exp.column("_keep"))
    )
    outer.comments = comments
    return outer


def _spark_select(node: exp.Select) -> exp.Expr:
    """A SELECT with its ``*`` qualified, its unnests zipped and its joins made laterals."""
    qualified = _qualify_star(node)
    if qualified is not None:
        return qualified
    _zip_unnests(node)
    if node.args.get("joins"):
        return _laterals(node)
    return node


def _spark_anonymous(node: exp.Anonymous) -> exp.Expr:
    """DuckDB functions sqlglot does not know, as Spark's."""
    name = str(node.this).lower()
    args = node.expressions
    if name == "make_timestamp_ns":
        ns = exp.Paren(this=args[0].copy())
        return exp.func(
            "timestamp_micros", exp.IntDiv(this=ns, expression=exp.Literal.number(1000))
        )
    if name == "list_bool_or" and isinstance(args[0], exp.Transform):
        return exp.Anonymous(
            this="exists", expressions=[args[0].this.copy(), args[0].expression.copy()]
        )
    if name == "json_extract_string" and len(args) == 2 and args[1].name == "$":
        return args[0]
    return node


def _spark_regexp_struct(node: exp.RegexpExtract) -> exp.Expr:
    """``regexp_extract(s, re, ['a', 'b'])`` (a struct of named groups) as a named_struct of
    one regexp_extract a group."""
    names = node.args["group"].expressions
    pairs: list[exp.Expr] = []
    for i, n in enumerate(names, start=1):
        pairs += [
            n.copy(),
            exp.RegexpExtract(
                this=node.this.copy(),
                expression=node.expression.copy(),
                group=exp.Literal.number(i),
            ),
        ]
    return exp.func("named_struct", *pairs)


def _spark_type(node: exp.DataType) -> exp.Expr:
    """JSON is a STRING in Spark; TIMESTAMP_NS a TIMESTAMP (microseconds)."""
    if node.this == exp.DataType.Type.JSON:
        return exp.DataType.build("STRING")
    if node.this in (exp.DataType.Type.TIMESTAMP_NS, exp.DataType.Type.TIMESTAMP):
        return exp.DataType.build("TIMESTAMP", dialect="spark")
    return node


def _spark_element_at(node: exp.Bracket) -> exp.Expr:
    """DuckDB's list[i] is 1-based and NULL out of range: Spark's try_element_at (sqlglot's
    reader made a literal index 0-based already; an expression it keeps)."""
    index = node.expressions[0].copy()
    if isinstance(index, exp.Literal):
        index = exp.Literal.number(int(index.this) + 1)
    index = exp.Cast(this=index, to=exp.DataType.build("INT"))
    return exp.func("try_element_at", node.this.copy(), index)


def _spark_range(node: exp.GenerateSeries) -> exp.Expr:
    """DuckDB's range(a, b): a .. b-1, empty when b <= a (Spark's sequence counts down)."""
    start = node.args["start"].copy()
    end = exp.Sub(this=exp.Paren(this=node.args["end"].copy()), expression=exp.Literal.number(1))
    seq = exp.func("sequence", start, end)
    empty = exp.Cast(
        this=exp.func("array"), to=exp.DataType.build("ARRAY<BIGINT>", dialect="spark")
    )
    return exp.If(this=exp.GTE(this=end.copy(), expression=start.copy()), true=seq, false=empty)


def _is_list_index(node: exp.Expr) -> bool:
    """A one-index bracket that is not a struct field by name (``s['name']``)."""
    return (
        isinstance(node, exp.Bracket)
        and len(node.expressions) == 1
        and not (isinstance(node.expressions[0], exp.Literal) and node.expressions[0].is_string)
    )


def _spark_functions(node: exp.Expr) -> exp.Expr:
    """The functions whose Spark twin has another name or meaning (see the module doc)."""
    picked = _ordered_pick(node)
    if picked is not None:
        return picked
    if isinstance(node, exp.CTE) and node.args.get("materialized") is not None:
        node.set("materialized", None)  # a hint DuckDB takes and Spark's grammar does not
        return node
    if isinstance(node, exp.Select):
        return _spark_select(node)
    if isinstance(node, exp.Anonymous):
        return _spark_anonymous(node)
    if isinstance(node, exp.JSONExtractScalar) and node.expression.name == "$":
        return node.this
    if isinstance(node, exp.RegexpExtract) and isinstance(node.args.get("group"), exp.Array):
        return _spark_regexp_struct(node)
    if isinstance(node, exp.PercentileCont) and node.expression is not None:
        # quantile_cont(x, q): Spark's percentile interpolates the same way
        return exp.func("percentile", node.this.copy(), node.expression.copy())
    if isinstance(node, exp.DataType):
        return _spark_type(node)
    if isinstance(node, exp.Bracket) and _is_list_index(node):
        return _spark_element_at(node)
    if isinstance(node, exp.GenerateSeries) and node.args.get("is_end_exclusive"):
        return _spark_range(node)
    if isinstance(node, exp.Cast) and node.to.this == exp.DataType.Type.JSON:
        return node.this
    return node


def _asof_ctes(tree: exp.Expr) -> dict[str, str]:
    """Spark SQL of each CTE whose FROM is ``m ASOF LEFT JOIN g ON <equalities> AND
    g.t >= m.u`` (Spark has no ASOF join): the nearest ``g`` row at or after each distinct
    left key is found with a join and ``min_by``, and brought back as ``g``'s columns
    by ``LATERAL VIEW OUTER inline``."""
    out: dict[str, str] = {}
    for cte in tree.find_all(exp.CTE):
        select = cte.this
        if not isinstance(select, exp.Select) or len(select.args.get("joins") or []) != 1:
            continue
        join = select.args["joins"][0]
        if join.args.get("method", "").upper() != "ASOF" or select.args.get("where"):
            continue
        left, right = (
            select.args["from_"].this if "from_" in select.args else select.args["from"].this,
            join.this,
        )
        m, g = left.alias_or_name, right.alias_or_name
        conds = (
            list(join.args["on"].flatten())
            if isinstance(join.args["on"], exp.And)
            else [join.args["on"]]
        )
        eqs, ineq = [], None
        for c in conds:
            if isinstance(c, exp.EQ):
                a, b = c.this, c.expression
                eqs.append((a, b) if a.table == g else (b, a))
            elif isinstance(c, exp.GTE) and c.this.table == g:
                ineq = (c.this, c.expression)
        if ineq is None:
            continue
        keys = [b.name for _, b in eqs] + [ineq[1].name]
        on = " AND ".join(f"_g2.{a.name} = _k.{b.name}" for a, b in eqs)
        head = select.copy()
        head.set("joins", None)
        head_sql = to_spark(head.sql(dialect="duckdb"), pretty=False)
        src = left.this.sql(dialect="spark") if isinstance(left, exp.Table) else left.sql("spark")
        back = " AND ".join(f"_j.{k} <=> {m}.{k}" for k in keys)
        out[cte.alias] = (
            f"{head_sql} LEFT JOIN (SELECT _k.*, "
            f"min_by(struct(_g2.*), _g2.{ineq[0].name}) AS _near "
            f"FROM (SELECT DISTINCT {', '.join(keys)} FROM {src}) _k "
            f"JOIN {right.this.sql(dialect='spark')} _g2 ON {on} "
            f"AND _g2.{ineq[0].name} >= _k.{ineq[1].name} GROUP BY ALL) _j ON {back} "
            f"LATERAL VIEW OUTER inline(array(_j._near)) {g}"
        )
    return out


def to_spark(sql: str, *, pretty: bool = True) -> str:
    """One DuckDB statement (a view's SELECT) as Spark SQL (see the module doc)."""
    tree = sqlglot.parse_one(_lambdas(sql), read="duckdb")
    tree = _inline(tree, _macros())
    asof = _asof_ctes(tree)
    for _ in range(8):  # until nothing changes: a rewrite may hold another one to rewrite
        before = tree.sql(dialect="duckdb")
        tree = tree.transform(_spark_functions)
        if tree.sql(dialect="duckdb") == before:
            break
    tree = tree.transform(_list_aggs)
    for name, cte_sql in {**asof, **_HAND.get(_view_of(sql) or "", {})}.items():
        for cte in tree.find_all(exp.CTE):
            if cte.alias == name:
                cte.set("this", sqlglot.parse_one(cte_sql, read="spark"))
    return tree.sql(dialect="spark", pretty=pretty)


def _view_of(sql: str) -> str | None:
    m = re.match(r"\s*--\s*(\w+):", sql)
    return m.group(1) if m else None


_HAND: dict[str, dict[str, str]] = {
    "cache_what_if": {
        # DuckDB: a window whose frame is the lookups since the key's previous lookup
        "dist": """
SELECT a.run_id, a.source, a.position, a.prev_seq, count(DISTINCT b.key) AS d
FROM l a
LEFT JOIN l b ON b.run_id = a.run_id AND b.source <=> a.source
    AND b.position <=> a.position AND b.seq > a.prev_seq AND b.seq < a.seq
GROUP BY a.run_id, a.source, a.position, a.seq, a.prev_seq
""",
    },
}

HAND_WRITTEN: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in _HAND.items()}
"""The view -> the CTEs of it that are hand-written for Spark (the rest is translated)."""


def spark_views() -> dict[str, str]:
    """Every view of ``analysis/sql`` as Spark SQL, in dependency order."""
    return {name: to_spark(view_sql(name).strip().rstrip(";")) for name in VIEW_NAMES}


def spark_tables(stored: dict[str, str]) -> dict[str, str]:
    """The lake tables as Spark SQL over their stored rows (``stored``: table -> the
    name of a Spark view of its Parquet, with ``run_id``)."""
    from ember.analysis.lake.ingest import LAKE_TABLES, lake_table_sql

    out = {}
    for table in LAKE_TABLES:
        sql = lake_table_sql(table, stored[table])
        out[table] = to_spark(_exclude_to_spark(sql))
    return out


def _exclude_to_spark(sql: str) -> str:
    return sql

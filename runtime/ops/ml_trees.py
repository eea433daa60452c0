"""The ``ai.onnx.ml`` tree ensembles: TreeEnsemble (opset 5 of the domain) and the older
TreeEnsembleRegressor/TreeEnsembleClassifier.

A tree ensemble is evaluated for all samples and all trees at once. The nodes of every tree
form one table whose leaves are rows that lead to themselves; each step of a
``lax.fori_loop`` moves every (sample, tree) pair one level down by gathers, for as many
steps as the deepest tree has levels, and the leaves reached are then aggregated per target
by scatters. The tables are built on the host from the attributes at each call (they are
static, so under ``jax.jit`` this happens once per trace).

The module is one job (about 650 lines): building the table from the two attribute layouts
(the opset-5 arrays and the older per-node lists), walking it, and aggregating.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import op
from .ml import ML, Array, is_strings, one_of

# ---------------------------------------------------------------------------------------------
# tree ensembles

_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
_MEMBER = 6  # TreeEnsemble's BRANCH_MEMBER
_AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


@dataclass(frozen=True)
class _Forest:
    """All trees as one table of R rows: interior nodes, then leaves leading to themselves."""

    feature: np.ndarray  # [R] feature each row compares
    threshold: np.ndarray  # [R] float64
    mode: np.ndarray  # [R] 0..6 (see _MODES, _MEMBER)
    missing_true: np.ndarray  # [R] bool: a NaN feature takes the true branch
    true_next: np.ndarray  # [R] row reached when the comparison holds
    false_next: np.ndarray  # [R]
    members: np.ndarray  # [R, M] float64 NaN-padded sets of BRANCH_MEMBER rows
    roots: np.ndarray  # [n_trees]
    depth: int  # steps from the roots until every path has reached a leaf
    targets: np.ndarray  # [R, K] target of each of a row's up to K leaf weights
    weights: np.ndarray  # [R, K] float64 (0 where absent)
    has_weight: np.ndarray  # [R, K] bool
    n_targets: int


def _enum(op_type: str, attr: str, value: Any, names: tuple[str, ...]) -> int:
    """An enum attribute (its int code or its name) as its int code."""
    if isinstance(value, str) and value in names:
        return names.index(value)
    if isinstance(value, int) and 0 <= value < len(names):
        return value
    choices = ", ".join(f"{i} ({n})" for i, n in enumerate(names))
    raise ValueError(
        f"{op_type} has {attr}={value!r}, which is not one of {choices}; "
        "fix the attribute in the model"
    )


def _depth(op_type: str, n_interior: int, roots: np.ndarray, t: np.ndarray, f: np.ndarray) -> int:
    """Levels of interior nodes on the longest path from a root (rows >= n_interior are leaves)."""
    frontier = np.unique(roots)
    depth = 0
    while frontier.size:
        depth += 1
        if depth > n_interior:
            raise ValueError(
                f"{op_type}'s nodes form a cycle (a path from a root visits more than "
                f"{n_interior} interior nodes); check the nodes_truenodeids/nodes_falsenodeids"
            )
        children = np.unique(np.concatenate([t[frontier], f[frontier]]))
        frontier = children[children < n_interior]
    return depth


def _members(op_type: str, mode: np.ndarray, membership_values: Any, n_rows: int) -> np.ndarray:
    member_rows = np.flatnonzero(mode == _MEMBER)
    if not member_rows.size:
        return np.full((n_rows, 1), np.nan)
    if membership_values is None:
        raise ValueError(
            f"{op_type} has BRANCH_MEMBER nodes but no membership_values; give the sets of "
            "those nodes in membership_values, in node order, separated by NaN"
        )
    flat = np.asarray(membership_values, dtype=np.float64).reshape(-1)
    cuts = np.flatnonzero(np.isnan(flat))
    sets = np.split(flat, cuts)
    sets = [s[~np.isnan(s)] for s in sets]
    if sets and not sets[-1].size and len(sets) > member_rows.size:
        sets = sets[:-1]  # a trailing NaN closes the last set
    if len(sets) != member_rows.size:
        raise ValueError(
            f"{op_type} has {member_rows.size} BRANCH_MEMBER nodes but membership_values holds "
            f"{len(sets)} NaN-separated sets; give one set per BRANCH_MEMBER node"
        )
    width = max(1, max(s.size for s in sets))
    members = np.full((n_rows, width), np.nan)
    for row, s in zip(member_rows, sets, strict=True):
        members[row, : s.size] = s
    return members


def _check_range(op_type: str, attr: str, values: np.ndarray, n: int) -> None:
    bad = values[(values < 0) | (values >= n)]
    if bad.size:
        raise ValueError(
            f"{op_type}'s {attr} holds {int(bad[0])}, outside [0, {n}); "
            "fix the attribute in the model"
        )


def _forest_v5(
    tree_roots: list[int],
    nodes_featureids: list[int],
    nodes_modes: np.ndarray,
    nodes_splits: np.ndarray,
    nodes_truenodeids: list[int],
    nodes_trueleafs: list[int],
    nodes_falsenodeids: list[int],
    nodes_falseleafs: list[int],
    nodes_missing_value_tracks_true: list[int] | None,
    membership_values: np.ndarray | None,
    leaf_targetids: list[int],
    leaf_weights: np.ndarray,
    n_targets: int | None,
) -> _Forest:
    name = "TreeEnsemble"
    n = len(nodes_featureids)
    n_leaves = len(leaf_targetids)
    columns: dict[str, Any] = {
        "nodes_modes": np.asarray(nodes_modes).reshape(-1),
        "nodes_splits": np.asarray(nodes_splits).reshape(-1),
        "nodes_truenodeids": nodes_truenodeids,
        "nodes_trueleafs": nodes_trueleafs,
        "nodes_falsenodeids": nodes_falsenodeids,
        "nodes_falseleafs": nodes_falseleafs,
    }
    if nodes_missing_value_tracks_true:
        columns["nodes_missing_value_tracks_true"] = nodes_missing_value_tracks_true
    _check_lengths(name, "nodes_featureids", n, columns)
    weights = np.asarray(leaf_weights, dtype=np.float64).reshape(-1)
    if weights.size != n_leaves:
        raise ValueError(
            f"{name} has {n_leaves} leaf_targetids but {weights.size} leaf_weights; "
            "the leaf_* attributes must have the same length"
        )
    mode = np.concatenate([columns["nodes_modes"].astype(np.int64), np.zeros(n_leaves, np.int64)])
    bad_modes = mode[(mode < 0) | (mode > _MEMBER)]
    if bad_modes.size:
        raise ValueError(
            f"{name} has nodes_modes value {int(bad_modes[0])}; the modes are 0 (BRANCH_LEQ) "
            "to 6 (BRANCH_MEMBER)"
        )
    rows = n + n_leaves
    leaf_rows = np.arange(n, rows)

    def nexts(ids: list[int], leafs: list[int], attr: str) -> np.ndarray:
        ids_a = np.asarray(ids, np.int64)
        is_leaf = np.asarray(leafs, bool)
        _check_range(name, attr, ids_a[is_leaf], n_leaves)
        _check_range(name, attr, ids_a[~is_leaf], n)
        return np.concatenate([np.where(is_leaf, n + ids_a, ids_a), leaf_rows])

    targets = np.asarray(leaf_targetids, np.int64)
    n_targets = int(n_targets) if n_targets else int(targets.max(initial=-1)) + 1
    _check_range(name, "leaf_targetids", targets, n_targets)
    roots = np.asarray(tree_roots, np.int64)
    _check_range(name, "tree_roots", roots, n)
    true_next = nexts(nodes_truenodeids, nodes_trueleafs, "nodes_truenodeids")
    false_next = nexts(nodes_falsenodeids, nodes_falseleafs, "nodes_falsenodeids")
    missing = np.zeros(rows, bool)
    if nodes_missing_value_tracks_true:
        missing[:n] = np.asarray(nodes_missing_value_tracks_true, bool)
    has_weight = np.zeros((rows, 1), bool)
    has_weight[n:] = True
    return _Forest(
        feature=np.concatenate([np.asarray(nodes_featureids, np.int64), np.zeros(n_leaves, int)]),
        threshold=np.concatenate([columns["nodes_splits"].astype(np.float64), np.zeros(n_leaves)]),
        mode=mode,
        missing_true=missing,
        true_next=true_next,
        false_next=false_next,
        members=_members(name, mode, membership_values, rows),
        roots=roots,
        depth=_depth(name, n, roots, true_next, false_next),
        targets=np.concatenate([np.zeros(n, np.int64), targets])[:, None],
        weights=np.concatenate([np.zeros(n), weights])[:, None],
        has_weight=has_weight,
        n_targets=n_targets,
    )


def _forest_v1(
    op_type: str,
    nodes_treeids: list[int] | None,
    nodes_nodeids: list[int] | None,
    nodes_featureids: list[int] | None,
    nodes_modes: list[str] | None,
    nodes_values: np.ndarray,
    nodes_truenodeids: list[int] | None,
    nodes_falsenodeids: list[int] | None,
    nodes_missing_value_tracks_true: list[int] | None,
    weight_treeids: list[int] | None,
    weight_nodeids: list[int] | None,
    weight_targetids: list[int] | None,
    weights: np.ndarray,
    n_targets: int,
    prefix: str,
) -> _Forest:
    """The forest of ``TreeEnsembleRegressor``/``Classifier``: nodes named by (tree, node id),
    with ``LEAF`` rows among them and leaf weights given per (tree, node id, target)."""
    tree_ids = np.asarray(nodes_treeids or [], np.int64)
    node_ids = np.asarray(nodes_nodeids or [], np.int64)
    rows = tree_ids.size
    columns = {
        "nodes_nodeids": node_ids,
        "nodes_featureids": nodes_featureids or [],
        "nodes_modes": nodes_modes or [],
        "nodes_values": nodes_values,
        "nodes_truenodeids": nodes_truenodeids or [],
        "nodes_falsenodeids": nodes_falsenodeids or [],
    }
    if nodes_missing_value_tracks_true:
        columns["nodes_missing_value_tracks_true"] = nodes_missing_value_tracks_true
    _check_lengths(op_type, "nodes_treeids", rows, columns)
    row_of = {
        (t, i): r for r, (t, i) in enumerate(zip(tree_ids.tolist(), node_ids.tolist(), strict=True))
    }
    is_leaf = np.asarray([m == "LEAF" for m in nodes_modes or []], bool)
    mode = np.asarray(
        [0 if m == "LEAF" else _enum(op_type, "nodes_modes", m, _MODES) for m in nodes_modes or []],
        np.int64,
    )
    true_next = _v1_next_rows(
        op_type, "nodes_truenodeids", tree_ids, nodes_truenodeids or [], is_leaf, row_of
    )
    false_next = _v1_next_rows(
        op_type, "nodes_falsenodeids", tree_ids, nodes_falsenodeids or [], is_leaf, row_of
    )
    roots = _v1_roots(tree_ids, true_next, false_next, is_leaf)
    depth = _v1_depth(op_type, is_leaf, roots, true_next, false_next)
    targets, leaf_weights, has_weight = _v1_leaf_weights(
        op_type,
        prefix,
        row_of,
        rows,
        weight_treeids,
        weight_nodeids,
        weight_targetids,
        weights,
        n_targets,
    )
    missing = np.zeros(rows, bool)
    if nodes_missing_value_tracks_true:
        missing[:] = np.asarray(nodes_missing_value_tracks_true, bool)
    return _Forest(
        feature=np.asarray(nodes_featureids or [], np.int64),
        threshold=np.asarray(nodes_values, np.float64).reshape(-1),
        mode=mode,
        missing_true=missing,
        true_next=true_next,
        false_next=false_next,
        members=np.full((rows, 1), np.nan),
        roots=roots,
        depth=depth,
        targets=targets,
        weights=leaf_weights,
        has_weight=has_weight,
        n_targets=n_targets,
    )


def _check_lengths(op_type: str, first: str, n: int, columns: dict[str, Any]) -> None:
    """Every ``nodes_*`` column has the ``n`` entries that ``first`` has."""
    for attr, column in columns.items():
        if len(column) != n:
            raise ValueError(
                f"{op_type} has {n} {first} but {len(column)} {attr}; "
                "all nodes_* attributes must have the same length"
            )


def _v1_next_rows(
    op_type: str,
    attr: str,
    tree_ids: np.ndarray,
    children: list[int],
    is_leaf: np.ndarray,
    row_of: dict[tuple[int, int], int],
) -> np.ndarray:
    """The row each row's ``attr`` child is (a leaf leads to itself)."""
    out = np.arange(tree_ids.size)
    for r, (t, child) in enumerate(zip(tree_ids.tolist(), children, strict=True)):
        if is_leaf[r]:
            continue
        if (t, child) not in row_of:
            raise ValueError(
                f"{op_type}'s {attr} names node {child} of tree {t}, which is not among "
                "nodes_treeids/nodes_nodeids; fix the attribute in the model"
            )
        out[r] = row_of[(t, child)]
    return out


def _v1_roots(
    tree_ids: np.ndarray, true_next: np.ndarray, false_next: np.ndarray, is_leaf: np.ndarray
) -> np.ndarray:
    """Each tree's root, in the order trees first appear: its node that no other leads to."""
    child = np.zeros(tree_ids.size, bool)
    interior = ~is_leaf
    child[true_next[interior]] = True
    child[false_next[interior]] = True
    roots = []
    for t in dict.fromkeys(tree_ids.tolist()):
        candidates = np.flatnonzero((tree_ids == t) & ~child)
        roots.append(candidates[0] if candidates.size else np.flatnonzero(tree_ids == t)[0])
    return np.asarray(roots, np.int64)


def _v1_depth(
    op_type: str,
    is_leaf: np.ndarray,
    roots: np.ndarray,
    true_next: np.ndarray,
    false_next: np.ndarray,
) -> int:
    """``_depth`` of rows where leaves and interior nodes mix: ``_depth`` wants the leaves
    after the interior rows, so the walk maps the leaf rows past the end."""
    rows = is_leaf.size
    order = np.argsort(is_leaf, kind="stable")
    rank = np.empty(rows, np.int64)
    rank[order] = np.arange(rows)
    n_interior = int((~is_leaf).sum())
    walk_true, walk_false = rank[true_next][order], rank[false_next][order]
    return _depth(op_type, n_interior, rank[roots], walk_true, walk_false)


def _v1_leaf_weights(
    op_type: str,
    prefix: str,
    row_of: dict[tuple[int, int], int],
    rows: int,
    weight_treeids: list[int] | None,
    weight_nodeids: list[int] | None,
    weight_targetids: list[int] | None,
    weights: np.ndarray,
    n_targets: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """[rows, K] targets, weights and presence of each row's up to K ``{prefix}_*`` weights
    (given per (tree, node id, target))."""
    w_tree = np.asarray(weight_treeids or [], np.int64)
    w_node = np.asarray(weight_nodeids or [], np.int64)
    w_target = np.asarray(weight_targetids or [], np.int64)
    w = np.asarray(weights, np.float64).reshape(-1)
    for attr, column in ((f"{prefix}_nodeids", w_node), (f"{prefix}_ids", w_target)):
        if len(column) != len(w_tree):
            raise ValueError(
                f"{op_type} has {len(w_tree)} {prefix}_treeids but {len(column)} {attr}; "
                f"all {prefix}_* attributes must have the same length"
            )
    if w.size != w_tree.size:
        raise ValueError(
            f"{op_type} has {w_tree.size} {prefix}_treeids but {w.size} weights; "
            f"all {prefix}_* attributes must have the same length"
        )
    _check_range(op_type, f"{prefix}_ids", w_target, n_targets)
    per_row: list[list[tuple[int, float]]] = [[] for _ in range(rows)]
    for t, i, target, value in zip(
        w_tree.tolist(), w_node.tolist(), w_target.tolist(), w.tolist(), strict=True
    ):
        if (t, i) not in row_of:
            raise ValueError(
                f"{op_type}'s {prefix}_nodeids names node {i} of tree {t}, which is not among "
                "nodes_treeids/nodes_nodeids; fix the attribute in the model"
            )
        per_row[row_of[(t, i)]].append((target, float(value)))
    width = max(1, max(len(p) for p in per_row)) if rows else 1
    targets = np.zeros((rows, width), np.int64)
    leaf_weights = np.zeros((rows, width))
    has_weight = np.zeros((rows, width), bool)
    for r, entries in enumerate(per_row):
        for k, (target, value) in enumerate(entries):
            targets[r, k], leaf_weights[r, k], has_weight[r, k] = target, value, True
    return targets, leaf_weights, has_weight


def _leaves(forest: _Forest, x: Array) -> Array:
    """[N, n_trees] row of the leaf each sample reaches in each tree."""
    f = forest
    n, n_features = x.shape
    used = f.feature[f.true_next != np.arange(f.feature.size)]  # interior rows only
    if used.size and (used.max() >= n_features or used.min() < 0):
        bad = int(used.max() if used.max() >= n_features else used.min())
        raise ValueError(
            f"a tree node compares feature {bad}, but X has {n_features} features per sample; "
            "give X as [N, F] with every feature the trees use"
        )
    dtype = x.dtype
    feature = jnp.asarray(f.feature)
    threshold = jnp.asarray(f.threshold, dtype)
    mode = jnp.asarray(f.mode)
    missing_true = jnp.asarray(f.missing_true)
    true_next, false_next = jnp.asarray(f.true_next), jnp.asarray(f.false_next)
    members = jnp.asarray(f.members, dtype)
    any_member = bool((f.mode == _MEMBER).any())

    def step(_: Any, rows: Array) -> Array:
        value = jnp.take_along_axis(x, feature[rows], axis=1)
        split = threshold[rows]
        m = mode[rows]
        holds = jnp.select(
            [m == 0, m == 1, m == 2, m == 3, m == 4, m == 5],
            [
                value <= split,
                value < split,
                value >= split,
                value > split,
                value == split,
                value != split,
            ],
            default=False,
        )
        if any_member:
            in_set = (members[rows] == value[..., None]).any(axis=-1)
            holds = jnp.where(m == _MEMBER, in_set, holds)
        holds = holds | (missing_true[rows] & jnp.isnan(value))
        return jnp.where(holds, true_next[rows], false_next[rows])

    start = jnp.broadcast_to(jnp.asarray(f.roots), (n, f.roots.size))
    return lax.fori_loop(0, f.depth, step, start)


def _aggregate(forest: _Forest, leaves: Array, aggregate: int, dtype: Any) -> Array:
    """[N, n_targets] scores: each target's leaf weights over the trees."""
    f = forest
    n = leaves.shape[0]
    targets = jnp.asarray(f.targets)[leaves]  # [N, trees, K]
    weights = jnp.asarray(f.weights, dtype)[leaves]
    has = jnp.asarray(f.has_weight)[leaves]
    samples = jnp.broadcast_to(jnp.arange(n)[:, None, None], targets.shape)
    scores = jnp.zeros((n, f.n_targets), dtype)
    if aggregate in (0, 1):  # AVERAGE, SUM
        scores = scores.at[samples, targets].add(jnp.where(has, weights, 0))
        return scores / f.roots.size if aggregate == 0 else scores
    seen = _seen(forest, leaves)
    if aggregate == 2:  # MIN
        best = jnp.full((n, f.n_targets), jnp.inf, dtype)
        best = best.at[samples, targets].min(jnp.where(has, weights, jnp.inf))
    else:  # MAX
        best = jnp.full((n, f.n_targets), -jnp.inf, dtype)
        best = best.at[samples, targets].max(jnp.where(has, weights, -jnp.inf))
    return jnp.where(seen, best, 0)


def _seen(forest: _Forest, leaves: Array) -> Array:
    """[N, n_targets] bool: some tree's leaf gives the target a weight."""
    n = leaves.shape[0]
    targets = jnp.asarray(forest.targets)[leaves]
    samples = jnp.broadcast_to(jnp.arange(n)[:, None, None], targets.shape)
    has = jnp.asarray(forest.has_weight)[leaves]
    return jnp.zeros((n, forest.n_targets), bool).at[samples, targets].max(has)


def _post_transform(scores: Array, transform: int) -> Array:
    if transform == 1:  # SOFTMAX
        return jax.nn.softmax(scores, axis=-1)
    if transform == 2:  # LOGISTIC
        return jax.nn.sigmoid(scores)
    if transform == 3:  # SOFTMAX_ZERO: zeros stay zero and take no share
        nonzero = scores != 0
        peak = jnp.max(jnp.where(nonzero, scores, -jnp.inf), axis=-1, keepdims=True)
        e = jnp.where(nonzero, jnp.exp(scores - jnp.where(jnp.isfinite(peak), peak, 0)), 0)
        total = e.sum(axis=-1, keepdims=True)
        return jnp.where(total > 0, e / jnp.where(total > 0, total, 1), 0)
    if transform == 4:  # PROBIT
        return jnp.sqrt(2.0).astype(scores.dtype) * jax.scipy.special.erfinv(2 * scores - 1)
    return scores


def _features(X: Array) -> tuple[Array, Any]:
    """X as [N, F] in the type comparisons and sums are made in (float64 for double)."""
    x = jnp.asarray(X)
    dtype = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
    x = x.astype(dtype)
    return (x.reshape(1, -1) if x.ndim == 1 else x.reshape(x.shape[0], -1)), dtype


@op("TreeEnsemble", since=5, domain=ML)
def tree_ensemble(
    X: Array,
    *,
    tree_roots: list[int],
    nodes_featureids: list[int],
    nodes_modes: np.ndarray,
    nodes_splits: np.ndarray,
    nodes_truenodeids: list[int],
    nodes_trueleafs: list[int],
    nodes_falsenodeids: list[int],
    nodes_falseleafs: list[int],
    leaf_targetids: list[int],
    leaf_weights: np.ndarray,
    n_targets: int | None = None,
    aggregate_function: int = 1,
    post_transform: int = 0,
    nodes_missing_value_tracks_true: list[int] | None = None,
    membership_values: np.ndarray | None = None,
    nodes_hitrates: np.ndarray | None = None,
) -> Array:
    """Sum, average, min or max of the leaf weights a tree ensemble reaches; opset 5+."""
    aggregate = _enum("TreeEnsemble", "aggregate_function", aggregate_function, _AGGREGATES)
    transform = _enum("TreeEnsemble", "post_transform", post_transform, _TRANSFORMS)
    forest = _forest_v5(
        tree_roots,
        nodes_featureids,
        nodes_modes,
        nodes_splits,
        nodes_truenodeids,
        nodes_trueleafs,
        nodes_falsenodeids,
        nodes_falseleafs,
        nodes_missing_value_tracks_true,
        membership_values,
        leaf_targetids,
        leaf_weights,
        n_targets,
    )
    x, dtype = _features(X)
    scores = _aggregate(forest, _leaves(forest, x), aggregate, dtype)
    return _post_transform(scores, transform).astype(X.dtype)


def _floats(as_tensor: np.ndarray | None, listed: list[float] | None) -> np.ndarray:
    """An attribute given as ``*_as_tensor`` or as a list (the tensor wins; neither: empty),
    as float64."""
    chosen = as_tensor if as_tensor is not None else listed
    return np.asarray(chosen if chosen is not None else [], np.float64)


def _plus_base_values(name: str, scores: Array, base: Any, n: int, what: str, dtype: Any):
    """``scores`` plus ``base_values``, one per target (or class); none: unchanged."""
    if base is None or not len(np.asarray(base).reshape(-1)):
        return scores
    base_a = np.asarray(base, np.float64).reshape(-1)
    if base_a.size != n:
        plural = "classes" if what == "class" else what + "s"
        raise ValueError(
            f"{name} has {base_a.size} base_values for {n} {plural}; give one per {what} or none"
        )
    return scores + jnp.asarray(base_a, dtype)


def _v1_scores(
    name: str, forest: _Forest, X: Array, aggregate: int, base: np.ndarray, what: str
) -> tuple[Array, Array]:
    """The leaves each row of ``X`` reaches in ``forest`` and the aggregated scores plus
    ``base`` (one per ``what``: target or class)."""
    x, dtype = _features(X)
    leaves = _leaves(forest, x)
    scores = _aggregate(forest, leaves, aggregate, dtype)
    return leaves, _plus_base_values(name, scores, base, forest.n_targets, what, dtype)


@op("TreeEnsembleRegressor", domain=ML)
def tree_ensemble_regressor(
    X: Array,
    *,
    nodes_treeids: list[int] | None = None,
    nodes_nodeids: list[int] | None = None,
    nodes_featureids: list[int] | None = None,
    nodes_modes: list[str] | None = None,
    nodes_values: list[float] | None = None,
    nodes_values_as_tensor: np.ndarray | None = None,
    nodes_truenodeids: list[int] | None = None,
    nodes_falsenodeids: list[int] | None = None,
    nodes_missing_value_tracks_true: list[int] | None = None,
    nodes_hitrates: list[float] | None = None,
    nodes_hitrates_as_tensor: np.ndarray | None = None,
    target_treeids: list[int] | None = None,
    target_nodeids: list[int] | None = None,
    target_ids: list[int] | None = None,
    target_weights: list[float] | None = None,
    target_weights_as_tensor: np.ndarray | None = None,
    n_targets: int | None = None,
    base_values: list[float] | None = None,
    base_values_as_tensor: np.ndarray | None = None,
    aggregate_function: str = "SUM",
    post_transform: str = "NONE",
) -> Array:
    """A tree ensemble's regression targets, + base values, transformed; opset 1+."""
    name = "TreeEnsembleRegressor"
    aggregate = _enum(name, "aggregate_function", aggregate_function, _AGGREGATES)
    transform = _enum(name, "post_transform", post_transform, _TRANSFORMS)
    targets = np.asarray(target_ids or [], np.int64)
    n_targets = int(n_targets) if n_targets else int(targets.max(initial=0)) + 1
    forest = _forest_v1(
        name,
        nodes_treeids,
        nodes_nodeids,
        nodes_featureids,
        nodes_modes,
        _floats(nodes_values_as_tensor, nodes_values),
        nodes_truenodeids,
        nodes_falsenodeids,
        nodes_missing_value_tracks_true,
        target_treeids,
        target_nodeids,
        target_ids,
        _floats(target_weights_as_tensor, target_weights),
        n_targets,
        "target",
    )
    base = _floats(base_values_as_tensor, base_values)
    _, scores = _v1_scores(name, forest, X, aggregate, base, "target")
    return _post_transform(scores, transform).astype(jnp.float32)


@op("TreeEnsembleClassifier", domain=ML)
def tree_ensemble_classifier(
    X: Array,
    *,
    nodes_treeids: list[int] | None = None,
    nodes_nodeids: list[int] | None = None,
    nodes_featureids: list[int] | None = None,
    nodes_modes: list[str] | None = None,
    nodes_values: list[float] | None = None,
    nodes_values_as_tensor: np.ndarray | None = None,
    nodes_truenodeids: list[int] | None = None,
    nodes_falsenodeids: list[int] | None = None,
    nodes_missing_value_tracks_true: list[int] | None = None,
    nodes_hitrates: list[float] | None = None,
    nodes_hitrates_as_tensor: np.ndarray | None = None,
    class_treeids: list[int] | None = None,
    class_nodeids: list[int] | None = None,
    class_ids: list[int] | None = None,
    class_weights: list[float] | None = None,
    class_weights_as_tensor: np.ndarray | None = None,
    classlabels_int64s: list[int] | None = None,
    classlabels_strings: list[str] | None = None,
    base_values: list[float] | None = None,
    base_values_as_tensor: np.ndarray | None = None,
    post_transform: str = "NONE",
) -> tuple[Array, Array]:
    """A tree ensemble's labels and class scores (+ base values); opset 1+."""
    name = "TreeEnsembleClassifier"
    transform = _enum(name, "post_transform", post_transform, _TRANSFORMS)
    labels = one_of(
        name,
        "classlabels_*",
        classlabels_int64s=classlabels_int64s,
        classlabels_strings=classlabels_strings,
    )
    n_classes = labels.size
    if n_classes <= 2:
        # With two classes onnxruntime follows conventions of its own that the spec does not
        # state (one score column for the positive class, 0.5 or 0 as the cut), so Ember
        # refuses rather than guess.
        raise ValueError(
            f"{name} with {n_classes} classes is not supported (only 3 or more): convert the "
            "model to TreeEnsemble (ai.onnx.ml 5) followed by ArgMax, or run it with onnxruntime"
        )
    forest = _forest_v1(
        name,
        nodes_treeids,
        nodes_nodeids,
        nodes_featureids,
        nodes_modes,
        _floats(nodes_values_as_tensor, nodes_values),
        nodes_truenodeids,
        nodes_falsenodeids,
        nodes_missing_value_tracks_true,
        class_treeids,
        class_nodeids,
        class_ids,
        _floats(class_weights_as_tensor, class_weights),
        n_classes,
        "class",
    )
    base = _floats(base_values_as_tensor, base_values)
    leaves, scores = _v1_scores(name, forest, X, 1, base, "class")
    # the label is the first best class among those some leaf voted for
    best = jnp.argmax(jnp.where(_seen(forest, leaves), scores, -jnp.inf), axis=-1)
    if is_strings(labels):
        # string labels only live on the host; a traced input stops the trace here
        label = labels[np.asarray(best)]
    else:
        label = jnp.take(jnp.asarray(labels), best)
    return label, _post_transform(scores, transform).astype(jnp.float32)

"""Every op function says in its docstring what it computes and which opsets it serves."""

from __future__ import annotations

from ember.runtime.ops import registered


def _opsets(since: int, next_since: int | None) -> str:
    if next_since is None:
        return f"opset {since}+"
    if next_since == since + 1:
        return f"opset {since}"
    return f"opsets {since}-{next_since - 1}"


def test_each_op_function_has_a_docstring_naming_the_opsets_it_serves():
    wrong = []
    for (domain, name), versions in sorted(registered().items()):
        for i, d in enumerate(versions):
            following = versions[i + 1].since if i + 1 < len(versions) else None
            first_line = (d.fn.__doc__ or "").strip().split("\n")[0]
            if not first_line.endswith(f"; {_opsets(d.since, following)}."):
                wrong.append(
                    f"{domain or 'ai.onnx'}::{name} {d.since} ({d.fn.__name__}): {first_line!r}"
                )
    assert not wrong, "\n".join(wrong)

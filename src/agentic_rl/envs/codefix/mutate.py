"""Bug injection by AST mutation, edited into the original text so the mutant differs on exactly one line.

Each mutation operator finds its sites with the AST and rewrites only the source span of that site (positions from
the AST), so the rest of the file keeps its formatting and the teacher's fix is "replace this line with that one".

Operators: operator swap (+ ↔ −, * → +, // ↔ %), comparison flip (< ↔ <=, > ↔ >=, == ↔ !=, in ↔ not in),
boolean operator swap (and ↔ or), off-by-one (an int in a slice, an index or a range() call ± 1), wrong constant
(any other int), swapped arguments (the first two positional arguments of a call), dropped negation (`not x` → `x`),
wrong variable (a loaded name replaced by another local of the same function) and removed statement (an assignment
or expression statement replaced by `pass`).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

OPERATORS = ("operator_swap", "comparison_flip", "boolean_swap", "off_by_one", "wrong_constant", "swapped_arguments",
             "dropped_negation", "wrong_variable", "removed_statement")

_BINOP_SWAP = {ast.Add: ("+", "-"), ast.Sub: ("-", "+"), ast.Mult: ("*", "+"), ast.FloorDiv: ("//", "%"),
               ast.Mod: ("%", "//")}
_CMP_SWAP = {ast.Lt: ("<", "<="), ast.LtE: ("<=", "<"), ast.Gt: (">", ">="), ast.GtE: (">=", ">"),
             ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="), ast.In: ("in", "not in"), ast.NotIn: ("not in", "in")}


@dataclass(frozen=True)
class Mutant:
    operator: str
    site: int  # index among this operator's sites in the module, in source order
    line: int  # 1-based line that changed
    original_line: str
    mutated_line: str
    source: str  # the whole mutated module


@dataclass(frozen=True)
class _Edit:
    line: int  # 1-based; the edit stays on this line
    col: int
    end_col: int
    text: str


def _offsets_on_line(src_lines: list[str], node: ast.AST) -> tuple[int, int, int] | None:
    """(line, col, end_col) of a node that sits on one line, else None."""
    if getattr(node, "lineno", None) is None or node.lineno != node.end_lineno:
        return None
    return node.lineno, node.col_offset, node.end_col_offset


def _gap_edit(src_lines: list[str], left: ast.AST, right: ast.AST, old: str, new: str) -> _Edit | None:
    """Replace the operator `old` that sits between two nodes on one line."""
    if left.end_lineno != right.lineno or left.lineno != right.lineno:
        return None
    line = src_lines[left.end_lineno - 1]
    gap = line[left.end_col_offset:right.col_offset]
    at = gap.find(old)
    if at < 0 or (old == "in" and gap.find("not in") >= 0):
        return None
    start = left.end_col_offset + at
    return _Edit(left.end_lineno, start, start + len(old), new)


def _function_locals(fn: ast.AST) -> set[str]:
    names = {a.arg for a in ast.walk(fn) if isinstance(a, ast.arg)}
    names |= {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    return names


def _sites(tree: ast.Module, src_lines: list[str]) -> Iterator[tuple[str, _Edit]]:
    """Every (operator, edit) in source order of the nodes visited."""
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            parents[child] = node

    def enclosing_function(node: ast.AST) -> ast.AST | None:
        while node in parents:
            node = parents[node]
            if isinstance(node, ast.FunctionDef):
                return node
        return None

    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOP_SWAP:
            old, new = _BINOP_SWAP[type(node.op)]
            if (e := _gap_edit(src_lines, node.left, node.right, old, new)) is not None:
                yield "operator_swap", e
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _CMP_SWAP:
            old, new = _CMP_SWAP[type(node.ops[0])]
            if (e := _gap_edit(src_lines, node.left, node.comparators[0], old, new)) is not None:
                yield "comparison_flip", e
        elif isinstance(node, ast.BoolOp) and len(node.values) == 2:
            old, new = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
            if (e := _gap_edit(src_lines, node.values[0], node.values[1], old, new)) is not None:
                yield "boolean_swap", e
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            if (pos := _offsets_on_line(src_lines, node)) and node.operand.lineno == node.lineno:
                line, col, end = pos
                inner = src_lines[line - 1][node.operand.col_offset:node.operand.end_col_offset]
                yield "dropped_negation", _Edit(line, col, end, inner)
        elif isinstance(node, ast.Constant) and type(node.value) is int and (pos := _offsets_on_line(src_lines, node)):
            parent = parents.get(node)
            in_index = isinstance(parent, (ast.Slice, ast.Subscript)) or (
                isinstance(parent, ast.BinOp) and isinstance(parents.get(parent), (ast.Slice, ast.Subscript)))
            in_range = isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "range"
            line, col, end = pos
            if in_index or in_range:
                yield "off_by_one", _Edit(line, col, end, str(node.value + 1 if node.value <= 0 else node.value - 1))
            else:
                yield "wrong_constant", _Edit(line, col, end, str(node.value * 2 if node.value > 1 else node.value + 1))
        elif isinstance(node, ast.Call) and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args):
            a, b = node.args[0], node.args[1]
            if a.lineno == a.end_lineno == b.lineno == b.end_lineno:
                line = src_lines[a.lineno - 1]
                ta, tb = line[a.col_offset:a.end_col_offset], line[b.col_offset:b.end_col_offset]
                if ta != tb:
                    gap = line[a.end_col_offset:b.col_offset]
                    yield "swapped_arguments", _Edit(a.lineno, a.col_offset, b.end_col_offset, tb + gap + ta)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            fn = enclosing_function(node)
            if fn is None or node.id not in _function_locals(fn):
                continue
            others = sorted(_function_locals(fn) - {node.id})
            if others and (pos := _offsets_on_line(src_lines, node)):
                line, col, end = pos
                yield "wrong_variable", _Edit(line, col, end, others[0])
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.Expr)) and not (
                isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)):
            body = getattr(parents.get(node), "body", None)
            if isinstance(body, list) and node in body and len(body) >= 2 and (pos := _offsets_on_line(src_lines, node)):
                line, col, end = pos
                yield "removed_statement", _Edit(line, col, end, "pass")


def mutants(source: str) -> list[Mutant]:
    """All single-line mutants of a module that still parse and differ from the original, in a stable order."""
    tree = ast.parse(source)
    src_lines = source.split("\n")
    out: list[Mutant] = []
    counts: dict[str, int] = {}
    seen: set[str] = set()
    edits = sorted(_sites(tree, src_lines), key=lambda oe: (oe[1].line, oe[1].col, OPERATORS.index(oe[0])))
    for op, e in edits:
        old_line = src_lines[e.line - 1]
        new_line = old_line[:e.col] + e.text + old_line[e.end_col:]
        if new_line == old_line:
            continue
        new_source = "\n".join(src_lines[:e.line - 1] + [new_line] + src_lines[e.line:])
        try:
            ast.parse(new_source)
        except SyntaxError:
            continue
        if new_source in seen:
            continue
        seen.add(new_source)
        site = counts.get(op, 0)
        counts[op] = site + 1
        out.append(Mutant(op, site, e.line, old_line, new_line, new_source))
    return out


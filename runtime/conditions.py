"""Approval rule conditions: JSON Logic over a tool call's validated arguments.

A condition is data, never code: a JSON Logic rule such as
`{">": [{"var": "amount_cents"}, 50000]}`, evaluated by datalogic-py (a Rust implementation
that passes the JSON Logic conformance suite; it has no way to call Python, read files or
loop without bound). On top of the library this module keeps the language small and checked:

- only the operators in OPERATORS are accepted (comparisons, and/or/not, `in`, `var`);
- every `var` must name a field of the tool's input schema, and each comparison's operands
  must have types that can meet (a number against a number field, a string against a string
  or enum field), so a rule that cannot match what the tool takes is refused when it is saved;
- the condition's size and depth are bounded, and its evaluation runs under an operation budget.

`{}` is the condition that matches every call.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import datalogic_py

MAX_BYTES = 4096
MAX_DEPTH = 12
MAX_OPERANDS = 64
MAX_LIST = 256
# Operations one evaluation may charge; a checked condition of MAX_BYTES needs far fewer.
BUDGET = 20_000

COMPARE = frozenset({">", ">=", "<", "<="})
EQUALITY = frozenset({"==", "!=", "===", "!=="})
LOGIC = frozenset({"and", "or"})
NEGATION = frozenset({"!", "!!"})
OPERATORS = COMPARE | EQUALITY | LOGIC | NEGATION | {"in", "var"}

_NUMBER = "number"
_ENGINE = datalogic_py.Engine()


class ConditionError(ValueError):
    """A condition that is not valid for the tool's input schema; `problems` says why."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


# --- the schema's fields -------------------------------------------------------------------------


def schema_fields(schema: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """Each field path of a JSON schema ("a", "a.b" for nested objects) with its JSON types
    ("number" stands for integer and number alike)."""
    defs = schema.get("$defs", {})
    fields: dict[str, frozenset[str]] = {}

    def visit(node: Mapping[str, Any], path: str, depth: int) -> None:
        node = _deref(node, defs)
        types = _types(node, defs)
        if path:
            fields[path] = frozenset(types)
        if depth > MAX_DEPTH:
            return
        for each in [node, *node.get("anyOf", []), *node.get("oneOf", [])]:
            variant = _deref(each, defs)
            for name, sub in variant.get("properties", {}).items():
                visit(sub, f"{path}.{name}" if path else name, depth + 1)

    visit(schema, "", 0)
    return fields


def _deref(node: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        found = defs.get(ref.removeprefix("#/$defs/"))
        return found if isinstance(found, Mapping) else {}
    return node


def _types(node: Mapping[str, Any], defs: Mapping[str, Any]) -> set[str]:
    node = _deref(node, defs)
    if "const" in node:
        return {_literal_type(node["const"])}
    if "enum" in node:
        return {_literal_type(value) for value in node["enum"]}
    declared = node.get("type")
    if isinstance(declared, str):
        return {_NUMBER if declared == "integer" else declared}
    if isinstance(declared, list):
        return {_NUMBER if t == "integer" else t for t in declared}
    found: set[str] = set()
    for variant in [*node.get("anyOf", []), *node.get("oneOf", []), *node.get("allOf", [])]:
        found |= _types(variant, defs)
    return found


def _literal_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return _NUMBER
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


# --- checking ------------------------------------------------------------------------------------


def check(condition: Any, schema: Mapping[str, Any]) -> None:
    """Raise ConditionError unless `condition` is a bounded, boolean JSON Logic expression over
    the fields of `schema`, with operand types that can meet."""
    if condition == {}:
        return
    try:
        size = len(json.dumps(condition, allow_nan=False, ensure_ascii=False).encode())
    except (TypeError, ValueError):
        raise ConditionError(["the condition must be plain JSON"]) from None
    except RecursionError:  # nested beyond what the encoder follows: far beyond MAX_DEPTH
        raise ConditionError([f"nested deeper than {MAX_DEPTH} levels"]) from None
    if size > MAX_BYTES:
        raise ConditionError([f"the condition is larger than {MAX_BYTES} bytes"])
    if not (isinstance(condition, dict) and len(condition) == 1):
        raise ConditionError(['the condition must be one operation, e.g. {">": [...]}'])
    operator = next(iter(condition))
    if operator not in COMPARE | EQUALITY | LOGIC | NEGATION | {"in"}:
        raise ConditionError([f"the condition must be true or false, not a {operator!r} value"])
    problems: list[str] = []
    _Checker(schema_fields(schema), problems).expression(condition, "", 0)
    if not problems:
        # The library's own view, should our subset ever let through what it cannot compile.
        problems = [f"{d['pointer'] or '/'}: {d['message']}" for d in _ENGINE.check(condition)]
    if problems:
        raise ConditionError(problems)


class _Checker:
    def __init__(self, fields: dict[str, frozenset[str]], problems: list[str]) -> None:
        self.fields = fields
        self.problems = problems

    def fail(self, where: str, message: str) -> frozenset[str]:
        self.problems.append(f"{where or '/'}: {message}")
        return frozenset()

    def expression(self, node: Any, where: str, depth: int) -> frozenset[str]:
        """Check `node`; return the JSON types it can evaluate to (empty once it failed)."""
        if depth > MAX_DEPTH:
            return self.fail(where, f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, list):
            return self.fail(where, "a list is only allowed as the second operand of 'in'")
        if not isinstance(node, dict):
            return frozenset({_literal_type(node)})
        if len(node) != 1:
            return self.fail(where, "an operation is an object with exactly one operator")
        operator, operands = next(iter(node.items()))
        if operator not in OPERATORS:
            allowed = ", ".join(sorted(OPERATORS))
            return self.fail(where, f"the operator {operator!r} is not allowed (use {allowed})")
        at = f"{where}/{operator}"
        if operator == "var":
            return self.var(operands, at)
        if not isinstance(operands, list):
            operands = [operands]
        if len(operands) > MAX_OPERANDS:
            return self.fail(at, f"more than {MAX_OPERANDS} operands")
        if operator in LOGIC or operator in NEGATION:
            want = (1, MAX_OPERANDS) if operator in LOGIC else (1, 1)
            if not want[0] <= len(operands) <= want[1]:
                return self.fail(at, f"{operator!r} takes {_count(want)} operand(s)")
            for i, operand in enumerate(operands):
                self.expression(operand, f"{at}/{i}", depth + 1)
            return frozenset({"boolean"})
        if operator == "in":
            return self.within(operands, at, depth)
        want = (2, 3) if operator in COMPARE else (2, 2)
        if not want[0] <= len(operands) <= want[1]:
            return self.fail(at, f"{operator!r} takes {_count(want)} operands")
        types = [self.expression(o, f"{at}/{i}", depth + 1) for i, o in enumerate(operands)]
        if any(not t for t in types):
            return frozenset({"boolean"})
        if operator in COMPARE:
            for i, t in enumerate(types):
                if _NUMBER not in t:
                    self.fail(f"{at}/{i}", f"{operator!r} compares numbers, not {_names(t)}")
        elif not (types[0] & types[1]) and not ({"null"} & (types[0] | types[1])):
            self.fail(at, f"{_names(types[0])} can never equal {_names(types[1])}")
        return frozenset({"boolean"})

    def var(self, operand: Any, at: str) -> frozenset[str]:
        if isinstance(operand, list):
            if not 1 <= len(operand) <= 2:
                return self.fail(at, "'var' takes a field name and an optional default")
            operand = operand[0]
        if not isinstance(operand, str) or not operand:
            return self.fail(at, "'var' needs the name of an argument")
        if operand not in self.fields:
            known = ", ".join(sorted(self.fields)) or "none"
            return self.fail(at, f"the tool has no argument {operand!r} (it has: {known})")
        return self.fields[operand] or frozenset({"null"})

    def within(self, operands: list[Any], at: str, depth: int) -> frozenset[str]:
        if len(operands) != 2:
            return self.fail(at, "'in' takes a value and a list (or a text) to look in")
        needle = self.expression(operands[0], f"{at}/0", depth + 1)
        haystack = operands[1]
        if isinstance(haystack, list):
            if len(haystack) > MAX_LIST:
                return self.fail(f"{at}/1", f"a list of more than {MAX_LIST} values")
            for i, value in enumerate(haystack):
                if isinstance(value, dict | list):
                    self.fail(f"{at}/1/{i}", "the list holds plain values only")
                elif needle and _literal_type(value) not in needle:
                    self.fail(f"{at}/1/{i}", f"{value!r} can never equal {_names(needle)}")
            return frozenset({"boolean"})
        text = self.expression(haystack, f"{at}/1", depth + 1)
        if text and "string" not in text:
            self.fail(f"{at}/1", f"'in' looks in a list or a text, not in {_names(text)}")
        if needle and "string" not in needle:
            self.fail(f"{at}/0", f"only a text can be found in a text, not {_names(needle)}")
        return frozenset({"boolean"})


def _count(bounds: tuple[int, int]) -> str:
    low, high = bounds
    if low == high:
        return str(low)
    return f"at least {low}" if high == MAX_OPERANDS else f"{low} to {high}"


def _names(types: Iterable[str]) -> str:
    return " or ".join(sorted(types)) or "nothing"


# --- evaluating ----------------------------------------------------------------------------------


def matches(condition: Any, arguments: Mapping[str, Any]) -> bool:
    """Whether validated `arguments` satisfy a checked `condition`.

    Raises ConditionError when the evaluation fails or runs over its budget: the caller fails
    closed (the call then needs approval under the rule).
    """
    if condition == {}:
        return True
    # Each operation nests an object and its operands' list: a checked condition is at most
    # about 2 * MAX_DEPTH containers deep. Far deeper is never handed to the library, which
    # crashes the process on nesting some thousands deep (a condition that skipped `check`).
    if _deeper_than(condition, 4 * MAX_DEPTH):
        raise ConditionError([f"the condition is nested deeper than {MAX_DEPTH} levels"])
    try:
        result, _charged = _ENGINE.eval_metered(condition, dict(arguments), BUDGET)
    except datalogic_py.DataLogicError as exc:
        raise ConditionError([f"the condition could not be evaluated: {exc}"]) from None
    return bool(_ENGINE.truthy(result))


def _deeper_than(value: Any, limit: int) -> bool:
    """Whether `value` nests lists and objects more than `limit` deep (without recursing)."""
    pending = [(value, 0)]
    while pending:
        node, depth = pending.pop()
        if depth > limit:
            return True
        if isinstance(node, dict):
            pending.extend((child, depth + 1) for child in node.values())
        elif isinstance(node, list):
            pending.extend((child, depth + 1) for child in node)
    return False

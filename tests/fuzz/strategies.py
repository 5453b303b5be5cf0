"""Hostile human-supplied data: what operators paste, fat-finger or send on purpose."""

from __future__ import annotations

from hypothesis import strategies as st

# Text the databases must never see raw: NULs, lone surrogates, huge and odd strings.
nasty_text = st.one_of(
    st.text(max_size=50),
    st.sampled_from(
        [
            "",
            " ",
            "\x00",
            "a\x00b",
            "\ud800",
            "x\udfff",
            "<script>alert(1)</script>",
            "' OR 1=1 --",
            "{{ 7*7 }}",
            "null",
            "NaN",
            "\u202e",
            "💸" * 3,
        ]
    ),
    st.text(min_size=3000, max_size=5000),
)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    nasty_text,
)

json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(nasty_text, children, max_size=4)
    ),
    max_leaves=20,
)


def deep(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


hostile_documents = st.one_of(
    json_values,
    st.builds(deep, st.integers(min_value=30, max_value=200)),
    st.just({"x": "y" * 300_000}),
    st.just(float("nan")),
    st.just(object()),
    st.just({1: "non-string key"}),
)

# JSON as text, as a form field carries it.
json_texts = st.one_of(
    nasty_text,
    st.sampled_from(
        [
            '{"a": 1, "a": 2}',
            '{"a": NaN}',
            '{"a": Infinity}',
            "[" * 5000 + "]" * 5000,
            '{"receipt_id": "\\u0000"}',
            '{"x": "\\ud800"}',
            "1e999999",
            '{"a":}',
            "9" * 5000,
            '{"approved": true}',
        ]
    ),
)

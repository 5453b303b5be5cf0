"""The runtime's public names: each one resolves, and the list users see is the list served."""

from __future__ import annotations

import importlib

import runtime


def test_every_public_name_resolves_to_its_definition() -> None:
    assert sorted(runtime._EXPORTS) == runtime.__all__
    for name in runtime.__all__:
        defining = importlib.import_module(runtime._EXPORTS[name])
        assert getattr(runtime, name) is getattr(defining, name)


def test_an_unknown_name_is_an_attribute_error() -> None:
    try:
        runtime.no_such_name  # noqa: B018
    except AttributeError as error:
        assert "no_such_name" in str(error)
    else:
        raise AssertionError("runtime.no_such_name resolved")

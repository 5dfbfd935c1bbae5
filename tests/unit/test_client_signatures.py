"""The public API's signatures: explicit, documented, and made of public types.

A user reads `Client.publish` in an editor or on the reference pages: every option is a
named keyword with a type and a line in the docstring's Args, and every type a public
method takes or returns can be imported from a public module.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable

import pytest

import liftbridge_client
from liftbridge_client import Client, features

PUBLISH_VERBS = ("publish", "send", "publish_nowait", "publish_to_subject")
EXPLICIT = (*PUBLISH_VERBS, "create_stream", "subscribe", "activity")


def _args_section(doc: str) -> set[str]:
    """The parameter names the google-style ``Args:`` section documents."""
    section = re.split(r"^(?:Returns|Raises):", doc.split("Args:", 1)[1], flags=re.MULTILINE)[0]
    return set(re.findall(r"^    (\w+):", section, re.MULTILINE))


@pytest.mark.parametrize("verb", EXPLICIT)
def test_verbs_take_explicit_documented_keywords(verb: str) -> None:
    fn = getattr(Client, verb)
    params = list(inspect.signature(fn).parameters.values())[1:]
    kinds = {p.kind for p in params}
    assert inspect.Parameter.VAR_KEYWORD not in kinds, f"{verb} takes **kw"
    if verb in PUBLISH_VERBS:
        keywords = [p.name for p in params if p.kind is inspect.Parameter.KEYWORD_ONLY]
        assert "ack_policy" in keywords
        assert "ack_wait" in keywords
    doc = inspect.getdoc(fn) or ""
    returns_none = inspect.signature(fn).return_annotation in (None, "None")
    for section in ("Args:", "Raises:", *(() if returns_none else ("Returns:",))):
        assert section in doc, f"{verb}'s docstring has no {section}"
    assert _args_section(doc) == {p.name for p in params}, verb


def test_the_stream_verbs_share_one_keyword_list() -> None:
    """publish, send and publish_nowait differ in waiting, not in what they accept."""
    lists = {
        verb: [
            (p.name, p.default)
            for p in inspect.signature(getattr(Client, verb)).parameters.values()
        ]
        for verb in ("publish", "send", "publish_nowait")
    }
    assert lists["publish"] == lists["send"] == lists["publish_nowait"]


def _public_names() -> dict[int, str]:
    found: dict[int, str] = {}
    modules = (
        liftbridge_client,
        features,
        liftbridge_client.errors,
        liftbridge_client.activity,
        liftbridge_client.groups,
        liftbridge_client.options,
        liftbridge_client.models,
        liftbridge_client.partitioning,
    )
    for module in modules:
        for name in getattr(module, "__all__", ()):
            found.setdefault(id(getattr(module, name)), f"{module.__name__}.{name}")
    return found


def _classes(annotation: object) -> set[type]:
    out: set[type] = set()
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and origin is None:
        out.add(annotation)
    elif origin is not None:
        if isinstance(origin, type) and origin.__module__.startswith("liftbridge_client"):
            out.add(origin)
        for arg in typing.get_args(annotation):
            out |= _classes(arg)
    return out


def _hints(member: Callable[..., object]) -> dict[str, object]:
    return typing.get_type_hints(member, vars(liftbridge_client.client))


def test_every_type_in_clients_public_signatures_is_public() -> None:
    """``Client.features`` returned a private detector type in 0.2; none may now."""
    public = _public_names()
    leaks: list[str] = []
    for name, member in vars(Client).items():
        if name.startswith("_"):
            continue
        fn = member.fget if isinstance(member, property) else member
        if not isinstance(fn, types.FunctionType):
            continue
        for where, hint in _hints(fn).items():
            leaks.extend(
                f"Client.{name} {where}: {cls.__module__}.{cls.__qualname__}"
                for cls in _classes(hint)
                if cls.__module__.startswith("liftbridge_client") and id(cls) not in public
            )
    assert leaks == []


def test_activity_takes_the_position_keywords_of_subscribe() -> None:
    subscribe = inspect.signature(Client.subscribe).parameters
    for name, param in inspect.signature(Client.activity).parameters.items():
        if name != "self":
            assert subscribe[name].default == param.default, name
            assert subscribe[name].annotation == param.annotation, name


def test_features_is_the_documented_protocol() -> None:
    hints = _hints(typing.cast(property, Client.features).fget)  # type: ignore[arg-type]
    assert hints["return"] is features.ServerFeatures
    assert "ServerFeatures" in features.__all__

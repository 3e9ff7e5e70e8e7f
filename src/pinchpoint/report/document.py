"""The machinery under pinchpoint's typed documents (`report.json` and the others): frozen dataclasses
turned into JSON, read back from it, and described as a JSON Schema, all from their type hints.

A field is written as its JSON key (`key=` renames one that is a Python keyword); a field made with
`optional()` is left out of the JSON when it is None (a section that only some runs have), any other
field is always written, null when None. Tuples are JSON arrays, mappings JSON objects.
"""

from __future__ import annotations

import dataclasses
import functools
import sys
import types
import typing
from collections.abc import Mapping
from typing import Any, Self

from pinchpoint.errors import TraceError

JsonObject = dict[str, Any]
"""A JSON object as parsed or written: the form documents take outside Python, and the foreign formats
pinchpoint reads or writes (Kineto and Chrome trace events, speedscope files)."""
JsonSchema = dict[str, Any]
"""A JSON Schema (draft 2020-12)."""

_OMIT = "omit"
_KEY = "key"
_DOC = "doc"


def optional(*, key: str | None = None, doc: str = "") -> Any:
    """A field left out of the JSON when None."""
    return dataclasses.field(default=None, metadata={_OMIT: True, _KEY: key, _DOC: doc})


def named(key: str, *, doc: str = "") -> Any:
    """A required field whose JSON key is `key` (a Python keyword such as `class`)."""
    return dataclasses.field(metadata={_KEY: key, _DOC: doc})


class DocumentError(TraceError):
    """A JSON document that does not have the shape its type says."""


class Document:
    """The base of a typed document (a frozen dataclass): `to_dict()` is its JSON, `from_dict` reads one."""

    __slots__ = ()

    def to_dict(self) -> JsonObject:
        out: JsonObject = to_dict(self)
        return out

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        doc: Self = from_dict(cls, data)
        return doc


@functools.cache
def _fields(cls: type) -> tuple[tuple[str, str, Any, bool], ...]:
    """(attribute, JSON key, type, left out when None) of a document class, in order."""
    hints = typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))
    return tuple(
        (f.name, f.metadata.get(_KEY) or f.name, hints[f.name], bool(f.metadata.get(_OMIT)))
        for f in dataclasses.fields(cls)
    )


def to_dict(doc: Any) -> Any:
    """`doc` as plain JSON values (dicts, lists, str, numbers, bool, None)."""
    if dataclasses.is_dataclass(doc) and not isinstance(doc, type):
        out: JsonObject = {}
        for name, key, _, omit in _fields(type(doc)):
            value = getattr(doc, name)
            if value is None and omit:
                continue
            out[key] = to_dict(value)
        return out
    if isinstance(doc, (tuple, list)):
        return [to_dict(v) for v in doc]
    if isinstance(doc, Mapping):
        return {str(k): to_dict(v) for k, v in doc.items()}
    return doc


def from_dict(cls: Any, data: Any) -> Any:
    """The document of type `cls` (a document class, or a hint such as `tuple[X, ...]`) that `data`
    (parsed JSON) holds; DocumentError when it does not fit. Keys the type does not know are ignored
    (a newer pinchpoint's additions), and a key it can hold null for may be missing (an older one's)."""
    return _read(cls, data, getattr(cls, "__name__", "document"))


def _read(tp: Any, data: Any, where: str) -> Any:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(tp)
        if data is None and type(None) in options:
            return None
        errors = []
        for option in (o for o in options if o is not type(None)):
            try:
                return _read(option, data, where)
            except DocumentError as exc:
                errors.append(str(exc))
        raise DocumentError(errors[0] if errors else f"{where}: null")
    if origin is tuple:
        if not isinstance(data, list):
            raise DocumentError(f"{where}: expected a list")
        inner = typing.get_args(tp)[0]
        return tuple(_read(inner, v, f"{where}[{i}]") for i, v in enumerate(data))
    if origin in (Mapping, dict) or tp is dict:
        if not isinstance(data, dict):
            raise DocumentError(f"{where}: expected an object")
        args = typing.get_args(tp)
        inner = args[1] if args else Any
        return {str(k): _read(inner, v, f"{where}.{k}") for k, v in data.items()}
    if tp is Any:
        return data
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise DocumentError(f"{where}: expected an object")
        kwargs: dict[str, object] = {}
        for name, key, hint, omit in _fields(tp):
            if key not in data:
                if omit:
                    continue
                if _nullable(hint):
                    kwargs[name] = None
                    continue
                raise DocumentError(f"{where}: no {key!r}")
            kwargs[name] = _read(hint, data[key], f"{where}.{key}")
        return tp(**kwargs)
    if tp is float:
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise DocumentError(f"{where}: expected a number")
        return float(data)
    if tp in (int, str, bool):
        if not isinstance(data, tp) or (tp is int and isinstance(data, bool)):
            raise DocumentError(f"{where}: expected {tp.__name__}")
        return data
    raise DocumentError(f"{where}: no reader for {tp!r}")


def _nullable(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


def json_schema(cls: type, *, title: str, schema_id: str) -> JsonSchema:
    """A JSON Schema (draft 2020-12) for documents of type `cls`."""
    defs: dict[str, JsonSchema] = {}
    _schema_of(cls, defs)
    root = defs.pop(cls.__name__)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": schema_id,
        "title": title,
        **root,
        "$defs": dict(sorted(defs.items())),
    }


def _schema_of(tp: Any, defs: dict[str, JsonSchema]) -> JsonSchema:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [_schema_of(o, defs) for o in typing.get_args(tp)]
        return {"anyOf": options}
    if tp is type(None):
        return {"type": "null"}
    if origin is tuple:
        return {"type": "array", "items": _schema_of(typing.get_args(tp)[0], defs)}
    if origin in (Mapping, dict) or tp is dict:
        args = typing.get_args(tp)
        return {"type": "object", "additionalProperties": _schema_of(args[1], defs) if args else {}}
    if tp is Any:
        return {}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # (a placeholder while its fields are described: no type nests itself)
            props = {}
            required = []
            for f, (_, key, hint, omit) in zip(dataclasses.fields(tp), _fields(tp), strict=True):
                props[key] = _schema_of(hint, defs) | (
                    {"description": f.metadata[_DOC]} if f.metadata.get(_DOC) else {}
                )
                if not omit:
                    required.append(key)
            doc = (tp.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
            defs[name] = {
                "type": "object",
                **({"description": doc} if doc else {}),
                "properties": props,
                "required": required,
            }
        return {"$ref": f"#/$defs/{name}"}
    simple = {float: "number", int: "integer", str: "string", bool: "boolean"}
    if tp in simple:
        return {"type": simple[tp]}
    raise TypeError(f"no JSON Schema for {tp!r}")

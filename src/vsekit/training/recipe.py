"""Strict recipes: a training configuration is a dataclass, a recipe file is that dataclass as JSON.

:class:`Recipe` is the base of every trainer's config. ``from_dict`` refuses an unknown key or a value of
the wrong type with an error naming the key and the file, so a typo in a recipe never silently trains
with a default. ``null`` is the one "off" value of every optional setting.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from vsekit.errors import ConfigMismatchError, VsekitError
from vsekit.fileio import read_named_json

__all__ = ["Recipe", "field_error", "list_recipe_names", "load_recipe_file"]

R = TypeVar("R", bound="Recipe")


class Recipe:
    """Mixin for ``@dataclass`` training configs: strict JSON reading, defaults, resume compatibility."""

    #: Fields a resumed run may change: they do not alter what the finished epochs computed.
    RESUMABLE: ClassVar[frozenset[str]] = frozenset(
        {"name", "description", "epochs", "patience", "num_threads"}
    )
    #: Fields whose "off" value was once written as 0 (older recipe files and checkpoints): 0 reads as None.
    ZERO_MEANS_OFF: ClassVar[frozenset[str]] = frozenset()

    # Fields every recipe has: the run template (vsekit.training.run) reads them. Declared, not defined:
    # each subclass's dataclass fields give them their defaults and their place.
    name: str
    epochs: int
    seed: int
    patience: int | None
    num_threads: int | None

    def validate(self: R, source: str = "config") -> R:
        """Range checks of the subclass (raise VsekitError naming ``source`` and the field); returns self."""
        return self

    @classmethod
    def from_dict(cls: type[R], data: Any, source: str = "config") -> R:
        """Build from a JSON object; unknown fields and wrong types raise VsekitError naming them."""
        if not isinstance(data, dict):
            raise VsekitError(f"{source}: expected a JSON object, found {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        known = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        unknown = sorted(k for k in data if k not in known)
        if unknown:
            raise VsekitError(f"{source}: unknown field(s) {', '.join(unknown)} (fields: {', '.join(known)})")
        data = cls.normalise(data)
        for key, value in data.items():
            if not _type_ok(value, hints[key]):
                raise VsekitError(f"{source}: field '{key}' must be {_type_name(hints[key])}, got {value!r}")
        copied = {
            k: (dict(v) if isinstance(v, dict) else list(v) if isinstance(v, list) else v)
            for k, v in data.items()
        }
        return cls(**copied).validate(source)

    @classmethod
    def normalise(cls, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` with the legacy 0 of :attr:`ZERO_MEANS_OFF` fields read as None (the one off value)."""
        return {
            k: None if k in cls.ZERO_MEANS_OFF and type(v) is int and v == 0 else v for k, v in data.items()
        }

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Every field's default: what a run used for a field that did not exist when it started."""
        out = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.default is not dataclasses.MISSING:
                out[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                out[f.name] = f.default_factory()
        return out

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def check_resumable(self, saved: dict[str, Any], path: str | os.PathLike[str]) -> None:
        """ConfigMismatchError naming the first field where the run saved in ``path`` differs from this one.

        Fields added after the run started compare against their default (what the run used).
        """
        old = {**self.defaults(), **self.normalise(saved)}
        for key, value in self.to_dict().items():
            if key not in self.RESUMABLE and old.get(key) != value:
                raise ConfigMismatchError(
                    f"{path}: cannot resume: the checkpoint was trained with {key}={old.get(key)!r}, "
                    f"this run asks for {key}={value!r} (use another --out or the original settings)"
                )


def list_recipe_names(directory: Path) -> list[str]:
    """Names of the JSON recipes shipped in ``directory``."""
    return sorted(p.stem for p in directory.glob("*.json"))


def load_recipe_file(cls: type[R], name_or_path: str | os.PathLike[str], directory: Path, kind: str) -> R:
    """A ``cls`` recipe by shipped name (``directory/NAME.json``) or by path; errors name the file."""
    data, path = read_named_json(name_or_path, directory, kind)
    return cls.from_dict(data, source=str(path))


def field_error(source: str, name: str, value: Any, why: str) -> VsekitError:
    """The one wording of a bad recipe value: file, field, what is wrong, what was given."""
    return VsekitError(f"{source}: field '{name}' {why} (got {value!r})")


def _type_ok(value: Any, hint: Any) -> bool:
    args = typing.get_args(hint)
    options = args if args and typing.get_origin(hint) is not list else (hint,)  # a Union's members
    for option in options:
        if option is type(None) and value is None:
            return True
        if typing.get_origin(option) is list:
            (item,) = typing.get_args(option)
            if isinstance(value, list) and all(_type_ok(v, item) for v in value):
                return True
            continue
        if option is float and isinstance(value, int | float) and not isinstance(value, bool):
            return True
        if option is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if option in (str, bool, dict) and isinstance(value, option):
            return True
    return False


def _type_name(hint: Any) -> str:
    def name(a: Any) -> str:
        if a is type(None):
            return "null"
        if typing.get_origin(a) is list:
            return f"a list of {name(typing.get_args(a)[0])}"
        return a.__name__

    return " or ".join(name(a) for a in typing.get_args(hint) or (hint,))

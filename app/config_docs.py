"""The configuration reference, docs/configuration.md, generated from the settings classes.

    python -m app.config_docs            print the page
    python -m app.config_docs --write    rewrite docs/configuration.md (what `make docs` runs)
    python -m app.config_docs --check    exit 1 when docs/configuration.md is out of date

The classes are app.settings.Settings and the BaseSettings classes of any plug-in that
has an app/<plug-in>/settings.py. Every field becomes one row: its environment variable,
type and limits, default and description. Inside a class, a comment line that follows a
blank line starts a group and names it, so the page keeps the grouping the class is
written in and a field added to a group lands in that group here too.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import io
import sys
import tokenize
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import annotated_types
from pydantic import AliasChoices, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from pydantic_settings import BaseSettings

from app.settings import EnvFileSettings

APP_DIR = Path(__file__).resolve().parent
PAGE_NAME = "docs/configuration.md"
PAGE = APP_DIR.parent / PAGE_NAME
REGENERATE = "make docs   (or: .venv/bin/python -m app.config_docs --write)"
UNGROUPED = "General"
NO_DESCRIPTION = "*(no description yet)*"


@dataclass(frozen=True)
class Row:
    variable: str
    type: str
    default: str
    description: str


def settings_modules() -> list[str]:
    """app.settings first, then each plug-in's settings module, by package name."""
    plugins = sorted(p.parent.name for p in APP_DIR.glob("*/settings.py"))
    return ["app.settings", *(f"app.{name}.settings" for name in plugins)]


def settings_classes(module: types.ModuleType) -> list[type[BaseSettings]]:
    """The BaseSettings classes a module defines (not the ones it imports), in source order."""
    found = [c for c in vars(module).values()
             if isinstance(c, type) and issubclass(c, BaseSettings) and c is not BaseSettings
             and c.__module__ == module.__name__ and c.model_fields]
    return sorted(found, key=lambda c: inspect.getsourcelines(c)[1])


def missing_descriptions(module_names: list[str] | None = None) -> list[str]:
    """`module.Class.field` of every setting without a description."""
    out = []
    for name in module_names or settings_modules():
        for cls in settings_classes(importlib.import_module(name)):
            out += [f"{name}.{cls.__name__}.{field}" for field, info in own_fields(cls)
                    if not (info.description or "").strip()]
    return out


def own_fields(cls: type[BaseSettings]) -> list[tuple[str, FieldInfo]]:
    """The fields a class declares itself (inherited ones belong to their own class)."""
    own = set(cls.__dict__.get("__annotations__", {}))
    return [(name, info) for name, info in cls.model_fields.items() if name in own]


def groups(cls: type[BaseSettings]) -> list[tuple[str, list[str]]]:
    """(heading, field names) in source order; see the module docstring for the rule."""
    source = inspect.getsource(cls)
    lines = source.splitlines()
    body = ast.parse(source).body[0].body
    fields = [(node.lineno, node.target.id) for node in body  # ClassVars are not settings
              if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
              and node.target.id in cls.model_fields]
    indent = body[0].col_offset
    headings: dict[int, str] = {}  # line of a group's first comment line -> its heading
    current, previous = None, 0  # the heading being read, and its last line so far
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        row = token.start[0]
        if (token.type != tokenize.COMMENT or token.start[1] != indent
                or lines[row - 1].strip() != token.string.strip()):
            continue  # not a comment line of the class body
        text = token.string.lstrip("#").strip()
        if current is not None and row == previous + 1:
            headings[current] = f"{headings[current]} {text}"
        elif not lines[row - 2].strip():
            current, headings[row] = row, text
        else:
            current = None  # a note under a field, not a heading
            continue
        previous = row
    ordered: list[tuple[str, list[str]]] = []
    for lineno, name in fields:
        above = [row for row in headings if row < lineno]
        heading = headings[max(above)].rstrip(".") if above else UNGROUPED
        if not ordered or ordered[-1][0] != heading:
            ordered.append((heading, []))
        ordered[-1][1].append(name)
    return ordered


def env_name(cls: type[BaseSettings], name: str, info: FieldInfo) -> str:
    alias = info.validation_alias or info.alias
    if isinstance(alias, str):
        return alias.upper()
    if isinstance(alias, AliasChoices):
        return " or ".join(c.upper() for c in alias.choices if isinstance(c, str))
    return f"{cls.model_config.get('env_prefix', '')}{name}".upper()


def _number(value) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


_BOUNDS = ((annotated_types.Gt, "gt", ">"), (annotated_types.Ge, "ge", "≥"),
           (annotated_types.Lt, "lt", "<"), (annotated_types.Le, "le", "≤"))


def _limits(metadata: list) -> str:
    bounds = {attr: getattr(m, attr) for m in metadata for kind, attr, _ in _BOUNDS if isinstance(m, kind)}
    if "ge" in bounds and "le" in bounds and len(bounds) == 2:
        return f"{_number(bounds['ge'])} to {_number(bounds['le'])}"
    return ", ".join(f"{sign} {_number(bounds[attr])}" for _, attr, sign in _BOUNDS if attr in bounds)


_TYPE_WORDS = {bool: "true/false", int: "integer", float: "number", str: "text", SecretStr: "secret text",
               Path: "path"}


def type_text(annotation, metadata: list) -> str:
    optional = False
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        annotation = args[0] if len(args) == 1 else annotation
    if typing.get_origin(annotation) is typing.Literal:
        text = "one of " + ", ".join(f"`{v}`" for v in typing.get_args(annotation))
    else:
        text = _TYPE_WORDS.get(annotation) or getattr(annotation, "__name__", None) or str(annotation)
    limits = _limits(metadata)
    if limits:
        text = f"{text}, {limits}"
    return f"{text} (optional)" if optional else text


def default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    value = info.get_default(call_default_factory=True)
    if value is None or value is PydanticUndefined:
        return "unset"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, SecretStr):
        return "(a built-in secret)"
    if isinstance(value, (int, float)):
        return f"`{_number(value)}`"
    if value == "":
        return '`""`'
    return f"`{value}`"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def rows(cls: type[BaseSettings], names: list[str]) -> list[Row]:
    fields = cls.model_fields
    return [Row(env_name(cls, n, fields[n]), type_text(fields[n].annotation, fields[n].metadata),
                default_text(fields[n]), (fields[n].description or "").strip() or NO_DESCRIPTION)
            for n in names]


def _summary(cls: type[BaseSettings]) -> str:
    """The first paragraph of the class's own docstring, if it has one."""
    doc = inspect.getdoc(cls) if "__doc__" in cls.__dict__ and cls.__doc__ else ""
    return " ".join(doc.split("\n\n")[0].split())


def _source_note(cls: type[BaseSettings]) -> str:
    env_file = cls.model_config.get("env_file")
    if issubclass(cls, EnvFileSettings):
        return ("Read from the environment, or from `.env` in the working directory "
                "(`SKIPLOCK_ENV_FILE` names another file; empty: none).")
    if env_file:
        files = [env_file] if isinstance(env_file, (str, Path)) else list(env_file)
        where = " or ".join(f"`{f}`" for f in files)
        return f"Read from the environment, or from {where} in the working directory."
    return "Read from the environment."


def render(module_names: list[str] | None = None) -> str:
    out = [
        "# Configuration",
        "",
        "<!-- Generated from the settings classes by `python -m app.config_docs --write` "
        "(`make docs`): edit the field descriptions there, not this page. -->",
        "",
        "Every setting is an environment variable; names are not case-sensitive. A value that",
        "does not fit stops the program with one line naming the variable, before anything runs;",
        "so do settings that contradict each other.",
    ]
    for name in module_names or settings_modules():
        module = importlib.import_module(name)
        for cls in settings_classes(module):
            path = name.replace(".", "/") + ".py"
            out += ["", f"## `{cls.__name__}` in [{path}](../{path})", "",
                    f"{_summary(cls)} {_source_note(cls)}".strip()]
            for heading, names in groups(cls):
                out += ["", f"### {heading}", "",
                        "| variable | type | default | description |", "|---|---|---|---|"]
                out += [f"| `{r.variable}` | {_cell(r.type)} | {_cell(r.default)} | {_cell(r.description)} |"
                        for r in rows(cls, names)]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.config_docs", description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help=f"rewrite {PAGE_NAME}")
    mode.add_argument("--check", action="store_true", help="exit 1 when the page is out of date")
    args = parser.parse_args(argv)
    page = render()
    if args.write:
        PAGE.write_text(page)
    elif args.check:
        if not PAGE.exists() or PAGE.read_text() != page:
            print(f"{PAGE_NAME} is out of date; regenerate it: {REGENERATE}", file=sys.stderr)
            return 1
    else:
        sys.stdout.write(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The configuration reference, generated from the schema's help strings and the loader's allowed values.

``python -m selfverify.loop --help`` prints it for a terminal (``HelpAction``);
``python -m selfverify.config.reference > docs/guides/configuration.md`` writes it as markdown (a test
checks that the committed file is current).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import textwrap
import typing
from dataclasses import dataclass
from typing import Any

from selfverify.config.load import SHORTHANDS, allowed_values, load_config, to_dict
from selfverify.config.schema import Config

DOC_COMMAND = "python -m selfverify.config.reference > docs/guides/configuration.md"


@dataclass(frozen=True)
class Key:
    """One configuration key: dotted name, type, default (as YAML writes it), allowed values, help."""

    key: str
    type: str
    default: str
    default_yaml: str | None  # configs/default.yaml's value where it differs from the schema's
    allowed: str | None
    help: str


@dataclass(frozen=True)
class Section:
    """The keys of one dataclass of the schema; ``name`` is its dotted prefix ("" for the top level)."""

    name: str
    doc: str
    keys: list[Key]


def yaml_value(value: Any) -> str:
    """A value as it is written in YAML or a ``key=value`` override."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yaml_value(v)}" for k, v in value.items()) + "}"
    return str(value)


def _doc(text: str | None) -> str:
    return " ".join((text or "").split())


def _lookup(tree: Any, key: str) -> Any:
    for part in key.split("."):
        tree = tree[part]
    return tree


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def sections() -> list[Section]:
    """Every key of the schema, by section: the top level, then each section in schema order, a nested
    model (``rl.critic_model``, ``loop.judge_model``, ``loop.meta_model``) right after its parent."""
    shipped = to_dict(load_config())  # configs/default.yaml: what a run without --config starts from
    out: list[Section] = []

    def walk(cls: type, name: str, doc: str) -> None:
        hints = typing.get_type_hints(cls)
        keys, nested = [], []
        for f in dataclasses.fields(cls):
            key = f"{name}.{f.name}" if name else f.name
            if dataclasses.is_dataclass(hints[f.name]):
                nested.append((hints[f.name], key, f.metadata["help"]))
                continue
            default = yaml_value(_default(f))
            in_yaml = yaml_value(_lookup(shipped, key))
            keys.append(
                Key(
                    key,
                    str(f.type),
                    default,
                    in_yaml if in_yaml != default else None,
                    allowed_values(key),
                    f.metadata["help"],
                )
            )
        out.append(Section(name, doc, keys))
        for sub, key, help_ in nested:
            walk(sub, key, help_ if "." in key else _doc(sub.__doc__))

    walk(Config, "", _doc(Config.__doc__))
    return out


def _intro() -> list[str]:
    shorthands = ", ".join(f"{k}=… for {v}=…" for k, v in SHORTHANDS.items())
    return [
        "Set a key in a YAML file (--config) or on the command line as a dotted override, key=value (the "
        "value is YAML: null, true, 1e-5, {a: 1}). Later wins: schema defaults < the config file "
        "(configs/default.yaml without --config) < the objective preset configs/objectives/<objective>.yaml "
        "< command-line overrides. An unknown key, a wrong type or a value outside the allowed ones stops "
        "the run before any work, naming the key.",
        f"Shorthands: {shorthands}.",
        "Defaults are the schema's; where configs/default.yaml sets another value, it is shown beside.",
    ]


def terminal_text(width: int | None = None) -> str:
    """The reference for ``--help``: per section, each key with its type, default and allowed values,
    and its help wrapped to ``width`` (the terminal's, at most 100 columns)."""
    if width is None:
        width = max(60, min(100, shutil.get_terminal_size().columns))

    def wrap(text: str, first: str, rest: str | None = None) -> list[str]:
        indent = {"initial_indent": first, "subsequent_indent": first if rest is None else rest}
        return textwrap.wrap(text, width, break_on_hyphens=False, **indent)

    lines = ["configuration keys:"]
    for para in _intro():
        lines += wrap(para, "  ")
    for section in sections():
        title = section.name or "top level"
        lines += ["", *wrap(f"{title}: {section.doc.replace('``', '')}", "", " " * (len(title) + 2))]
        for k in section.keys:
            head = f"  {k.key} ({k.type}) = {k.default}"
            if k.default_yaml is not None:
                head += f"  [default.yaml: {k.default_yaml}]"
            lines.append(head)
            if k.allowed is not None:
                lines += wrap(f"allowed: {k.allowed}", " " * 6)
            lines += wrap(k.help, " " * 6)
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _code(text: str) -> str:
    return f"`{_cell(text)}`"


def markdown() -> str:
    """The reference as docs/guides/configuration.md."""
    lines = [
        "# Configuration reference",
        "",
        f"<!-- Generated by `{DOC_COMMAND}` from the schema's help (selfverify/config/schema.py) and the "
        "loader's allowed values (selfverify/config/load.py); edit those, not this file. -->",
        "",
        "Every key of the run configuration, as `python -m selfverify.loop --help` also prints it.",
        "",
    ]
    for para in _intro():
        lines += [para.replace("<objective>", "&lt;objective&gt;"), ""]
    for section in sections():
        lines += [f"## {_code(section.name) if section.name else 'Top level'}", ""]
        lines += [section.doc.replace("``", "`"), ""]
        lines += ["| key | type | default | allowed | help |", "| --- | --- | --- | --- | --- |"]
        for k in section.keys:
            default = _code(k.default)
            if k.default_yaml is not None:
                default += f" (default.yaml: {_code(k.default_yaml)})"
            allowed = _cell(k.allowed) if k.allowed is not None else ""
            lines.append(f"| {_code(k.key)} | {_code(k.type)} | {default} | {allowed} | {_cell(k.help)} |")
        lines.append("")
    return "\n".join(lines)


class HelpAction(argparse.Action):
    """``-h/--help`` that prints the parser's help and then every configuration key."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        kwargs.setdefault("help", "show this help, with every configuration key, and exit")
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser: argparse.ArgumentParser, *_: Any) -> None:
        try:
            parser.print_help()
            print()
            print(terminal_text(), end="", flush=True)
        except BrokenPipeError:  # piped into head or a pager that quit: not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        parser.exit()


if __name__ == "__main__":
    sys.stdout.buffer.write(markdown().encode("utf-8"))

"""Providers own everything about themselves: no module outside `labkit/providers/` names a
provider kind, a provider class (provider, settings or parser) or a provider module.

The check reads every module's syntax tree, so prose in docstrings and comments ("llama.cpp
reports ...") is free; what counts is code: a string literal that *is* a kind, an identifier
that is a provider class or carries a kind as one of its words (`is_llamacpp`), and an
import of a provider's own module.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import labkit
import labkit.providers
from labkit.providers.base import (
    Provider,
    ProviderSettings,
    SDKAdapter,
    StreamParser,
    provider_kinds,
)

pytestmark = pytest.mark.unit

LABKIT = Path(labkit.__file__).parent

#: Names that are allowed where they are, each for a reason that is not provider knowledge.
#: (path relative to labkit/, what is named) -> why
ALLOWED: dict[tuple[str, str], str] = {
    # PyPI distribution names, not provider kinds.
    ("runner/results.py", "_PACKAGES"): "package names for package_versions()",
    ("measurement/sdkpath.py", "_SDK_PACKAGES"): "packages whose exceptions are the SDKs' own",
    # The fake server speaks each provider's wire: the shapes whose names are also kinds.
    ("truth/schedule.py", "ServerTimings"): "the server timing shapes the fake server sends",
    ("truth/schedule.py", "CPP_SHAPE"): "llama-server's timings shape, served by the fake",
    ("truth/schedule.py", "PROCESSING_HEADER_SHAPE"): "the processing-ms header's shape",
    ("measurement/capacity.py", "labkit.providers.fake"): "calibration reads a fake server",
}


@dataclass(frozen=True)
class Vocabulary:
    """What names a provider: kinds, class names, module paths."""

    kinds: frozenset[str]
    classes: frozenset[str]
    modules: frozenset[str]


def provider_vocabulary() -> Vocabulary:
    """Every registered kind; every provider, settings, parser and SDK adapter class; and the
    modules that define them (`base` and `sdk`, the shared interfaces, define only bases)."""
    bases = (Provider, ProviderSettings, StreamParser, SDKAdapter)
    classes: set[str] = set()
    modules: set[str] = set()
    for info in pkgutil.iter_modules(labkit.providers.__path__):
        name = f"labkit.providers.{info.name}"
        module = importlib.import_module(name)
        for obj in vars(module).values():
            if (
                inspect.isclass(obj)
                and obj.__module__ == name
                and issubclass(obj, bases)
                and obj not in bases
            ):
                classes.add(obj.__name__)
                modules.add(name)
    return Vocabulary(frozenset(provider_kinds()), frozenset(classes), frozenset(modules))


def _words(identifier: str) -> set[str]:
    """`_is_llamacpp` -> {is, llamacpp}; `LlamaCppSettings` -> {llama, cpp, settings}."""
    parts = re.split(r"_+|(?<=[a-z0-9])(?=[A-Z])", identifier)
    return {p.lower() for p in parts if p}


def offences(source: str, where: str, vocab: Vocabulary) -> list[str]:
    """Each place in `source` (a module at `where`, relative to labkit/) naming a provider."""
    tree = ast.parse(source)
    allowed_assignments = {name for (path, name) in ALLOWED if path == where}
    exempt: set[int] = set()  # ids of string constants inside an allowed assignment
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in allowed_assignments for t in targets):
                exempt.update(id(n) for n in ast.walk(node))
    # A kind that is an English word ("fake") only counts as a whole identifier word when it
    # is also the whole identifier; kinds like "llamacpp" count as any word.
    word_kinds = {k for k in vocab.kinds if "_" not in k}
    found: list[str] = []

    def identifier(name: str, line: int) -> None:
        if name in vocab.classes:
            found.append(f"{where}:{line}: provider class {name}")
        elif name.lower() in vocab.kinds or _words(name) & (word_kinds - {"fake"}):
            found.append(f"{where}:{line}: identifier {name} names a provider kind")

    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value in vocab.kinds and id(node) not in exempt:
                found.append(f"{where}:{line}: string {node.value!r} is a provider kind")
        elif isinstance(node, ast.Name):
            identifier(node.id, line)
        elif isinstance(node, ast.Attribute):
            identifier(node.attr, line)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            identifier(node.name, line)
        elif isinstance(node, ast.arg):
            identifier(node.arg, line)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names]
            if isinstance(node, ast.ImportFrom) and node.module:
                modules = [node.module] + [f"{node.module}.{n}" for n in names]
            else:
                modules = names
            for module in modules:
                if module in vocab.modules and (where, module) not in ALLOWED:
                    found.append(f"{where}:{line}: imports provider module {module}")
            for alias in node.names:
                identifier(alias.asname or alias.name.rsplit(".", 1)[-1], line)
    return sorted(found, key=lambda f: int(f.split(":")[1]))


def test_the_vocabulary_covers_every_provider() -> None:
    vocab = provider_vocabulary()
    assert {"openai", "openai_compatible", "anthropic", "llamacpp", "fake"} <= vocab.kinds
    assert {"LlamaCppSettings", "OpenAIProvider", "AnthropicParser", "FakeProvider"} <= (
        vocab.classes
    )
    assert {"labkit.providers.llamacpp", "labkit.providers.openai_sdk"} <= vocab.modules
    assert not {"labkit.providers.base", "labkit.providers.sdk"} & vocab.modules


def test_the_check_finds_each_way_of_naming_a_provider() -> None:
    source = (
        "from labkit.providers.llamacpp import LlamaCppSettings\n"
        "import labkit.providers.anthropic\n"
        "def f(s, is_llamacpp=False):\n"
        "    if s.kind in ('openai', 'openai_compatible'):\n"
        "        return isinstance(s, LlamaCppSettings)\n"
        "_PACKAGES = ('openai',)\n"
    )
    found = offences(source, "experiments/example.py", provider_vocabulary())
    text = "\n".join(found)
    assert "imports provider module labkit.providers.llamacpp" in text
    assert "imports provider module labkit.providers.anthropic" in text
    assert "provider class LlamaCppSettings" in text
    assert "identifier is_llamacpp names a provider kind" in text
    assert "string 'openai' is a provider kind" in text
    assert "string 'openai_compatible' is a provider kind" in text
    assert len([f for f in found if "'openai'" in f]) == 2  # _PACKAGES is allowed only there


def test_prose_and_allowed_names_pass() -> None:
    source = (
        '"""llama.cpp and OpenAI report timings; llamacpp is a kind."""\n'
        "# an openai comment\n"
        "_PACKAGES = ('labkit', 'openai', 'anthropic')\n"
        "fake_server = 'fake server'\n"
    )
    assert offences(source, "runner/results.py", provider_vocabulary()) == []


def test_no_module_outside_providers_names_a_provider() -> None:
    vocab = provider_vocabulary()
    found: list[str] = []
    for path in sorted(LABKIT.rglob("*.py")):
        where = path.relative_to(LABKIT).as_posix()
        if where.startswith("providers/"):
            continue
        found += offences(path.read_text(encoding="utf-8"), where, vocab)
    assert found == [], "provider knowledge outside labkit/providers/:\n" + "\n".join(found)

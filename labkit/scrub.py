"""One scrubber for every output: no key leaves labkit, in any encoding, and nothing a server
sends can drive a terminal.

Keys are registered once, where they are read (`register_secret`, called by
`ProviderSettings.resolve_api_key` in the run and in every worker process). Values in memory
may hold a key; what is written or printed goes through one of these at its sink: `scrub`
(every registered key, in every form a server or library could produce, replaced by ``***``),
`scrub_json` (the same over a JSON document, which stays valid) and `for_people` (control
sequences stripped, then scrubbed). See docs/guarantees.md, "The key never reaches an output".
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import threading
import traceback
import urllib.parse
from collections.abc import Iterable
from types import TracebackType
from typing import Any, TextIO

__all__ = [
    "FRAGMENT_CHARS",
    "MASK",
    "MIN_SECRET_CHARS",
    "ScrubbedStream",
    "for_people",
    "guard_std_streams",
    "key_prefix",
    "random_looking",
    "register_environment_credentials",
    "register_secret",
    "register_url_credentials",
    "registered_secrets",
    "scrub",
    "scrub_frame",
    "scrub_json",
    "strip_controls",
]

#: What a secret is replaced with.
MASK = "***"
#: Shorter keys are placeholders, not credentials (``EMPTY``, ``none``, ``x``, which local
#: servers accept): never registered, since masking them would corrupt every output.
MIN_SECRET_CHARS = 8
#: A key's prefix from this many characters on counts as the key (a truncated copy), after
#: its vendor prefix (`key_prefix`) if it has one: labkit cuts messages and body excerpts to
#: fixed lengths, which keeps a prefix. A shorter prefix of a real key (32 characters or more)
#: leaves over 20 random characters unknown, and a 10-character run of a random key does not
#: occur in honest text by chance.
FRAGMENT_CHARS = 10

_NAMED_ENTITIES = {
    "&": ("&amp;",),
    "<": ("&lt;",),
    ">": ("&gt;",),
    '"': ("&quot;",),
    "'": ("&apos;",),
    "/": ("&sol;",),
    "=": ("&equals;",),
    "+": ("&plus;",),
}
_BACKSLASH_FORMS = {"/": "\\/", '"': '\\"', "\\": "\\\\", "'": "\\'"}

# Escape sequences (CSI, OSC up to BEL/ST or the end of the line, DCS/SOS/PM/APC, two-byte
# escapes), their C1 forms, the other C0/C1 controls but \n and \t, DEL, and the Unicode
# direction overrides that reorder what a terminal shows.
_CONTROLS = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?"
    r"|\x1b\][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|\x1b[PX^_][^\x1b\x9c\n]*(?:\x1b\\|\x9c)?"
    r"|\x1b[ -/]*[0-~]?"
    r"|\x9b[0-?]*[ -/]*[@-~]?"
    r"|[\x9d\x90\x98\x9e\x9f][^\x07\x1b\x9c\n]*(?:\x07|\x1b\\|\x9c)?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def strip_controls(text: str) -> str:
    """`text` without terminal escape sequences or control characters (\\n and \\t kept)."""
    return _CONTROLS.sub("", text)


def _hex(value: int, width: int) -> str:
    """A regex for `value` in hex, either case, zero-padded to `width`."""
    return "".join(f"[{d}{d.upper()}]" if d.isalpha() else d for d in f"{value:0{width}x}")


def _char_forms(char: str, as_json: bool) -> str:
    """A regex group matching `char` in every character-wise encoding."""

    def lit(text: str) -> str:
        return re.escape(json.dumps(text)[1:-1] if as_json else text)

    backslash = lit("\\")
    code = ord(char)
    forms = [lit(char), backslash + "u" + _hex(code, 4), "&#0*" + str(code) + ";"]
    forms.append("&#[xX]0*" + _hex(code, 1) + ";")
    if as_json:  # the document's own escape of the character
        forms.append(r"\\u" + _hex(code, 4))
    if code < 0x100:
        forms.append(backslash + "x" + _hex(code, 2))
    if code < 0x80:
        forms.append("%" + _hex(code, 2))
    if char == " ":
        forms.append(r"\+")
    if char in _BACKSLASH_FORMS:
        forms.append(lit(_BACKSLASH_FORMS[char]))
    forms.extend(lit(name) for name in _NAMED_ENTITIES.get(char, ()))
    return "(?:" + "|".join(forms) + ")"


def _base64_cores(secret: str) -> list[str]:
    """The base64 characters that depend on `secret` alone, at each alignment mod 3."""
    raw = secret.encode("utf-8")
    cores = []
    for offset in range(3):
        encoded = base64.b64encode(b"\0" * offset + raw).decode("ascii")
        core = encoded[4 if offset else 0 : 4 * ((offset + len(raw)) // 3)]
        if len(core) >= MIN_SECRET_CHARS:
            cores.append(core)
            cores.append(core.translate(str.maketrans("+/", "-_")))
    return cores


def _inside_escape(text: str, start: int) -> bool:
    """Whether `start` falls inside a JSON escape (after its backslash, or inside \\uXXXX):
    a match there would cut the escape and leave the document invalid."""
    slash = text.rfind("\\", max(0, start - 5), start)
    if slash < 0:
        return False
    first = slash
    while first > 0 and text[first - 1] == "\\":
        first -= 1
    if (slash - first) % 2:  # this backslash is itself escaped
        return False
    rest = text[slash + 1 : start]
    return rest == "" or (rest[0] == "u" and all(c in _HEX for c in rest[1:]))


_HEX = frozenset("0123456789abcdefABCDEF")


# --- What a key looks like ------------------------------------------------------------------

#: Documented key formats' fixed beginnings, longest first: Anthropic ``sk-ant-api03-``,
#: OpenAI ``sk-proj-`` / ``sk-svcacct-`` / ``sk-admin-`` / ``sk-``, Stripe ``sk_live_``,
#: Groq ``gsk_``, Hugging Face ``hf_``, xAI ``xai-``, GitHub ``ghp_`` / ``github_pat_``,
#: GitLab ``glpat-``, Slack ``xoxb-``, Google ``AIza``, AWS ``AKIA``.
_VENDOR_PREFIX = re.compile(
    r"sk-ant-(?:api|admin|sid)\d\d-|sk-(?:proj|svcacct|admin)-|[sr]k_(?:live|test)_|sk-|sk_|"
    r"gsk_|hf_|xai-|gh[pousr]_|github_pat_|glpat-|xox[abpr]-|AIza|AKIA"
)
#: A run (between ``-`` and ``_``) that reads as a word, not as random characters: a word
#: with a number after it (``grok``, ``Llama31``), CamelCase words (``MetaLlama``), acronyms
#: and sizes (``GGUF``, ``8B``, ``Q4KM``, ``20261201``), a short tag (``v01``, ``8x22b``).
_WORD_RUN = re.compile(
    r"[A-Z]?[a-z]+[0-9]*|(?:[A-Z][a-z]{2,})+[A-Z]?[0-9]*|[A-Z]*[0-9]*[A-Z]*|[a-z0-9]{1,8}"
)
#: A vendor-prefixed body with this many characters in runs that are not words is a key.
RANDOM_CHARS = 8


def key_prefix(text: str) -> str:
    """The documented key prefix `text` starts with (``sk-ant-api03-``, ``sk-proj-``,
    ``xai-``, ``hf_``, ...), or ``""``. A key in such a format counts from its prefix plus
    `FRAGMENT_CHARS` random characters: the prefix alone is plain text (docs, names like
    ``xai-grok-4``) and is never masked by itself; whether what follows is a key or a name
    is `random_looking`'s question."""
    found = _VENDOR_PREFIX.match(text)
    return found.group() if found else ""


def _word_like(run: str) -> bool:
    if _WORD_RUN.fullmatch(run):
        return True
    # Lower case and a few digits (``mixtral8x22binstruct``); random hex is mostly digits.
    return run.isalnum() and run.islower() and sum(c.isdigit() for c in run) * 10 < 3 * len(run)


def random_looking(body: str) -> bool:
    """Whether what follows a key prefix is random characters (a key) rather than words (a
    name that starts like a key: ``xai-grok-4-fast-reasoning-stream``).

    The body is cut into runs at ``-`` and ``_``; a run is a word when it is lower case, a
    Title or CamelCase word, an acronym or a number, maybe with a number after (`_WORD_RUN`),
    or lower case with under 30% digits. It is random when `RANDOM_CHARS` or more of its
    characters are in runs that are not words: random characters from a key's alphabet mix
    cases and digits within a run. Measured over 200,000 random bodies of each documented
    format, none of sk-proj (48+), sk-ant-api03 (95), xai (80), gsk (52), ghp (36) or
    github_pat was missed, 1 in 200,000 hf (34 letters), 1 in 100,000 Stripe sk_live (24),
    1 in 900 glpat (20 characters, may hold ``-`` and ``_``: the config check therefore takes
    any 16+ characters after ``glpat-``, ``AIza`` or ``AKIA`` as a key). A run of 8+
    characters mixing cases out of word order (``GrokFASTer``) still reads as random: write
    such words apart.
    """
    return (
        sum(len(run) for run in re.split(r"[-_]", body) if run and not _word_like(run))
        >= RANDOM_CHARS
    )


class _Matcher:
    """Finds registered secrets in one flavour of text (plain or JSON)."""

    def __init__(self, secrets: Iterable[str], as_json: bool) -> None:
        self.as_json = as_json
        self.tails: list[list[re.Pattern[str]]] = []
        heads = []
        literals: list[str] = []
        # A quick "certainly none here": text holding no escape marker can hold a key only
        # raw (its head as written) or in base64, both found by `in` at memory speed.
        self.markers = {"\\u", "\\x", "%", "&"}
        self.raw_heads: set[str] = set()
        for secret in secrets:
            self.markers.update("\\" + c for c in secret if c in _BACKSLASH_FORMS)
            if " " in secret:
                self.markers.add("+")
            # A vendor prefix is plain text; the key starts where its random part does.
            cut = len(key_prefix(secret)) + FRAGMENT_CHARS
            head = secret[:cut]
            self.raw_heads.update({head, json.dumps(head)[1:-1]} if as_json else {head})
            chars = [_char_forms(c, as_json) for c in secret]
            heads.append("(" + "".join(chars[:cut]) + ")")
            self.tails.append([re.compile(c) for c in chars[cut:]])
            literals.extend(_base64_cores(secret))
        self.raw_heads.update(literals)
        literal_group = "|".join(re.escape(x) for x in sorted(set(literals), key=len, reverse=True))
        self.pattern = re.compile("|".join([*heads, f"({literal_group})" if literals else "(?!)"]))

    def sub(self, text: str) -> str:
        if not any(m in text for m in self.markers) and not any(h in text for h in self.raw_heads):
            return text
        search = self.pattern.search
        found = search(text)
        if found is None:
            return text
        out: list[str] = []
        pos = 0
        while found is not None:
            if self.as_json and _inside_escape(text, found.start()):
                found = search(text, found.start() + 1)
                continue
            end = found.end()
            index = (found.lastindex or 1) - 1
            if index < len(self.tails):  # a key's head: take as much more of it as follows
                for tail in self.tails[index]:
                    more = tail.match(text, end)
                    if more is None:
                        break
                    end = more.end()
            out.append(text[pos : found.start()])
            out.append(MASK)
            pos = end
            found = search(text, pos)
        out.append(text[pos:])
        return "".join(out)


_lock = threading.Lock()
_secrets: tuple[str, ...] = ()
_plain: _Matcher | None = None
_json: _Matcher | None = None


def register_secret(value: str | None) -> None:
    """Add `value` to the process-wide secrets every output is scrubbed of."""
    global _secrets, _plain, _json
    if not value or len(value) < MIN_SECRET_CHARS or value in _secrets:
        return
    with _lock:
        secrets = (*_secrets, value)
        _plain, _json = _Matcher(secrets, as_json=False), _Matcher(secrets, as_json=True)
        _secrets = secrets


def registered_secrets() -> tuple[str, ...]:
    """The secrets registered so far (for tests and for handing to an SDK's redaction)."""
    return _secrets


def scrub(text: str) -> str:
    """`text` with every registered secret, in every encoding, replaced by `MASK`.

    The forms: raw; JSON-escaped (``\\uXXXX`` for any character, ``\\/``, ``\\"``);
    repr-escaped (``\\xXX``, ``\\'``); percent-encoded (quote and quote_plus, either hex
    case); HTML entities (decimal, hex, named); mixed forms of these, character by character;
    base64 and URL-safe base64 of the key at any alignment inside a larger encoded string (so
    ``Bearer KEY`` and ``user:KEY`` are covered too); and a truncated key from its first
    `FRAGMENT_CHARS` characters on.
    """
    matcher = _plain
    return text if matcher is None else matcher.sub(text)


def scrub_json(text: str) -> str:
    """`scrub` for a JSON document (records.jsonl lines, manifest.json, lab.json): matches
    each encoding as JSON escaping wrote it, so the document stays valid."""
    matcher = _json
    return text if matcher is None else matcher.sub(text)


def for_people(text: str) -> str:
    """`text` fit for a terminal or a report: control sequences stripped (`strip_controls`),
    secrets scrubbed; for everything written for people (consoles, summary.txt,
    report.md/html, logs)."""
    return scrub(strip_controls(text))


def scrub_frame(frame: Any) -> Any:
    """A pandas DataFrame with every text cell scrubbed (numbers untouched); returns it."""
    if not _secrets:
        return frame
    for column in frame.columns:
        if str(frame[column].dtype) in ("object", "string", "str"):
            frame[column] = frame[column].map(
                lambda v: scrub(v) if isinstance(v, str) else v, na_action="ignore"
            )
    return frame


class ScrubbedStream:
    """A text stream that scrubs what is written to it before passing it on.

    With `controls`, terminal control sequences are stripped too: only for streams that
    nothing styles (a worker's log); a console's own styling would be stripped with them.
    """

    def __init__(self, target: TextIO, *, controls: bool = False) -> None:
        self._target = target
        self._clean = for_people if controls else scrub

    def write(self, text: str) -> int:
        """Write `text`, scrubbed; returns the length of `text` (as TextIO does)."""
        self._target.write(self._clean(text))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        """Write each line, scrubbed."""
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._target, name)


def guard_std_streams(*, stdout: bool = True, controls: bool = False) -> None:
    """Scrub everything this process prints: sys.stderr (tracebacks, warnings, logging) and,
    with `stdout`, sys.stdout; an uncaught exception's traceback is also stripped of control
    sequences. Idempotent."""
    sys.excepthook = _clean_excepthook
    if not isinstance(sys.stderr, ScrubbedStream):
        sys.stderr = ScrubbedStream(sys.stderr, controls=controls)
    if stdout and not isinstance(sys.stdout, ScrubbedStream):
        sys.stdout = ScrubbedStream(sys.stdout, controls=controls)


def _clean_excepthook(
    kind: type[BaseException], value: BaseException, tb: TracebackType | None
) -> None:
    text = "".join(traceback.format_exception(kind, value, tb))
    sys.stderr.write(for_people(text))


# --- Credentials beyond the key variable ---------------------------------------------------

#: The variables a proxy (with its credentials) may come from, as httpx and curl read them.
PROXY_VARIABLES = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
)


def register_url_credentials(url: str | None) -> None:
    """Register the credentials a URL carries (`scheme://user:password@host`): the
    password, decoded and as written, and `user:password` (whose base64 is what a proxy
    echoing `Proxy-Authorization: Basic ...` shows). A URL without them changes nothing."""
    if not url or "@" not in url:
        return
    try:
        parts = urllib.parse.urlsplit(url.strip())
    except ValueError:
        return
    userinfo = parts.netloc.rpartition("@")[0]
    if not userinfo:
        return
    user, _, password = userinfo.partition(":")
    for value in (
        userinfo,
        urllib.parse.unquote(userinfo),
        password,
        urllib.parse.unquote(password),
    ):
        register_secret(value)
    if password:
        register_secret(f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}")


def register_environment_credentials(*variables: str | None) -> None:
    """Register the credentials in the proxy variables and in `variables` (a provider's
    `base_url_env`), so no output shows them."""
    for name in (*PROXY_VARIABLES, *variables):
        if name:
            register_url_credentials(os.environ.get(name))

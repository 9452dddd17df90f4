"""Real math data (GSM8K, MATH, AIME) through Hugging Face ``datasets``: loading, answers, steps.

Every loader returns records normalised to four string fields:

- ``id``: the source's own id (``id``/``unique_id``/``idx``) or ``"{kind}-{split}-{row}"``;
- ``problem``: the question text;
- ``solution``: the reference solution (empty for AIME-style sets that ship none); GSM8K solutions are
  kept verbatim, ``<<a*b=c>>`` calculator annotations and the final ``#### x`` line included;
- ``answer``: the final answer as text (GSM8K: after ``####``; MATH: the ``answer`` column, else the
  last ``\\boxed{}`` of the solution; AIME: the integer as text).

The answer of a free-form response (docs/guides/architecture.md, 'Untrusted text') is the value it states
last: after the answer marker written last ("the answer is", "Answer:", ``\\boxed{}``, ``####``), else
its last number. A marked statement that is a chain ("3 + 2 - 3 + 2 = 9") states its last side (9);
nothing is re-evaluated.

Answers are compared with math-verify behind guards: plain numbers are compared exactly first; a
predicted answer that is unevaluated arithmetic on plain numbers ("3 + 2", "1/2 + 1/4") is a stated
expression, not a stated value, and matches only a reference written the same way; oversized text,
power towers and huge powers never reach sympy. math-verify times itself out with ``signal.alarm``,
which only the main thread can set, so off the main thread it runs in a worker process under the same
limits (a comparison that runs out of time is unequal, as math-verify itself decides). A normalised
string comparison decides only what math-verify cannot parse or what the guards keep from it.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import unicodedata
from collections import deque
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import datasets

Kind = Literal["gsm8k", "math", "aime"]
KINDS: tuple[str, ...] = ("gsm8k", "math", "aime")
RECORD_FIELDS: tuple[str, ...] = ("id", "problem", "solution", "answer")
SplitRule = Literal["lines", "sentences", "double-newline"]
SPLIT_RULES: tuple[str, ...] = ("lines", "sentences", "double-newline")

# Longer answers are not handed to math-verify: a final answer is short, and sympy's cost grows
# with the expression.
MAX_ANSWER_CHARS = 300
MATH_VERIFY_TIMEOUT_S = 2
# Off the main thread the worker process's own alarms enforce MATH_VERIFY_TIMEOUT_S (two parses and at
# most four comparisons); this backstop, one limit more than their sum, catches a worker they cannot stop.
MATH_VERIFY_WORKER_TIMEOUT_S = 7 * MATH_VERIFY_TIMEOUT_S
# A fresh worker imports math-verify and sympy, which takes a while on a loaded machine.
MATH_VERIFY_WORKER_START_S = 120
# Only the last few "answer is" markers and "####" lines of a response are read.
MAX_ANSWER_MARKERS = 32

_FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("id", "unique_id", "idx", "ID"),
    "problem": ("problem", "question", "Problem", "Question"),
    "solution": ("solution", "Solution"),
    "answer": ("answer", "Answer", "final_answer"),
}

_GSM8K_FINAL_RE = re.compile(r"####([^\n]*)")
_GSM8K_LINE_START_RE = re.compile(r"\n\s*(?=####)")  # where a paragraph's "#### x" line starts
_ANSWER_MARKER_RE = re.compile(r"\banswer\b[\s*]*(?:is\b|:|=)", re.IGNORECASE)
_EQUALS_WORDS_RE = re.compile(r",?\s*\b(?:(?:which|that)\s+)?(?:equals|is\s+equal\s+to)\b", re.IGNORECASE)
# What ends a stated value: a word, a sentence end; what is read whole: math spans, LaTeX commands.
_STATEMENT_TOKEN_RE = re.compile(r"\\[()\[\]]|\$\$|\$(?=\S)|\\[A-Za-z]+|\\.|[A-Za-z]{2,}|[{}]|[.;!?](?!\d)")
# Math spans by their openers. As in Pandoc, "$" closes math only after a non-space and not before a
# digit, so the dollars of "$18, and she spends $2" are currency, not a span.
_MATH_CLOSE_RE = {
    "$": re.compile(r"(?<=\S)(?<!\\)\$(?!\d)"),
    "$$": re.compile(r"\$\$"),
    "\\(": re.compile(r"\\\)"),
    "\\[": re.compile(r"\\\]"),
}
# "=" of a chain; not the one of "<=", ">=", "!=".
_EQUALS_RE = re.compile(r"\\[{}]|[{}]|(?<![<>!])=+>?")
_LEADING_WRAP_CHARS = " \t*$:"
_TRAILING_WRAP_CHARS = " \t*$.,;:("
# Arithmetic between two plain numbers (or \frac{a}{b}, or powers of them), e.g. "3 + 2", "2\times 3^2",
# "1/2 + 1/4": not an exponent or index ("x^2+1"), a coefficient ("2x+1") or a term of a surd ("1+2\sqrt3").
_PLAIN_OPERAND = r"(?:\d+(?:\.\d+)?|\\[dt]?frac\{\d+\}\{\d+\})(?:\^\{?[-+]?\d+\}?)?"
_UNEVALUATED_RE = re.compile(
    rf"(?<![\w.^_])(?<!\^\{{)(?<!_\{{){_PLAIN_OPERAND}\s*(?:[-+*×·÷−]|\\times|\\cdot|\\div)\s*\(?\s*[-+]?"
    rf"{_PLAIN_OPERAND}(?![\w.^{{(\\])(?!\s*\\(?!text)[A-Za-z])"
)
_SCIENTIFIC_RE = re.compile(r"-?\d+(?:\.\d+)?\s*(?:\\times|\\cdot|[*×·])\s*10\^\{?[-+]?\d+\}?")
_LAST_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_INTEGER_RE = re.compile(r"-?\d+")
_PLAIN_NUMBER_RE = re.compile(
    r"(?P<sign>[-+]?)(?P<int>\d{1,3}(?:,\d{3})+|\d*)(?:\.(?P<dec>\d+))?(?:/(?P<den>\d+))?(?P<pct>%?)"
)
_LATEX_FRAC_RE = re.compile(r"^(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
# a^b^c or a^{b^c}: sympy would try to build the tower before any timeout can fire.
_POWER_TOWER_RE = re.compile(r"(\^|\*\*)[\s({]*[-+]?[\w.]+[\s)}]*(\^|\*\*)")
# An exponent, a factorial's or a binomial's argument of 4 digits or more, or a factorial of a bracketed
# expression ("(9!)!", "(10^6)!"): sympy works on it until the timeout fires.
_HUGE_POWER_RE = re.compile(r"(?:\^|\*\*)[\s({]*[-+]?\d{4}|(?<!\d)\d{4,}\s*!|[)}\]]\s*!|\\binom\s*\{\s*\d{4}")
_INVISIBLE_RE = re.compile("[\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]")
_UNICODE_MAP = {c: chr(c - 0xFEE0) for c in range(0xFF01, 0xFF5F)} | {0x3000: " ", 0xA0: " ", 0x202F: " "}
_NON_ASCII_DIGIT_RE = re.compile(r"(?![0-9])\d")
_SENTENCE_END_RE = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9$\\])")


def load_math_dataset(
    source: str | Path,
    kind: Kind,
    split: str = "train",
    *,
    config: str | None = None,
    cache_dir: str | Path | None = None,
) -> datasets.Dataset:
    """Load GSM8K-, MATH- or AIME-style data as a ``datasets.Dataset`` of normalised records.

    ``source`` is a local ``.json``/``.jsonl``/``.parquet`` file (``split`` then only names it), a
    local directory ``datasets`` can read, or a hub name such as ``openai/gsm8k`` (``config``
    defaults to ``main`` for names ending in ``gsm8k``, the hub's only GSM8K config). ``cache_dir``
    is handed to ``datasets.load_dataset``.
    """
    import datasets

    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    path = Path(source)
    cache = str(cache_dir) if cache_dir is not None else None
    if path.is_file():
        suffix = path.suffix.lower()
        builder = {".json": "json", ".jsonl": "json", ".parquet": "parquet"}.get(suffix)
        if builder is None:
            raise ValueError(f"{path}: unsupported file type {suffix!r}; use .json, .jsonl or .parquet")
        raw = datasets.load_dataset(builder, data_files={split: str(path)}, split=split, cache_dir=cache)
    elif path.is_dir():
        raw = datasets.load_dataset(str(path), split=split, cache_dir=cache)
    else:
        name = str(source)
        if config is None and kind == "gsm8k" and name.lower().endswith("gsm8k"):
            config = "main"
        raw = datasets.load_dataset(name, config, split=split, cache_dir=cache)
    columns = set(raw.column_names)
    if not any(c in columns for c in _FIELD_ALIASES["problem"]):
        raise ValueError(f"{source}: no problem column (looked for {', '.join(_FIELD_ALIASES['problem'])})")
    return raw.map(
        _normalise_record,
        with_indices=True,
        fn_kwargs={"kind": kind, "split": split},
        remove_columns=raw.column_names,
        # Explicit string features: an integer "answer" column must not cast the new one back.
        features=datasets.Features({name: datasets.Value("string") for name in RECORD_FIELDS}),
        desc=f"normalising {kind}",
    )


def _first(row: dict, field: str) -> object:
    """The value of the first alias of ``field`` present in ``row`` (None when none is)."""
    for name in _FIELD_ALIASES[field]:
        if row.get(name) is not None:
            return row[name]
    return None


def _normalise_record(row: dict, index: int, *, kind: Kind, split: str) -> dict[str, str]:
    """Map one raw row of ``kind`` to ``id``/``problem``/``solution``/``answer`` strings."""
    raw_id = _first(row, "id")
    problem = str(_first(row, "problem") or "")
    if kind == "gsm8k":
        # GSM8K stores the worked solution in ``answer``; the final answer is its ``####`` line.
        solution = str(row.get("answer") or row.get("solution") or "")
        answer = extract_answer(solution, "gsm8k") or ""
    elif kind == "math":
        solution = str(_first(row, "solution") or "")
        given = _first(row, "answer")
        answer = str(given) if given is not None else (extract_answer(solution, "math") or "")
    else:
        solution = str(_first(row, "solution") or "")
        given = _first(row, "answer")
        answer = str(given).strip() if given is not None else (extract_answer(solution, "aime") or "")
        if _INTEGER_RE.fullmatch(answer):
            answer = _integer_text(answer)
    return {
        "id": str(raw_id) if raw_id is not None else f"{kind}-{split}-{index}",
        "problem": problem,
        "solution": solution,
        "answer": answer,
    }


def clean_unicode(text: str) -> str:
    """Drop invisible characters (zero-width, bidi marks, soft hyphen, BOM); map full-width ASCII,
    odd spaces and other scripts' decimal digits ("１２", "٣") to ASCII."""
    s = _INVISIBLE_RE.sub("", text)
    if s.isascii():
        return s
    s = s.translate(_UNICODE_MAP)
    return _NON_ASCII_DIGIT_RE.sub(lambda m: str(unicodedata.decimal(m.group(), 0)), s)


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, nested braces allowed."""
    start = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    if start < 0:
        return None
    brace = text.find("{", start)
    # ``\boxed 5`` (no braces) is valid LaTeX for a single token.
    if brace < 0 or text[start:brace].strip() not in ("\\boxed", "\\fbox"):
        tail = text[start:].split(None, 1)
        rest = tail[1] if len(tail) > 1 else ""
        token = re.match(r"[^\s$]+", rest)
        return token.group() if token else None
    depth = 0
    for i in range(brace, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[brace + 1 : i].strip()
    return None


def extract_answer(text: str, kind: Kind | Literal["auto"] = "auto") -> str | None:
    """The final answer written in ``text``, or None when there is none.

    ``gsm8k``: the last ``#### x`` line (thousands separators and ``$`` removed).
    ``math``: the last ``\\boxed{...}``, whole. ``aime``: the last boxed answer, else the last integer.
    (These three read reference solutions.)
    ``auto`` (free-form responses, untrusted): the value stated after the answer marker written last
    ("the answer is", "Answer:", the last ``\\boxed{}``, a ``####`` line), else the last number in the
    text. A stated value ends at its line's or sentence's end or at a word ("Answer: 5 apples" -> "5");
    of a chain only the last side counts ("the answer is 3 + 2 - 3 + 2 = 9" -> "9"); a marker that
    states nothing ("the answer is wrong") is skipped. Unicode digits and invisible characters are
    normalised first.
    """
    if kind == "gsm8k":
        found = [m.strip() for m in _GSM8K_FINAL_RE.findall(text) if m.strip()]
        return _clean_number_text(found[-1]) if found else None
    if kind == "math":
        return last_boxed(text)
    if kind == "aime":
        boxed = last_boxed(text)
        source = boxed if boxed is not None else text
        ints = _INTEGER_RE.findall(source.replace(",", ""))
        return _integer_text(ints[-1]) if ints else None
    if kind != "auto":
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)} or 'auto'")
    text = clean_unicode(text)
    found = _marked_answer(text)
    if found is None:
        last = deque(_LAST_NUMBER_RE.finditer(text), maxlen=1)
        found = last[0].group() if last else None
    return _clean_number_text(found) if found else None


def _marked_answer(text: str) -> str | None:
    """The value stated after the answer marker written last in ``text`` (None when no marker states one).

    Markers: "answer is"/"answer:"/"answer =" (any case, ``**Answer:**``), ``\\boxed{...}``/``\\fbox``
    (the last one), ``####``. A marker followed by no value ("the answer is wrong") is skipped, so an
    earlier one counts.
    """
    candidates: list[tuple[int, str]] = []
    boxed_at = max(text.rfind("\\boxed"), text.rfind("\\fbox"))
    boxed = last_boxed(text) if boxed_at >= 0 else None
    if boxed is not None:
        candidates.append((boxed_at, _unwrap(_last_side(boxed))))
    for m in deque(_ANSWER_MARKER_RE.finditer(text), maxlen=MAX_ANSWER_MARKERS):
        candidates.append((m.start(), _stated_value(text, m.end())))
    for m in deque(_GSM8K_FINAL_RE.finditer(text), maxlen=MAX_ANSWER_MARKERS):
        candidates.append((m.start(), _stated_value(text, m.start(1))))
    stated = [(at, value) for at, value in candidates if value]
    return max(stated)[1] if stated else None


def _stated_value(text: str, start: int) -> str:
    """The value the statement at ``text[start:]`` states: up to its line's end, sentence end or first
    word ("5 apples." -> "5"), and of a chain only the last side ("3 + 2 - 3 + 2 = 9" -> "9", "x = 5"
    -> "5"; "equals" counts as "=")."""
    line_end = text.find("\n", start)
    line = _EQUALS_WORDS_RE.sub(" =", text[start : line_end if line_end >= 0 else len(text)])
    return _unwrap(_last_side(line[: _statement_end(line)]))


def _statement_end(line: str) -> int:
    """Where the statement that opens ``line`` ends: at a sentence end or a word (two letters or more)
    outside braces and math spans. ``$...$``, ``$$...$$``, ``\\(...\\)`` and ``\\[...\\]`` are read whole;
    a ``$`` that opens no span on the line is a currency sign."""
    depth, pos = 0, 0
    unclosed: set[str] = set()  # openers with no closer left on the line (so each is searched for once)
    while m := _STATEMENT_TOKEN_RE.search(line, pos):
        token, pos = m.group(), m.end()
        if token in _MATH_CLOSE_RE and token not in unclosed:
            close = _MATH_CLOSE_RE[token].search(line, pos)
            if close:
                pos = close.end()
            else:
                unclosed.add(token)
        elif token == "{":
            depth += 1
        elif token == "}":
            depth = max(depth - 1, 0)
        elif depth == 0 and (token[0].isalpha() or token in ".;!?"):
            return m.start()
    return len(line)


def _last_side(text: str) -> str:
    """The last side of a chain ``a = b = c`` (``text`` itself when it has no ``=`` outside braces)."""
    depth, cut = 0, 0
    for m in _EQUALS_RE.finditer(text):
        token = m.group()
        if token == "{":
            depth += 1
        elif token == "}":
            depth = max(depth - 1, 0)
        elif token[0] == "=" and depth == 0:
            cut = m.end()
    return text[cut:]


def _unwrap(value: str) -> str:
    """``value`` without what surrounds a stated value: spaces, ``$``, ``\\(``/``\\)``, ``**``, ``:``,
    trailing punctuation."""
    i, j = 0, len(value)
    while True:
        start, end = i, j
        while i < j and value[i] in _LEADING_WRAP_CHARS:
            i += 1
        while j > i and value[j - 1] in _TRAILING_WRAP_CHARS:
            j -= 1
        i += 2 if value.startswith(("\\(", "\\["), i, j) else 0
        j -= 2 if j - i >= 2 and value.endswith(("\\)", "\\]"), i, j) else 0
        if (i, j) == (start, end):
            return value[i:j]


def _integer_text(digits: str) -> str:
    """Canonical text of an integer ("042" -> "42", "-0" -> "0") without ``int()``'s 4300-digit limit."""
    negative = digits.startswith("-")
    body = digits.lstrip("-+").lstrip("0") or "0"
    return f"-{body}" if negative and body != "0" else body


def _clean_number_text(text: str) -> str:
    """Drop currency signs, thousands separators and trailing punctuation from a plain number."""
    stripped = text.strip().rstrip(".").strip()
    candidate = stripped.replace("$", "").replace(" ", "")
    if _PLAIN_NUMBER_RE.fullmatch(candidate) and any(ch.isdigit() for ch in candidate):
        return candidate.replace(",", "")
    return stripped


def parse_number(text: str) -> Fraction | None:
    """The exact value of a plain number: ``-1,200.5``, ``$5``, ``25%``, ``3/4``, ``\\frac{3}{4}``.

    Anything else (expressions, units, variables, more than 100 characters) gives None.
    """
    if len(text) > 100:
        return None
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", text)
    s = s.replace("\\$", "").replace("$", "").replace("\\%", "%").replace("\\!", "").replace("\\,", "")
    s = "".join(s.split()).rstrip(".")
    frac = _LATEX_FRAC_RE.match(s)
    if frac:
        den = int(frac.group(3))
        return None if den == 0 else Fraction(int(frac.group(2)), den) * (-1 if frac.group(1) else 1)
    m = _PLAIN_NUMBER_RE.fullmatch(s)
    if not m or not (m.group("int") or m.group("dec")):
        return None
    value = Fraction(m.group("int").replace(",", "") or "0")
    if m.group("dec"):
        value += Fraction(int(m.group("dec")), 10 ** len(m.group("dec")))
    if m.group("den"):
        if int(m.group("den")) == 0:
            return None
        value /= int(m.group("den"))
    if m.group("pct"):
        value /= 100
    return -value if m.group("sign") == "-" else value


def _normalise_answer_text(text: str) -> str:
    """A canonical string for the last-resort comparison: no spaces, ``$``, ``\\left``/``\\right``."""
    s = re.sub(r"\\(?:left|right|!|,|;|displaystyle)", "", text)
    s = re.sub(r"\\text\{([^{}]*)\}", r"\1", s)
    return "".join(s.replace("$", "").split()).rstrip(".").lower()


def answers_equal(pred: str | None, gold: str | None) -> bool:
    """Whether a predicted final answer states the reference one.

    Against a reference that is a value (no ``=``), only the last side of a predicted chain counts
    ("x = 5", "2 + 3 = 5" state 5). Plain numbers (``1,200``, ``$5``, ``25%``, ``3/4``) are compared
    exactly with fractions. A predicted answer that is unevaluated arithmetic on plain numbers ("3 + 2
    - 3 + 2", ``\\boxed{2+2}``; scientific notation aside) is a stated expression, not a stated value:
    it is never evaluated into a match, only compared as text. Otherwise math-verify decides (answers
    of at most ``MAX_ANSWER_CHARS`` characters and no power towers, on any thread, see
    :func:`_math_verify_equal`), and a normalised string comparison decides what it cannot parse.
    """
    if pred is None or gold is None:
        return False
    pred, gold = clean_unicode(pred).strip(), clean_unicode(gold).strip()
    if _last_side(gold) == gold:
        pred = _last_side(pred)
    pred = _unwrap(pred)
    if not pred or not gold:
        return False
    p_num, g_num = parse_number(pred), parse_number(gold)
    if p_num is not None and g_num is not None:
        return p_num == g_num
    if _math_verify_allowed(pred) and _math_verify_allowed(gold) and not _is_unevaluated(pred):
        verdict = _math_verify_equal(pred, gold)
        if verdict is not None:
            return verdict
    return _normalise_answer_text(pred) == _normalise_answer_text(gold)


def _is_unevaluated(answer: str) -> bool:
    """Whether ``answer`` holds arithmetic between plain numbers that it leaves unevaluated."""
    return _UNEVALUATED_RE.search(answer) is not None and _SCIENTIFIC_RE.fullmatch(answer) is None


def _math_verify_allowed(text: str) -> bool:
    """Keep sympy to short text and away from power towers (which it would build before any timeout
    could fire) and huge powers and factorials (which it would work on until the timeout)."""
    return len(text) <= MAX_ANSWER_CHARS and not (_POWER_TOWER_RE.search(text) or _HUGE_POWER_RE.search(text))


def _math_verify_equal(pred: str, gold: str) -> bool | None:
    """math-verify's judgment, or None when it cannot parse either side or fails, under its time limits.

    Those limits are ``signal.alarm``s, which only the main thread can set (math-verify raises
    elsewhere). Off the main thread the comparison runs on the main thread of a worker process instead,
    so it is never made without a limit nor silently replaced by a weaker one.
    """
    if threading.current_thread() is threading.main_thread():
        return _math_verify_here(pred, gold)
    return _WORKER.compare(pred, gold)


def _math_verify_here(pred: str, gold: str) -> bool | None:
    """math-verify in this thread (the main one: its timeouts need ``signal.alarm``)."""
    try:
        from math_verify import parse, verify

        gold_parsed = parse(_as_latex(gold), parsing_timeout=MATH_VERIFY_TIMEOUT_S)
        pred_parsed = parse(_as_latex(pred), parsing_timeout=MATH_VERIFY_TIMEOUT_S)
        if not gold_parsed or not pred_parsed:
            return None
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=MATH_VERIFY_TIMEOUT_S))
    except Exception:  # math-verify/sympy raise many types on odd input; the caller falls back
        return None


class _MathVerifyWorker:
    """A lazily started child Python that runs :func:`_math_verify_here` on its main thread for callers
    on other threads: one JSON ``[pred, gold]`` line in, one JSON verdict line out.

    Calls are serialised. A comparison that takes longer than ``MATH_VERIFY_WORKER_TIMEOUT_S`` (or kills
    the child) counts as unequal, math-verify's own verdict on a timeout; the child is killed and the
    next call starts a fresh one. A plain subprocess rather than ``multiprocessing``: it imports only
    this module, not the caller's ``__main__`` (torch and all), and cannot inherit a forked lock.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    def compare(self, pred: str, gold: str) -> bool | None:
        with self._lock:
            process = self._running()
            try:
                process.stdin.write(json.dumps([pred, gold]).encode() + b"\n")
                process.stdin.flush()
                reply = _read_line(process, MATH_VERIFY_WORKER_TIMEOUT_S)
            except OSError:  # the child died
                reply = None
            if reply is not None:
                return json.loads(reply)
            self._stop()
            return False

    def _running(self) -> subprocess.Popen[bytes]:
        if self._process is not None and self._process.poll() is None:
            return self._process
        self._stop()
        root = str(Path(__file__).resolve().parents[1])
        command = [sys.executable, "-c", _WORKER_CODE, root]
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
        if _read_line(self._process, MATH_VERIFY_WORKER_START_S) != b"ready\n":
            self._stop()
            raise RuntimeError("the math-verify worker process did not start")
        return self._process

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for pipe in (self._process.stdin, self._process.stdout):
                if pipe is not None:
                    pipe.close()
        self._process = None


def _read_line(process: subprocess.Popen[bytes], timeout: float) -> bytes | None:
    """The child's next output line, or None when none comes within ``timeout`` seconds (or at EOF)."""
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    line = process.stdout.readline() if ready else b""
    return line or None


def _serve_math_verify() -> None:
    """The worker's loop, on its main thread: answer requests until the parent closes stdin."""
    import math_verify  # noqa: F401  (imported before "ready", so no comparison pays for it)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it closes our stdin
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # anything else written to stdout, from C too, goes to stderr, not into a reply
    replies.write("ready\n")
    replies.flush()
    for request in sys.stdin:
        pred, gold = json.loads(request)
        replies.write(json.dumps(_math_verify_here(pred, gold)) + "\n")
        replies.flush()


# The worker imports this package from where the parent did (argv[1]), nothing of the parent's __main__.
_WORKER_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1]); "
    "from selfverify.tasks.realmath import _serve_math_verify; _serve_math_verify()"
)
_WORKER = _MathVerifyWorker()


def _as_latex(text: str) -> str:
    """Wrap bare LaTeX in ``$...$`` so math-verify's LaTeX extractor (not only its expression one) sees it."""
    return text if "$" in text or "\\boxed" in text else f"${text}$"


def split_steps(solution: str, rule: SplitRule = "lines") -> list[str]:
    """Split a solution into steps.

    ``lines`` (default): every non-empty line, stripped. ``double-newline``: paragraphs separated by
    blank lines, inner newlines kept. ``sentences``: lines further split after ``.``/``!``/``?``
    followed by whitespace and a capital letter, digit, ``$`` or ``\\`` (so ``0.5`` stays whole;
    abbreviations such as "Mr. Smith" do split). GSM8K's final ``#### x`` line stays as its own last
    step under every rule: it carries the final answer the outcome check reads.
    """
    if rule == "lines":
        return [line.strip() for line in solution.splitlines() if line.strip()]
    if rule == "double-newline":
        paragraphs = [p for p in re.split(r"\n\s*\n", solution) if p.strip()]
        return [s.strip() for p in paragraphs for s in _GSM8K_LINE_START_RE.split(p) if s.strip()]
    if rule == "sentences":
        return [
            s.strip() for line in solution.splitlines() for s in _SENTENCE_END_RE.split(line) if s.strip()
        ]
    raise ValueError(f"unknown split rule {rule!r}; expected one of {', '.join(SPLIT_RULES)}")

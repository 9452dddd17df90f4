"""Real math data (GSM8K, MATH, AIME) through Hugging Face ``datasets``: loading, answers, steps.

Every loader returns records normalised to four string fields:

- ``id``: the source's own id (``id``/``unique_id``/``idx``) or ``"{kind}-{split}-{row}"``;
- ``problem``: the question text;
- ``solution``: the reference solution (empty for AIME-style sets that ship none); GSM8K solutions are
  kept verbatim, ``<<a*b=c>>`` calculator annotations and the final ``#### x`` line included;
- ``answer``: the final answer as text (GSM8K: after ``####``; MATH: the ``answer`` column, else the
  last ``\\boxed{}`` of the solution; AIME: the integer as text).

Answers are compared with math-verify (DESIGN §6) behind guards: plain numbers are compared exactly
first, oversized or power-tower text never reaches sympy, and math-verify (which times itself out
with ``signal.alarm``) is only called from the main thread; elsewhere a normalised string comparison
is the fallback.
"""

from __future__ import annotations

import re
import threading
import unicodedata
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

_FIELD_ALIASES: dict[str, tuple[str, ...]] = {
    "id": ("id", "unique_id", "idx", "ID"),
    "problem": ("problem", "question", "Problem", "Question"),
    "solution": ("solution", "Solution"),
    "answer": ("answer", "Answer", "final_answer"),
}

_GSM8K_FINAL_RE = re.compile(r"####([^\n]*)")
# One character class before the number, so the pattern cannot backtrack over long blank runs.
_ANSWER_IS_RE = re.compile(r"answer\s*(?:is|:)[\s:$\\(]*(-?[\d.,]*\d(?:/\d+)?%?)", re.IGNORECASE)
_LAST_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")
_INTEGER_RE = re.compile(r"-?\d+")
_PLAIN_NUMBER_RE = re.compile(
    r"(?P<sign>[-+]?)(?P<int>\d{1,3}(?:,\d{3})+|\d*)(?:\.(?P<dec>\d+))?(?:/(?P<den>\d+))?(?P<pct>%?)"
)
_LATEX_FRAC_RE = re.compile(r"^(-?)\\[dt]?frac\{(\d+)\}\{(\d+)\}$")
# a^b^c or a^{b^c}: sympy would try to build the tower before any timeout can fire.
_POWER_TOWER_RE = re.compile(r"(\^|\*\*)[\s({]*[-+]?[\w.]+[\s)}]*(\^|\*\*)")
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
    ``math``: the last ``\\boxed{...}``. ``aime``: the last boxed answer, else the last integer.
    ``auto`` (free-form solutions): ``####``, then ``\\boxed``, then "the answer is X", then the
    last number in the text.
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
    for finder in (
        lambda t: extract_answer(t, "gsm8k"),
        last_boxed,
        lambda t: m[-1] if (m := _ANSWER_IS_RE.findall(t)) else None,
        lambda t: m[-1] if (m := _LAST_NUMBER_RE.findall(t)) else None,
    ):
        found = finder(text)
        if found:
            return _clean_number_text(found)
    return None


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
    """Whether a predicted final answer equals the reference one.

    Plain numbers (``1,200``, ``$5``, ``25%``, ``3/4``) are compared exactly with fractions;
    otherwise math-verify decides (main thread only, answers of at most ``MAX_ANSWER_CHARS``
    characters and no power towers), falling back to a normalised string comparison when
    math-verify cannot be used or fails.
    """
    if pred is None or gold is None:
        return False
    pred, gold = clean_unicode(pred).strip(), clean_unicode(gold).strip()
    if not pred or not gold:
        return False
    p_num, g_num = parse_number(pred), parse_number(gold)
    if p_num is not None and g_num is not None:
        return p_num == g_num
    if _math_verify_allowed(pred) and _math_verify_allowed(gold):
        verdict = _math_verify_equal(pred, gold)
        if verdict is not None:
            return verdict
    return _normalise_answer_text(pred) == _normalise_answer_text(gold)


def _math_verify_allowed(text: str) -> bool:
    """math-verify's timeout relies on SIGALRM (main thread only); keep sympy away from towers."""
    return (
        threading.current_thread() is threading.main_thread()
        and len(text) <= MAX_ANSWER_CHARS
        and not _POWER_TOWER_RE.search(text)
    )


def _math_verify_equal(pred: str, gold: str) -> bool | None:
    """math-verify's judgment, or None when it cannot parse either side or fails."""
    try:
        from math_verify import parse, verify

        gold_parsed = parse(_as_latex(gold), parsing_timeout=MATH_VERIFY_TIMEOUT_S)
        pred_parsed = parse(_as_latex(pred), parsing_timeout=MATH_VERIFY_TIMEOUT_S)
        if not gold_parsed or not pred_parsed:
            return None
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=MATH_VERIFY_TIMEOUT_S))
    except Exception:  # math-verify/sympy raise many types on odd input; the caller falls back
        return None


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
        return [p.strip() for p in re.split(r"\n\s*\n", solution) if p.strip()]
    if rule == "sentences":
        return [
            s.strip() for line in solution.splitlines() for s in _SENTENCE_END_RE.split(line) if s.strip()
        ]
    raise ValueError(f"unknown split rule {rule!r}; expected one of {', '.join(SPLIT_RULES)}")

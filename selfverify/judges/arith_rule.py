"""Rule-based verifier for natural-language math: every numeric ``lhs = rhs`` claim checked exactly.

A step's claims are found in its text ("48/2 = 24", "3 × 4 = 12", "$12 + 5 = 17$", LaTeX
``\\frac{a}{b}``/``\\times``/``\\cdot``/``\\div``, chains ``a = b = c``) and in GSM8K calculator
annotations ``<<48/2=24>>``. Each side is parsed by a small whitelist parser (numbers, ``+ - * / ^ **``,
unary minus, parentheses, postfix ``%``) into exact ``fractions.Fraction`` values; nothing is ever
``eval``-ed or ``sympify``-ed (docs/guides/architecture.md, 'Untrusted text'), and every size is bounded
(``MAX_*`` below), so ``9^9^9^9`` is refused at once instead of being computed.

Unit words between numbers and operators are read through ("18 items + 6 items = 24 items"). A side
that is not fully numeric ("x = 5", "2x + 3 = 7", "half of 48 = 24") and a unit conversion ("4.5
gallons = 36 pints") make the claim *unchecked*: neither right nor wrong. Rounding rule: when one side
of a claim is a bare number with d decimals (d = 0 for a whole number), it is right if it equals the
exact value of the other side rounded to nearest (a tie either way) or truncated toward zero at d
decimals, so ``2/3 = 0.67``, ``2/3 = 0.66`` and ``100/3 = 33`` pass and ``100/3 = 34`` does not; a
value with no more than d decimals must match exactly. Ambiguous notation passes if any reading
holds: ``%`` as 1/100 or as a label (``100 - 20 = 80%``), and ``25 / 1/3`` as 25/(1/3) or left to
right.

It judges arithmetic only: wrong setups, logic errors, unit confusion and wrong reasoning with correct
arithmetic all pass. See docs/guides/scoring.md for coverage and
docs/results/scoring.md for measured false-alarm rates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Literal

from selfverify.judges.base import Verdict, VerifyInput, earliest_error_from_scores
from selfverify.tasks.realmath import answers_equal, clean_unicode, extract_answer

# Bounds on untrusted text. A side longer or deeper than this, or a value larger, is refused
# (the claim becomes unchecked) rather than computed.
MAX_EXPR_CHARS = 300
MAX_EXPR_TOKENS = 160
MAX_NUMBER_DIGITS = 60
MAX_DEPTH = 40
MAX_BITS = 20_000  # numerator/denominator size of any intermediate value
MAX_EXPONENT = 10_000
MAX_CLAIMS_PER_STEP = 256
# Real steps are a few hundred characters; only this much of a step, and of a whole solution, is read.
MAX_STEP_CHARS = 20_000
MAX_SOLUTION_CHARS = 100_000
# Only the tail of a step is searched for its final answer.
ANSWER_SEARCH_CHARS = 4000

ClaimStatus = Literal["right", "wrong", "unchecked"]
# How an ambiguous notation is read: (% as a unit label instead of 1/100, "a / b/c" as a / (b/c)).
Reading = tuple[bool, bool]
READINGS: tuple[Reading, ...] = ((False, False), (True, False), (False, True), (True, True))


class Uncheckable(ValueError):
    """An expression the checker will not evaluate: not purely numeric, malformed, or too large."""


@dataclass(frozen=True)
class Claim:
    """One ``lhs = rhs`` claim found in a step, with the checker's decision.

    text: the claim as written (after normalisation), e.g. ``"48/2 = 25"``.
    status: ``right``, ``wrong``, or ``unchecked`` (a side is not fully numeric or was refused).
    detail: for ``wrong``, the exact values; for ``unchecked``, why.
    """

    text: str
    status: ClaimStatus
    detail: str = ""


@dataclass
class StepClaims:
    """All claims of one step."""

    claims: list[Claim] = field(default_factory=list)

    @property
    def wrong(self) -> list[Claim]:
        return [c for c in self.claims if c.status == "wrong"]

    @property
    def checked(self) -> int:
        return sum(c.status != "unchecked" for c in self.claims)


# ---------------------------------------------------------------------------------------------
# Text normalisation: one ASCII-ish notation for the tokenizer.

_CHAR_MAP = str.maketrans(
    {
        "\u2212": "-",  # minus sign
        "\u2013": "-",  # en dash, used as a minus in GSM8K
        "\u00d7": "*",
        "\u2715": "*",
        "\u2217": "*",
        "\u00b7": "*",
        "\u22c5": "*",
        "\u00f7": "/",
        "\u2215": "/",
        "\u2044": "/",
        # Currency signs carry no arithmetic; LaTeX's $...$ delimiters go with them.
        "$": "",
        "\u20ac": "",
        "\u00a3": "",
        "\u00a5": "",
        "\u20b9": "",
    }
)
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
_SUPERSCRIPT_RE = re.compile("[⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+")
_VULGAR = {"½": "1/2", "⅓": "1/3", "⅔": "2/3", "¼": "1/4", "¾": "3/4", "⅕": "1/5", "⅖": "2/5"}
_VULGAR |= {"⅗": "3/5", "⅘": "4/5", "⅙": "1/6", "⅚": "5/6", "⅛": "1/8", "⅜": "3/8", "⅝": "5/8", "⅞": "7/8"}
# The whole-number part may only start where a digit run starts: without the lookbehind every digit of a
# long run retried the run to its end, quadratic time (20,000 digits and one non-ASCII char: 7 s).
_VULGAR_RE = re.compile(r"((?<!\d)\d+ ?)?([" + "".join(_VULGAR) + "])")
# "3 x 4", "3x4", "0.2 x 50": x between numbers is multiplication; "2x + 3" keeps its variable.
_TIMES_X_RE = re.compile(r"(?<=[\d)%])[ \t]*[xX][ \t]*(?=[\d(.])")
_ANNOTATION_RE = re.compile(r"<<([^<>\n]{1,400})>>")

_LATEX_SUBS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), r)
    for p, r in (
        (r"\\[\[\]()]", " "),  # display/inline math delimiters
        (r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}", r" \1 "),
        (r"\\(?:boxed|fbox|displaystyle|left|right|bigl|bigr|Bigl|Bigr)\b", ""),
        (r"\\(?:times|cdot|ast)(?![a-zA-Z])", "*"),
        (r"\\div(?![a-zA-Z])", "/"),
        (r"\\%", "%"),
        (r"\\\$", ""),
        (r"(?<=\d)\\[,!;: ](?=\d{3})", ""),  # 1\,200
        (r"\\[,!;: ]|\\q?quad\b", " "),
        (r"\\[{}]", " "),
        (r"\\[dt]?frac\s+\{", r"\\frac{"),
        (r"\\[dt]?frac\s*(\d)\s*(\d)", r"((\1)/(\2))"),  # \frac12
    )
)
_FRAC_INNER_RE = re.compile(r"\\[dt]?frac\{([^{}]*)\}\s*\{([^{}]*)\}")
# An innermost brace group that is not a \frac argument (exponents, \sqrt arguments, ...).
_BRACE_INNER_RE = re.compile(r"(?<!frac)(?<!\})\{([^{}]*)\}")
_MAX_LATEX_PASSES = 30


def normalise_math_text(text: str) -> str:
    """Rewrite ``text`` into the notation the tokenizer reads.

    Invisible characters are dropped and full-width characters and other scripts' digits become
    ASCII (:func:`selfverify.tasks.realmath.clean_unicode`); ``× · ÷ −`` and LaTeX ``\\times \\cdot \\div
    \\frac{a}{b}`` become ``* / -`` and ``((a)/(b))``; superscript digits become ``^n``; currency
    signs and ``$`` vanish.
    """
    s = clean_unicode(text)
    if not s.isascii():
        s = s.translate(_CHAR_MAP)
        s = _SUPERSCRIPT_RE.sub(lambda m: "^(" + m.group().translate(_SUPERSCRIPT) + ")", s)
        s = _VULGAR_RE.sub(_vulgar_to_text, s)
    else:
        s = s.replace("$", "")
    if "\\" in s or "{" in s:
        s = _delatex(s)
    return _TIMES_X_RE.sub("*", s)


def _vulgar_to_text(m: re.Match[str]) -> str:
    """``1½`` is a mixed number, 1 + 1/2; a lone ``½`` is 1/2."""
    whole = (m.group(1) or "").strip()
    frac = _VULGAR[m.group(2)]
    return f"({whole}+{frac})" if whole else f"({frac})"


def _delatex(s: str) -> str:
    """LaTeX arithmetic to plain notation; innermost braces first so nested \\frac work."""
    for pattern, repl in _LATEX_SUBS:
        s = pattern.sub(repl, s)
    for _ in range(_MAX_LATEX_PASSES):
        t = _BRACE_INNER_RE.sub(r"(\1)", _FRAC_INNER_RE.sub(r"((\1)/(\2))", s))
        if t == s:
            break
        s = t
    return s.replace("{", "(").replace("}", ")")


# ---------------------------------------------------------------------------------------------
# Tokens and the whitelist parser.


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str  # num op lp rp eq sp word var unit other
    text: str
    start: int
    end: int
    index: int  # position in the token list


# A thousands-grouped number has at most MAX_NUMBER_DIGITS digits (a longer one is refused anyway), so its
# groups are capped: uncapped, each group of a long "1,234,234,..." chain rescanned the chain to its end,
# quadratic time (a 20,000-character step: over 1 s).
_MAX_GROUPS = MAX_NUMBER_DIGITS // 3
_TOKEN_RE = re.compile(
    rf"(?P<num>(?:\d{{1,3}}(?:,\d{{3}}){{1,{_MAX_GROUPS}}}(?!\d|,\d)|\d+)(?:\.\d+)?%?|\.\d+%?)"
    r"|(?P<op>\*\*|[-+*/^])"
    r"|(?P<lp>\()|(?P<rp>\))"
    r"|(?P<eq>(?<![=<>!:])=(?![=>]))"
    r"|(?P<sp>\s+)"
    r"|(?P<word>\\?[^\W\d_]+)"
    r"|(?P<other>.)",
    re.DOTALL,
)
# "unit" marks unit words between a number and an operator ("18 items + 6 items"); like spaces,
# they belong to a claim's text but not to its arithmetic.
_ARITH_KINDS = frozenset({"num", "op", "lp", "rp", "eq", "sp", "unit"})
_SILENT_KINDS = frozenset({"sp", "unit"})
MAX_UNIT_WORDS = 5
_LEADING_ZERO_RE = re.compile(r"0\d")
_POWER = ("^", "**")


def _tokenise(s: str) -> list[_Token]:
    tokens = [
        _Token(m.lastgroup or "other", m.group(), m.start(), m.end(), i)
        for i, m in enumerate(_TOKEN_RE.finditer(s))
    ]
    # A number glued to letters ("2x", "x2", "3rd") is a term, not a number; a glued unit
    # abbreviation ("12cm", "72km") is a unit.
    for i, tok in enumerate(tokens):
        if tok.kind != "num":
            continue
        glued_left = i > 0 and tokens[i - 1].kind == "word" and tokens[i - 1].end == tok.start
        after = tokens[i + 1] if i + 1 < len(tokens) else None
        glued_right = after is not None and after.kind == "word" and after.start == tok.end
        beyond = tokens[i + 2] if i + 2 < len(tokens) else None
        powered = beyond is not None and beyond.text in _POWER  # "500cm^3" is not 500^3
        if (
            glued_right
            and not (glued_left or powered)
            and after is not None
            and after.text.lower() in _GLUED_UNITS
        ):
            tokens[i + 1] = _Token("unit", after.text, after.start, after.end, i + 1)
        elif glued_left or glued_right:
            tokens[i] = _Token("var", tok.text, tok.start, tok.end, i)
    _mark_units(tokens)
    return tokens


def _is_unit_word(tok: _Token, first: bool) -> bool:
    """A word that may belong to a unit phrase; "of" only inside one ("cups of coffee")."""
    if tok.kind != "word" or len(tok.text) < 2 or tok.text.startswith("\\"):
        return False
    word = tok.text.lower()
    return word not in _UNIT_STOP_WORDS or (word == "of" and not first)


def _mark_units(tokens: list[_Token]) -> None:
    """Turn unit words after a number into ``unit`` tokens when an operator follows them.

    "18 items + 6 items = 24", "$60/lesson * 2 lessons", "25 floors x 4 apartments/floor = 100":
    up to ``MAX_UNIT_WORDS`` words (``/`` allowed between them) and a free-standing ``x`` after them
    becomes ``*``. Value-changing words ("thousand", "dozen", "of", "times") are never units.
    """
    n = len(tokens)
    for i in range(n):
        if tokens[i].kind != "num":
            continue
        j = i + 1
        if j < n and tokens[j].kind == "unit":
            j += 1  # "12cm"
        if j + 1 < n and tokens[j].text == "/" and _is_unit_word(tokens[j + 1], first=True):
            # "60/lesson": a number per something is never arithmetic on words; always a unit.
            tokens[j] = _Token("unit", "/", tokens[j].start, tokens[j].end, j)
            tokens[j + 1] = _Token("unit", tokens[j + 1].text, tokens[j + 1].start, tokens[j + 1].end, j + 1)
            j += 2
        start, words = j, 0
        while words < MAX_UNIT_WORDS:
            if j + 1 < n and tokens[j].text == "/" and _is_unit_word(tokens[j + 1], first=False):
                j += 2  # "apartments/floor"
            elif j + 1 < n and tokens[j].kind == "sp" and _is_unit_word(tokens[j + 1], first=words == 0):
                j += 2
            else:
                break
            words += 1
        if words == 0:
            continue
        k = j + 1 if j < n and tokens[j].kind == "sp" else j
        if k >= n:
            continue
        nxt = tokens[k]
        times = nxt.kind == "word" and nxt.text in ("x", "X") and _operand_follows(tokens, k)
        if (nxt.kind not in ("op", "eq") or nxt.text in _POWER) and not times:
            continue
        for m in range(start, j):
            if tokens[m].kind != "sp":
                tokens[m] = _Token("unit", tokens[m].text, tokens[m].start, tokens[m].end, m)
        if times:
            tokens[k] = _Token("op", "*", nxt.start, nxt.end, k)


def _operand_follows(tokens: list[_Token], k: int) -> bool:
    """Whether a number or an opening parenthesis comes after ``tokens[k]`` (spaces skipped)."""
    k += 1
    if k < len(tokens) and tokens[k].kind == "sp":
        k += 1
    return k < len(tokens) and tokens[k].kind in ("num", "lp")


class _Parser:
    """Recursive descent over ``+ - * / ^ ** ( )`` and numbers, exact and bounded.

    expr := term (('+'|'-') term)* ; term := unary (('*'|'/') unary | glued '(' ...)* ;
    unary := '-' unary | '+' unary | power ; power := atom (('^'|'**') unary)? ; atom := num | '(' expr ')'
    """

    def __init__(self, tokens: Sequence[_Token], reading: Reading = (False, False)) -> None:
        self.tokens = tokens
        self.pos = 0
        self.depth = 0
        self.percent = Fraction(1) if reading[0] else Fraction(1, 100)
        self.tight = reading[1]
        self.ambiguous = False  # set when a percent sign or a tight fraction was read

    def parse(self) -> Fraction:
        value = self.expr()
        if self.pos != len(self.tokens):
            raise Uncheckable(f"unexpected {self.tokens[self.pos].text!r}")
        return value

    def _peek(self) -> _Token | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def _tight_fraction(self, numerator: _Token) -> bool:
        """Whether to read ``numerator`` and the next two tokens as one fraction "b/c".

        GSM8K writes both "25 / 1/3 = 75" (25 divided by one third) and "500/ 1/10 = 50" (left to
        right), so a glued "b/c" is an ambiguous reading (sets ``self.ambiguous``), taken when
        ``self.tight``. Never inside a glued chain ("a/b/c") or next to a power ("2/3^2").
        """
        toks, k = self.tokens, self.pos
        if k + 1 >= len(toks) or toks[k].text != "/" or toks[k + 1].kind != "num":
            return False
        if not (numerator.end == toks[k].start and toks[k].end == toks[k + 1].start):
            return False
        before = toks[k - 2] if k >= 2 else None
        if before is not None and (
            before.text in _POWER or (before.text == "/" and before.end == numerator.start)
        ):
            return False
        after = toks[k + 2] if k + 2 < len(toks) else None
        if after is not None and (
            after.text in _POWER or (after.kind == "lp" and after.start == toks[k + 1].end)
        ):
            return False
        self.ambiguous = True
        return self.tight

    def _enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Uncheckable("nested too deeply")

    def expr(self) -> Fraction:
        value = self.term()
        while (tok := self._peek()) is not None and tok.text in ("+", "-"):
            self.pos += 1
            rhs = self.term()
            value = _bounded(value + rhs if tok.text == "+" else value - rhs)
        return value

    def term(self) -> Fraction:
        value = self.unary()
        while (tok := self._peek()) is not None:
            if tok.text in ("*", "/"):
                self.pos += 1
                rhs = self.unary()
                value = _bounded(value * rhs if tok.text == "*" else value / rhs)
            elif tok.kind == "lp" and self.tokens[self.pos - 1].end == tok.start:
                value = _bounded(value * self.unary())  # implicit product: 2(3+4), (1+1)(2+3)
            else:
                break
        return value

    def unary(self) -> Fraction:
        tok = self._peek()
        if tok is not None and tok.text in ("-", "+"):
            self.pos += 1
            self._enter()
            value = self.unary()
            self.depth -= 1
            return -value if tok.text == "-" else value
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        tok = self._peek()
        if tok is None or tok.text not in _POWER:
            return base
        self.pos += 1
        self._enter()
        exponent = self.unary()
        self.depth -= 1
        return _power(base, exponent)

    def atom(self) -> Fraction:
        tok = self._peek()
        if tok is None:
            raise Uncheckable("missing operand")
        self.pos += 1
        if tok.kind == "num":
            value = self._number(tok)
            if self._tight_fraction(tok):
                denominator = self._number(self.tokens[self.pos + 1])
                self.pos += 2
                return value / denominator
            return value
        if tok.kind == "lp":
            self._enter()
            value = self.expr()
            close = self._peek()
            if close is None or close.kind != "rp":
                raise Uncheckable("unbalanced parentheses")
            self.pos += 1
            self.depth -= 1
            return value
        raise Uncheckable(f"unexpected {tok.text!r}")

    def _number(self, tok: _Token) -> Fraction:
        digits = tok.text.replace(",", "").rstrip("%")
        if len(digits) > MAX_NUMBER_DIGITS:
            raise Uncheckable("number has too many digits")
        value = Fraction(digits) if "." in digits else Fraction(int(digits))  # int() is the fast path
        if not tok.text.endswith("%"):
            return value
        self.ambiguous = True
        return value * self.percent


def _bounded(value: Fraction) -> Fraction:
    if value.numerator.bit_length() > MAX_BITS or value.denominator.bit_length() > MAX_BITS:
        raise Uncheckable("value too large")
    return value


def _power(base: Fraction, exponent: Fraction) -> Fraction:
    if exponent.denominator != 1:
        raise Uncheckable("non-integer exponent")
    e = exponent.numerator
    size = max(base.numerator.bit_length(), base.denominator.bit_length(), 1)
    # Refuse before computing: 9^(9^9) would take minutes and gigabytes.
    if abs(e) > MAX_EXPONENT or size * abs(e) > MAX_BITS:
        raise Uncheckable("power too large")
    return _bounded(base**e)


def evaluate(expression: str) -> Fraction:
    """Exact value of a purely numeric expression such as ``"(48 + 2) / 2^2 - 25%"``.

    The text is normalised (:func:`normalise_math_text`) and parsed by the whitelist parser.
    Raises :class:`Uncheckable` for anything else or anything beyond the ``MAX_*`` bounds, and
    ``ZeroDivisionError`` on division by zero.
    """
    # Refused before normalising, like a step past MAX_STEP_CHARS: normalising costs time in the length
    # of the text, and no text this long normalises to an expression short enough to evaluate.
    if len(expression) > MAX_STEP_CHARS:
        raise Uncheckable("expression too long")
    s = normalise_math_text(expression)
    if len(s) > MAX_EXPR_CHARS:
        raise Uncheckable("expression too long")
    tokens = [t for t in _tokenise(s) if t.kind not in _SILENT_KINDS]
    if len(tokens) > MAX_EXPR_TOKENS:
        raise Uncheckable("expression too long")
    if not tokens:
        raise Uncheckable("empty expression")
    return _Parser(tokens).parse()


# ---------------------------------------------------------------------------------------------
# Finding claims: runs of arithmetic tokens joined by '=' signs.

# fmt: off
# A word right before a claim's left side means the expression began in words ("twice 12 = 24",
# "20 minus 5 = 15", "sqrt 16 + 1 = 5"): the numeric part alone is not the claim. "of" and "and"
# count only after a number or a fraction word ("half of 48 = 24", "1 and 1/4 = 1.25").
_LEFT_WORDS = frozenset((
    "x", "times", "by", "plus", "minus", "over", "into", "per", "less", "more", "than", "from",
    "half", "twice", "double", "triple", "thrice", "multiplied", "divided", "sqrt", "root", "log",
    "ln", "exp", "sin", "cos", "tan",
))
# A word right after a claim's right side that changes its value ("= 1.5 million", "= 3 dozen").
# "of" counts unless the side is a whole number ("= 1/2 of it" vs "= 12 of them"), "and" when a
# number follows ("= 5 and 2/3").
_RIGHT_WORDS = frozenset((
    "times", "squared", "cubed", "multiplied", "divided", "plus", "minus", "over", "percent",
    "dozen", "dozens", "hundred", "thousand", "million", "billion", "trillion", "half", "halves",
    "third", "thirds", "quarter", "quarters", "fourth", "fourths", "fifth", "fifths",
))
_FRACTION_WORDS = frozenset((
    "half", "halves", "third", "thirds", "quarter", "quarters", "fourth", "fourths", "fifth",
    "fifths", "sixth", "sixths", "eighth", "eighths", "tenth", "tenths", "twice", "double",
    "triple", "percent",
))
# Words never taken for units: they change a value or link two statements.
_UNIT_STOP_WORDS = (_LEFT_WORDS | _RIGHT_WORDS | frozenset((
    "of", "and", "or", "is", "are", "was", "were", "be", "equals", "equal", "gives", "makes",
    "so", "then", "thus", "hence", "which", "that", "the", "an", "to", "in", "on", "at", "for",
    "with", "because", "since", "as", "if", "when", "while", "but", "also", "already", "still",
    "only", "just", "up", "down", "out", "left", "now", "total", "altogether", "together",
))) - {"per"}
# Unit abbreviations written glued to a number ("12cm").
_GLUED_UNITS = frozenset((
    "mm", "cm", "km", "kg", "mg", "lb", "lbs", "oz", "ft", "yd", "yds", "mi", "mph", "kph", "ml",
    "hr", "hrs", "min", "mins", "sec", "secs", "am", "pm", "kw", "kwh", "gb", "mb", "kb", "sq",
))
# fmt: on
# Characters that may touch a claim without changing it; anything else glued on (letters, "!",
# "|", "√", "_", ...) means the numbers are part of something larger.
_GLUE_OK_LEFT = frozenset(":;,(\"'[")
_GLUE_OK_RIGHT = frozenset(".,;:?)]\"'")


@dataclass
class _Side:
    """One side of a claim: its text, its value under each reading, or why it has none."""

    text: str
    values: dict[Reading, Fraction] | None = None
    undefined: bool = False  # division by zero
    reason: str = ""
    literal_decimals: int | None = None  # decimals of a bare literal ("24" -> 0, "0.67" -> 2)
    literal_percent: bool = False
    unit: str = ""  # unit words right before the next "=" ("4.5 gallons = ...")
    lead: Fraction | None = None  # the leading number of "420 + 23", for running totals

    @property
    def usable(self) -> bool:
        return self.values is not None or self.undefined


def _side(tokens: list[_Token], source: str, reason: str = "", units: Sequence[str] = ()) -> _Side:
    """Evaluate one side (tokens without spaces or units) unless ``reason`` already rules it out.

    ``units`` are the side's unit phrases, normalised; the last is its trailing unit when the side
    ends with one.
    """
    if not tokens:
        return _Side("", reason=reason or "empty side")
    text = source[tokens[0].start : tokens[-1].end]
    if reason:
        return _Side(text, reason=reason)
    if len(text) > MAX_EXPR_CHARS or len(tokens) > MAX_EXPR_TOKENS:
        return _Side(text, reason="expression too long")
    if any(t.kind == "num" and _LEADING_ZERO_RE.match(t.text) for t in tokens):
        return _Side(text, reason="number with a leading zero (a clock time or a code)")
    if len(set(units)) > 1 and any(t.text in ("+", "-") for t in tokens):
        return _Side(text, reason="adds quantities in different units")
    values: dict[Reading, Fraction] = {}
    try:
        for reading in READINGS:
            parser = _Parser(tokens, reading)
            values[reading] = parser.parse()
            if not parser.ambiguous:  # nothing to read two ways: one value for every reading
                values = dict.fromkeys(READINGS, values[reading])
                break
    except Uncheckable as err:
        return _Side(text, reason=str(err))
    except ZeroDivisionError:
        return _Side(text, undefined=True)
    side = _Side(text, values=values)
    nums = [t for t in tokens if t.kind == "num"]
    if len(nums) == 1 and all(t.kind in ("lp", "rp") or t.text == "-" for t in tokens if t.kind != "num"):
        number = nums[0].text.rstrip("%")
        side.literal_decimals = len(number.split(".", 1)[1]) if "." in number else 0
        side.literal_percent = nums[0].text.endswith("%")
    elif tokens[0].kind == "num" and len(tokens) > 1 and tokens[1].kind == "op":
        side.lead = _Parser(tokens[:1]).parse()
    return side


def _trim_parens(tokens: list[_Token], leading: bool) -> list[_Token]:
    """Drop parentheses opened before (or closed after) a claim: "(so 3 + 4 = 7)"."""
    opened = sum(t.kind == "lp" for t in tokens) - sum(t.kind == "rp" for t in tokens)
    start, end = 0, len(tokens)
    while leading and opened > 0 and start < end and tokens[start].kind == "lp":
        start, opened = start + 1, opened - 1
    while not leading and opened < 0 and start < end and tokens[end - 1].kind == "rp":
        end, opened = end - 1, opened + 1
    return tokens[start:end]


def _context(tokens: list[_Token], index: int, step: int) -> tuple[bool, _Token | None, _Token | None]:
    """Context of ``tokens[index]`` going ``step`` (-1 or +1).

    Returns whether a non-space token touches it, the nearest non-space token, and the token right
    beyond that one (a space included, so a number there touches the nearest token).
    """
    k = index + step
    glued = 0 <= k < len(tokens) and tokens[k].kind != "sp"
    if 0 <= k < len(tokens) and tokens[k].kind == "sp":
        k += step
    near = tokens[k] if 0 <= k < len(tokens) else None
    beyond = tokens[k + step] if 0 <= k + step < len(tokens) else None
    return glued, near, beyond


def _is_word(tok: _Token | None) -> bool:
    return tok is not None and tok.kind in ("word", "var")


def _touches(tok: _Token | None, allowed: frozenset[str]) -> bool:
    """Whether ``tok``, glued to a side, makes that side part of something larger."""
    return _is_word(tok) or (tok is not None and tok.kind == "other" and tok.text not in allowed)


def _number_punct(punct: _Token | None, other: _Token | None) -> bool:
    """Whether ``punct`` is a comma, point or colon with a number on its far side ("13,2000", "6:00")."""
    return punct is not None and punct.text in ",.:" and other is not None and other.kind in ("num", "var")


def _first_side_reason(seg: list[_Token], tokens: list[_Token]) -> str:
    """Why the leftmost side of a chain may not be the whole left expression ('' if it is)."""
    if not seg:
        return "empty side"
    first = seg[0]
    glued, prev, before_prev = _context(tokens, first.index, -1)
    if glued and _touches(prev, _GLUE_OK_LEFT):
        return "part of a larger expression"
    # "13,2000", "6:00+48", "14, 400": the side starts inside a malformed number or a clock time.
    thousands_typo = prev is not None and prev.text == "," and first.kind == "num" and len(first.text) == 3
    if _number_punct(prev, before_prev) and (glued or thousands_typo):
        return "part of a larger number"
    word = prev if _is_word(prev) else None
    if first.kind == "op":
        # A leading minus is a sign only at the start, after punctuation, or after a word when
        # written "-5" rather than "- 5" ("the cost - 5 = 10" subtracts from words).
        sign = first.text == "-" and len(seg) > 1 and seg[1].start == first.end
        if not sign or (word is not None and (glued or word.kind == "var" or len(word.text) < 2)):
            return "left side starts with an operator"
    if word is not None:
        if word.text.lower() in _LEFT_WORDS or word.text.startswith("\\") or _linking_word(word, seg, tokens):
            return f"left side continues in words ({word.text!r})"
        if len(seg) == 1 or (len(seg) == 2 and first.text == "-"):
            return "bare number after words"
    return ""


def _last_side_reason(seg: list[_Token], tokens: list[_Token]) -> str:
    """Why the rightmost side of a chain may not be the whole right expression ('' if it is)."""
    if not seg:
        return "empty side"
    glued, nxt, beyond = _context(tokens, seg[-1].index, 1)
    if glued and _touches(nxt, _GLUE_OK_RIGHT):
        return "part of a larger expression"
    # "= 6:48", "= 1.2.3", "= 8.333...": the side ends inside a clock time or a longer number.
    if glued and (
        _number_punct(nxt, beyond)
        or (nxt is not None and nxt.text in ".…" and beyond is not None and beyond.text in ".…")
    ):
        return "part of a larger number"
    if nxt is None or nxt.kind != "word":
        return ""
    lowered = nxt.text.lower()
    whole = len(seg) == 1 and seg[0].kind == "num" and "." not in seg[0].text and "%" not in seg[0].text
    after_and = _context(tokens, nxt.index, 1)[1] if lowered == "and" else None
    mixed_number = after_and is not None and _fraction_at(tokens, after_and.index)  # "= 5 and 2/3"
    if lowered in _RIGHT_WORDS or (lowered == "of" and not whole) or mixed_number:
        return f"right side continues in words ({nxt.text!r})"
    return ""


def _fraction_at(tokens: list[_Token], index: int) -> bool:
    """Whether a fraction written "a/b" (no spaces) starts at ``tokens[index]``."""
    if index + 2 >= len(tokens):
        return False
    a, slash, b = tokens[index : index + 3]
    return a.kind == "num" and slash.text == "/" and b.kind == "num" and a.end == slash.start == b.start - 1


def _linking_word(word: _Token, seg: list[_Token], tokens: list[_Token]) -> bool:
    """Whether ``word`` links ``seg`` to a number before it: "half of 48", "1 and 1/4"."""
    before = _context(tokens, word.index, -1)[1]
    if before is None:
        return False
    if word.text.lower() == "of":
        return before.kind in ("num", "var") or before.text.lower() in _FRACTION_WORDS
    return word.text.lower() == "and" and before.kind == "num" and _fraction_at(tokens, seg[0].index)


def _rounds_to(exact: Fraction, claimed: Fraction, decimals: int) -> bool:
    """Whether ``claimed`` is ``exact`` rounded to nearest (ties either way) or truncated toward zero,
    at ``decimals`` decimal places."""
    if decimals > MAX_NUMBER_DIGITS:
        return exact == claimed
    scale = 10**decimals
    scaled, target = exact * scale, claimed * scale
    if target.denominator != 1:
        return False
    low, high = math.floor(scaled), math.ceil(scaled)
    truncated = low if scaled >= 0 else high
    nearest = (
        {low, high} if scaled - low == high - scaled else {low if scaled - low < high - scaled else high}
    )
    return target.numerator == truncated or target.numerator in nearest


def _pair_holds(a: _Side, b: _Side) -> bool:
    """Whether ``a = b`` holds exactly, or within the rounding rule, under some reading."""
    assert a.values is not None and b.values is not None
    for reading in READINGS:
        va, vb = a.values[reading], b.values[reading]
        if va == vb:
            return True
        for exact, claimed in ((va, b), (vb, a)):
            if claimed.literal_decimals is not None:
                extra = 2 if claimed.literal_percent and not reading[0] else 0
                if _rounds_to(exact, claimed.values[reading], claimed.literal_decimals + extra):
                    return True
    return False


def format_value(value: Fraction) -> str:
    """A short exact rendering: ``24``, ``0.125``, ``10/3 ≈ 3.333333``; huge values by size only."""
    if max(value.numerator.bit_length(), value.denominator.bit_length()) > 200:
        return f"a number of about {int(value.numerator.bit_length() * 0.30103) + 1} digits"
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    twos_fives = den
    for p in (2, 5):
        while twos_fives % p == 0:
            twos_fives //= p
    if twos_fives == 1:
        places = max(len(str(den)) - 1, 1)
        while (value * 10**places).denominator != 1:
            places += 1
        return f"{float(value):.{places}f}" if places <= 15 else f"{value} ≈ {float(value):.6g}"
    return f"{value} ≈ {float(value):.6g}"


def _judge(a: _Side, b: _Side, in_chain: bool) -> Claim:
    """Decide the claim ``a = b``; ``in_chain`` when it is one link of ``s0 = s1 = s2 ...``."""
    text = f"{a.text} = {b.text}"
    if not (a.usable and b.usable):
        return Claim(text, "unchecked", a.reason or b.reason)
    if a.undefined or b.undefined:
        return Claim(text, "wrong", "division by zero")
    # "60 = 1 hour", "= 100 cents = 1", "4.5 gallons = 4.5 * 8 pints": restatements and unit
    # conversions, not arithmetic. Two bare numbers are compared only inside a longer chain
    # ("48/2 = 24 = 25").
    bare_pair = b.literal_decimals is not None and not in_chain
    if a.literal_decimals is not None and (bare_pair or a.unit):
        return Claim(text, "unchecked", "a quantity restated (unit conversion)")
    if _pair_holds(a, b):
        return Claim(text, "right")
    assert a.values is not None and b.values is not None
    va, vb = a.values[READINGS[0]], b.values[READINGS[0]]
    if b.lead is not None and b.lead == va:
        return Claim(text, "right", "running total")  # "7 x 60 = 420 + 23 = 443"
    if a.literal_decimals is not None and b.literal_decimals is not None:
        detail = f"{a.text} ≠ {b.text}"
    elif b.literal_decimals is not None:
        detail = f"{a.text} = {format_value(va)}"
    elif a.literal_decimals is not None:
        detail = f"{b.text} = {format_value(vb)}"
    else:
        detail = f"{a.text} = {format_value(va)}, {b.text} = {format_value(vb)}"
    return Claim(text, "wrong", detail)


def _unit_key(words: list[str]) -> str:
    """A unit phrase compared loosely: lower case, plural "s" dropped ("Items" ~ "item")."""
    return " ".join(w.lower().removesuffix("s") for w in words)


def _chain_claims(run: list[_Token], tokens: list[_Token], source: str) -> list[Claim]:
    """Claims of one run ``s0 = s1 = ... = sn`` of arithmetic tokens: each adjacent pair."""
    segments: list[list[_Token]] = [[]]
    units: list[list[str]] = [[]]
    trailing: list[bool] = [False]  # whether the segment ends with a unit phrase
    phrase: list[str] = []
    for tok in run:
        if tok.kind == "unit":
            phrase.append(tok.text)
            continue
        if phrase and tok.kind != "sp":
            units[-1].append(_unit_key(phrase))
            trailing[-1] = tok.kind == "eq"
            phrase = []
        if tok.kind == "eq":
            segments.append([])
            units.append([])
            trailing.append(False)
        elif tok.kind != "sp":
            segments[-1].append(tok)
    segments[0] = _trim_parens(segments[0], leading=True)
    segments[-1] = _trim_parens(segments[-1], leading=False)
    sides: list[_Side] = []
    for i, seg in enumerate(segments):
        reason = ""
        if i == 0:
            reason = _first_side_reason(seg, tokens)
        if i == len(segments) - 1:
            reason = reason or _last_side_reason(seg, tokens)
        side = _side(seg, source, reason, units[i])
        if trailing[i]:
            side.unit = units[i][-1]
        sides.append(side)
    return [_judge(a, b, len(sides) > 2) for a, b in zip(sides, sides[1:], strict=False)]


def find_claims(text: str) -> list[Claim]:
    """Every ``lhs = rhs`` claim in ``text`` (calculator annotations included), judged, deduplicated.

    Only the first ``MAX_STEP_CHARS`` characters are read, and at most ``MAX_CLAIMS_PER_STEP``
    claims are kept, so the cost of a step is bounded whatever its length.
    """
    text = text[:MAX_STEP_CHARS]
    claims: list[Claim] = []
    annotations = _ANNOTATION_RE.findall(text) if "<<" in text else []
    for content in annotations[:MAX_CLAIMS_PER_STEP]:
        claims.extend(_claims_in(normalise_math_text(content)))
    if annotations:
        text = _ANNOTATION_RE.sub("", text)
    if "=" in text or "\uff1d" in text:
        claims.extend(_claims_in(normalise_math_text(text)))
    unique: dict[str, Claim] = {}
    for claim in claims:
        unique.setdefault("".join(claim.text.split()), claim)
    return list(unique.values())[:MAX_CLAIMS_PER_STEP]


def _claims_in(s: str) -> list[Claim]:
    tokens = _tokenise(s)
    claims: list[Claim] = []
    i = 0
    while i < len(tokens) and len(claims) < MAX_CLAIMS_PER_STEP:
        if tokens[i].kind not in _ARITH_KINDS:
            i += 1
            continue
        j = i
        while j < len(tokens) and tokens[j].kind in _ARITH_KINDS:
            j += 1
        run = tokens[i:j]
        if any(t.kind == "eq" for t in run):
            claims.extend(_chain_claims(run, tokens, s))
        i = j
    return claims


# ---------------------------------------------------------------------------------------------
# The verifier.


class ArithmeticRuleVerifier:
    """Verifier ``rule``: a step is wrong when one of its numeric claims is false.

    step score = 1.0 when every checkable claim of the step holds (or it has none), else 0.0.
    earliest_error = first step scored 0, -1 if none. Overall score: 0 when a step is wrong; else,
    with a reference ``answer``, 1 if the final answer of the solution (the value it states last, see
    :func:`final_answer`) equals it, else 0; with no reference answer, 1. ``analysis`` lists each
    wrong claim ("Step 3: 48/2 = 25 is wrong (48/2 = 24).", steps numbered from 1) and an answer
    mismatch. ``extra`` counts claims (``claims_checked``,
    ``claims_wrong``, ``claims_unchecked``), steps read only in part (``steps_truncated``, past
    ``MAX_STEP_CHARS`` or ``MAX_SOLUTION_CHARS``), and with a reference answer has
    ``predicted_answer`` and ``answer_correct``.
    """

    name = "rule"

    def verify_batch(self, items: Sequence[VerifyInput]) -> list[Verdict]:
        return [self.verify(item) for item in items]

    def verify(self, item: VerifyInput) -> Verdict:
        """Judge one solution."""
        checks: list[StepClaims] = []
        budget, truncated = MAX_SOLUTION_CHARS, 0
        for step in item.steps:
            readable = step[: min(MAX_STEP_CHARS, budget)]
            truncated += len(readable) < len(step)
            budget -= len(readable)
            checks.append(StepClaims(find_claims(readable)))
        step_scores = [0.0 if check.wrong else 1.0 for check in checks]
        lines = [
            f"Step {i + 1}: {claim.text} is wrong ({claim.detail})."
            for i, check in enumerate(checks)
            for claim in check.wrong
        ]
        earliest = earliest_error_from_scores(step_scores)
        extra: dict[str, object] = {
            "claims_checked": sum(c.checked for c in checks),
            "claims_wrong": sum(len(c.wrong) for c in checks),
            "claims_unchecked": sum(len(c.claims) - c.checked for c in checks),
        }
        if truncated:
            extra["steps_truncated"] = truncated
        score = 0.0 if earliest >= 0 else 1.0
        if item.answer is not None:
            predicted = final_answer(item.steps)
            correct = answers_equal(predicted, item.answer)
            extra["predicted_answer"] = predicted
            extra["answer_correct"] = correct
            if not correct:
                score = 0.0
                shown = "none found" if predicted is None else _shorten(predicted)
                lines.append(
                    f"Final answer {shown} does not match the reference answer {_shorten(item.answer)}."
                )
        return Verdict(step_scores, earliest, score, analysis="\n".join(lines), extra=extra)


def final_answer(steps: Sequence[str]) -> str | None:
    """The solution's final answer: :func:`extract_answer` of its steps read as one text, so the answer
    marker written last wins wherever it is, and beats a number a later step merely mentions.

    Read are the tail of each step (``ANSWER_SEARCH_CHARS``), calculator annotations dropped, and of
    the whole solution its last ``MAX_SOLUTION_CHARS``.
    """
    tails: list[str] = []
    budget = MAX_SOLUTION_CHARS
    for step in reversed(steps):
        if budget <= 0:
            break
        tail = step[-min(ANSWER_SEARCH_CHARS, budget) :]
        tails.append(_ANNOTATION_RE.sub("", tail))
        budget -= len(tail)
    return extract_answer("\n".join(reversed(tails)), "auto")


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"

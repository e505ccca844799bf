"""Reading a math answer as one number: the literal forms a person writes for a number, and nothing that computes.

An answer is graded only when it is one number literal; an expression (`26 * 32`), several values (`3108 or 3018`),
a complex or modular form (`1420i`, `1420 \\pmod{10}`) is refused with a reason, so an agent cannot copy the question
and let the checker do the arithmetic. Accepted, with units and currency around them: `1420`, `-7`, `1,420`, `1 420`,
`1\\,420`, `1420.0`, `1/2` and `\\frac{1}{2}` in lowest terms, `1.42e3` and `1.42 \\times 10^3` (mantissa in [1, 10)),
full-width and other Unicode digits, and Chinese numerals (`一千四百二十`, `两千零五`, `1.2万`). Every step is a
linear scan or a fullmatch of a pattern without nested repetition, on a bounded input: grading time is bounded too.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction
from math import gcd

MAX_ANSWER_CHARS = 80  # a marked answer longer than this is not one number
REASONING = re.compile(r"<think>.*?(?:</think>|\Z)", re.S)
SIGN = r"[-+]?"
GROUPED = r"\d{1,3}(?:(?P<sep>,|'| |\\,|\{,\})\d{3})(?:(?P=sep)\d{3})*"  # one separator, groups of three
DECIMAL = re.compile(rf"{SIGN}(?:{GROUPED}|\d+)(?:\.\d+)?|{SIGN}\.\d+")
FRACTION = re.compile(rf"(?P<s>{SIGN})(?:(?P<a>\d+)/(?P<b>\d+)|\\d?frac\{{(?P<c>\d+)\}}\{{(?P<d>\d+)\}})")
SCIENTIFIC = re.compile(rf"(?P<m>{SIGN}\d(?:\.\d+)?)(?:[eE]|\s*(?:\\times|\\cdot|×|\*|x)\s*10\^)"
                        r"(?P<e>\{[-+]?\d{1,3}\}|[-+]?\d{1,3})")
MYRIAD = re.compile(rf"(?P<n>{SIGN}\d+(?:\.\d+)?)(?P<u>[万亿])")
LATEX_NOISE = re.compile(r"\\[()\[\]]|\$|\\!|\\displaystyle|\\left|\\right|~")
UNIT_WRAPPER = re.compile(r"\\(?:text|mbox|mathrm|textrm|operatorname)\{([^{}]*)\}")
NUMERAL_CHARS = "零〇一二两三四五六七八九十百千万亿点负"
# A unit after the number, word by word: two or more Latin letters (one letter, as in 1420i, is a symbol), a word of
# another script that holds no numeral (个, 元, 名乘客), a measure word that starts with a numeral character, °, %.
UNIT_WORD = re.compile(rf"(?:[A-Za-z]{{2,}}|[^\W\d_A-Za-z{NUMERAL_CHARS}]+|千米|千克|°C?|\\?%|\^?\{{?\\circ\}}?)")
SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")
CURRENCY = re.compile(r"^(?:\\\$|[$¥€£]|USD|RMB)\s*")
CN_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
CN_UNITS = {"十": 10, "百": 100, "千": 1000}
CN_BIG = {"万": 10**4, "亿": 10**8}
CHINESE = re.compile(r"负?[零〇一二两三四五六七八九十百千万亿]+(?:点[零〇一二三四五六七八九]+)?")


@dataclass(frozen=True)
class Reading:
    """What an answer says: its value, or why it is not one number."""

    value: Fraction | None
    reason: str = ""  # set when value is None


def strip_reasoning(text: str) -> str:
    """The reply without its `<think>…</think>` blocks (an unclosed one runs to the end): reasoning is not an answer."""
    return REASONING.sub("", text)


def read_number(text: str) -> Reading:
    """The one number `text` writes, or the reason it is not one (an expression, several values, too long, empty)."""
    if len(text) > MAX_ANSWER_CHARS:
        return Reading(None, f"too long to be one number ({len(text)} characters, at most {MAX_ANSWER_CHARS})")
    s = _plain(text)
    if not s:
        return Reading(None, "empty")
    for reader in (_decimal, _fraction, _scientific, _myriad, _chinese):
        value = reader(s)
        if value is not None:
            return Reading(value)
    if len(re.findall(r"\d+", s)) > 1:
        return Reading(None, f"not one number literal (an expression or several values): {text.strip()!r}")
    return Reading(None, f"not a number literal: {text.strip()!r}")


def normalize_digits(text: str) -> str:
    """Any Unicode decimal digit (full-width ３, Arabic-Indic ٣, …) as its ASCII digit; full-width signs and
    punctuation as ASCII; the minus sign − as -."""
    out = []
    for ch in text:
        if "０" <= ch <= "～" or ch == "　":  # the full-width block: ０-９, ＋, －, ，, ．, ＄ …
            ch = " " if ch == "　" else chr(ord(ch) - 0xFEE0)
        elif ch in "−–":
            ch = "-"
        elif not ch.isascii() and unicodedata.category(ch) == "Nd":
            ch = str(unicodedata.decimal(ch))
        out.append(ch)
    return "".join(out)


def _plain(text: str) -> str:
    """The literal alone: digits normalized, LaTeX delimiters, currency, units and a final period removed."""
    s = normalize_digits(text).strip().replace("\\$", "")  # \$ is a dollar sign in LaTeX
    s = LATEX_NOISE.sub("", s).strip()
    s = UNIT_WRAPPER.sub(lambda m: m.group(1) if re.fullmatch(r"[^\W\d_]*(?:\s+[^\W\d_]+)*\s*", m.group(1)) else
                         m.group(0), s)
    s = CURRENCY.sub("", s).rstrip(". ")
    s = _without_unit(s)
    s = re.sub(r"10([⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+)$", lambda m: "10^" + m.group(1).translate(SUPERSCRIPT), s.strip())
    return s.strip()


def _without_unit(s: str) -> str:
    """`s` without the unit words after its number (`12 apples`, `1420元`, `5千米`, `25%`), if they are all units."""
    end = len(s)
    for measure in ("千米", "千克"):  # their first character is a numeral, so the scan below would stop inside them
        end -= len(measure) if s.endswith(measure) else 0
    start = end
    while start > 0 and (s[start - 1] in " \t°%\\{}^" or (s[start - 1].isalpha() and s[start - 1] not in NUMERAL_CHARS)):
        start -= 1
    words = s[start:].split()
    if start == 0 or not words or not all(UNIT_WORD.fullmatch(w) for w in words):
        return s
    return s[:start]


def _decimal(s: str) -> Fraction | None:
    m = DECIMAL.fullmatch(s)
    if not m:
        return None
    digits = re.sub(r"\\,|\{,\}|[, ']", "", s)
    return Fraction(digits)


def _fraction(s: str) -> Fraction | None:
    m = FRACTION.fullmatch(s)
    if not m:
        return None
    a, b = int(m.group("a") or m.group("c")), int(m.group("b") or m.group("d"))
    if b < 2 or gcd(a, b) != 1:  # 52/2 or 26/1 is a division to carry out, not a fraction's literal
        return None
    return Fraction(-a if m.group("s") == "-" else a, b)


def _scientific(s: str) -> Fraction | None:
    m = SCIENTIFIC.fullmatch(s)
    if not m:
        return None
    mantissa = Fraction(m.group("m"))
    if not 1 <= abs(mantissa) < 10:  # 26 × 10^1 is a product; 2.6 × 10^1 is how a number is written
        return None
    return mantissa * Fraction(10) ** int(m.group("e").strip("{}"))


def _myriad(s: str) -> Fraction | None:
    m = MYRIAD.fullmatch(s)
    return Fraction(m.group("n")) * CN_BIG[m.group("u")] if m else None


def _chinese(s: str) -> Fraction | None:
    """一千四百二十 → 1420, 两千零五 → 2005, 十二 → 12, 一亿五千万 → 150000000, 三点五 → 3.5, 负七 → -7."""
    if not CHINESE.fullmatch(s):
        return None
    negative, s = s.startswith("负"), s.removeprefix("负")
    whole, _, frac = s.partition("点")
    yi = wan = section = 0
    digit, prev = 0, ""
    for ch in whole:
        if ch in CN_DIGITS:
            if prev == "digit":
                return None  # 一二 or 二零: digit after digit is read digit by digit, not as a number here
            digit, prev = CN_DIGITS[ch], "digit" if CN_DIGITS[ch] else "zero"
        elif ch in CN_UNITS:
            section += (digit if prev == "digit" else 1) * CN_UNITS[ch]
            digit, prev = 0, "unit"
        elif ch == "万":
            wan += (section + digit) * 10**4
            section, digit, prev = 0, 0, "unit"
        else:  # 亿 scales all that came before it
            yi = (yi + wan + section + digit) * 10**8
            wan, section, digit, prev = 0, 0, 0, "unit"
    value = Fraction(yi + wan + section + digit)
    if frac:
        value += Fraction(int("".join(str(CN_DIGITS[c]) for c in frac)), 10 ** len(frac))
    return -value if negative else value

"""Reading a math answer as one number: the literal forms a person writes for a number, and nothing that computes.

An answer is graded only when it is one number literal; an expression (`26 * 32`), several values (`3108 or 3018`),
a complex or modular form (`1420i`, `1420 \\pmod{10}`), or words that compute or hedge (`832 squared`, `832 or
so`) are refused with a reason, so an agent cannot copy the question and let the checker do the arithmetic.
Accepted: `1420`, `-7`, `1,420`, `1 420`, `1\\,420`, `1,42,000`, `1420.0`, `1/2` and `\\frac{1}{2}` in lowest terms,
`1.42e3`, `1.42 \\times 10^3` (mantissa in [1, 10)), `1.42 million`, full-width and other Unicode digits, Chinese
numerals (`一千四百二十`, `两千零五`, `一千四百二`, `1.2万`, `壹仟肆佰贰拾`), with a label (`x =`, `Answer:`),
Markdown or LaTeX around it, currency and unit words after it. Every step is a linear scan or a fullmatch of a
pattern without nested repetition, on a bounded input: grading time is bounded too.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from fractions import Fraction
from math import gcd

MAX_ANSWER_CHARS = 80  # a marked answer longer than this is not one number
REASONING = re.compile(r"<(think|thinking|reasoning|reflection)>.*?(?:</\1>|\Z)", re.S | re.I)
CLOSING = re.compile(r"</(?:think|thinking|reasoning|reflection)>", re.I)
INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"))
SPACES = dict.fromkeys(map(ord, "\u00a0\u2009\u202f\u2007\u3000"), " ")
SIGN = r"[-+]?"
GROUPED = (r"[1-9]\d{0,2}(?P<sep>,|'| |\\,|\\;|\\ |\{,\})\d{3}(?:(?P=sep)\d{3})*"  # groups of three, one separator
           r"|[1-9]\d?(?:,\d\d)+,\d{3}")  # Indian grouping: 1,42,000
DECIMAL = re.compile(rf"{SIGN}(?:{GROUPED}|\d+)(?:\.\d+)?|{SIGN}\.\d+")
FRACTION = re.compile(rf"(?P<s>{SIGN})(?:(?P<a>\d+)/(?P<b>\d+)|\\[dt]?frac(?:\{{(?P<c>\d+)\}}\{{(?P<d>\d+)\}}|(?P<e>\d)(?P<f>\d)))")
E_NOTATION = re.compile(rf"(?P<m>{SIGN}\d+(?:\.\d+)?)[eE](?P<e>[-+]?\d{{1,3}})")
TIMES_TEN = re.compile(rf"(?P<m>{SIGN}\d(?:\.\d+)?)\s*(?:\\times|\\cdot|×|·|\*|x)\s*10\^(?P<e>\{{[-+]?\d{{1,3}}\}}|[-+]?\d{{1,3}})")
SCALED = re.compile(rf"(?P<n>{SIGN}(?:{GROUPED}|\d+)(?:\.\d+)?)\s*(?P<u>[千万萬亿億]|hundred|thousand|million|billion|trillion)")
SCALES = {"千": 10**3, "万": 10**4, "萬": 10**4, "亿": 10**8, "億": 10**8, "hundred": 100, "thousand": 10**3, "million": 10**6,
          "billion": 10**9, "trillion": 10**12}
LATEX_NOISE = re.compile(r"\\[()\[\]]|\$|\\!|\\displaystyle|\\left|\\right")
WRAPPER = re.compile(r"\\(?:text|textbf|textrm|textit|mathbf|mathrm|mbox|operatorname|boldsymbol|boxed)\s*\{([^{}]*)\}")
LABEL = re.compile(r"^(?:=|[A-Za-z]\w{0,15}\s*=|(?:the\s+)?(?:final\s+)?(?:answer|total|result|sum)\s*(?:is\s*)?[:：=]?"
                   r"|(?:答案|答|结果|一共|总共|共有|共|合计|等于|还剩|剩下|剩)\s*(?:是|为|有)?\s*[:：]?)\s*", re.I)
CURRENCY = re.compile(r"^(?:US\s?\$|\\\$|[$¥￥€£₹]|USD|RMB|EUR|Rs\.?|CNY)\s*")
CN_DIGITS = {"零": 0, "〇": 0, "一": 1, "壹": 1, "二": 2, "两": 2, "兩": 2, "贰": 2, "貳": 2, "三": 3, "叁": 3, "參": 3,
             "四": 4, "肆": 4, "五": 5, "伍": 5, "六": 6, "陆": 6, "陸": 6, "七": 7, "柒": 7, "八": 8, "捌": 8,
             "九": 9, "玖": 9}
CN_UNITS = {"十": 10, "拾": 10, "百": 100, "佰": 100, "千": 1000, "仟": 1000}
CN_BIG = {"万": 10**4, "萬": 10**4, "亿": 10**8, "億": 10**8}
NUMERAL_CHARS = "".join(CN_DIGITS) + "".join(CN_UNITS) + "".join(CN_BIG) + "点點负負"
CHINESE = re.compile(rf"[负負]?[{''.join(CN_DIGITS)}{''.join(CN_UNITS)}{''.join(CN_BIG)}]+"
                     rf"(?:[点點][{''.join(CN_DIGITS)}]+)?")
# A unit after the number, word by word. A word that computes, hedges or names a number is not a unit: `832
# squared`, `832 or so`, `832 dozen` are refused rather than read as 832.
NOT_UNITS = frozenset("""
    zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen
    eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety dozen dozens half halves quarter quarters
    third thirds score gross plus minus times over divided multiplied mod modulo squared cubed power powers root roots
    sqrt factorial of or nor and approximately approx roughly about around nearly almost maybe perhaps ish odd
    something max maximum min minimum tops top guess guessed wrong right is was are be estimate estimated
    probably possibly likely less more than least most exactly equals equal not no plusminus pm mp
    hundred hundreds thousand thousands million millions billion billions trillion trillions k
""".split())  # noqa: SIM905 (a word list reads better as words)
NOT_CJK_UNITS = ("或", "约", "約", "乘", "加", "减", "減", "除", "次方", "左右", "至", "到", "和", "余", "多", "几", "幾")
SINGLE_LETTER_UNITS = set("mgshlLKVWAJNCF")
UNIT_WORD = re.compile(r"[A-Za-z]+(?:[./][A-Za-z]+)*\.?[²³]?|°[CF]?|\\?%|\^?\{?\\circ\}?|[$¥￥€£₹]|"
                       rf"[^\W\d_A-Za-z{NUMERAL_CHARS}]+|千米|千克")


@dataclass(frozen=True)
class Reading:
    """What an answer says: its value, or why it is not one number."""

    value: Fraction | None
    reason: str = ""  # set when value is None


def strip_reasoning(text: str) -> str:
    """The reply without its `<think>…</think>` blocks (any case; `<thinking>`, `<reasoning>` too; an unclosed one
    runs to the end), and without everything before a closing tag whose opening tag the prompt wrote: reasoning is
    not an answer."""
    text = REASONING.sub("", text)
    closing = CLOSING.findall(text)
    return text[text.lower().rindex(closing[-1].lower()) + len(closing[-1]):] if closing else text


def read_number(text: str) -> Reading:
    """The one number `text` writes, or the reason it is not one (an expression, several values, too long, empty)."""
    if len(text) > MAX_ANSWER_CHARS:
        return Reading(None, f"too long to be one number ({len(text)} characters, at most {MAX_ANSWER_CHARS})")
    s = _plain(text)
    if not s:
        return Reading(None, "empty")
    for reader in (_decimal, _fraction, _e_notation, _times_ten, _scaled, _chinese):
        value = reader(s)
        if value is not None:
            return Reading(value)
    if len(re.findall(r"\d+", s)) > 1 or (re.search(r"\d", s) and re.search(rf"[{NUMERAL_CHARS}]", s)):
        return Reading(None, f"not one number literal (an expression or several values): {text.strip()!r}")
    return Reading(None, f"not a number literal: {text.strip()!r}")


def normalize_digits(text: str) -> str:
    """Any Unicode decimal digit (full-width ３, Arabic-Indic ٣, …) as its ASCII digit; full-width signs and
    punctuation as ASCII; the minus sign − as -; invisible characters dropped; special spaces as spaces."""
    out = []
    for ch in text.translate(INVISIBLE).translate(SPACES):
        if "！" <= ch <= "～":  # the full-width block: ０-９, ＋, －, ，, ．, ＄ …
            ch = chr(ord(ch) - 0xFEE0)
        elif ch in "−–":
            ch = "-"
        elif not ch.isascii() and unicodedata.category(ch) == "Nd":
            ch = str(unicodedata.decimal(ch))
        out.append(ch)
    return "".join(out)


def _plain(text: str) -> str:
    """The literal alone: digits normalized; Markdown, LaTeX delimiters and wrappers, a label, currency, units and
    a final period removed."""
    s = normalize_digits(text).strip().strip("*_`").strip()
    s = s.replace("\\$", "$").replace("US$", "$")  # \$ is a dollar sign in LaTeX
    s = re.sub(r"~(?=\\?[A-Za-z])", " ", s)  # LaTeX's tie before a unit (a leading ~ means "about": refused)
    s = LATEX_NOISE.sub("", s)
    s = WRAPPER.sub(lambda m: m.group(1), s).strip()
    s = re.sub(r"\\[,; ](?!\d)", " ", s)  # LaTeX's small spaces before a unit (a separator between digits stays)
    s = LABEL.sub("", s.replace("**", ""), count=1)
    s = CURRENCY.sub("", s).rstrip(".。,，!！;； ")
    # cm^2, 1420 m2 → cm², m² (not 1.42e3: the letter must be a word's, not a digit's neighbour)
    s = re.sub(r"(?:(?<=[A-Za-z]{2})|(?<=\s[A-Za-z]))\^?\{?([23])\}?(?!\d)", lambda m: "²³"[int(m.group(1)) - 2], s)
    s = re.sub(r"10([⁰¹²³⁴⁵⁶⁷⁸⁹⁻]+)", lambda m: "10^" + m.group(1).translate(SUPERSCRIPT), s)  # 1.42×10³
    return _without_unit(s).strip()


SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻", "0123456789-")


def _without_unit(s: str) -> str:
    """`s` without the unit words after its number (`12 apples`, `1420元`, `5千米`, `25%`, `1420 km/h`, `1.42
    million dollars` keeps `million`): words are dropped from the end while they are units."""
    end = len(s)
    for measure in ("千米", "千克"):  # their first character is a numeral, so the scan below would stop inside them
        end -= len(measure) if s.endswith(measure) else 0
    start = end
    while start > 0 and (s[start - 1] in " \t°%\\{}^/.²³$¥￥€£₹()（）" or (s[start - 1].isalpha()
                                                                    and s[start - 1] not in NUMERAL_CHARS)):
        start -= 1
    if start == 0:
        return s
    cut = len(s)
    for word in reversed(list(re.finditer(r"\S+", s[start:]))):
        if not _is_unit(word.group()):
            break
        cut = start + word.start()
    return s[:cut]


def _is_unit(word: str) -> bool:
    word = word.strip("()（）") or "()"
    if not UNIT_WORD.fullmatch(word) or word.lower().strip(".") in NOT_UNITS or any(w in word for w in NOT_CJK_UNITS):
        return False
    if re.fullmatch(r"[A-Za-z]\.?[²³]?", word):  # 1420i is a complex number, 1420 m a length
        return word[0] in SINGLE_LETTER_UNITS
    return True


def _decimal(s: str) -> Fraction | None:
    if not DECIMAL.fullmatch(s):
        return None
    return Fraction(re.sub(r"\\[,; ]|\{,\}|[, ']", "", s))


def _fraction(s: str) -> Fraction | None:
    m = FRACTION.fullmatch(s)
    if not m:
        return None
    a = int(m.group("a") or m.group("c") or m.group("e"))
    b = int(m.group("b") or m.group("d") or m.group("f"))
    if b < 2 or gcd(a, b) != 1:  # 52/2 or 26/1 is a division to carry out, not a fraction's literal
        return None
    return Fraction(-a if m.group("s") == "-" else a, b)


def _e_notation(s: str) -> Fraction | None:
    m = E_NOTATION.fullmatch(s)
    return Fraction(m.group("m")) * Fraction(10) ** int(m.group("e")) if m else None


def _times_ten(s: str) -> Fraction | None:
    m = TIMES_TEN.fullmatch(s)
    if not m:
        return None
    mantissa = Fraction(m.group("m"))
    if not 1 <= abs(mantissa) < 10:  # 26 × 10^1 is a product; 2.6 × 10^1 is how a number is written
        return None
    return mantissa * Fraction(10) ** int(m.group("e").strip("{}"))


def _scaled(s: str) -> Fraction | None:
    """1.2万, 1.42 million, 3 thousand."""
    m = SCALED.fullmatch(s)
    return _decimal(m.group("n")) * SCALES[m.group("u")] if m else None  # type: ignore[operator]


def _chinese(s: str) -> Fraction | None:
    """一千四百二十 → 1420, 两千零五 → 2005, 十二 → 12, 一千四百二 → 1420 (the spoken short form), 一亿五千万 →
    150000000, 三点五 → 3.5, 负七 → -7; financial numerals (壹仟肆佰贰拾) and traditional characters too."""
    if not CHINESE.fullmatch(s):
        return None
    negative, s = s[0] in "负負", s.lstrip("负負")
    whole, _, frac = s.replace("點", "点").partition("点")
    yi = wan = section = 0
    digit, prev, last_unit, small = 0, "", 0, 10**5  # small: the last of 十百千 in this section
    for ch in whole:
        if ch in CN_DIGITS:
            if prev == "digit":
                return None  # 一二 or 二零: digit after digit is read digit by digit, not as a number here
            digit, prev = CN_DIGITS[ch], "digit" if CN_DIGITS[ch] else "zero"
        elif ch in CN_UNITS:
            if CN_UNITS[ch] >= small:
                return None  # 二十三十, 百百: numbers written side by side, not one number
            section += (digit if prev == "digit" else 1) * CN_UNITS[ch]
            digit, prev, last_unit, small = 0, "unit", CN_UNITS[ch], CN_UNITS[ch]
        elif CN_BIG[ch] == 10**4:
            if section + digit == 0 or wan:
                return None  # 万 alone, or 二万三万
            wan = (section + digit) * 10**4
            section, digit, prev, last_unit, small = 0, 0, "unit", 10**4, 10**5
        else:  # 亿 scales all that came before it
            if wan + section + digit == 0:
                return None
            yi = (yi + wan + section + digit) * 10**8
            wan, section, digit, prev, last_unit, small = 0, 0, 0, "unit", 10**8, 10**5
    if prev == "digit" and len(whole) >= 2 and whole[-2] in {**CN_UNITS, **CN_BIG} and last_unit >= 100:
        digit *= last_unit // 10  # 一千四百二: the last digit counts in the unit below the one before it
    value = Fraction(yi + wan + section + digit)
    if frac:
        value += Fraction(int("".join(str(CN_DIGITS[c]) for c in frac)), 10 ** len(frac))
    return -value if negative else value

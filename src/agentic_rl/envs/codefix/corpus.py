"""The codefix corpus: small Python modules written for this project, each with visible and hidden test cases.

A case is (expression, expected value). Visible cases become the workspace's pytest file (one test per case, ids
`test_<module>.py::test_NN`); hidden cases never enter the workspace: the grader evaluates them out of process and
compares the values itself. Expected values are plain data (ints, strings, lists, dicts, tuples, bools, None).
Train and eval tasks come from disjoint modules (see `tasks.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

Case = tuple[str, Any]


@dataclass(frozen=True, eq=False)  # compared and hashed by identity (cases hold dicts)
class Module:
    name: str  # file stem: the module is `<name>.py`, its tests `test_<name>.py`
    source: str
    visible: tuple[Case, ...]
    hidden: tuple[Case, ...]


def _m(name: str, source: str, visible: list[Case], hidden: list[Case]) -> Module:
    return Module(name, source.strip() + "\n", tuple(visible), tuple(hidden))


CORPUS: list[Module] = [
    # ---- strings --------------------------------------------------------------------------------------------------
    _m("slug", '''
def slugify(text):
    """Lower-case words joined by single hyphens; anything but letters and digits separates words."""
    words = []
    current = ""
    for ch in text:
        if ch.isalnum():
            current += ch.lower()
        elif current:
            words.append(current)
            current = ""
    if current:
        words.append(current)
    return "-".join(words)
''', [("slugify('Hello World')", "hello-world"), ("slugify('  a  b ')", "a-b"), ("slugify('Rust & Go!')", "rust-go"),
      ("slugify('')", ""), ("slugify('one')", "one"), ("slugify('A1 b2')", "a1-b2")],
       [("slugify('--x--y--')", "x-y"), ("slugify('MiXeD CaSe')", "mixed-case"), ("slugify('9 lives')", "9-lives")]),
    _m("caesar", '''
def shift_char(ch, k):
    """Rotate a letter by k places, keeping case; other characters are unchanged."""
    if "a" <= ch <= "z":
        return chr((ord(ch) - ord("a") + k) % 26 + ord("a"))
    if "A" <= ch <= "Z":
        return chr((ord(ch) - ord("A") + k) % 26 + ord("A"))
    return ch


def encode(text, k):
    return "".join(shift_char(c, k) for c in text)


def decode(text, k):
    return encode(text, -k)
''', [("encode('abc', 1)", "bcd"), ("encode('xyz', 3)", "abc"), ("encode('Hi!', 2)", "Jk!"), ("decode('bcd', 1)", "abc"),
      ("encode('', 5)", ""), ("decode(encode('Round Trip', 7), 7)", "Round Trip")],
       [("encode('Zz', 1)", "Aa"), ("encode('a b', 26)", "a b"), ("decode('a', 1)", "z")]),
    _m("palindrome", '''
def is_palindrome(text):
    """True if the letters and digits read the same backwards, ignoring case."""
    chars = [c.lower() for c in text if c.isalnum()]
    i, j = 0, len(chars) - 1
    while i < j:
        if chars[i] != chars[j]:
            return False
        i += 1
        j -= 1
    return True


def longest_palindrome_prefix(text):
    for end in range(len(text), 0, -1):
        if is_palindrome(text[:end]):
            return text[:end]
    return ""
''', [("is_palindrome('racecar')", True), ("is_palindrome('A man, a plan, a canal: Panama')", True),
      ("is_palindrome('abc')", False), ("is_palindrome('')", True), ("longest_palindrome_prefix('abacus')", "aba"),
      ("is_palindrome('ab')", False)],
       [("longest_palindrome_prefix('xyz')", "x"), ("is_palindrome('No lemon, no melon')", True),
        ("longest_palindrome_prefix('')", "")]),
    _m("wordcount", '''
def word_counts(text):
    """How often each lower-cased word occurs; words are runs of letters."""
    counts = {}
    word = ""
    for ch in text + " ":
        if ch.isalpha():
            word += ch.lower()
        else:
            if word:
                counts[word] = counts.get(word, 0) + 1
            word = ""
    return counts


def most_common(text):
    counts = word_counts(text)
    if not counts:
        return None
    best = max(counts.values())
    return sorted(w for w, c in counts.items() if c == best)[0]
''', [("word_counts('a b a')", {"a": 2, "b": 1}), ("word_counts('')", {}), ("word_counts('Hi, hi!')", {"hi": 2}),
      ("most_common('x y y z')", "y"), ("most_common('')", None), ("most_common('b a')", "a")],
       [("word_counts('one1two')", {"one": 1, "two": 1}), ("most_common('c c b b')", "b"),
        ("word_counts('The the THE')", {"the": 3})]),
    _m("casing", '''
def snake_to_camel(name):
    """'snake_case_name' -> 'snakeCaseName'."""
    parts = [p for p in name.split("_") if p]
    if not parts:
        return ""
    return parts[0].lower() + "".join(p[:1].upper() + p[1:].lower() for p in parts[1:])


def camel_to_snake(name):
    out = []
    for i, ch in enumerate(name):
        if ch.isupper() and i > 0:
            out.append("_")
        out.append(ch.lower())
    return "".join(out)
''', [("snake_to_camel('hello_world')", "helloWorld"), ("snake_to_camel('a')", "a"), ("snake_to_camel('__x__y')", "xY"),
      ("camel_to_snake('helloWorld')", "hello_world"), ("camel_to_snake('Already')", "already"), ("snake_to_camel('')", "")],
       [("camel_to_snake('aBC')", "a_b_c"), ("snake_to_camel('ONE_TWO')", "oneTwo"), ("camel_to_snake('')", "")]),
    _m("rle", '''
def rle_encode(text):
    """'aaab' -> 'a3b1'."""
    if not text:
        return ""
    out = []
    prev, count = text[0], 1
    for ch in text[1:]:
        if ch == prev:
            count += 1
        else:
            out.append(prev + str(count))
            prev, count = ch, 1
    out.append(prev + str(count))
    return "".join(out)


def rle_decode(code):
    out = []
    i = 0
    while i < len(code):
        ch = code[i]
        j = i + 1
        while j < len(code) and code[j].isdigit():
            j += 1
        out.append(ch * int(code[i + 1:j]))
        i = j
    return "".join(out)
''', [("rle_encode('aaab')", "a3b1"), ("rle_encode('')", ""), ("rle_encode('abc')", "a1b1c1"),
      ("rle_decode('a3b1')", "aaab"), ("rle_decode('x12')", "x" * 12), ("rle_decode(rle_encode('zzzzy'))", "zzzzy")],
       [("rle_encode('aabbaa')", "a2b2a2"), ("rle_decode('')", ""), ("rle_encode('q')", "q1")]),
    _m("vowels", '''
VOWELS = "aeiou"


def count_vowels(text):
    return sum(1 for c in text.lower() if c in VOWELS)


def strip_vowels(text):
    return "".join(c for c in text if c.lower() not in VOWELS)


def first_vowel_index(text):
    for i, c in enumerate(text):
        if c.lower() in VOWELS:
            return i
    return -1
''', [("count_vowels('hello')", 2), ("count_vowels('AEIOU')", 5), ("strip_vowels('banana')", "bnn"),
      ("first_vowel_index('rhythm')", -1), ("first_vowel_index('street')", 3), ("count_vowels('')", 0)],
       [("strip_vowels('AbE')", "b"), ("first_vowel_index('apple')", 0), ("count_vowels('xyz')", 0)]),
    _m("truncate", '''
def truncate(text, width, ellipsis="..."):
    """At most `width` characters; a cut text ends with the ellipsis."""
    if len(text) <= width:
        return text
    if width <= len(ellipsis):
        return ellipsis[:width]
    return text[: width - len(ellipsis)] + ellipsis


def wrap_words(text, width):
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = word if not line else line + " " + word
    if line:
        lines.append(line)
    return lines
''', [("truncate('hello', 10)", "hello"), ("truncate('hello world', 8)", "hello..."), ("truncate('abcdef', 2)", ".."),
      ("wrap_words('a bb ccc', 4)", ["a bb", "ccc"]), ("wrap_words('', 3)", []), ("truncate('abc', 3)", "abc")],
       [("wrap_words('one two three', 7)", ["one two", "three"]), ("truncate('abcdef', 5, '~')", "abcd~"),
        ("wrap_words('x', 1)", ["x"])]),
    _m("titlecase", '''
SMALL = {"a", "an", "the", "of", "and", "or", "in", "on"}


def title_case(text):
    """Capitalise words, except small words that are not first or last."""
    words = text.lower().split()
    out = []
    for i, w in enumerate(words):
        if 0 < i < len(words) - 1 and w in SMALL:
            out.append(w)
        else:
            out.append(w[:1].upper() + w[1:])
    return " ".join(out)
''', [("title_case('the lord of the rings')", "The Lord of the Rings"), ("title_case('')", ""),
      ("title_case('a tale')", "A Tale"), ("title_case('war and peace')", "War and Peace"),
      ("title_case('HELLO')", "Hello"), ("title_case('in the end')", "In the End")],
       [("title_case('of')", "Of"), ("title_case('x of y')", "X of Y"), ("title_case('go on')", "Go On")]),
    _m("anagram", '''
def normalise(word):
    return sorted(c for c in word.lower() if c.isalpha())


def is_anagram(a, b):
    return normalise(a) == normalise(b)


def group_anagrams(words):
    groups = {}
    for w in words:
        groups.setdefault("".join(normalise(w)), []).append(w)
    return sorted(sorted(g) for g in groups.values())
''', [("is_anagram('listen', 'silent')", True), ("is_anagram('abc', 'abd')", False),
      ("is_anagram('Dormitory', 'dirty room')", True), ("group_anagrams(['ab', 'ba', 'c'])", [["ab", "ba"], ["c"]]),
      ("group_anagrams([])", []), ("is_anagram('', '')", True)],
       [("is_anagram('a', 'aa')", False), ("group_anagrams(['x', 'y', 'x'])", [["x", "x"], ["y"]]),
        ("is_anagram('Tea', 'EAT')", True)]),
    # ---- lists ----------------------------------------------------------------------------------------------------
    _m("chunks", '''
def chunk(items, size):
    """Split into lists of `size` items; the last may be shorter."""
    if size < 1:
        raise ValueError("size must be at least 1")
    return [items[i:i + size] for i in range(0, len(items), size)]


def pad_last(chunks, size, fill=None):
    if chunks and len(chunks[-1]) < size:
        chunks[-1] = chunks[-1] + [fill] * (size - len(chunks[-1]))
    return chunks
''', [("chunk([1, 2, 3, 4, 5], 2)", [[1, 2], [3, 4], [5]]), ("chunk([], 3)", []), ("chunk([1, 2], 5)", [[1, 2]]),
      ("pad_last([[1, 2], [3]], 2, 0)", [[1, 2], [3, 0]]), ("chunk([1, 2, 3], 1)", [[1], [2], [3]]),
      ("pad_last([], 2)", [])],
       [("chunk(list(range(6)), 3)", [[0, 1, 2], [3, 4, 5]]), ("pad_last([[1]], 3)", [[1, None, None]]),
        ("chunk([1, 2, 3, 4], 3)", [[1, 2, 3], [4]])]),
    _m("flatten", '''
def flatten(nested):
    """Flatten lists and tuples of any depth, keeping order."""
    out = []
    for item in nested:
        if isinstance(item, (list, tuple)):
            out.extend(flatten(item))
        else:
            out.append(item)
    return out


def depth(nested):
    if not isinstance(nested, (list, tuple)):
        return 0
    return 1 + max((depth(x) for x in nested), default=0)
''', [("flatten([1, [2, [3, 4]], 5])", [1, 2, 3, 4, 5]), ("flatten([])", []), ("flatten([[[]]])", []),
      ("depth([1, [2, [3]]])", 3), ("depth(5)", 0), ("depth([])", 1)],
       [("flatten([(1, 2), [3]])", [1, 2, 3]), ("depth([[], [[]]])", 3), ("flatten(['ab', ['c']])", ["ab", "c"])]),
    _m("dedupe", '''
def dedupe(items):
    """Remove repeats, keeping the first occurrence of each item."""
    seen = set()
    out = []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


def duplicates(items):
    counts = {}
    for x in items:
        counts[x] = counts.get(x, 0) + 1
    return [x for x in dedupe(items) if counts[x] > 1]
''', [("dedupe([3, 1, 3, 2, 1])", [3, 1, 2]), ("dedupe([])", []), ("duplicates([1, 2, 1, 3, 2])", [1, 2]),
      ("duplicates([1, 2, 3])", []), ("dedupe('abca')", ["a", "b", "c"]), ("duplicates([5, 5, 5])", [5])],
       [("dedupe([2, 2, 2])", [2]), ("duplicates(['x', 'y', 'y'])", ["y"]), ("dedupe([1, 2, 3])", [1, 2, 3])]),
    _m("rotate", '''
def rotate_left(items, k):
    """Rotate a list left by k places (k may exceed the length or be negative)."""
    if not items:
        return []
    k = k % len(items)
    return items[k:] + items[:k]


def rotate_right(items, k):
    return rotate_left(items, -k)
''', [("rotate_left([1, 2, 3, 4], 1)", [2, 3, 4, 1]), ("rotate_left([1, 2, 3], 3)", [1, 2, 3]),
      ("rotate_right([1, 2, 3], 1)", [3, 1, 2]), ("rotate_left([], 2)", []), ("rotate_left([1, 2, 3], 5)", [3, 1, 2]),
      ("rotate_right([1, 2], 0)", [1, 2])],
       [("rotate_left([1, 2, 3], -1)", [3, 1, 2]), ("rotate_right([1, 2, 3, 4], 6)", [3, 4, 1, 2]),
        ("rotate_left(['a'], 9)", ["a"])]),
    _m("moving", '''
def moving_average(values, window):
    """Averages of each full window, left to right."""
    if window < 1:
        raise ValueError("window must be at least 1")
    out = []
    total = 0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        if i >= window - 1:
            out.append(total / window)
    return out
''', [("moving_average([1, 2, 3, 4], 2)", [1.5, 2.5, 3.5]), ("moving_average([5], 1)", [5.0]),
      ("moving_average([1, 2], 3)", []), ("moving_average([2, 4, 6], 3)", [4.0]),
      ("moving_average([1, 1, 1, 1], 1)", [1.0, 1.0, 1.0, 1.0]), ("moving_average([], 2)", [])],
       [("moving_average([0, 10, 20, 30], 2)", [5.0, 15.0, 25.0]), ("moving_average([3, 3, 9], 3)", [5.0]),
        ("moving_average([4, 8], 2)", [6.0])]),
    _m("ranking", '''
def second_largest(values):
    """The second largest distinct value, or None."""
    first = second = None
    for v in values:
        if first is None or v > first:
            if first is not None:
                second = first
            first = v
        elif v != first and (second is None or v > second):
            second = v
    return second


def top_n(values, n):
    return sorted(values, reverse=True)[:n]
''', [("second_largest([3, 1, 4, 1, 5])", 4), ("second_largest([2, 2])", None), ("second_largest([])", None),
      ("top_n([3, 1, 2], 2)", [3, 2]), ("second_largest([1, 2])", 1), ("top_n([], 3)", [])],
       [("second_largest([5, 5, 4])", 4), ("top_n([1, 9, 9], 1)", [9]), ("second_largest([-1, -2])", -2)]),
    _m("merge", '''
def merge_sorted(a, b):
    """Merge two sorted lists into one sorted list."""
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i])
            i += 1
        else:
            out.append(b[j])
            j += 1
    out.extend(a[i:])
    out.extend(b[j:])
    return out
''', [("merge_sorted([1, 3, 5], [2, 4])", [1, 2, 3, 4, 5]), ("merge_sorted([], [1])", [1]),
      ("merge_sorted([1], [])", [1]), ("merge_sorted([1, 1], [1])", [1, 1, 1]), ("merge_sorted([], [])", []),
      ("merge_sorted([4, 5], [1, 2])", [1, 2, 4, 5])],
       [("merge_sorted([0, 10], [5])", [0, 5, 10]), ("merge_sorted([2], [1, 3])", [1, 2, 3]),
        ("merge_sorted([-3, 0], [-1])", [-3, -1, 0])]),
    _m("prefix", '''
def running_sum(values):
    out, total = [], 0
    for v in values:
        total += v
        out.append(total)
    return out


def range_sum(values, start, stop):
    """Sum of values[start:stop] from the prefix sums."""
    sums = [0] + running_sum(values)
    return sums[stop] - sums[start]
''', [("running_sum([1, 2, 3])", [1, 3, 6]), ("running_sum([])", []), ("range_sum([1, 2, 3, 4], 1, 3)", 5),
      ("range_sum([5, 5], 0, 2)", 10), ("running_sum([-1, 1])", [-1, 0]), ("range_sum([1, 2, 3], 1, 1)", 0)],
       [("range_sum([4, 3, 2, 1], 2, 4)", 3), ("running_sum([0, 0, 5])", [0, 0, 5]), ("range_sum([9], 0, 1)", 9)]),
    _m("diffs", '''
def pairwise_diffs(values):
    """Differences between neighbours: b - a for each adjacent pair."""
    return [values[i + 1] - values[i] for i in range(len(values) - 1)]


def is_increasing(values, strict=True):
    for d in pairwise_diffs(values):
        if d < 0 or (strict and d == 0):
            return False
    return True
''', [("pairwise_diffs([1, 4, 9])", [3, 5]), ("pairwise_diffs([7])", []), ("is_increasing([1, 2, 3])", True),
      ("is_increasing([1, 1, 2])", False), ("is_increasing([1, 1, 2], strict=False)", True),
      ("is_increasing([3, 2])", False)],
       [("pairwise_diffs([5, 3, 1])", [-2, -2]), ("is_increasing([])", True), ("is_increasing([2, 2], False)", True)]),
    _m("bsearch", '''
def binary_search(items, target):
    """Index of target in a sorted list, or -1."""
    lo, hi = 0, len(items) - 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if items[mid] == target:
            return mid
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid - 1
    return -1


def insertion_point(items, target):
    lo, hi = 0, len(items)
    while lo < hi:
        mid = (lo + hi) // 2
        if items[mid] < target:
            lo = mid + 1
        else:
            hi = mid
    return lo
''', [("binary_search([1, 3, 5, 7], 5)", 2), ("binary_search([1, 3, 5, 7], 4)", -1), ("binary_search([], 1)", -1),
      ("insertion_point([1, 3, 5], 4)", 2), ("insertion_point([1, 3, 5], 0)", 0), ("binary_search([2], 2)", 0)],
       [("binary_search([1, 2, 3, 4, 5, 6], 6)", 5), ("insertion_point([1, 1, 1], 1)", 0),
        ("insertion_point([], 3)", 0)]),
    # ---- numbers --------------------------------------------------------------------------------------------------
    _m("fizzbuzz", '''
def fizzbuzz(n):
    if n % 15 == 0:
        return "FizzBuzz"
    if n % 3 == 0:
        return "Fizz"
    if n % 5 == 0:
        return "Buzz"
    return str(n)


def fizzbuzz_range(start, stop):
    return [fizzbuzz(i) for i in range(start, stop + 1)]
''', [("fizzbuzz(3)", "Fizz"), ("fizzbuzz(10)", "Buzz"), ("fizzbuzz(30)", "FizzBuzz"), ("fizzbuzz(7)", "7"),
      ("fizzbuzz_range(1, 5)", ["1", "2", "Fizz", "4", "Buzz"]), ("fizzbuzz_range(5, 4)", [])],
       [("fizzbuzz(45)", "FizzBuzz"), ("fizzbuzz_range(14, 15)", ["14", "FizzBuzz"]), ("fizzbuzz(1)", "1")]),
    _m("primes", '''
def is_prime(n):
    if n < 2:
        return False
    d = 2
    while d * d <= n:
        if n % d == 0:
            return False
        d += 1
    return True


def primes_below(n):
    return [k for k in range(2, n) if is_prime(k)]


def prime_factors(n):
    out, d = [], 2
    while n > 1:
        while n % d == 0:
            out.append(d)
            n //= d
        d += 1
    return out
''', [("is_prime(7)", True), ("is_prime(1)", False), ("is_prime(9)", False), ("primes_below(10)", [2, 3, 5, 7]),
      ("prime_factors(12)", [2, 2, 3]), ("prime_factors(1)", [])],
       [("is_prime(97)", True), ("primes_below(2)", []), ("prime_factors(49)", [7, 7])]),
    _m("gcdlcm", '''
def gcd(a, b):
    a, b = abs(a), abs(b)
    while b:
        a, b = b, a % b
    return a


def lcm(a, b):
    if a == 0 or b == 0:
        return 0
    return abs(a * b) // gcd(a, b)


def reduce_fraction(num, den):
    g = gcd(num, den)
    if den < 0:
        g = -g
    return (num // g, den // g)
''', [("gcd(12, 18)", 6), ("gcd(7, 0)", 7), ("lcm(4, 6)", 12), ("lcm(0, 5)", 0), ("reduce_fraction(6, 8)", (3, 4)),
      ("reduce_fraction(3, -9)", (-1, 3))],
       [("gcd(-8, 12)", 4), ("lcm(7, 3)", 21), ("reduce_fraction(-10, -4)", (5, 2))]),
    _m("digits", '''
def digit_sum(n):
    n = abs(n)
    total = 0
    while n > 0:
        total += n % 10
        n //= 10
    return total


def digital_root(n):
    while n >= 10:
        n = digit_sum(n)
    return n


def reverse_number(n):
    sign = -1 if n < 0 else 1
    return sign * int(str(abs(n))[::-1])
''', [("digit_sum(123)", 6), ("digit_sum(0)", 0), ("digit_sum(-45)", 9), ("digital_root(9875)", 2),
      ("reverse_number(120)", 21), ("reverse_number(-34)", -43)],
       [("digital_root(5)", 5), ("digit_sum(1000)", 1), ("reverse_number(7)", 7)]),
    _m("roman", '''
NUMERALS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
            (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


def to_roman(n):
    if not 0 < n < 4000:
        raise ValueError("out of range")
    out = ""
    for value, letters in NUMERALS:
        while n >= value:
            out += letters
            n -= value
    return out


def from_roman(text):
    values = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}
    total = 0
    for i, ch in enumerate(text):
        v = values[ch]
        if i + 1 < len(text) and values[text[i + 1]] > v:
            total -= v
        else:
            total += v
    return total
''', [("to_roman(4)", "IV"), ("to_roman(1994)", "MCMXCIV"), ("to_roman(3)", "III"), ("from_roman('XLII')", 42),
      ("from_roman('MMXXIV')", 2024), ("from_roman(to_roman(944))", 944)],
       [("to_roman(3999)", "MMMCMXCIX"), ("from_roman('IX')", 9), ("to_roman(58)", "LVIII")]),
    _m("clamp", '''
def clamp(x, lo, hi):
    if lo > hi:
        raise ValueError("lo must not exceed hi")
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def rescale(x, old_lo, old_hi, new_lo, new_hi):
    t = (clamp(x, old_lo, old_hi) - old_lo) / (old_hi - old_lo)
    return new_lo + t * (new_hi - new_lo)
''', [("clamp(5, 0, 10)", 5), ("clamp(-1, 0, 10)", 0), ("clamp(11, 0, 10)", 10), ("rescale(5, 0, 10, 0, 100)", 50.0),
      ("rescale(20, 0, 10, 0, 1)", 1.0), ("clamp(3, 3, 3)", 3)],
       [("rescale(0, 0, 4, 10, 20)", 10.0), ("clamp(2.5, 1, 2)", 2), ("rescale(1, 0, 4, 0, 8)", 2.0)]),
    _m("fib", '''
def fib(n):
    """The n-th Fibonacci number, fib(0) = 0, fib(1) = 1."""
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    return a


def fib_upto(limit):
    out = []
    a, b = 0, 1
    while a <= limit:
        out.append(a)
        a, b = b, a + b
    return out
''', [("fib(0)", 0), ("fib(1)", 1), ("fib(10)", 55), ("fib_upto(10)", [0, 1, 1, 2, 3, 5, 8]), ("fib_upto(0)", [0]),
      ("fib(2)", 1)],
       [("fib(20)", 6765), ("fib_upto(1)", [0, 1, 1]), ("fib(5)", 5)]),
    _m("combin", '''
def factorial(n):
    if n < 0:
        raise ValueError("negative")
    out = 1
    for k in range(2, n + 1):
        out *= k
    return out


def choose(n, k):
    if k < 0 or k > n:
        return 0
    k = min(k, n - k)
    out = 1
    for i in range(1, k + 1):
        out = out * (n - k + i) // i
    return out
''', [("factorial(0)", 1), ("factorial(5)", 120), ("choose(5, 2)", 10), ("choose(4, 0)", 1), ("choose(3, 5)", 0),
      ("choose(10, 9)", 10)],
       [("factorial(1)", 1), ("choose(20, 10)", 184756), ("choose(6, 3)", 20)]),
    _m("bases", '''
DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"


def to_base(n, base):
    if not 2 <= base <= 36:
        raise ValueError("base must be in 2..36")
    if n == 0:
        return "0"
    sign = "-" if n < 0 else ""
    n = abs(n)
    out = ""
    while n:
        out = DIGITS[n % base] + out
        n //= base
    return sign + out


def from_base(text, base):
    return int(text, base)
''', [("to_base(10, 2)", "1010"), ("to_base(255, 16)", "ff"), ("to_base(0, 7)", "0"), ("to_base(-5, 2)", "-101"),
      ("from_base('ff', 16)", 255), ("to_base(35, 36)", "z")],
       [("to_base(8, 8)", "10"), ("to_base(100, 10)", "100"), ("from_base(to_base(12345, 3), 3)", 12345)]),
    _m("collatz", '''
def collatz_steps(n):
    """Steps for n to reach 1 under n -> n/2 (even) or 3n+1 (odd)."""
    if n < 1:
        raise ValueError("n must be positive")
    steps = 0
    while n != 1:
        n = n // 2 if n % 2 == 0 else 3 * n + 1
        steps += 1
    return steps


def longest_below(limit):
    best, best_n = -1, None
    for n in range(1, limit):
        s = collatz_steps(n)
        if s > best:
            best, best_n = s, n
    return best_n
''', [("collatz_steps(1)", 0), ("collatz_steps(6)", 8), ("collatz_steps(7)", 16), ("longest_below(10)", 9),
      ("collatz_steps(2)", 1), ("longest_below(2)", 1)],
       [("collatz_steps(27)", 111), ("longest_below(30)", 27), ("collatz_steps(16)", 4)]),
    # ---- dates and times ------------------------------------------------------------------------------------------
    _m("calendar_days", '''
def is_leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year, month):
    if month == 2:
        return 29 if is_leap(year) else 28
    if month in (4, 6, 9, 11):
        return 30
    return 31


def day_of_year(year, month, day):
    return sum(days_in_month(year, m) for m in range(1, month)) + day
''', [("is_leap(2000)", True), ("is_leap(1900)", False), ("is_leap(2024)", True), ("days_in_month(2023, 2)", 28),
      ("days_in_month(2024, 4)", 30), ("day_of_year(2024, 3, 1)", 61)],
       [("day_of_year(2023, 12, 31)", 365), ("days_in_month(2000, 2)", 29), ("day_of_year(2023, 1, 5)", 5)]),
    _m("durations", '''
UNITS = {"h": 3600, "m": 60, "s": 1}


def parse_duration(text):
    """'1h30m' -> 5400 seconds."""
    total, number = 0, ""
    for ch in text.strip():
        if ch.isdigit():
            number += ch
        elif ch in UNITS and number:
            total += int(number) * UNITS[ch]
            number = ""
        else:
            raise ValueError("bad duration: " + text)
    if number:
        raise ValueError("missing unit: " + text)
    return total


def format_duration(seconds):
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    parts = [f"{v}{u}" for v, u in ((h, "h"), (m, "m"), (s, "s")) if v]
    return "".join(parts) or "0s"
''', [("parse_duration('1h30m')", 5400), ("parse_duration('45s')", 45), ("parse_duration('2m5s')", 125),
      ("format_duration(3661)", "1h1m1s"), ("format_duration(0)", "0s"), ("format_duration(120)", "2m")],
       [("parse_duration('10h')", 36000), ("format_duration(parse_duration('3h4s'))", "3h4s"),
        ("format_duration(59)", "59s")]),
    _m("clock", '''
def add_minutes(hhmm, minutes):
    """'23:50' + 15 -> '00:05' (a 24-hour clock)."""
    h, m = (int(x) for x in hhmm.split(":"))
    total = (h * 60 + m + minutes) % (24 * 60)
    return f"{total // 60:02d}:{total % 60:02d}"


def minutes_between(a, b):
    ha, ma = (int(x) for x in a.split(":"))
    hb, mb = (int(x) for x in b.split(":"))
    return (hb * 60 + mb - ha * 60 - ma) % (24 * 60)
''', [("add_minutes('23:50', 15)", "00:05"), ("add_minutes('10:00', 0)", "10:00"), ("add_minutes('00:00', -1)", "23:59"),
      ("minutes_between('10:00', '11:30')", 90), ("minutes_between('23:00', '01:00')", 120),
      ("add_minutes('12:34', 60)", "13:34")],
       [("minutes_between('05:05', '05:05')", 0), ("add_minutes('01:59', 1)", "02:00"),
        ("minutes_between('00:01', '00:00')", 1439)]),
    # ---- parsing --------------------------------------------------------------------------------------------------
    _m("kvparse", '''
def parse_kv(text, sep=";", eq="="):
    """'a=1;b=2' -> {'a': '1', 'b': '2'}; blank pairs are skipped, keys stripped."""
    out = {}
    for pair in text.split(sep):
        if not pair.strip():
            continue
        if eq not in pair:
            raise ValueError("no '=' in " + repr(pair))
        key, value = pair.split(eq, 1)
        out[key.strip()] = value.strip()
    return out


def format_kv(mapping, sep=";", eq="="):
    return sep.join(f"{k}{eq}{v}" for k, v in sorted(mapping.items()))
''', [("parse_kv('a=1;b=2')", {"a": "1", "b": "2"}), ("parse_kv('')", {}), ("parse_kv(' x = y ;')", {"x": "y"}),
      ("parse_kv('k=a=b')", {"k": "a=b"}), ("format_kv({'b': 2, 'a': 1})", "a=1;b=2"),
      ("parse_kv('p:1,q:2', sep=',', eq=':')", {"p": "1", "q": "2"})],
       [("format_kv({})", ""), ("parse_kv(format_kv({'z': 'w'}))", {"z": "w"}), ("parse_kv(';;a=;')", {"a": ""})]),
    _m("csvrow", '''
def split_row(line, delim=","):
    """Split one CSV line; double quotes protect delimiters, and "" inside quotes is a quote."""
    fields, field, quoted, i = [], "", False, 0
    while i < len(line):
        ch = line[i]
        if quoted:
            if ch == '"' and i + 1 < len(line) and line[i + 1] == '"':
                field += '"'
                i += 1
            elif ch == '"':
                quoted = False
            else:
                field += ch
        elif ch == '"':
            quoted = True
        elif ch == delim:
            fields.append(field)
            field = ""
        else:
            field += ch
        i += 1
    fields.append(field)
    return fields
''', [("split_row('a,b,c')", ["a", "b", "c"]), ("split_row('')", [""]), ('split_row(\'"x,y",z\')', ["x,y", "z"]),
      ("split_row('a;b', delim=';')", ["a", "b"]), ("split_row('1,,3')", ["1", "", "3"]),
      ('split_row(\'"say ""hi"""\')', ['say "hi"'])],
       [("split_row(',')", ["", ""]), ('split_row(\'""\')', [""]), ('split_row(\'a,"b"\')', ["a", "b"])]),
    _m("versions", '''
def parse_version(text):
    """'1.10.2' -> (1, 10, 2); missing parts count as 0 when comparing."""
    return tuple(int(p) for p in text.strip().split("."))


def compare_versions(a, b):
    """-1, 0 or 1 as a < b, a == b, a > b."""
    pa, pb = parse_version(a), parse_version(b)
    n = max(len(pa), len(pb))
    pa, pb = pa + (0,) * (n - len(pa)), pb + (0,) * (n - len(pb))
    if pa < pb:
        return -1
    if pa > pb:
        return 1
    return 0
''', [("parse_version('1.10.2')", (1, 10, 2)), ("compare_versions('1.2', '1.10')", -1),
      ("compare_versions('2.0', '2')", 0), ("compare_versions('3.1', '3.0.9')", 1), ("parse_version('7')", (7,)),
      ("compare_versions('0.1', '0.1.0.0')", 0)],
       [("compare_versions('1.0.1', '1')", 1), ("compare_versions('9', '10')", -1), ("parse_version(' 2.3 ')", (2, 3))]),
    _m("brackets", '''
PAIRS = {")": "(", "]": "[", "}": "{"}


def is_balanced(text):
    stack = []
    for ch in text:
        if ch in "([{":
            stack.append(ch)
        elif ch in PAIRS:
            if not stack or stack.pop() != PAIRS[ch]:
                return False
    return not stack


def max_depth(text):
    depth = best = 0
    for ch in text:
        if ch in "([{":
            depth += 1
            best = max(best, depth)
        elif ch in PAIRS:
            depth -= 1
    return best
''', [("is_balanced('([]{})')", True), ("is_balanced('(]')", False), ("is_balanced('((')", False),
      ("is_balanced('')", True), ("max_depth('(a[b]{c})')", 2), ("max_depth('x')", 0)],
       [("is_balanced('}{')", False), ("max_depth('((()))')", 3), ("is_balanced('a(b)c')", True)]),
    _m("rpn", '''
def eval_rpn(tokens):
    """Evaluate reverse Polish notation with + - * and integer division //."""
    stack = []
    for tok in tokens:
        if tok in ("+", "-", "*", "//"):
            b = stack.pop()
            a = stack.pop()
            if tok == "+":
                stack.append(a + b)
            elif tok == "-":
                stack.append(a - b)
            elif tok == "*":
                stack.append(a * b)
            else:
                stack.append(a // b)
        else:
            stack.append(int(tok))
    if len(stack) != 1:
        raise ValueError("malformed expression")
    return stack[0]
''', [("eval_rpn(['2', '3', '+'])", 5), ("eval_rpn(['5', '1', '2', '+', '4', '*', '+', '3', '-'])", 14),
      ("eval_rpn(['7'])", 7), ("eval_rpn(['10', '3', '//'])", 3), ("eval_rpn(['2', '5', '-'])", -3),
      ("eval_rpn(['4', '6', '*'])", 24)],
       [("eval_rpn(['9', '2', '//', '3', '*'])", 12), ("eval_rpn(['1', '2', '3', '+', '-'])", -4),
        ("eval_rpn(['0', '8', '-'])", -8)]),
    # ---- small data structures ------------------------------------------------------------------------------------
    _m("stackqueue", '''
class Stack:
    def __init__(self):
        self.items = []

    def push(self, x):
        self.items.append(x)

    def pop(self):
        if not self.items:
            raise IndexError("pop from empty stack")
        return self.items.pop()

    def peek(self):
        return self.items[-1] if self.items else None

    def __len__(self):
        return len(self.items)


def reverse_with_stack(items):
    s = Stack()
    for x in items:
        s.push(x)
    return [s.pop() for _ in range(len(s))]
''', [("reverse_with_stack([1, 2, 3])", [3, 2, 1]), ("reverse_with_stack([])", []), ("len(Stack())", 0),
      ("Stack().peek()", None), ("(lambda s: (s.push(4), s.push(5), s.peek())[2])(Stack())", 5),
      ("(lambda s: (s.push(1), s.pop(), len(s))[2])(Stack())", 0)],
       [("reverse_with_stack('ab')", ["b", "a"]), ("(lambda s: (s.push(1), s.push(2), s.pop())[2])(Stack())", 2),
        ("(lambda s: (s.push(1), len(s))[1])(Stack())", 1)]),
    _m("matrix", '''
def transpose(m):
    if not m:
        return []
    return [[row[j] for row in m] for j in range(len(m[0]))]


def mat_add(a, b):
    return [[x + y for x, y in zip(ra, rb)] for ra, rb in zip(a, b)]


def mat_mul(a, b):
    bt = transpose(b)
    return [[sum(x * y for x, y in zip(row, col)) for col in bt] for row in a]
''', [("transpose([[1, 2, 3], [4, 5, 6]])", [[1, 4], [2, 5], [3, 6]]), ("transpose([])", []),
      ("mat_add([[1, 2]], [[3, 4]])", [[4, 6]]), ("mat_mul([[1, 2], [3, 4]], [[5, 6], [7, 8]])", [[19, 22], [43, 50]]),
      ("mat_mul([[2]], [[3]])", [[6]]), ("transpose([[1]])", [[1]])],
       [("mat_mul([[1, 0], [0, 1]], [[4, 5], [6, 7]])", [[4, 5], [6, 7]]), ("mat_add([], [])", []),
        ("transpose([[1, 2]])", [[1], [2]])]),
    _m("histogram", '''
def histogram(values, bins, lo, hi):
    """Counts of values in `bins` equal-width bins over [lo, hi]; hi falls in the last bin, outside values are dropped."""
    counts = [0] * bins
    width = (hi - lo) / bins
    for v in values:
        if v < lo or v > hi:
            continue
        i = int((v - lo) / width)
        counts[min(i, bins - 1)] += 1
    return counts
''', [("histogram([1, 2, 3, 4], 2, 0, 4)", [1, 3]), ("histogram([], 3, 0, 1)", [0, 0, 0]),
      ("histogram([0, 10], 5, 0, 10)", [1, 0, 0, 0, 1]), ("histogram([-1, 11], 2, 0, 10)", [0, 0]),
      ("histogram([5], 1, 0, 10)", [1]), ("histogram([2.5, 7.5], 2, 0, 10)", [1, 1])],
       [("histogram([0, 1, 2, 3], 4, 0, 4)", [1, 1, 1, 1]), ("histogram([9.99], 10, 0, 10)", [0] * 9 + [1]),
        ("histogram([3, 3, 3], 3, 0, 9)", [0, 3, 0])]),
    _m("intervals", '''
def merge_intervals(intervals):
    """Merge overlapping or touching [start, end] intervals."""
    out = []
    for start, end in sorted(intervals):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], end)
        else:
            out.append([start, end])
    return out


def total_length(intervals):
    return sum(end - start for start, end in merge_intervals(intervals))
''', [("merge_intervals([[1, 3], [2, 6], [8, 10]])", [[1, 6], [8, 10]]), ("merge_intervals([])", []),
      ("merge_intervals([[1, 2], [2, 3]])", [[1, 3]]), ("merge_intervals([[5, 6], [1, 2]])", [[1, 2], [5, 6]]),
      ("total_length([[0, 2], [1, 5]])", 5), ("total_length([])", 0)],
       [("merge_intervals([[1, 10], [2, 3]])", [[1, 10]]), ("total_length([[0, 1], [3, 4]])", 2),
        ("merge_intervals([[0, 0]])", [[0, 0]])]),
    _m("topk", '''
def top_k_frequent(items, k):
    """The k most frequent items, most frequent first; ties broken by first appearance."""
    counts, first = {}, {}
    for i, x in enumerate(items):
        counts[x] = counts.get(x, 0) + 1
        first.setdefault(x, i)
    order = sorted(counts, key=lambda x: (-counts[x], first[x]))
    return order[:k]
''', [("top_k_frequent(['a', 'b', 'a', 'c', 'b', 'a'], 2)", ["a", "b"]), ("top_k_frequent([], 3)", []),
      ("top_k_frequent([1, 2, 3], 2)", [1, 2]), ("top_k_frequent([3, 3, 1, 1, 2], 1)", [3]),
      ("top_k_frequent(['x'], 5)", ["x"]), ("top_k_frequent([2, 1, 1], 2)", [1, 2])],
       [("top_k_frequent([5, 4, 4, 5, 6], 3)", [5, 4, 6]), ("top_k_frequent('mississippi', 2)", ["i", "s"]),
        ("top_k_frequent([0, 0, 0], 0)", [])]),
]

BY_NAME: dict[str, Module] = {m.name: m for m in CORPUS}


def visible_test_file(module: Module) -> str:
    """The pytest file the agent sees: one test per visible case, ids test_01 … test_NN."""
    lines = [f"from {module.name} import *  # noqa: F403", ""]
    for i, (expr, expected) in enumerate(module.visible, 1):
        lines += ["", f"def test_{i:02d}():", f"    assert {expr} == {expected!r}", ""]
    return "\n".join(lines).rstrip() + "\n"


def visible_test_ids(module: Module) -> list[str]:
    return [f"test_{module.name}.py::test_{i:02d}" for i in range(1, len(module.visible) + 1)]

"""The sql env's databases and the guarded way to query them.

A database is generated from a seed: customers, products and their orders, with realistic names, cities and prices.
The agent's queries run through `run_query`: a read-only connection (`mode=ro` URI and `PRAGMA query_only`), one
statement that must be a SELECT (or WITH / VALUES), an authorizer that allows only reading and an allow-list of
functions (no ATTACH, PRAGMA, writes, `load_extension` or `printf`), SQLite's own limits on the size of any value, of the query and of a LIKE pattern, a
CPU-time limit checked every PROGRESS_STEPS virtual-machine steps (a wall-clock backstop at WALL_FACTOR times it),
and caps on the rows and bytes read back. Every check on the agent's text is a linear scan: no regular expression
that can backtrack. The agent's queries run this in a worker process (`worker.py`), which stops what these cannot.
"""

from __future__ import annotations

import hashlib
import random
import sqlite3
import time
from pathlib import Path

FIRST = ["Alice", "Bruno", "Chen", "Dana", "Emil", "Fatima", "Goran", "Hana", "Ivan", "Jia", "Kofi", "Lena", "Mateo",
         "Nora", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tara", "Umar", "Vera", "Wei", "Yara", "Zane"]
LAST = ["Smith", "Garcia", "Wang", "Müller", "Okafor", "Rossi", "Kim", "Silva", "Novak", "Haddad", "Ito", "Berg"]
CITIES = ["Lisbon", "Osaka", "Nairobi", "Toronto", "Krakow", "Lyon", "Austin", "Pune", "Quito", "Perth"]
PRODUCTS = {"books": ["Atlas", "Cookbook", "Novel", "Dictionary", "Comic"], "garden": ["Rake", "Hose", "Shovel", "Seeds"],
            "kitchen": ["Kettle", "Pan", "Knife", "Blender", "Toaster"], "toys": ["Kite", "Puzzle", "Robot", "Yo-yo"],
            "office": ["Stapler", "Lamp", "Chair", "Notebook", "Pen"]}
SCHEMA = """
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, signup_year INTEGER NOT NULL);
CREATE TABLE products (id INTEGER PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, price REAL NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, customer_id INTEGER NOT NULL REFERENCES customers(id),
                     product_id INTEGER NOT NULL REFERENCES products(id), quantity INTEGER NOT NULL,
                     order_date TEXT NOT NULL);
"""
READ_ONLY_ACTIONS = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION, sqlite3.SQLITE_RECURSIVE}
# The functions a query may call: SQL's aggregates, window functions and the scalar functions whose cost grows with
# their input (which SQLITE_LIMIT_LENGTH bounds). Everything else is refused: extensions and file access, and
# functions whose cost a small argument sets (printf('%.*c', 1e9, 'x') runs for seconds inside one VM step).
ALLOWED_FUNCTIONS = frozenset(["count", "sum", "total", "avg", "min", "max", "group_concat", "string_agg", "row_number", "rank", "dense_rank", "ntile", "percent_rank", "cume_dist", "lag", "lead", "first_value", "last_value", "nth_value", "abs", "round", "sign", "ceil", "ceiling", "floor", "trunc", "sqrt", "pow", "power", "exp", "ln", "log", "log2", "log10", "mod", "pi", "length", "octet_length", "lower", "upper", "trim", "ltrim", "rtrim", "substr", "substring", "replace", "instr", "like", "glob", "coalesce", "ifnull", "nullif", "iif", "typeof", "quote", "hex", "unicode", "char", "concat", "concat_ws", "date", "time", "datetime", "julianday", "unixepoch", "strftime"])
QUERY_KEYWORDS = ("select", "with", "values")
MAX_QUERY_CHARS = 4000  # SQLITE_LIMIT_SQL_LENGTH: a query longer than this is refused by SQLite itself
MAX_VALUE_BYTES = 100_000  # SQLITE_LIMIT_LENGTH: no string or blob a query makes may be larger (zeroblob, printf)
MAX_COLUMNS = 64  # SQLITE_LIMIT_COLUMN: columns of a result, terms of a GROUP BY / ORDER BY
MAX_PATTERN_CHARS = 200  # SQLITE_LIMIT_LIKE_PATTERN_LENGTH
PROGRESS_STEPS = 100  # how often (in virtual-machine steps) the time limit is checked
WALL_FACTOR = 4.0  # the wall-clock backstop, for a query on a machine so busy it gets little CPU


def build(conn: sqlite3.Connection, seed: int) -> None:
    """Fill an empty database with the tables and rows of `seed`."""
    rng = random.Random(seed)
    customers = _customers(rng)
    products = _products(rng)
    products = [(i, n, c, round(rng.uniform(2, 120), 2)) for i, (n, c) in enumerate(products, 1)]
    orders = [(i, rng.randint(1, len(customers)), rng.randint(1, len(products)), rng.randint(1, 5),
               f"{rng.randint(2021, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
              for i in range(1, rng.randint(120, 220))]
    conn.executescript(SCHEMA)
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?, ?)", customers)
    conn.executemany("INSERT INTO products VALUES (?, ?, ?, ?)", products)
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)", orders)
    conn.commit()


def product_names(seed: int) -> list[str]:
    """The product names of database `seed`, in id order, without building it (a task's question names one)."""
    rng = random.Random(seed)
    _customers(rng)
    return [name for name, _ in _products(rng)]


def _customers(rng: random.Random) -> list[tuple[int, str, str, int]]:
    names = rng.sample([f"{f} {la}" for f in FIRST for la in LAST], rng.randint(25, 45))
    return [(i, n, rng.choice(CITIES), rng.randint(2015, 2024)) for i, n in enumerate(names, 1)]


def _products(rng: random.Random) -> list[tuple[str, str]]:
    """(name, category) of each product, without prices (drawn next, in `build`)."""
    items = [(f"{rng.choice(['Red', 'Blue', 'Mini', 'Pro', 'Classic'])} {name}", cat)
             for cat, names_ in PRODUCTS.items() for name in names_ if rng.random() < 0.8]
    return list(dict.fromkeys(items))


def create(path: Path, seed: int) -> None:
    with sqlite3.connect(path) as conn:
        build(conn, seed)
    conn.close()


def checksum(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None) -> int:
    if action not in READ_ONLY_ACTIONS or (action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() not in ALLOWED_FUNCTIONS):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def open_guarded(path: Path | None, seed: int | None = None) -> sqlite3.Connection:
    """A read-only connection to the database file at `path`, or (trusted side) to a pristine in-memory copy built
    from `seed`; either way with the authorizer installed and no databases attachable."""
    if path is not None:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False, cached_statements=0)
    else:  # no statement cache: a cached statement of a query that expanded as it was prepared pins its memory
        conn = sqlite3.connect(":memory:", check_same_thread=False, cached_statements=0)
        build(conn, seed)  # type: ignore[arg-type]
    conn.execute("PRAGMA query_only = ON")
    if hasattr(conn, "setlimit"):  # Python ≥ 3.11; before it, the authorizer refuses ATTACH and the caps below hold
        for limit, value in ((sqlite3.SQLITE_LIMIT_ATTACHED, 0), (sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES),
                             (sqlite3.SQLITE_LIMIT_SQL_LENGTH, MAX_QUERY_CHARS), (sqlite3.SQLITE_LIMIT_COLUMN, MAX_COLUMNS),
                             (sqlite3.SQLITE_LIMIT_LIKE_PATTERN_LENGTH, MAX_PATTERN_CHARS)):
            conn.setlimit(limit, value)
    conn.set_authorizer(_authorize)
    return conn


def first_keyword(sql: str) -> str:
    """The query's first word after whitespace and comments, lower-cased ("" if none): one pass, no backtracking."""
    i, n = 0, len(sql)
    while i < n:
        if sql[i].isspace():
            i += 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end + 1
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            break
    j = i
    while j < n and (sql[j].isalnum() or sql[j] == "_"):
        j += 1
    return sql[i:j].lower()


def run_query(conn: sqlite3.Connection, sql: str, seconds: float, max_rows: int,
              max_bytes: int = 1 << 20) -> tuple[list[str], list[tuple]]:
    """(column names, at most max_rows + 1 rows) of one read-only query; sqlite3.Error (or ValueError) when the query
    is not one, breaks a guard, runs past `seconds` of CPU time, or its rows hold more than `max_bytes`."""
    if len(sql) > MAX_QUERY_CHARS:
        raise ValueError(f"the query is too long ({len(sql)} characters, at most {MAX_QUERY_CHARS})")
    if first_keyword(sql) not in QUERY_KEYWORDS:
        raise ValueError("only a single SELECT (or WITH … SELECT) query is allowed")
    cpu_deadline, wall_deadline = time.thread_time() + seconds, time.monotonic() + WALL_FACTOR * seconds
    conn.set_progress_handler(lambda: int(time.thread_time() > cpu_deadline or time.monotonic() > wall_deadline),
                              PROGRESS_STEPS)
    try:
        cur = conn.execute(sql)
        rows, size = [], 0
        while len(rows) <= max_rows and (row := cur.fetchone()) is not None:
            size += sum(len(v) if isinstance(v, (str, bytes)) else 8 for v in row)
            if size > max_bytes:
                raise ValueError(f"the result is too large (over {max_bytes} bytes)")
            rows.append(row)
        return [d[0] for d in cur.description or []], rows
    except sqlite3.OperationalError as e:
        if str(e) == "interrupted":
            raise sqlite3.OperationalError(f"the query ran past its time limit ({seconds:g} s)") from None
        raise
    except MemoryError:
        raise ValueError("the query ran out of memory") from None
    finally:
        conn.set_progress_handler(None, 0)

"""The sql env's databases and the guarded way to query them.

A database is generated from a seed: customers, products and their orders, with realistic names, cities and prices.
The agent's queries run through `run_query`: a read-only connection (`mode=ro` URI and `PRAGMA query_only`), one
statement that must be a SELECT (or WITH / VALUES), an authorizer that allows only reading (no ATTACH, PRAGMA,
writes or `load_extension`), a time limit (a progress handler) and a row cap.
"""

from __future__ import annotations

import hashlib
import random
import re
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
DENIED_FUNCTIONS = {"load_extension", "readfile", "writefile", "edit", "fts3_tokenizer"}
QUERY_START = re.compile(r"^\s*(?:(?:--[^\n]*\n|/\*.*?\*/)\s*)*(select|with|values)\b", re.I | re.S)


def build(conn: sqlite3.Connection, seed: int) -> None:
    """Fill an empty database with the tables and rows of `seed`."""
    rng = random.Random(seed)
    conn.executescript(SCHEMA)
    names = rng.sample([f"{f} {la}" for f in FIRST for la in LAST], rng.randint(25, 45))
    conn.executemany("INSERT INTO customers VALUES (?, ?, ?, ?)",
                     [(i, n, rng.choice(CITIES), rng.randint(2015, 2024)) for i, n in enumerate(names, 1)])
    items = [(f"{rng.choice(['Red', 'Blue', 'Mini', 'Pro', 'Classic'])} {name}", cat)
             for cat, names_ in PRODUCTS.items() for name in names_ if rng.random() < 0.8]
    items = list(dict.fromkeys(items))
    conn.executemany("INSERT INTO products VALUES (?, ?, ?, ?)",
                     [(i, n, c, round(rng.uniform(2, 120), 2)) for i, (n, c) in enumerate(items, 1)])
    conn.executemany("INSERT INTO orders VALUES (?, ?, ?, ?, ?)",
                     [(i, rng.randint(1, len(names)), rng.randint(1, len(items)), rng.randint(1, 5),
                       f"{rng.randint(2021, 2024)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}")
                      for i in range(1, rng.randint(120, 220))])
    conn.commit()


def create(path: Path, seed: int) -> None:
    with sqlite3.connect(path) as conn:
        build(conn, seed)
    conn.close()


def checksum(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _authorize(action: int, arg1: str | None, arg2: str | None, db: str | None, trigger: str | None) -> int:
    if action not in READ_ONLY_ACTIONS or (action == sqlite3.SQLITE_FUNCTION and (arg2 or "").lower() in DENIED_FUNCTIONS):
        return sqlite3.SQLITE_DENY
    return sqlite3.SQLITE_OK


def open_guarded(path: Path | None, seed: int | None = None) -> sqlite3.Connection:
    """A read-only connection to the database file at `path`, or (trusted side) to a pristine in-memory copy built
    from `seed`; either way with the authorizer installed and no databases attachable."""
    if path is not None:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    else:
        conn = sqlite3.connect(":memory:", check_same_thread=False)
        build(conn, seed)  # type: ignore[arg-type]
    conn.execute("PRAGMA query_only = ON")
    if hasattr(conn, "setlimit"):  # Python ≥ 3.11; the authorizer refuses ATTACH either way
        conn.setlimit(sqlite3.SQLITE_LIMIT_ATTACHED, 0)
    conn.set_authorizer(_authorize)
    return conn


def run_query(conn: sqlite3.Connection, sql: str, seconds: float, max_rows: int) -> tuple[list[str], list[tuple]]:
    """(column names, at most max_rows + 1 rows) of one read-only query; sqlite3.Error (or ValueError) when the query
    is not one, breaks a guard, or runs past `seconds`."""
    if not QUERY_START.match(sql):
        raise ValueError("only a single SELECT (or WITH … SELECT) query is allowed")
    deadline = time.monotonic() + seconds
    conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
    try:
        cur = conn.execute(sql)
        rows = cur.fetchmany(max_rows + 1)
        return [d[0] for d in cur.description or []], rows
    finally:
        conn.set_progress_handler(None, 0)

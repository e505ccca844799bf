"""The sql env's questions: data, one row per kind of question."""

# (kind, question, gold query, tables it reads, ordered); {city}, {category}, {product}, {year} are drawn per task
QUESTIONS = [
    ("count", "How many customers live in {city}?", "SELECT COUNT(*) FROM customers WHERE city = '{city}'",
     ("customers",), False),
    ("list", "List the names of the products in the {category} category.",
     "SELECT name FROM products WHERE category = '{category}'", ("products",), False),
    ("list", "Which customers signed up in {year}? Give their names in alphabetical order.",
     "SELECT name FROM customers WHERE signup_year = {year} ORDER BY name", ("customers",), True),
    ("aggregate", "What is the average price of the products in the {category} category?",
     "SELECT AVG(price) FROM products WHERE category = '{category}'", ("products",), False),
    ("join", "How many units of {product} were ordered in total?",
     "SELECT SUM(o.quantity) FROM orders o JOIN products p ON p.id = o.product_id WHERE p.name = '{product}'",
     ("orders", "products"), False),
    ("join", "What is the total revenue (price times quantity) from customers in {city}?",
     "SELECT SUM(p.price * o.quantity) FROM orders o JOIN products p ON p.id = o.product_id JOIN customers c ON "
     "c.id = o.customer_id WHERE c.city = '{city}'", ("orders", "products", "customers"), False),
    ("count", "How many orders were placed in {year2}?", "SELECT COUNT(*) FROM orders WHERE order_date LIKE '{year2}-%'",
     ("orders",), False),
]
